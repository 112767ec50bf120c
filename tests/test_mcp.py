"""The MCP server (formation/mcp_server.py), driven by the official SDK's own client.

Over stdio it is ``manage.py mcp_server --token`` in a subprocess pointed at the test database;
over HTTP it is ``/mcp`` on pytest-django's live server, serving the production WSGI entry point
(so /mcp is routed as under gunicorn), and the ASGI entry point in process. Both must list the
tools the token may call with the schemas of formation/tools.py and answer every call with
exactly the REST endpoint's body, or its error envelope as a tool error. The subprocess and the
server threads use their own database connections, so these tests commit their data
(``transaction=True``).

Then what HTTP refuses: every method but POST, at once on each server (a real gunicorn too);
malformed requests, whose errors must never quote what was sent (SPEC §9); and tool arguments,
which hold to JSON types for every argument of every tool, as a REST JSON body does.
"""

from __future__ import annotations

import asyncio
import contextvars
import io
import json
import logging
import sys
import time
import uuid
import wsgiref.handlers
import wsgiref.util
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import anyio
import httpx2
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection, connections
from django.utils import timezone
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.test import APIClient

from formation.auth import token_digest
from formation.errors import MethodNotAllowed, api_exception_handler
from formation.json_logging import request_id_var
from formation.limits import MAX_BODY_BYTES
from formation.mcp_envelope import read_body
from formation.mcp_server import build_server, route_mcp_asgi
from formation.tools import (
    AGENT_TOOLS,
    call_tool,
    caller_for_token,
    input_schema,
    tool_definitions,
)
from messages_app import services
from messages_app.models import ApiToken, TokenKind
from search_app.runs.services import run_create
from tests import factories
from tests.test_serving import gunicorn_serving

TOOL_NAMES = ["list_messages", "get_message", "search_messages", "search_history"]


class Scene:
    """Two messages in the public room, a run of the world's agent and its tokens."""

    def __init__(self, world) -> None:
        self.message = factories.post(world.public, world.bob, "the migration plan is ready")
        factories.post(world.public, world.alice, "migration done")
        _, self.run_token = run_create(
            workspace_id=world.workspace.id,
            agent_id=world.agent.id,
            conversation_id=world.public.id,
            requester_id=world.alice.id,
        )
        _, self.agent_token = services.token_create(
            workspace_id=world.workspace.id, kind=TokenKind.AGENT, agent=world.agent
        )
        _, self.service_token = services.token_create(
            workspace_id=world.workspace.id, kind=TokenKind.SERVICE
        )
        self.calls: list[tuple[str, dict[str, Any]]] = [
            ("list_messages", {"conversationId": str(world.public.id), "limit": 3}),
            ("get_message", {"messageId": str(self.message.id)}),
            ("search_messages", {"query": "migration"}),
            ("search_history", {"query": "migration plan", "limit": 2}),
            ("get_message", {"messageId": str(uuid.uuid4())}),
            ("list_messages", {"conversation_id": str(world.public.id)}),
        ]


@pytest.fixture
def scene(world) -> Scene:
    return Scene(world)


def answer_of(result) -> dict[str, Any]:
    """A tool result's body: the JSON of its one text block."""
    (block,) = result.content
    return json.loads(block.text)


