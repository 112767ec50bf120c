"""The authorization matrix: every route of the URL conf, with every method it serves, called by
every kind of caller, answers exactly the status listed in ``MATRIX`` (SPEC §5, §8).

Why: who may call what is decided in several places (authentication, permission classes,
querysets scoped to the token's workspace, run-id checks inside views), so a new route or a new
method can quietly forget one kind of caller. The route list is read from the URL conf, so a
route or method without a row here, or a row whose route is gone, fails
``test_matrix_lists_every_route_and_method``.

Every call uses a valid body and query and real ids of *this* workspace, so the status reflects
who is calling and nothing else. The world is built once per module (building it per test made
the file several times slower) and each call runs inside a savepoint that is rolled back, so a
call that succeeds (a delete, a reply that finishes the run) never changes what the next caller
finds. A refused call must leave every table of the three apps exactly as it was; a 404 or 400
must be byte for byte what the same call answers for random ids (no-access and not-found look
identical); no error body names an id of the workspace; a 2xx for another workspace's token
names none either.

Left out of the matrix, on purpose:

- ``admin/``: the Django admin, a session login for trusted administrators, not the token API.
- ``/mcp``: mounted in front of Django by ``formation/wsgi.py`` and ``formation/asgi.py``, not in
  the URL conf; ``tests/test_mcp.py`` covers its tokens.
- HEAD: GET without a body. Every GET row is also sent as HEAD and must answer the same status.
- OPTIONS: ``DEFAULT_METADATA_CLASS`` is None, so no view serves it (the enumeration adds it back
  if a view ever gets a metadata class). It is sent, with every other method a route does not
  serve, by ``test_unlisted_methods_are_refused``.

Clients enforce CSRF, as production does (Django's test client skips the check unless asked),
so a POST that reaches a plain Django view answers here what it answers in production.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.http import HttpResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.resolvers import RegexPattern

from formation.errors import NotFound, error_body
from messages_app import services
from messages_app.models import TokenKind
from search_app.runs.services import run_create, run_reply
from tests import factories

pytestmark = pytest.mark.django_db

# --- callers ------------------------------------------------------------------------------------

# Callers that never get past authentication on a token-protected route.
BAD_CALLERS = ("none", "bearer_junk", "wrong_scheme", "revoked_service", "revoked_run")
# Callers with a valid token, in the column order of ``api()`` below.
TOKEN_CALLERS = (
    "service",  # service token of this workspace
    "service_other",  # service token of another workspace
    "agent_member",  # agent token of the agent in the room the rows use
    "agent_nonmember",  # agent token of an agent of this workspace outside that room
    "run_this",  # the token of the run the rows use
    "run_other",  # the token of another open run of the same agent, same room
    "run_finished",  # the token of a run of the same agent that has replied
)
CALLERS = BAD_CALLERS + TOKEN_CALLERS

# The envelope's code for each error status (SPEC §5; 405 is formation.errors.MethodNotAllowed).
CODES = {
    400: "invalid_arguments",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
}
NOT_FOUND_BYTES = json.dumps(
    error_body(NotFound.code, NotFound.default_message), separators=(",", ":")
).encode()
API_PREFIX = "/api/v1/"


def api(
    service: int,
    service_other: int,
    agent_member: int,
    agent_nonmember: int,
    run_this: int,
    run_other: int,
    run_finished: int,
) -> dict[str, int]:
    """A token-protected row: no token, a malformed or a revoked token is 401, then one status
    per valid token, in ``TOKEN_CALLERS`` order."""
    statuses = dict.fromkeys(BAD_CALLERS, 401)
    statuses.update(
        service=service,
        service_other=service_other,
        agent_member=agent_member,
        agent_nonmember=agent_nonmember,
        run_this=run_this,
        run_other=run_other,
        run_finished=run_finished,
    )
    return statuses


def everyone(status: int) -> dict[str, int]:
    """A route that reads no token: every caller, even a bad header, gets the same status."""
    return dict.fromkeys(CALLERS, status)


# Shorthands for the rows that share a column pattern. Another workspace's service token lists
# and creates in its own workspace; this workspace's ids are unknown to it, like random ids:
# not_found in the path, invalid_arguments in a body (as any unknown id there is).
SERVICE_LIST = api(200, 200, 403, 403, 403, 403, 403)
SERVICE_CREATE = api(201, 201, 403, 403, 403, 403, 403)
SERVICE_ON_OBJECT = api(200, 404, 403, 403, 403, 403, 403)
SERVICE_CREATE_ON_OBJECT = api(201, 404, 403, 403, 403, 403, 403)
SERVICE_CREATE_FROM_IDS = api(201, 400, 403, 403, 403, 403, 403)
# The agent tools: a room the agent is not in is not_found; a finished run's tools are closed.
AGENT_TOOL = api(403, 403, 200, 404, 200, 200, 403)
# Run-token routes without a run id in the path: any open run.
RUN_TOOL = api(403, 403, 403, 403, 200, 200, 403)
# /runs/{id}/...: for a run token only its own run exists, so any other run id is not_found.
OWN_RUN_WRITE = api(403, 403, 403, 403, 201, 404, 404)


@dataclass(frozen=True)
class Call:
    """One row. ``path``, ``query`` values and string values in ``body`` may name objects of the
    world as ``{room}``, ``{message}``, ``{alice}``, ... (``World.ids``)."""

    path: str
    expect: dict[str, int]
    body: Any = None
    query: dict[str, str] = field(default_factory=dict)


ROOM = "/api/v1/conversations/{room}"
MESSAGE = "/api/v1/messages/{message}"
LINK = "/api/v1/identity-links/{link}"
RUN = "/api/v1/runs/{run}"
HOLD = "/api/v1/legal-holds/{hold}"
UNKNOWN_API_PATH = "/api/v1/no-such-endpoint"

MATRIX: dict[tuple[str, str], Call] = {
    # --- ingestion: service token, scoped to its workspace ---
    ("api/v1/accounts", "GET"): Call("/api/v1/accounts", SERVICE_LIST),
    ("api/v1/accounts", "POST"): Call(
        "/api/v1/accounts", SERVICE_CREATE, {"displayName": "Dana Example"}
    ),
    ("api/v1/accounts/<pk>", "GET"): Call("/api/v1/accounts/{alice}", SERVICE_ON_OBJECT),
    ("api/v1/agents", "GET"): Call("/api/v1/agents", SERVICE_LIST),
    ("api/v1/agents", "POST"): Call("/api/v1/agents", SERVICE_CREATE, {"name": "Second helper"}),
    ("api/v1/agents/<pk>", "GET"): Call("/api/v1/agents/{agent}", SERVICE_ON_OBJECT),
    ("api/v1/conversations", "GET"): Call("/api/v1/conversations", SERVICE_LIST),
    ("api/v1/conversations", "POST"): Call(
        "/api/v1/conversations", SERVICE_CREATE, {"kind": "private", "title": "Room b"}
    ),
    ("api/v1/conversations/<pk>", "GET"): Call(ROOM, SERVICE_ON_OBJECT),
    ("api/v1/conversations/<pk>/members", "GET"): Call(f"{ROOM}/members", SERVICE_ON_OBJECT),
    ("api/v1/conversations/<pk>/members", "POST"): Call(
        f"{ROOM}/members", SERVICE_CREATE_ON_OBJECT, {"accountId": "{carol}"}
    ),
    ("api/v1/conversations/<pk>/members/leave", "POST"): Call(
        f"{ROOM}/members/leave", SERVICE_ON_OBJECT, {"accountId": "{bob}"}
    ),
    ("api/v1/conversations/<pk>/messages", "POST"): Call(
        f"{ROOM}/messages",
        SERVICE_CREATE_ON_OBJECT,
        {"senderUserId": "{alice}", "content": "sample status three"},
    ),
    ("api/v1/conversations/<pk>/messages/bulk", "POST"): Call(
        f"{ROOM}/messages/bulk",
        SERVICE_CREATE_ON_OBJECT,
        {"messages": [{"senderUserId": "{bob}", "content": "sample status four"}]},
    ),
    ("api/v1/identity-links", "GET"): Call("/api/v1/identity-links", SERVICE_LIST),
    ("api/v1/identity-links", "POST"): Call(
        "/api/v1/identity-links",
        SERVICE_CREATE_FROM_IDS,
        {"accountId": "{bob}", "linkedAccountId": "{carol}"},
    ),
    ("api/v1/identity-links/<pk>", "GET"): Call(LINK, SERVICE_ON_OBJECT),
    ("api/v1/identity-links/<pk>/verify", "POST"): Call(f"{LINK}/verify", SERVICE_ON_OBJECT),
    ("api/v1/identity-links/<pk>/revoke", "POST"): Call(f"{LINK}/revoke", SERVICE_ON_OBJECT),
    ("api/v1/runs", "POST"): Call(
        "/api/v1/runs",
        SERVICE_CREATE_FROM_IDS,
        {"agentId": "{agent}", "conversationId": "{room}", "requesterId": "{alice}"},
    ),
    ("api/v1/runs/<pk>", "GET"): Call(RUN, SERVICE_ON_OBJECT),
    ("api/v1/messages/<message_id>", "PATCH"): Call(
        MESSAGE, SERVICE_ON_OBJECT, {"content": "sample status edited"}
    ),
    ("api/v1/messages/<message_id>", "DELETE"): Call(
        MESSAGE, api(204, 404, 403, 403, 403, 403, 403)
    ),
    # --- the data lifecycle: service token, scoped to its workspace ---
    ("api/v1/retention", "GET"): Call("/api/v1/retention", SERVICE_LIST),
    ("api/v1/retention", "PUT"): Call("/api/v1/retention", SERVICE_LIST, {"days": 30}),
    ("api/v1/conversations/<pk>/retention", "GET"): Call(f"{ROOM}/retention", SERVICE_ON_OBJECT),
    ("api/v1/conversations/<pk>/retention", "PUT"): Call(
        f"{ROOM}/retention", SERVICE_ON_OBJECT, {"days": 7}
    ),
    ("api/v1/conversations/<pk>/retention", "DELETE"): Call(f"{ROOM}/retention", SERVICE_ON_OBJECT),
    ("api/v1/conversations/<pk>/export", "GET"): Call(f"{ROOM}/export", SERVICE_ON_OBJECT),
    ("api/v1/accounts/<pk>/erase", "POST"): Call("/api/v1/accounts/{bob}/erase", SERVICE_ON_OBJECT),
    ("api/v1/accounts/<pk>/export", "GET"): Call(
        "/api/v1/accounts/{alice}/export", SERVICE_ON_OBJECT
    ),
    ("api/v1/legal-holds", "GET"): Call("/api/v1/legal-holds", SERVICE_LIST),
    ("api/v1/legal-holds", "POST"): Call(
        "/api/v1/legal-holds", SERVICE_CREATE_FROM_IDS, {"conversationId": "{room}"}
    ),
    ("api/v1/legal-holds/<pk>", "GET"): Call(HOLD, SERVICE_ON_OBJECT),
    ("api/v1/legal-holds/<pk>/release", "POST"): Call(f"{HOLD}/release", SERVICE_ON_OBJECT),
    # --- agent tools: agent or run token, scoped to the agent's current rooms ---
    ("api/v1/messages", "GET"): Call(
        "/api/v1/messages", AGENT_TOOL, query={"conversationId": "{room}"}
    ),
    ("api/v1/messages/search", "GET"): Call(
        "/api/v1/messages/search", AGENT_TOOL, query={"query": "sample", "conversationId": "{room}"}
    ),
    ("api/v1/messages/<message_id>", "GET"): Call(MESSAGE, AGENT_TOOL),
    # --- run-token routes ---
    ("api/v1/history/search", "POST"): Call(
        "/api/v1/history/search", RUN_TOOL, {"query": "sample"}
    ),
    ("api/v1/memories", "GET"): Call("/api/v1/memories", RUN_TOOL, query={"query": "sample"}),
    ("api/v1/runs/<run_id>/reply", "POST"): Call(
        f"{RUN}/reply", OWN_RUN_WRITE, {"content": "sample answer"}
    ),
    ("api/v1/runs/<run_id>/memories", "POST"): Call(
        f"{RUN}/memories", OWN_RUN_WRITE, {"content": "sample note"}
    ),
    ("api/v1/runs/<run_id>/trace", "GET"): Call(
        f"{RUN}/trace", api(200, 404, 403, 403, 200, 404, 404)
    ),
    # --- any valid token: the tool definitions hold nothing of the workspace ---
    ("api/v1/tools", "GET"): Call("/api/v1/tools", api(200, 200, 200, 200, 200, 200, 200)),
    # --- no token: the front page, probes and the API description ---
    ("", "GET"): Call("/", everyone(200)),
    ("healthz", "GET"): Call("/healthz", everyone(200)),
    ("readyz", "GET"): Call("/readyz", everyone(200)),
    # Without METRICS_TOKEN (as here) /metrics does not exist (tests/test_metrics.py has it on).
    ("metrics", "GET"): Call("/metrics", everyone(404)),
    ("api/schema/", "GET"): Call("/api/schema/", everyone(200)),
    ("api/docs/", "GET"): Call("/api/docs/", everyone(200)),
    # --- any other /api/ path: the JSON not_found, whoever asks and however ---
    ("api/<rest>", "GET"): Call(UNKNOWN_API_PATH, everyone(404)),
    ("api/<rest>", "POST"): Call(UNKNOWN_API_PATH, everyone(404), {"content": "sample"}),
    ("api/<rest>", "PUT"): Call(UNKNOWN_API_PATH, everyone(404), {"content": "sample"}),
    ("api/<rest>", "PATCH"): Call(UNKNOWN_API_PATH, everyone(404), {"content": "sample"}),
    ("api/<rest>", "DELETE"): Call(UNKNOWN_API_PATH, everyone(404)),
}

# Plain Django views say nothing about their methods: what each serves is declared here. The
# catch-all answers not_found to any method: GET and the four unsafe ones have rows; HEAD follows
# GET, and OPTIONS and TRACE are sent by test_unlisted_methods_are_refused.
PLAIN_VIEW_METHODS: dict[str, frozenset[str]] = {
    "": frozenset({"GET"}),
    "healthz": frozenset({"GET"}),
    "readyz": frozenset({"GET"}),
    "metrics": frozenset({"GET"}),
    "api/<rest>": frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"}),
}
EVERY_METHOD = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE")
# For the unlisted methods: no token, and one token that passes each permission class (the
# service token: service routes; this run's token: agent, run and run-or-service routes).
UNLISTED_METHOD_CALLERS = ("none", "service", "run_this")


# --- the URL conf -------------------------------------------------------------------------------


def normalize(route: str, prefix_match: bool) -> str:
    """One spelling for both kinds of pattern: ``<id:pk>`` and the router's ``(?P<pk>...)``
    become ``<pk>``; a regex that matches a prefix ends in ``<rest>``."""
    text = re.sub(r"\(\?P<(\w+)>[^()]*\)", r"<\1>", route)
    text = re.sub(r"<\w+:(\w+)>", r"<\1>", text)
    text = text.replace("^", "").replace("$", "")
    return f"{text}<rest>" if prefix_match else text


def walk(patterns: list[Any], prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    """Every leaf pattern under ``patterns``, with its full normalized route."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, prefix + str(entry.pattern))
            continue
        pattern = entry.pattern
        prefix_match = isinstance(pattern, RegexPattern) and not str(pattern).endswith("$")
        yield normalize(prefix + str(pattern), prefix_match), entry


