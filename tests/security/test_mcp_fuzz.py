"""Generated requests against ``/mcp``, which the OpenAPI-driven fuzzing never reaches.

Hypothesis builds JSON-RPC messages of every shape (known and unknown methods, params of random
shapes, tool arguments of every JSON type, ids of every JSON type, batches), raw bodies that are
malformed, oversized, repeat a key or are not UTF-8, and random HTTP methods, content types,
Accept headers and tokens. Each goes through the real ASGI entry point, or the WSGI one (a2wsgi,
as under gunicorn), with real tokens on the test database. Every answer must be below 500, JSON,
either a JSON-RPC response or the REST envelope (a notification's 202 alone has no body), and
free of ``CANARY``, which the generated values carry; a refused request must change no table.

The server threads use their own connections, so the data is committed (``transaction=True``).
Derandomized, so every run tries the same requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formation.limits import MAX_BODY_BYTES
from formation.tools import AGENT_TOOLS, input_schema
from formation.wsgi import application as wsgi_application
from messages_app import services
from messages_app.models import TokenKind
from search_app.runs.services import run_create
from tests import factories
from tests.test_mcp import asgi_request

CANARY = "canaryfz"
# Keys are drawn from letters that cannot spell the canary: REST names an unknown argument in
# its error (``details.fields``), as it does for any JSON body, and that is no value.
KEY_LETTERS = "abcdeghijk"
TOOL_ARGUMENTS = {tool.name: list(input_schema(tool)["properties"]) for tool in AGENT_TOOLS}
METHODS = [
    "tools/call",
    "tools/list",
    "initialize",
    "ping",
    "server/discover",
    "resources/list",
    "notifications/initialized",
    "notifications/cancelled",
    CANARY,
]
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=b",
    f"text/{CANARY}",
    None,
]
ACCEPTS = ["application/json, text/event-stream", "application/json", "*/*", "text/html", None]
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
PROTOCOL_HEADERS = [None, None, "2025-11-25", MODERN, MODERN, CANARY]
CANARY_BYTES = CANARY.encode()
MALFORMED = [
    b'{"jsonrpc": "2.0", "jsonrpc": "2.0", "id": 1, "method": "' + CANARY_BYTES + b'"}',
    b'{"jsonrpc": "2.0", "id": NaN, "method": "' + CANARY_BYTES + b'"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "\xff' + CANARY_BYTES + b'"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "\\ud800' + CANARY_BYTES + b'"}',
    b"[" * 40 + b'"' + CANARY_BYTES + b'"' + b"]" * 40,
    b"",
]
OVERSIZED = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "%s"}}' % (
    CANARY_BYTES * (MAX_BODY_BYTES // len(CANARY_BYTES) + 1)
)
OTHER_METHODS = st.one_of(
    st.sampled_from(["GET", "DELETE", "PUT", "PATCH", "OPTIONS"]),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=8),
)
OTHER_TOKENS = ["service", "forged", None]


@dataclass(frozen=True)
class World:
    tokens: dict[str, str]
    ids: list[str]
    # Arguments each tool accepts, for generated calls to start from.
    valid_arguments: dict[str, dict[str, Any]]


@pytest.fixture
def fuzz_world(transactional_db, settings) -> World:
    # One token makes every call here: its rate limit would soon answer them all instead.
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"service": None, "agent": None},
    }
    workspace = factories.make_workspace("mcp-fuzz")
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    room = factories.make_conversation(workspace, "public", "general")
    for member in (agent, alice):
        factories.join(room, member, joined_at=factories.at(-60))
    message = factories.post(
        room, alice, "sample status for the fuzzer", created_at=factories.at(1)
    )
    _, run_token = run_create(
        workspace_id=workspace.id,
        agent_id=agent.id,
        conversation_id=room.id,
        requester_id=alice.id,
    )
    _, agent_token = services.token_create(
        workspace_id=workspace.id, kind=TokenKind.AGENT, agent=agent
    )
    _, service_token = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    return World(
        tokens={
            "run": run_token,
            "agent": agent_token,
            "service": service_token,
            "forged": "fmn_agent_" + "x" * 43,
        },
        ids=[str(room.id), str(message.id)],
        valid_arguments={
            "list_messages": {"conversationId": str(room.id)},
            "get_message": {"messageId": str(message.id)},
            "search_messages": {"query": "sample"},
            "search_history": {"query": "sample status"},
        },
    )


# --- what is generated -----------------------------------------------------------------------

keys = st.text(alphabet=KEY_LETTERS, min_size=1, max_size=6)
texts = st.one_of(
    st.just(CANARY),
    st.text(max_size=12).map(lambda text: f"{text}{CANARY}"),
    st.sampled_from(["", " ", "%_\\", "2026-01-02T03:04:05Z", "9" * 30, CANARY * 80]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(keys, children, max_size=3)
    ),
    max_leaves=8,
)
ids = st.one_of(
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.text(alphabet=KEY_LETTERS, max_size=8),
)
bad_ids = st.sampled_from([None, True, 1.5, 2**60 * 10, [], {}, "x" * 300])


def often(strategy: st.SearchStrategy[Any], otherwise: st.SearchStrategy[Any]) -> Any:
    """``strategy`` about nine times in ten, else ``otherwise``."""
    return st.integers(0, 9).flatmap(lambda roll: otherwise if roll == 9 else strategy)


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws; the simplest draw (0) is the common case."""
    return draw(st.integers(0, one_in - 1)) == one_in - 1