def rest_answer(token: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    if tool == "get_message":
        response = client.get(f"/api/v1/messages/{arguments['messageId']}")
    elif tool == "search_history":
        response = client.post("/api/v1/history/search", arguments, format="json")
    else:
        path = {"list_messages": "/api/v1/messages", "search_messages": "/api/v1/messages/search"}
        response = client.get(path[tool], arguments)
    return response.json()


def approx_floats(value: Any) -> Any:
    """search_history's recency moves with the clock between two calls: compare floats loosely."""
    if isinstance(value, float):
        return pytest.approx(value, abs=1e-5)
    if isinstance(value, dict):
        return {key: approx_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [approx_floats(item) for item in value]
    return value


def same_error(tool_error: dict[str, Any], rest_error: dict[str, Any]) -> bool:
    """The same code, message and fields named. Only the sentence per field may differ: an
    unknown query-string key is an "Unknown parameter." over REST, an "Unknown field." among a
    tool's JSON arguments (as in any REST JSON body)."""

    def key(envelope: dict[str, Any]) -> tuple[Any, ...]:
        error = envelope["error"]
        fields = error["details"].get("fields", {})
        details = {k: v for k, v in error["details"].items() if k != "fields"}
        return error["code"], error["message"], set(fields), details

    return key(tool_error) == key(rest_error)


async def drive(client: Client, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """List the tools, then make every call; what came back, in wire shapes."""
    listed = await client.list_tools()
    results = []
    for tool, arguments in calls:
        result = await client.call_tool(tool, arguments)
        # The body once, as JSON text: no structured copy beside it.
        assert result.structured_content is None
        results.append((result.is_error, answer_of(result)))
    return {
        "tools": [
            {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
            for t in listed.tools
        ],
        "read_only": {t.name: t.annotations.read_only_hint for t in listed.tools},
        "results": results,
    }


def assert_same_as_rest(seen: dict[str, Any], scene: Scene) -> None:
    assert seen["tools"] == tool_definitions()
    assert seen["read_only"] == {
        "list_messages": True,
        "get_message": True,
        "search_messages": True,
        "search_history": False,
    }
    for (tool, arguments), (is_error, body) in zip(scene.calls, seen["results"], strict=True):
        rest = rest_answer(scene.run_token, tool, arguments)
        assert is_error == ("error" in rest), (tool, arguments)
        if is_error:
            assert same_error(body, rest), (tool, arguments)
        else:
            assert body == approx_floats(rest), (tool, arguments)
    search = seen["results"][3][1]
    assert [hit["id"] for hit in search["items"]][:1] == [str(scene.message.id)]


# --- stdio ------------------------------------------------------------------------------------


def subprocess_database_url() -> str:
    """The test database as a DATABASE_URL, for a subprocess (pytest-django's test_<name>)."""
    db = connection.settings_dict
    options = db.get("OPTIONS", {})
    params = {
        "host": db["HOST"] or options.get("host", ""),
        "port": db["PORT"] or options.get("port", ""),
    }
    auth = quote(db["USER"], safe="") + (
        f":{quote(db['PASSWORD'], safe='')}" if db["PASSWORD"] else ""
    )
    query = urlencode({key: value for key, value in params.items() if value})
    return f"postgresql://{auth}@/{quote(db['NAME'], safe='')}?{query}"


def stdio_server(token: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp_server", "--token", token],
        cwd=str(Path(settings.BASE_DIR)),
        env={
            "DATABASE_URL": subprocess_database_url(),
            "DJANGO_SETTINGS_MODULE": "formation.settings_test",
        },
    )


@pytest.mark.django_db(transaction=True)
def test_stdio_lists_and_calls_the_tools_like_rest(scene):
    async def session() -> dict[str, Any]:
        async with Client(stdio_server(scene.run_token), read_timeout_seconds=60) as client:
            return await drive(client, scene.calls)

    seen = anyio.run(session)

    assert_same_as_rest(seen, scene)


@pytest.mark.django_db(transaction=True)
def test_stdio_with_an_agent_token_refuses_search_history_like_rest(scene):
    async def session() -> Any:
        async with Client(stdio_server(scene.agent_token), read_timeout_seconds=60) as client:
            return await client.call_tool("search_history", {"query": "migration"})

    result = anyio.run(session)

    assert result.is_error
    assert answer_of(result) == rest_answer(
        scene.agent_token, "search_history", {"query": "migration"}
    )
    assert answer_of(result)["error"]["code"] == "forbidden"


@pytest.mark.django_db
@pytest.mark.parametrize("token", ["", "fmn_agent_unknown", "service"])
def test_the_stdio_command_refuses_a_token_that_is_not_an_agents(scene, token, monkeypatch):
    monkeypatch.delenv("FORMATION_TOKEN", raising=False)
    raw = scene.service_token if token == "service" else token

    with pytest.raises(CommandError):
        call_command("mcp_server", token=raw)


# --- in process: what both transports share -------------------------------------------------


def call_in_process(token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The SDK client against the server in this process (as the stdio command builds it)."""

    async def session() -> list[Any]:
        async with Client(build_server(token=token)) as client:
            return [await client.call_tool(tool, arguments) for tool, arguments in calls]

    return anyio.run(session)


@pytest.mark.django_db(transaction=True)
def test_a_token_revoked_mid_session_stops_the_next_call(scene):
    search = ("search_messages", {"query": "migration"})

    async def session() -> list[Any]:
        async with Client(build_server(token=scene.agent_token)) as client:
            first = await client.call_tool(*search)
            await anyio.to_thread.run_sync(revoke, scene.agent_token)
            second = await client.call_tool(*search)
            with pytest.raises(MCPError) as listing:
                await client.list_tools()
            return [first, second, listing.value.error]

    def revoke(raw: str) -> None:
        ApiToken.objects.filter(digest=token_digest(raw)).update(revoked_at=timezone.now())
        connections.close_all()

    first, second, listing = anyio.run(session)

    assert not first.is_error
    assert second.is_error
    assert answer_of(second)["error"]["code"] == "unauthenticated"
    assert listing.message == "A valid bearer token is required."


@pytest.mark.django_db(transaction=True)
def test_tool_calls_share_the_rest_rate_limit(scene, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"service": None, "agent": "2/min"},
    }

    results = call_in_process(scene.agent_token, [("search_messages", {"query": "x"})] * 3)

    assert [result.is_error for result in results] == [False, False, True]
    error = answer_of(results[2])["error"]
    assert error["code"] == "rate_limited"
    assert error["details"]["retryAfter"] >= 1


# --- streamable HTTP ---------------------------------------------------------------------------


@pytest.fixture
def mcp_url(live_server):
    """live_server serving formation.wsgi.application (pytest-django serves Django's bare
    handler), so /mcp goes through the same WSGI routing as under gunicorn."""
    from formation.wsgi import application

    httpd = live_server.thread.httpd
    original = httpd.get_app()
    httpd.set_app(application)
    yield f"{live_server.url}/mcp"
    httpd.set_app(original)


def http_client(url: str, token: str, mode: str = "auto", **kwargs: Any) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60, **kwargs)
    return Client(streamable_http_client(url, http_client=http), mode=mode)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_http_lists_and_calls_the_tools_like_rest(scene, mcp_url, mode):
    async def session() -> dict[str, Any]:
        async with http_client(mcp_url, scene.run_token, mode) as client:
            return await drive(client, scene.calls)

    seen = anyio.run(session)

    assert_same_as_rest(seen, scene)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("token", "status", "code"),
    [
        (None, 401, "unauthenticated"),
        ("nope", 401, "unauthenticated"),
        ("service", 403, "forbidden"),
    ],
)
def test_http_refuses_missing_bad_and_service_tokens_with_the_rest_envelope(
    scene, mcp_url, token, status, code
):
    headers = {"Accept": "application/json, text/event-stream"}
    if token:
        raw = scene.service_token if token == "service" else token
        headers["Authorization"] = f"Bearer {raw}"
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}

    response = httpx2.post(mcp_url, json=body, headers=headers, timeout=30)

    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    if status == 401:
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.mark.django_db(transaction=True)
def test_asgi_entry_point_serves_mcp_too(scene):
    from formation.asgi import application

    transport = httpx2.ASGITransport(app=application)

    async def session() -> Any:
        async with http_client(
            "http://localhost/mcp", scene.agent_token, transport=transport
        ) as client:
            listed = await client.list_tools()
            result = await client.call_tool("get_message", {"messageId": str(scene.message.id)})
            return [tool.name for tool in listed.tools], result

    names, result = anyio.run(session)

    assert names == TOOL_NAMES[:3]
    assert answer_of(result) == rest_answer(
        scene.agent_token, "get_message", {"messageId": str(scene.message.id)}
    )


# --- tools/list: only what the token may call ------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_tools_list_offers_only_the_tools_the_token_may_call(scene):
    """An agent token has no run, so search_history (which answers it forbidden) is not offered;
    a run token is offered all four. Over HTTP and over stdio's in-process server alike."""
    from formation.asgi import application

    transport = httpx2.ASGITransport(app=application)

    async def listed_over_http(token: str) -> list[str]:
        async with http_client("http://localhost/mcp", token, transport=transport) as client:
            return [tool.name for tool in (await client.list_tools()).tools]

    async def listed_in_process(token: str) -> list[str]:
        async with Client(build_server(token=token)) as client:
            return [tool.name for tool in (await client.list_tools()).tools]

    agent_tools = [name for name in TOOL_NAMES if name != "search_history"]
    assert anyio.run(listed_over_http, scene.agent_token) == agent_tools
    assert anyio.run(listed_over_http, scene.run_token) == TOOL_NAMES
    assert anyio.run(listed_in_process, scene.agent_token) == agent_tools
    assert anyio.run(listed_in_process, scene.run_token) == TOOL_NAMES


# --- only POST, answered at once on every server --------------------------------------------

NOT_POST = ["GET", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"]


def assert_method_not_allowed(response: httpx2.Response, method: str) -> None:
    """The REST 405 envelope with ``Allow: POST`` (a HEAD answer carries no body)."""
    assert response.status_code == 405, (method, response.status_code, response.content[:300])
    assert response.headers["Allow"] == "POST"
    if method != "HEAD":
        assert response.headers["Content-Type"] == "application/json"
        assert response.json() == {
            "error": {
                "code": "method_not_allowed",
                "message": MethodNotAllowed.default_message,
                "details": {},
            }
        }


def asgi_request(
    method: str, headers: Mapping[str, str], content: bytes | None = None, query: str = ""
) -> Any:
    """One request to the ASGI entry point's /mcp, given up after 10 s."""
    from formation.asgi import application

    async def send() -> httpx2.Response:
        with anyio.fail_after(10):
            async with httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=application), base_url="http://localhost"
            ) as client:
                return await client.request(
                    method, f"/mcp{query}", headers=headers, content=content
                )

    return anyio.run(send)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method", NOT_POST)
@pytest.mark.parametrize("authenticated", [True, False], ids=["token", "no-token"])
def test_asgi_answers_every_method_but_post_with_405_before_authentication(
    scene, method, authenticated
):
    headers = {"Authorization": f"Bearer {scene.agent_token}"} if authenticated else {}
    assert_method_not_allowed(asgi_request(method, headers), method)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method", NOT_POST)
def test_wsgiref_answers_every_method_but_post_with_405(scene, mcp_url, method):
    """runserver's server (wsgiref, as live_server runs it): a GET used to reach the SDK's
    stream, whose hop-by-hop header wsgiref refuses with a plain-text 500."""
    headers = {"Authorization": f"Bearer {scene.agent_token}"}
    response = httpx2.request(method, mcp_url, headers=headers, timeout=10)
    assert_method_not_allowed(response, method)


@pytest.mark.django_db(transaction=True)
def test_gunicorn_answers_get_at_once_and_stays_available(scene):
    """Under gunicorn (2 workers x 4 threads) a GET used to open a stream that never ended;
    eight of them stopped the whole API. Now twelve at once are 405 within the timeout, and
    the probes and POST still answer."""
    headers = {"Authorization": f"Bearer {scene.agent_token}"}
    methods = ["GET"] * 8 + ["DELETE", "PUT", "HEAD", "OPTIONS"]

    def send(base_url: str, method: str) -> httpx2.Response:
        return httpx2.request(method, f"{base_url}/mcp", headers=headers, timeout=10)

    with gunicorn_serving(DATABASE_URL=subprocess_database_url()) as base_url:
        with ThreadPoolExecutor(max_workers=len(methods)) as pool:
            responses = list(pool.map(partial(send, base_url), methods))
        for response, method in zip(responses, methods, strict=True):
            assert_method_not_allowed(response, method)
        assert httpx2.get(f"{base_url}/healthz", timeout=5).status_code == 200
        listed = httpx2.post(
            f"{base_url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={**headers, "Accept": "application/json, text/event-stream"},
            timeout=10,
        )
    assert listed.status_code == 200
    assert [tool["name"] for tool in listed.json()["result"]["tools"]] == TOOL_NAMES[:3]


def wsgi_environ(method: str, **extra: str) -> dict[str, Any]:
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/mcp",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "80",
        "HTTP_HOST": "localhost",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.input": io.BytesIO(),
        "wsgi.url_scheme": "http",
        **extra,
    }
    wsgiref.util.setup_testing_defaults(environ)
    return environ


class GoneClient(io.RawIOBase):
    """A connection whose client has gone: every write fails as a reset socket's does."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def mcp_access_lines(caplog) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.name == "formation.request" and getattr(record, "endpoint", "") == "mcp"
    ]


def test_wsgi_finishes_the_exchange_when_the_server_gives_up_on_the_answer(caplog):
    """runserver with the MCP Inspector's GET left open: wsgiref's write failed, it closed the
    answer, and the app's last send was never taken. Its coroutine waited until the process
    exited (``duration_ms`` 46087.2, "Task was destroyed but it is pending!"). Now the exchange
    is over before the server gets the answer, and its access line is written at once."""
    from formation.wsgi import application

    caplog.set_level(logging.INFO, logger="formation.request")
    environ = wsgi_environ("GET", HTTP_ACCEPT="text/event-stream")
    handler = wsgiref.handlers.SimpleHandler(io.BytesIO(), GoneClient(), io.StringIO(), environ)

    handler.run(application)  # the way runserver's ServerHandler serves a request

    deadline = time.monotonic() + 5
    while not mcp_access_lines(caplog) and time.monotonic() < deadline:
        time.sleep(0.05)
    [line] = mcp_access_lines(caplog)
    assert (line.method, line.status) == ("GET", 405)
    assert line.duration_ms < 1000


def test_a_request_closed_in_another_context_resets_nothing_there():
    """A coroutine destroyed pending runs its ``finally`` in whatever context closes it, and a
    ContextVar token reset there raised ``ValueError: ... was created in a different Context``.
    Each request's id now lives and ends in its own task's context: closing every pending
    request from a fresh context raises nothing, and nothing leaks into the caller's."""
    from formation.asgi import application

    loop = asyncio.new_event_loop()
    never = loop.create_future()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"localhost")],
    }

    async def receive() -> dict[str, Any]:
        return await never

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            await never  # a server that never takes the answer

    try:
        request = loop.create_task(application(scope, receive, send))
        loop.run_until_complete(asyncio.sleep(0.2))
        assert not request.done()
        pending = asyncio.all_tasks(loop)
        for task in pending:
            contextvars.Context().run(task.get_coro().close)
        assert request_id_var.get() is None
    finally:
        never.cancel()
        loop.close()


