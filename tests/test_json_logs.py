"""Logs are JSON lines that name routes, never text (SPEC §9), proven with a canary word.

The canary travels in a search query string, a search_history body, a message body, a path and
a database error's message. Everything logged is captured twice: every record at DEBUG (caplog,
with all of its attributes) and the bytes the real console handler writes.
"""

from __future__ import annotations

import io
import json
import logging
import uuid

import anyio
import httpx2
import pytest
from django.db import OperationalError
from django.test import Client

from formation import db_timeouts
from formation.json_logging import JsonFormatter
from messages_app import selectors, services
from messages_app.models import TokenKind
from tests import factories

pytestmark = pytest.mark.django_db

CANARY = f"canary{uuid.uuid4().hex[:10]}"
REQUEST_KEYS = {"request_id", "token_kind", "endpoint", "method", "status", "duration_ms"}


@pytest.fixture
def asgi_application():
    """The ASGI entry point, imported before ``console_output``: its django.setup() configures
    logging again, with a new console handler."""
    from formation.asgi import application

    return application


@pytest.fixture
def console_output():
    """What the configured console handler (JSON formatter and filters) writes."""
    handler = next(h for h in logging.getLogger().handlers if h.get_name() == "console")
    stream = io.StringIO()
    previous = handler.setStream(stream)
    yield stream
    handler.setStream(previous)