@st.composite
def tool_arguments(draw: st.DrawFn, tool: Any, world: World) -> Any:
    """Mostly an object of the tool's own arguments, with values of any type (real ids and
    small numbers among them, so some calls get past validation); sometimes anything at all."""
    if rarely(draw, 10):
        return draw(json_values)
    tool = tool if isinstance(tool, str) and tool in TOOL_ARGUMENTS else "search_messages"
    names = TOOL_ARGUMENTS[tool]
    value = st.one_of(st.sampled_from(world.ids), st.integers(-5, 300), texts, json_values)
    arguments = dict(world.valid_arguments[tool]) if draw(st.booleans()) else {}
    arguments.update(draw(st.dictionaries(st.sampled_from(names), value, max_size=2)))
    if rarely(draw, 5):
        arguments[draw(keys)] = draw(json_values)
    return arguments


@st.composite
def messages(draw: st.DrawFn, world: World, modern: bool) -> Any:
    """One JSON-RPC message, each member mostly right, sometimes wrong or missing; under the
    2026-07-28 protocol its params carry the envelope ``_meta``."""
    message: dict[str, Any] = {}
    if not rarely(draw, 20):
        message["jsonrpc"] = "2.0"
    elif draw(st.booleans()):
        message["jsonrpc"] = draw(st.sampled_from(["1.0", 2, None, CANARY]))
    if not rarely(draw, 5):
        message["id"] = draw(often(ids, bad_ids))
    method = draw(often(st.sampled_from(METHODS), json_values))
    if not rarely(draw, 20):
        message["method"] = method
    if method == "tools/call":
        name = draw(often(st.sampled_from(sorted(TOOL_ARGUMENTS)), st.one_of(texts, json_values)))
        params: Any = {"name": name}
        if not rarely(draw, 10):
            params["arguments"] = draw(tool_arguments(name, world))
    else:
        params = draw(often(st.dictionaries(keys, json_values, max_size=2), json_values))
    if modern and isinstance(params, dict) and not rarely(draw, 10):
        params["_meta"] = MODERN_META
    if not rarely(draw, 10):
        message["params"] = params
    if rarely(draw, 20):
        message[draw(st.sampled_from(["result", "error", "extra"]))] = draw(json_values)
    return message


@st.composite
def bodies(draw: st.DrawFn, world: World, modern: bool) -> bytes:
    kind = draw(st.integers(0, 29))
    if kind < 23:
        return json.dumps(draw(messages(world, modern))).encode()
    if kind == 23:
        return json.dumps(draw(st.lists(messages(world, modern), max_size=3))).encode()
    if kind == 24:
        return draw(st.binary(max_size=40)) + CANARY.encode()
    if kind == 25:
        whole = json.dumps(draw(messages(world, modern))).encode()
        return whole[: draw(st.integers(0, len(whole)))] + CANARY.encode()
    if kind == 26:
        return draw(st.sampled_from(MALFORMED))
    if kind == 27:
        return OVERSIZED
    return json.dumps(draw(json_values)).encode()