def test_a_request_leaves_no_request_id_in_the_callers_context():
    async def one_request() -> Any:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=route_mcp_asgi(None)), base_url="http://localhost"
        ) as client:
            response = await client.get("/mcp")
        return response.status_code, request_id_var.get()

    assert anyio.run(one_request) == (405, None)


@pytest.mark.django_db(transaction=True)
def test_wsgiref_answers_the_inspectors_stream_request_at_once(mcp_url, caplog):
    """The MCP Inspector's GET asks for an event stream and keeps its connection open."""
    caplog.set_level(logging.INFO, logger="formation.request")
    started = time.monotonic()

    response = httpx2.get(mcp_url, headers={"Accept": "text/event-stream"}, timeout=5)

    assert_method_not_allowed(response, "GET")
    assert time.monotonic() - started < 2
    [line] = mcp_access_lines(caplog)
    assert line.duration_ms < 1000


# --- what an MCP error may say: never a request value (SPEC §9) ------------------------------

CANARY = "canarymcp"
ACCEPT = "application/json, text/event-stream"
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def rpc(method: Any = "tools/call", params: Any = None, **members: Any) -> bytes:
    """A JSON-RPC request body; ``members`` override or add top-level members."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps({**message, **members}).encode()


def call(tool: str, arguments: Any, **params: Any) -> bytes:
    return rpc("tools/call", {"name": tool, "arguments": arguments, **params})


def modern(method: str, **headers: str) -> dict[str, str]:
    return {"mcp-protocol-version": MODERN, "mcp-method": method, **headers}


def with_canary_in_query(text: bytes) -> bytes:
    """``call("search_messages", {"query": CANARY})`` with ``text`` before the canary."""
    return call("search_messages", {"query": CANARY}).replace(CANARY.encode(), text + b"canary")


def nested(depth: int) -> Any:
    value: Any = CANARY
    for _ in range(depth):
        value = [value]
    return value


@dataclass(frozen=True)
class Refused:
    """A request carrying ``CANARY`` and its answer. ``kind`` is ``rpc`` (a JSON-RPC error),
    ``rest`` (the REST envelope, for HTTP-level refusals) or ``tool`` (a tool error, whose
    content is the REST envelope)."""

    body: bytes
    kind: str
    code: int | str
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    method: str = "POST"
    token: str = "run"


SEARCH = call("search_messages", {"query": CANARY})
REFUSED = {
    # The two: the SDK answered both with pydantic's message quoting the request.
    "jsonrpc-1.0": Refused(SEARCH.replace(b'"2.0"', b'"1.0"'), "rpc", -32600, 400),
    "no-method": Refused(
        json.dumps({"jsonrpc": "2.0", "id": 1, "params": {"name": CANARY}}).encode(),
        "rpc",
        -32600,
        400,
    ),
    "method-not-a-string": Refused(rpc([CANARY]), "rpc", -32600, 400),
    "unknown-method": Refused(rpc(CANARY), "rpc", -32601, 404),
    "unknown-tool": Refused(call(CANARY, {}), "rpc", -32602, 400),
    "tool-name-not-a-string": Refused(rpc(params={"name": {"x": CANARY}}), "rpc", -32602, 400),
    "params-a-list": Refused(rpc("tools/list", [CANARY]), "rpc", -32602, 400),
    "arguments-a-string": Refused(call("search_messages", CANARY), "rpc", -32602, 400),
    "initialize-params": Refused(
        rpc("initialize", {"protocolVersion": CANARY}), "rpc", -32602, 400
    ),
    "list-params": Refused(rpc("tools/list", {"cursor": [CANARY]}), "rpc", -32602, 400),
    "call-params": Refused(call("search_messages", {}, task=CANARY), "rpc", -32602, 400),
    "id-an-object": Refused(rpc("tools/list", id={"x": CANARY}), "rpc", -32600, 400),
    "id-too-long": Refused(rpc("tools/list", id=CANARY * 30), "rpc", -32600, 400),
    "id-a-fraction": Refused(rpc("tools/list", {"x": CANARY}, id=1.5), "rpc", -32600, 400),
    "id-null": Refused(rpc("tools/list", {"x": CANARY}, id=None), "rpc", -32600, 400),
    "batch": Refused(b"[" + SEARCH + b"]", "rpc", -32600, 400),
    "a-response": Refused(
        json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"x": CANARY}}).encode(),
        "rpc",
        -32600,
        400,
    ),
    "extra-member": Refused(rpc("tools/list", extra=CANARY), "rpc", -32600, 400),
    "lone-surrogate": Refused(with_canary_in_query(b"\\ud800"), "rpc", -32600, 400),
    # Strict JSON, by the REST parser's rules and sentences.
    "not-json": Refused(b'{"jsonrpc": "2.0", ' + CANARY.encode(), "rpc", -32700, 400),
    "duplicate-key": Refused(SEARCH.replace(b'"id": 1', b'"id": 1, "id": 2'), "rpc", -32700, 400),
    "nan": Refused(
        call("search_messages", {"query": CANARY, "limit": 1}).replace(b"1}", b"NaN}"),
        "rpc",
        -32700,
        400,
    ),
    "invalid-utf8": Refused(with_canary_in_query(b"\xff"), "rpc", -32700, 400),
    "too-deep": Refused(call("search_messages", {"query": nested(40)}), "rpc", -32700, 400),
    # HTTP-level refusals, before any JSON-RPC: the REST envelope.
    "too-large": Refused(
        call("search_messages", {"query": CANARY * 120_000}), "rest", "invalid_arguments", 400
    ),
    "content-type": Refused(
        SEARCH, "rest", "invalid_arguments", 400, headers={"content-type": f"text/{CANARY}"}
    ),
    "accept": Refused(
        SEARCH, "rest", "invalid_arguments", 400, headers={"accept": f"text/{CANARY}"}
    ),
    "get": Refused(b"", "rest", "method_not_allowed", 405, method="GET"),
    # Tool arguments: REST's validation, answered as a tool error.
    "limit-a-string": Refused(
        call("search_messages", {"query": CANARY, "limit": "5"}), "tool", "invalid_arguments", 200
    ),
    "limit-a-canary": Refused(
        call("search_messages", {"query": "x", "limit": CANARY}), "tool", "invalid_arguments", 200
    ),
    "query-too-long": Refused(
        call("search_messages", {"query": CANARY * 60}), "tool", "invalid_arguments", 200
    ),
    "conversation-id": Refused(
        call("list_messages", {"conversationId": CANARY}), "tool", "invalid_arguments", 200
    ),
    "message-id": Refused(
        call("get_message", {"messageId": CANARY}), "tool", "invalid_arguments", 200
    ),
    "speaker": Refused(
        call("search_history", {"query": "plan", "speaker": CANARY}),
        "tool",
        "invalid_arguments",
        200,
    ),
    "history-with-an-agent-token": Refused(
        call("search_history", {"query": CANARY}), "tool", "forbidden", 200, token="agent"
    ),
    # The 2026-07-28 envelope is the SDK's to check: its errors are scrubbed on the way out.
    "modern-version": Refused(
        rpc(
            "tools/list",
            {"_meta": {**MODERN_META, "io.modelcontextprotocol/protocolVersion": CANARY}},
        ),
        "rpc",
        -32022,
        400,
        headers=modern("tools/list", **{"mcp-protocol-version": CANARY}),
    ),
    "modern-method-header": Refused(
        rpc("tools/list", {"_meta": MODERN_META}), "rpc", -32020, 400, headers=modern(CANARY)
    ),
    "modern-name-header": Refused(
        call("search_messages", {"query": "x"}, _meta=MODERN_META),
        "rpc",
        -32020,
        400,
        headers=modern("tools/call", **{"mcp-name": CANARY}),
    ),
    "modern-capabilities": Refused(
        rpc(
            "tools/list",
            {"_meta": {**MODERN_META, "io.modelcontextprotocol/clientCapabilities": CANARY}},
        ),
        "rpc",
        -32602,
        400,
        headers=modern("tools/list"),
    ),
    "modern-initialize": Refused(
        rpc(
            "initialize",
            {
                "_meta": MODERN_META,
                "protocolVersion": CANARY,
                "capabilities": {},
                "clientInfo": {"name": CANARY, "version": "1"},
            },
        ),
        "rpc",
        -32601,
        404,
        headers=modern("initialize"),
    ),
}


def assert_refused_as(response: httpx2.Response, expected: Refused) -> None:
    assert response.status_code == expected.status, (response.status_code, response.text[:300])
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    if expected.kind == "rest":
        assert set(body) == {"error"}
        assert set(body["error"]) == {"code", "message", "details"}
        assert body["error"]["code"] == expected.code
        return
    assert body["jsonrpc"] == "2.0"
    if expected.kind == "rpc":
        assert set(body) == {"jsonrpc", "id", "error"}
        assert body["error"]["code"] == expected.code
        assert isinstance(body["error"]["message"], str)
        return
    result = body["result"]
    assert result["isError"] is True
    assert "structuredContent" not in result
    assert json.loads(result["content"][0]["text"])["error"]["code"] == expected.code


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_no_mcp_error_echoes_the_request_and_none_changes_a_table(scene, case):
    token = scene.run_token if case.token == "run" else scene.agent_token
    headers = {
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        "accept": ACCEPT,
        **case.headers,
    }
    query = f"?query={CANARY}" if case.method == "GET" else ""
    before = factories.table_snapshot()

    response = asgi_request(case.method, headers, case.body or None, query=query)

    assert CANARY.encode() not in response.content, response.content[:300]
    assert_refused_as(response, case)
    assert factories.table_snapshot() == before


# --- one validation for both transports ------------------------------------------------------

# One value of each JSON type, for arguments declared as another.
VALUE_OF_TYPE = {
    "string": "5",
    "integer": 5,
    "number": 5.5,
    "boolean": True,
    "array": ["5"],
    "object": {"value": 5},
    "null": None,
}


def wrong_types(schema: Mapping[str, Any]) -> list[str]:
    """The JSON types an argument's schema does not allow (an integer is no ``number`` 5.5)."""
    declared = [branch["type"] for branch in schema.get("anyOf", [schema])]
    return [json_type for json_type in VALUE_OF_TYPE if json_type not in declared]