def json_lines(stream: io.StringIO) -> list[dict]:
    """Every line must be one JSON object."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def request_lines(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["logger"] == "formation.request"]


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_no_canary_in_any_log_while_request_lines_are_complete(
    world, caplog, console_output, settings, monkeypatch, debug
):
    settings.DEBUG = debug  # DEBUG turns on Django's SQL logging, parameters included
    caplog.set_level(logging.DEBUG)
    _, run_api = factories.make_run(world.agent, world.private, world.alice)

    posted = world.service.post(
        f"/api/v1/conversations/{world.private.id}/messages",
        {"senderUserId": str(world.alice.id), "content": f"the {CANARY} rollout plan"},
        format="json",
    )
    assert posted.status_code == 201
    found = world.agent_api.get(f"/api/v1/messages/search?query={CANARY}")
    assert [item["content"] for item in found.json()["items"]] == [f"the {CANARY} rollout plan"]
    searched = run_api.post("/api/v1/history/search", {"query": CANARY}, format="json")
    assert searched.status_code == 200
    assert (
        run_api.post(
            "/api/v1/history/search", {"query": CANARY, CANARY: 1}, format="json"
        ).status_code
        == 400
    )
    assert world.agent_api.get(f"/api/v1/{CANARY}").status_code == 404

    def outage(**kwargs):
        raise OperationalError(f"server closed the connection near {CANARY}")

    monkeypatch.setattr(selectors, "message_search", outage)
    failed = world.agent_api.get(f"/api/v1/messages/search?query={CANARY}")
    assert failed.status_code == 503

    captured = console_output.getvalue()
    assert CANARY not in captured
    assert CANARY not in caplog.text
    for record in caplog.records:
        assert CANARY not in repr(record.__dict__), record.name

    lines = json_lines(console_output)
    requests = request_lines(lines)
    assert all(set(line) >= REQUEST_KEYS for line in requests)
    assert all(isinstance(line["duration_ms"], float) for line in requests)
    assert [
        (line["method"], line["endpoint"], line["status"], line["token_kind"]) for line in requests
    ] == [
        ("POST", "api/v1/conversations/<pk>/messages", 201, "service"),
        ("GET", "api/v1/messages/search", 200, "agent"),
        ("POST", "api/v1/history/search", 200, "run"),
        ("POST", "api/v1/history/search", 400, "run"),
        ("GET", "api/", 404, "none"),  # not a DRF view: no token was read
        ("GET", "api/v1/messages/search", 503, "agent"),
    ]
    assert [line["request_id"] for line in requests] == [
        response["X-Request-ID"] for response in (posted, found, searched)
    ] + [line["request_id"] for line in requests[3:]]

    # The outage's other lines carry its request id, and Django's error line names the route.
    outage_id = failed["X-Request-ID"]
    outage_lines = [line for line in lines if line.get("request_id") == outage_id]
    assert {line["logger"] for line in outage_lines} == {
        "formation.errors",
        "django.request",
        "formation.request",
    }
    django_line = next(line for line in outage_lines if line["logger"] == "django.request")
    assert django_line["message"] == "Service Unavailable: api/v1/messages/search"


def test_incoming_request_id_is_kept_when_sane(world, console_output):
    response = world.agent_api.get(
        f"/api/v1/messages?conversationId={world.private.id}", HTTP_X_REQUEST_ID="edge-7f3a.42:1"
    )
    assert response["X-Request-ID"] == "edge-7f3a.42:1"
    (line,) = request_lines(json_lines(console_output))
    assert line["request_id"] == "edge-7f3a.42:1"
    assert line["endpoint"] == "api/v1/messages"


@pytest.mark.parametrize(
    "incoming",
    ["has spaces", "x" * 129, '"quoted"', "-leading-dash", "semi;colon", "ünïcode"],
)
def test_insane_request_id_is_replaced(world, console_output, incoming):
    response = world.agent_api.get(
        f"/api/v1/messages?conversationId={world.private.id}", HTTP_X_REQUEST_ID=incoming
    )
    generated = response["X-Request-ID"]
    assert generated != incoming
    assert len(generated) == 32
    int(generated, 16)
    (line,) = request_lines(json_lines(console_output))
    assert line["request_id"] == generated


def test_unauthenticated_request_logs_token_kind_none(world, console_output):
    response = factories.bearer_client("fmn_service_bogus").get("/api/v1/accounts")
    assert response.status_code == 401
    (line,) = request_lines(json_lines(console_output))
    assert (line["endpoint"], line["status"]) == ("api/v1/accounts", 401)
    assert line["token_kind"] == "none"


def test_lines_name_a_route_even_without_a_view(world, console_output, monkeypatch):
    """Static files, unknown paths, and a request answered by a middleware (database down)."""
    Client().get("/static/admin/css/base.css")
    Client().get(f"/{CANARY}.php")

    def down(milliseconds: int) -> None:
        raise OperationalError("connection refused")

    monkeypatch.setattr(db_timeouts, "set_statement_timeout", down)
    assert world.agent_api.get(f"/api/v1/messages/{world.agent.id}").status_code == 503

    lines = json_lines(console_output)
    assert [line["endpoint"] for line in request_lines(lines)] == [
        "static/<path>",
        "<unmatched>",
        "api/v1/messages/<id:message_id>",
    ]
    (django_line,) = [line for line in lines if line["logger"] == "django.request"]
    assert django_line["message"] == "Service Unavailable: api/v1/messages/<id:message_id>"
    assert CANARY not in console_output.getvalue()


def test_exception_lines_name_the_class_and_frames_but_not_the_message(console_output):
    logger = logging.getLogger("formation.tests")
    try:
        raise ValueError(f"row value {CANARY}")
    except ValueError:
        logger.exception("failed")
    (line,) = json_lines(console_output)
    assert line["exc_type"] == "ValueError"
    assert "test_exception_lines_name_the_class" in line["traceback"]
    assert CANARY not in console_output.getvalue()


def test_extra_attributes_outside_the_allowed_fields_are_never_written(console_output):
    logging.getLogger("formation.tests").warning("note", extra={"sql": CANARY, "members": [1]})
    (line,) = json_lines(console_output)
    assert set(line) == {"time", "level", "logger", "message"}
    assert CANARY not in console_output.getvalue()


def handlers_reached(name: str) -> list[logging.Handler]:
    """Every handler a record of logger ``name`` is written by, but pytest's own."""
    handlers: list[logging.Handler] = []
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        handlers += logger.handlers
        logger = logger.parent if logger.propagate else None
    return [handler for handler in handlers if not type(handler).__module__.startswith("_pytest")]


@pytest.mark.parametrize("name", ["django.utils.autoreload", "django.request", "django.server"])
def test_djangos_lines_are_written_once_as_json(name):
    """Django's default config gives ``django`` a plain-text console handler under DEBUG, so
    runserver printed "Watching for file changes" twice, once as text and once as JSON."""
    [handler] = handlers_reached(name)
    assert isinstance(handler.formatter, JsonFormatter)


@pytest.mark.django_db(transaction=True)  # the app authenticates on a connection of its own
def test_an_mcp_post_logs_only_its_request_line(world, asgi_application, console_output):
    """The MCP SDK's session manager logged three INFO lines for every /mcp POST."""
    _, token = services.token_create(
        workspace_id=world.workspace.id, kind=TokenKind.AGENT, agent=world.agent
    )

    async def post() -> int:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=asgi_application), base_url="http://localhost"
        ) as client:
            response = await client.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Authorization": f"Bearer {token}"},
            )
        return response.status_code

    assert anyio.run(post) == 200
    loggers = [line["logger"] for line in json_lines(console_output)]
    assert [name for name in loggers if name != "httpx2"] == ["formation.request"]  # the client