def served_methods(route: str, callback: Any) -> set[str]:
    """The methods a route serves, from the view itself where the view can say."""
    actions = getattr(callback, "actions", None)
    if actions is not None:  # a DRF viewset route: its action map (HEAD is GET's shadow)
        return {method.upper() for method in actions} - {"HEAD"}
    view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if view_class is None:
        if route not in PLAIN_VIEW_METHODS:
            raise AssertionError(
                f"{route}: a plain view; declare its methods in PLAIN_VIEW_METHODS"
            )
        return set(PLAIN_VIEW_METHODS[route])
    methods = {
        name.upper()
        for name in view_class.http_method_names
        if name not in ("head", "options") and hasattr(view_class, name)
    }
    if getattr(view_class, "metadata_class", None) is not None:
        methods.add("OPTIONS")
    return methods


def url_routes() -> dict[str, URLPattern]:
    """Every route except the admin's, by its normalized spelling."""
    routes: dict[str, URLPattern] = {}
    for route, pattern in walk(get_resolver().url_patterns):
        if route.startswith("admin/"):
            continue
        assert route not in routes, f"two URL patterns normalize to {route}"
        routes[route] = pattern
    return routes


# --- the world ----------------------------------------------------------------------------------


@dataclass
class World:
    """This workspace's objects (``ids``, for the rows' placeholders) and one Authorization
    header per caller (None: no header)."""

    ids: dict[str, str]
    headers: dict[str, str | None]