WRONG_TYPES = [
    (tool.name, argument, json_type)
    for tool in AGENT_TOOLS
    for argument, schema in input_schema(tool)["properties"].items()
    for json_type in wrong_types(schema)
]


def valid_arguments(scene: Scene, world) -> dict[str, dict[str, Any]]:
    return {
        "list_messages": {"conversationId": str(world.public.id)},
        "get_message": {"messageId": str(scene.message.id)},
        "search_messages": {"query": "migration"},
        "search_history": {"query": "migration"},
    }


def test_the_type_table_covers_every_argument_of_every_tool():
    covered = {(tool, argument) for tool, argument, _ in WRONG_TYPES}
    declared = {(t.name, name) for t in AGENT_TOOLS for name in input_schema(t)["properties"]}
    assert covered == declared
    assert ("search_messages", "limit", "string") in WRONG_TYPES


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("tool", "argument", "json_type"), WRONG_TYPES, ids=["-".join(case) for case in WRONG_TYPES]
)
def test_a_tool_argument_of_the_wrong_json_type_is_invalid_arguments(
    scene, world, tool, argument, json_type
):
    """MCP arguments are JSON, so JSON types hold as in any REST JSON body, for every argument
    of every tool: ``"limit": "5"`` is refused although ``?limit=5`` is how REST reads it."""
    caller = caller_for_token(scene.run_token)
    arguments = {**valid_arguments(scene, world)[tool], argument: VALUE_OF_TYPE[json_type]}
    assert call_tool(caller=caller, name=tool, arguments=valid_arguments(scene, world)[tool])

    with pytest.raises(ValidationError) as refused:
        call_tool(caller=caller, name=tool, arguments=arguments)

    error = api_exception_handler(refused.value, {}).data["error"]
    assert error["code"] == "invalid_arguments"
    assert list(error["details"]["fields"]) == [argument]