@dataclass(frozen=True)
class Request:
    server: str
    method: str
    token: str | None
    content_type: str | None
    accept: str | None
    protocol: str | None
    body: bytes

    def headers(self, world: World) -> dict[str, str]:
        headers = {}
        if self.token is not None:
            headers["authorization"] = f"Bearer {world.tokens[self.token]}"
        for name, value in (
            ("content-type", self.content_type),
            ("accept", self.accept),
            ("mcp-protocol-version", self.protocol),
        ):
            if value is not None:
                headers[name] = value
        if self.protocol == MODERN:
            headers.update(self.routing_headers())
        return headers

    def routing_headers(self) -> dict[str, str]:
        """The 2026-07-28 protocol's copies of the method and tool name, as a client sends."""
        try:
            message = json.loads(self.body)
        except ValueError:
            return {}
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return {}
        headers = {"mcp-method": message["method"]}
        params = message.get("params")
        if isinstance(params, dict) and isinstance(params.get("name"), str):
            headers["mcp-name"] = params["name"]
        return {name: value for name, value in headers.items() if value.isascii()}


@st.composite
def requests(draw: st.DrawFn, world: World) -> Request:
    protocol = draw(st.sampled_from(PROTOCOL_HEADERS))
    return Request(
        server=draw(st.sampled_from(["asgi", "wsgi"])),
        method=draw(often(st.just("POST"), OTHER_METHODS)),
        token=draw(often(st.sampled_from(["run", "agent"]), st.sampled_from(OTHER_TOKENS))),
        content_type=draw(often(st.just("application/json"), st.sampled_from(CONTENT_TYPES))),
        accept=draw(often(st.just(ACCEPTS[0]), st.sampled_from(ACCEPTS))),
        protocol=protocol,
        body=draw(bodies(world, modern=protocol == MODERN)),
    )


# --- the checks ------------------------------------------------------------------------------


def send(request: Request, world: World) -> httpx2.Response:
    headers = request.headers(world)
    content = request.body if request.method not in {"GET", "OPTIONS"} else None
    if request.server == "wsgi":
        with httpx2.Client(
            transport=httpx2.WSGITransport(app=wsgi_application), base_url="http://localhost"
        ) as client:
            return client.request(request.method, "/mcp", headers=headers, content=content)
    return asgi_request(request.method, headers, content)


def refused(response: httpx2.Response) -> bool:
    """Whether the answer is a refusal, after checking it is one of the shapes allowed."""
    if response.status_code == 202:
        assert response.content == b""
        return False
    assert response.headers["content-type"] == "application/json", response.content[:200]
    body = response.json()
    if set(body) == {"error"}:
        assert set(body["error"]) == {"code", "message", "details"}
        assert isinstance(body["error"]["code"], str)
        assert response.status_code >= 400
        return True
    assert body["jsonrpc"] == "2.0"
    assert "id" in body
    assert ("result" in body) != ("error" in body), body
    if "error" in body:
        assert set(body["error"]) <= {"code", "message", "data"}
        assert isinstance(body["error"]["code"], int)
        assert isinstance(body["error"]["message"], str)
        return True
    return bool(body["result"].get("isError"))


@pytest.mark.django_db(transaction=True)
def test_mcp_answers_every_generated_request_safely(fuzz_world: World) -> None:
    @settings(
        max_examples=300,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )
    @given(request=requests(fuzz_world))
    def check(request: Request) -> None:
        before = factories.table_snapshot()
        response = send(request, fuzz_world)
        assert response.status_code < 500, (request, response.content[:300])
        assert CANARY.encode() not in response.content, (request, response.content[:300])
        if request.method != "POST":
            assert response.status_code == 405
        if refused(response):
            assert factories.table_snapshot() == before, request

    check()