@pytest.fixture(scope="module")
def authz_world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    """The world, built once for the module inside a transaction undone at its end: every call
    runs in its own rolled-back savepoint, so no test can change what the next one finds, and
    building it once keeps the file fast."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield build_world()
        transaction.set_rollback(True)


def build_world() -> World:
    """A private room with the agent, Alice and Bob and two messages; Carol outside it; a second
    agent outside it; a pending link; three runs of the agent in the room, one finished; a legal
    hold on another room; and a second workspace with a little of everything, so its lists are
    not trivially empty."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    outsider = factories.make_agent(workspace, "Outside agent")
    alice = factories.make_account(workspace, "Alice Example")
    bob = factories.make_account(workspace, "Bob Example")
    carol = factories.make_account(workspace, "Carol Example")
    room = factories.make_conversation(workspace, "private", "planning")
    for member in (agent, alice, bob):
        factories.join(room, member)
    first = factories.post(room, alice, "sample status one")
    second = factories.post(room, bob, "sample status two")
    link = services.identity_link_create(
        workspace_id=workspace.id, account_id=alice.id, linked_account_id=bob.id
    )
    run, run_token = _run(agent, room, alice)
    other_run, other_run_token = _run(agent, room, bob)
    finished_run, finished_token = _run(agent, room, alice)
    reply = run_reply(workspace_id=workspace.id, run_id=finished_run.id, content="sample answer")
    hold = factories.hold_elsewhere(workspace)

    elsewhere = factories.make_workspace()
    elsewhere_agent = factories.make_agent(elsewhere, "Other agent")
    elsewhere_person = factories.make_account(elsewhere, "Erin Example")
    elsewhere_room = factories.make_conversation(elsewhere, "public", "other-general")
    factories.join(elsewhere_room, elsewhere_agent)
    factories.join(elsewhere_room, elsewhere_person)

    _, service = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    _, service_other = services.token_create(workspace_id=elsewhere.id, kind=TokenKind.SERVICE)
    _, agent_token = services.token_create(
        workspace_id=workspace.id, kind=TokenKind.AGENT, agent=agent
    )
    _, outsider_token = services.token_create(
        workspace_id=workspace.id, kind=TokenKind.AGENT, agent=outsider
    )
    revoked_service, revoked_service_raw = services.token_create(
        workspace_id=workspace.id, kind=TokenKind.SERVICE
    )
    services.token_revoke(token=revoked_service)
    # A second token of the rows' own run, revoked: were revocation ignored, it would pass
    # wherever run_this does.
    revoked_run, revoked_run_raw = services.token_create(
        workspace_id=workspace.id, kind=TokenKind.RUN, agent=agent, run=run
    )
    services.token_revoke(token=revoked_run)

    ids = {
        "workspace": workspace.id,
        "agent": agent.id,
        "outsider": outsider.id,
        "alice": alice.id,
        "bob": bob.id,
        "carol": carol.id,
        "room": room.id,
        "message": first.id,
        "second_message": second.id,
        "reply": reply.id,
        "link": link.id,
        "hold": hold.id,
        "run": run.id,
        "other_run": other_run.id,
        "finished_run": finished_run.id,
    }
    bearer = {
        "service": service,
        "service_other": service_other,
        "agent_member": agent_token,
        "agent_nonmember": outsider_token,
        "run_this": run_token,
        "run_other": other_run_token,
        "run_finished": finished_token,
        "revoked_service": revoked_service_raw,
        "revoked_run": revoked_run_raw,
    }
    headers: dict[str, str | None] = {name: f"Bearer {raw}" for name, raw in bearer.items()}
    headers.update(
        none=None,
        bearer_junk="Bearer %%not-a-token%%",
        # A valid service token under DRF's TokenAuthentication keyword: only Bearer counts.
        wrong_scheme=f"Token {service}",
    )
    assert set(headers) == set(CALLERS)
    return World(ids={name: str(value) for name, value in ids.items()}, headers=headers)