@pytest.mark.django_db
def test_a_query_string_still_reads_its_numbers_as_text(world):
    """The same serializers validate REST's query strings, where every value is text."""
    response = world.agent_api.get("/api/v1/messages/search", {"query": "x", "limit": "5"})
    assert response.status_code == 200
    assert response.json()["limit"] == 5
    refused = world.agent_api.get("/api/v1/messages/search", {"query": "x", "limit": "five"})
    assert refused.status_code == 400
    assert list(refused.json()["error"]["details"]["fields"]) == ["limit"]


def body_stream(chunks: list[bytes]) -> Any:
    """An ASGI ``receive`` sending ``chunks`` without a Content-Length (chunked encoding)."""
    events = [
        {"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
        for index, chunk in enumerate(chunks)
    ]

    async def receive() -> dict[str, Any]:
        return events.pop(0)

    return receive


def test_a_body_over_the_limit_is_refused_while_it_is_read_without_a_content_length():
    chunk = b"x" * (64 * 1024)
    whole = anyio.run(read_body, body_stream([chunk] * 16), None)
    assert len(whole) == MAX_BODY_BYTES

    with pytest.raises(ParseError) as refused:
        anyio.run(read_body, body_stream([chunk] * 17), None)
    assert str(refused.value.detail) == f"The request body is larger than {MAX_BODY_BYTES} bytes."


def test_a_declared_length_over_the_limit_is_refused_before_a_byte_is_read():
    async def receive() -> dict[str, Any]:
        raise AssertionError("the body was read")

    with pytest.raises(ParseError):
        anyio.run(read_body, receive, str(MAX_BODY_BYTES + 1))


@pytest.mark.django_db(transaction=True)
def test_mcp_and_rest_refuse_a_body_with_the_same_sentence(scene):
    """One parser for both: a repeated key is refused by REST's sentence over MCP too."""
    raw = b'{"query": "plan", "query": "other"}'
    rest = factories.bearer_client(scene.run_token).generic(
        "POST", "/api/v1/history/search", raw, content_type="application/json"
    )
    mcp = asgi_request(
        "POST",
        {"authorization": f"Bearer {scene.run_token}", "content-type": "application/json"},
        call("search_history", {}).replace(b"{}", raw),
    )
    assert rest.status_code == mcp.status_code == 400
    assert mcp.json()["error"]["message"] == rest.json()["error"]["message"]
