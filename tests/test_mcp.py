"""The MCP server (formation/mcp_server.py), driven by the official SDK's own client.

Over stdio it is ``manage.py mcp_server --token`` in a subprocess pointed at the test database;
over HTTP it is ``/mcp`` on pytest-django's live server, serving the production WSGI entry point
(so /mcp is routed as under gunicorn), and the ASGI entry point in process. Both must list the
four tools with the schemas of formation/tools.py and answer every call with exactly the REST
endpoint's body, or its error envelope as a tool error. The subprocess and the server threads
use their own database connections, so these tests commit their data (``transaction=True``).
"""

from __future__ import annotations

import json
import sys
import uuid
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
from rest_framework.test import APIClient

from formation.auth import token_digest
from formation.mcp_server import build_server
from formation.tools import tool_definitions
from messages_app import services
from messages_app.models import ApiToken, TokenKind
from tests import factories

TOOL_NAMES = ["list_messages", "get_message", "search_messages", "search_history"]


class Scene:
    """Two messages in the public room, a run of the world's agent and its tokens."""

    def __init__(self, world) -> None:
        self.message = factories.post(world.public, world.bob, "the migration plan is ready")
        factories.post(world.public, world.alice, "migration done")
        _, self.run_token = services.run_create(
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
        assert json.loads(result.content[0].text) == result.structured_content
        results.append((result.is_error, result.structured_content))
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
    assert result.structured_content == rest_answer(
        scene.agent_token, "search_history", {"query": "migration"}
    )
    assert result.structured_content["error"]["code"] == "forbidden"


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
            return [first, await client.call_tool(*search)]

    def revoke(raw: str) -> None:
        ApiToken.objects.filter(digest=token_digest(raw)).update(revoked_at=timezone.now())
        connections.close_all()

    first, second = anyio.run(session)

    assert not first.is_error
    assert second.is_error
    assert second.structured_content["error"]["code"] == "unauthenticated"


@pytest.mark.django_db(transaction=True)
def test_tool_calls_share_the_rest_rate_limit(scene, settings):
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"service": None, "agent": "2/min"},
    }

    results = call_in_process(scene.agent_token, [("search_messages", {"query": "x"})] * 3)

    assert [result.is_error for result in results] == [False, False, True]
    error = results[2].structured_content["error"]
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

    assert names == TOOL_NAMES
    assert result.structured_content == rest_answer(
        scene.agent_token, "get_message", {"messageId": str(scene.message.id)}
    )