def _run(agent: Any, room: Any, requester: Any) -> tuple[Any, str]:
    """A run through the real service, with its raw token."""
    return run_create(
        workspace_id=agent.workspace_id,
        agent_id=agent.id,
        conversation_id=room.id,
        requester_id=requester.id,
    )


# --- sending and checking -----------------------------------------------------------------------


def send(method: str, call: Call, ids: dict[str, str], header: str | None) -> HttpResponse:
    """One request from a fresh CSRF-enforcing client, so no cookie travels between calls."""
    client = Client(enforce_csrf_checks=True)
    extra: dict[str, Any] = {}
    if call.body is not None:
        extra = {
            "data": json.dumps(factories.fill_placeholders(call.body, ids)),
            "content_type": "application/json",
        }
    response = client.generic(
        method,
        factories.fill_placeholders(call.path, ids),
        query_params=factories.fill_placeholders(call.query, ids),
        headers={"Authorization": header} if header is not None else {},
        **extra,
    )
    if not response.streaming:
        return response
    # An export: read it whole here, inside the caller's savepoint, as its client would.
    whole = HttpResponse(b"".join(response.streaming_content), status=response.status_code)
    for name, value in response.items():
        whole[name] = value
    return whole


def ghost_ids(ids: dict[str, str]) -> dict[str, str]:
    """The same names with random ids: what a caller who can see nothing must not tell apart."""
    return {name: str(uuid.uuid4()) for name in ids}


def state_tables() -> list[str]:
    models = [
        model
        for label in ("messages_app", "search_app", "audit_app")
        for model in apps.get_app_config(label).get_models(include_auto_created=True)
    ]
    return sorted({model._meta.db_table for model in models})


def state_fingerprint() -> tuple[str, ...]:
    """One digest per table of every row's text: any insert, update or delete changes it."""
    parts = ", ".join(
        "(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
        f"FROM {connection.ops.quote_name(table)} t)"
        for table in state_tables()
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {parts}")
        return tuple(cursor.fetchone())


@contextmanager
def rolled_back() -> Iterator[None]:
    """A savepoint undone afterwards, so one caller's success never reaches the next caller."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def problems_with(
    response: HttpResponse, *, expected: int, caller: str, path: str, world: World
) -> list[str]:
    """Everything wrong with one response, as readable lines (empty when it is right)."""
    found: list[str] = []
    content = response.content
    if response.status_code != expected:
        found.append(f"expected {expected}, got {response.status_code}: {content[:300]!r}")
        return found
    if response.status_code >= 400:
        leaked = [name for name, value in world.ids.items() if value.encode() in content]
        if leaked:
            found.append(f"error body names {leaked}")
    elif caller == "service_other":
        leaked = [name for name, value in world.ids.items() if value.encode() in content]
        if leaked:
            found.append(f"another workspace's token was shown {leaked}")
    if response.status_code == 401 and response.get("WWW-Authenticate") != 'Bearer realm="api"':
        found.append(f"401 without the Bearer challenge: {response.get('WWW-Authenticate')!r}")
    if path.startswith(API_PREFIX) and response.status_code >= 400 and content:
        try:
            body = json.loads(content)
        except ValueError:
            return [*found, f"not the JSON envelope: {content[:200]!r}"]
        error = body.get("error") if isinstance(body, dict) else None
        if set(body) != {"error"} or set(error or {}) != {"code", "message", "details"}:
            found.append(f"not the error envelope: {body!r}")
        elif error["code"] != CODES.get(response.status_code):
            found.append(f"code {error['code']!r}, expected {CODES.get(response.status_code)!r}")
        if response.status_code == 404 and content != NOT_FOUND_BYTES:
            found.append(f"404 differs from the plain not_found: {content!r}")
    return found


# --- tests --------------------------------------------------------------------------------------


def test_matrix_lists_every_route_and_method() -> None:
    """A route or method the URL conf serves without a row, or a row for nothing, fails here."""
    served = {
        (route, method)
        for route, pattern in url_routes().items()
        for method in served_methods(route, pattern.callback)
    }
    missing = sorted(served - set(MATRIX))
    stale = sorted(set(MATRIX) - served)
    assert not missing, f"routes/methods the URL conf serves with no row in MATRIX: {missing}"
    assert not stale, f"MATRIX rows for routes/methods the URL conf does not serve: {stale}"


def test_every_row_covers_every_caller_and_reaches_its_route() -> None:
    """A row's path must resolve to the row's own route, and name a status for every caller."""
    routes = url_routes()
    ids = {name: str(uuid.uuid4()) for name in _placeholder_names()}
    for (route, method), call in MATRIX.items():
        assert set(call.expect) == set(CALLERS), f"{method} {route}: callers differ"
        match = resolve(factories.fill_placeholders(call.path, ids))
        assert match.func is routes[route].callback, f"{method} {route}: {call.path} goes elsewhere"


def _placeholder_names() -> set[str]:
    names: set[str] = set()
    for call in MATRIX.values():
        text = json.dumps([call.path, call.body, call.query])
        names.update(re.findall(r"\{(\w+)\}", text))
    return names


def checked_call(
    method: str, call: Call, caller: str, expected: int, world: World
) -> tuple[HttpResponse, list[str]]:
    """Send one call in a rolled-back savepoint; a call meant to be refused must change no row."""
    with rolled_back():
        before = state_fingerprint() if expected >= 400 else None
        response = send(method, call, world.ids, world.headers[caller])
        changed = before is not None and state_fingerprint() != before
    problems = problems_with(
        response, expected=expected, caller=caller, path=call.path, world=world
    )
    if changed:
        problems.append(f"refused with {response.status_code} but changed stored rows")
    return response, problems


@pytest.mark.parametrize(("route", "method"), sorted(MATRIX), ids=lambda value: value)
def test_authorization_matrix(route: str, method: str, authz_world: World) -> None:
    """Every caller gets exactly its status (HEAD too, for a GET row); a refused call changes
    nothing; a 400 or 404 for this workspace's ids is byte for byte the one for random ids."""
    call = MATRIX[(route, method)]
    world = authz_world
    failures: list[str] = []
    for caller in CALLERS:
        expected = call.expect[caller]
        response, problems = checked_call(method, call, caller, expected, world)
        failures.extend(f"{method} {route} as {caller}: {problem}" for problem in problems)
        if method == "GET":
            _, problems = checked_call("HEAD", call, caller, expected, world)
            failures.extend(f"HEAD {route} as {caller}: {problem}" for problem in problems)
        if expected in (400, 404):
            with rolled_back():
                ghost = send(method, call, ghost_ids(world.ids), world.headers[caller])
            if (response.status_code, response.content) != (ghost.status_code, ghost.content):
                failures.append(
                    f"{method} {route} as {caller}: this workspace's ids answer "
                    f"{response.status_code} {response.content[:200]!r}, random ids "
                    f"{ghost.status_code} {ghost.content[:200]!r}"
                )
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("route", sorted({route for route, _ in MATRIX}), ids=lambda value: value)
def test_unlisted_methods_are_refused(route: str, authz_world: World) -> None:
    """A method a route does not serve (OPTIONS included) does nothing for anyone: 401 without a
    valid token on the token API, else 403 or 405, never 2xx or 5xx, and no row changes."""
    world = authz_world
    served = {method for (name, method) in MATRIX if name == route}
    call = next(call for (name, _), call in MATRIX.items() if name == route)
    unlisted = [
        method
        for method in EVERY_METHOD
        if method not in served and not (method == "HEAD" and "GET" in served)
    ]
    token_api = call.path.startswith(API_PREFIX) and route != "api/<rest>"
    failures: list[str] = []
    for method in unlisted:
        for caller in UNLISTED_METHOD_CALLERS:
            with rolled_back():
                before = state_fingerprint()
                response = send(method, call, world.ids, world.headers[caller])
                changed = state_fingerprint() != before
            status = response.status_code
            if token_api and world.headers[caller] is None:
                allowed = {401}
            elif route == "api/<rest>":
                allowed = {404}
            else:
                allowed = {403, 405}
            label = f"{method} {route} as {caller}"
            if changed:
                failures.append(f"{label}: changed stored rows")
            if status not in allowed:
                failures.append(
                    f"{label}: expected one of {sorted(allowed)}, got {status}: "
                    f"{response.content[:200]!r}"
                )
            elif call.path.startswith(API_PREFIX) and method != "HEAD":
                problems = problems_with(
                    response, expected=status, caller=caller, path=call.path, world=world
                )
                failures.extend(f"{label}: {problem}" for problem in problems)
    assert not failures, "\n".join(failures)
