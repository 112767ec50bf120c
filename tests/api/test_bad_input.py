"""Bad input on the ingestion endpoints (SPEC §5, §9): every case is a 400 ``invalid_arguments``
in the error envelope, stores nothing, never a 500, and never echoes what was sent.

Each case carries the canary in a *value* it sends. Unknown field and parameter *names* may be
named back to the caller (that is how a client finds its typo), so the canary is not put there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from messages_app import services
from messages_app.models import (
    Account,
    Agent,
    ApiToken,
    Conversation,
    IdentityLink,
    Membership,
    Message,
    MessageLineage,
    Run,
)
from tests import factories

pytestmark = pytest.mark.django_db

CANARY = "canary-zqx"
BAD_UUID = f"{CANARY}-0000-0000-0000"
MODELS = (
    Account,
    Agent,
    Conversation,
    Membership,
    Message,
    MessageLineage,
    IdentityLink,
    Run,
    ApiToken,
)


@dataclass(frozen=True)
class Case:
    """One bad request. ``path`` and string values in ``body`` may name world objects as
    ``{private}``, ``{alice}``, ``{agent}``, ``{message}``, ``{other_message}``, ``{link}``."""

    method: str
    path: str
    body: Any = None
    raw: bytes | None = None
    query: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


def _deep(depth: int) -> bytes:
    return b'{"displayName": ' + b"[" * depth + b'"' + CANARY.encode() + b'"' + b"]" * depth + b"}"


ACCOUNTS = "/api/v1/accounts"
AGENTS = "/api/v1/agents"
CONVERSATIONS = "/api/v1/conversations"
MESSAGES = "/api/v1/conversations/{private}/messages"
BULK = "/api/v1/conversations/{private}/messages/bulk"
MEMBERS = "/api/v1/conversations/{private}/members"
LEAVE = "/api/v1/conversations/{private}/members/leave"
MESSAGE = "/api/v1/messages/{message}"
LINKS = "/api/v1/identity-links"
RUNS = "/api/v1/runs"
USER_MSG = {"senderUserId": "{alice}"}
AGENT_MSG = {"senderAgentId": "{agent}"}


def user_msg(**extra) -> dict:
    return {**USER_MSG, "content": f"{CANARY} body", **extra}


def agent_msg(**extra) -> dict:
    return {**AGENT_MSG, "content": f"{CANARY} body", **extra}


CASES = {
    # --- JSON bodies that are not JSON objects, or not JSON at all ---
    "accounts-list-body": Case("post", ACCOUNTS, raw=json.dumps([CANARY]).encode()),
    "accounts-string-body": Case("post", ACCOUNTS, raw=json.dumps(CANARY).encode()),
    "accounts-number-body": Case("post", ACCOUNTS, raw=b"42"),
    "accounts-null-body": Case("post", ACCOUNTS, raw=b"null"),
    "accounts-nan-literal": Case(
        "post", ACCOUNTS, raw=b'{"displayName": NaN, "externalId": "canary-zqx"}'
    ),
    "accounts-infinity-literal": Case(
        "post", ACCOUNTS, raw=b'{"displayName": "canary-zqx", "externalId": Infinity}'
    ),
    "accounts-nested-1000": Case("post", ACCOUNTS, raw=_deep(1000)),
    "accounts-nested-40": Case("post", ACCOUNTS, raw=_deep(40)),
    "accounts-empty-body": Case("post", ACCOUNTS, raw=b""),
    "accounts-whitespace-body": Case("post", ACCOUNTS, raw=b"   \n"),
    "accounts-truncated-json": Case("post", ACCOUNTS, raw=b'{"displayName": "canary-zqx"'),
    "accounts-trailing-garbage": Case("post", ACCOUNTS, raw=b'{"displayName": "canary-zqx"} x'),
    "accounts-invalid-utf8": Case("post", ACCOUNTS, raw=b'{"displayName": "canary-zqx \xff\xfe"}'),
    "accounts-latin1-body": Case(
        "post", ACCOUNTS, raw='{"displayName": "canary-zqx caf\u00e9"}'.encode("latin-1")
    ),
    "accounts-text-plain": Case(
        "post", ACCOUNTS, raw=b'{"displayName": "canary-zqx"}', content_type="text/plain"
    ),
    "accounts-form-encoded": Case(
        "post",
        ACCOUNTS,
        raw=b"displayName=canary-zqx",
        content_type="application/x-www-form-urlencoded",
    ),
    "messages-invalid-utf8": Case(
        "post",
        MESSAGES,
        raw=b'{"senderUserId": "{alice}", "content": "canary-zqx \xc3\x28"}',
    ),
    "messages-nested-1000": Case(
        "post",
        MESSAGES,
        raw=b'{"senderUserId": "{alice}", "content": "canary-zqx", "lineage": '
        + b"[" * 1000
        + b"]" * 1000
        + b"}",
    ),
    # --- accounts / agents / conversations ---
    "accounts-unknown-field": Case("post", ACCOUNTS, {"displayName": "Ok", "nickname": CANARY}),
    "accounts-snake-case-field": Case("post", ACCOUNTS, {"display_name": CANARY}),
    "accounts-display-name-number": Case(
        "post", ACCOUNTS, {"displayName": 12345, "externalId": CANARY}
    ),
    "accounts-display-name-null": Case(
        "post", ACCOUNTS, {"displayName": None, "externalId": CANARY}
    ),
    "accounts-display-name-bool": Case(
        "post", ACCOUNTS, {"displayName": True, "externalId": CANARY}
    ),
    "accounts-display-name-list": Case("post", ACCOUNTS, {"displayName": [CANARY]}),
    "accounts-display-name-object": Case("post", ACCOUNTS, {"displayName": {"v": CANARY}}),
    "accounts-display-name-empty": Case(
        "post", ACCOUNTS, {"displayName": "", "externalId": CANARY}
    ),
    "accounts-display-name-missing": Case("post", ACCOUNTS, {"externalId": CANARY}),
    "accounts-display-name-nul": Case("post", ACCOUNTS, {"displayName": f"{CANARY}\u0000"}),
    "accounts-display-name-too-long": Case("post", ACCOUNTS, {"displayName": CANARY * 100}),
    "accounts-external-id-number": Case("post", ACCOUNTS, {"displayName": CANARY, "externalId": 7}),
    "agents-name-list": Case("post", AGENTS, {"name": [CANARY]}),
    "agents-unknown-field": Case("post", AGENTS, {"name": "Ok", "model": CANARY}),
    "agents-name-missing": Case("post", AGENTS, {}),
    "conversations-invalid-kind": Case("post", CONVERSATIONS, {"kind": CANARY, "title": "t"}),
    "conversations-kind-number": Case("post", CONVERSATIONS, {"kind": 1, "title": CANARY}),
    "conversations-kind-uppercase": Case(
        "post", CONVERSATIONS, {"kind": "PUBLIC", "title": CANARY}
    ),
    "conversations-title-null": Case(
        "post", CONVERSATIONS, {"kind": "public", "title": None, "externalId": CANARY}
    ),
    "conversations-unknown-field": Case(
        "post", CONVERSATIONS, {"kind": "public", "title": "t", "topic": CANARY}
    ),
    # --- messages ---
    "messages-content-nul": Case("post", MESSAGES, user_msg(content=f"{CANARY}\u0000tail")),
    "messages-content-lone-surrogate": Case(
        "post",
        MESSAGES,
        raw=b'{"senderUserId": "{alice}", "content": "canary-zqx \\ud800 tail"}',
    ),
    "messages-content-lone-low-surrogate": Case(
        "post",
        MESSAGES,
        raw=b'{"senderUserId": "{alice}", "content": "canary-zqx \\udc00"}',
    ),
    "messages-content-too-long": Case(
        "post", MESSAGES, user_msg(content=CANARY + "x" * (100_001 - len(CANARY)))
    ),
    "messages-content-empty": Case("post", MESSAGES, {**USER_MSG, "content": ""}),
    "messages-content-null": Case("post", MESSAGES, {**USER_MSG, "content": None}),
    "messages-content-number": Case("post", MESSAGES, {**USER_MSG, "content": 3.5}),
    "messages-content-bool": Case("post", MESSAGES, {**USER_MSG, "content": False}),
    "messages-content-object": Case("post", MESSAGES, {**USER_MSG, "content": {"t": CANARY}}),
    "messages-content-missing": Case("post", MESSAGES, {**USER_MSG}),
    "messages-unknown-field": Case("post", MESSAGES, user_msg(text=CANARY)),
    "messages-no-sender": Case("post", MESSAGES, {"content": CANARY}),
    "messages-both-senders": Case("post", MESSAGES, user_msg(senderAgentId="{agent}")),
    "messages-sender-malformed-uuid": Case(
        "post", MESSAGES, {"senderUserId": BAD_UUID, "content": CANARY}
    ),
    "messages-sender-number": Case("post", MESSAGES, {"senderUserId": 12, "content": CANARY}),
    "messages-sender-null": Case("post", MESSAGES, {"senderUserId": None, "content": CANARY}),
    "messages-sender-non-hex-uuid": Case(
        "post",
        MESSAGES,
        {"senderUserId": "0000000g-0000-0000-0000-000000000000", "content": CANARY},
    ),
    "messages-reply-to-malformed-uuid": Case("post", MESSAGES, user_msg(replyToId=BAD_UUID)),
    "messages-thread-number": Case("post", MESSAGES, user_msg(threadId=5)),
    "messages-reply-to-other-conversation": Case(
        "post", MESSAGES, user_msg(replyToId="{other_message}")
    ),
    "messages-invalid-role": Case("post", MESSAGES, user_msg(role=CANARY)),
    "messages-role-number": Case("post", MESSAGES, user_msg(role=1)),
    "messages-role-null": Case("post", MESSAGES, user_msg(role=None)),
    "messages-invalid-status": Case("post", MESSAGES, user_msg(status=CANARY)),
    "messages-lineage-string": Case("post", MESSAGES, agent_msg(lineage=CANARY)),
    "messages-lineage-object": Case("post", MESSAGES, agent_msg(lineage={"id": CANARY})),
    "messages-lineage-malformed-uuid": Case("post", MESSAGES, agent_msg(lineage=[BAD_UUID])),
    "messages-lineage-null-item": Case("post", MESSAGES, agent_msg(lineage=[None])),
    "messages-lineage-too-many": Case(
        "post",
        MESSAGES,
        agent_msg(lineage=[f"00000000-0000-4000-8000-{n:012d}" for n in range(1_001)]),
    ),
    "messages-lineage-on-user-message": Case(
        "post", MESSAGES, user_msg(lineage=["{other_message}"])
    ),
    "messages-created-at-month-13": Case(
        "post", MESSAGES, user_msg(createdAt="2026-13-01T00:00:00Z")
    ),
    "messages-created-at-feb-30": Case(
        "post", MESSAGES, user_msg(createdAt="2026-02-30T00:00:00Z")
    ),
    "messages-created-at-naive": Case("post", MESSAGES, user_msg(createdAt="2026-01-01T00:00:00")),
    "messages-created-at-date-only": Case("post", MESSAGES, user_msg(createdAt="2026-01-01")),
    "messages-created-at-yesterday": Case("post", MESSAGES, user_msg(createdAt="yesterday")),
    "messages-created-at-epoch-number": Case("post", MESSAGES, user_msg(createdAt=1767225600)),
    "messages-created-at-hour-25": Case(
        "post", MESSAGES, user_msg(createdAt="2026-01-01T25:00:00Z")
    ),
    "messages-created-at-year-0": Case(
        "post", MESSAGES, user_msg(createdAt="0000-01-01T00:00:00Z")
    ),
    "messages-created-at-overflows-utc": Case(
        "post", MESSAGES, user_msg(createdAt="9999-12-31T23:59:59-01:00")
    ),
    "messages-created-at-far-future": Case(
        "post", MESSAGES, user_msg(createdAt="2999-01-01T00:00:00Z")
    ),
    "messages-created-at-next-year": Case(
        "post", MESSAGES, user_msg(createdAt="2099-06-01T00:00:00+02:00")
    ),
    # --- bulk ---
    "bulk-messages-string": Case("post", BULK, {"messages": CANARY}),
    "bulk-messages-object": Case("post", BULK, {"messages": user_msg()}),
    "bulk-messages-empty": Case("post", BULK, {"messages": []}),
    "bulk-messages-missing": Case("post", BULK, {"items": [user_msg()]}),
    "bulk-item-not-object": Case("post", BULK, {"messages": [user_msg(), 7, CANARY]}),
    "bulk-item-unknown-field": Case("post", BULK, {"messages": [user_msg(), user_msg(x=CANARY)]}),
    "bulk-item-content-nul": Case(
        "post", BULK, {"messages": [user_msg(), user_msg(content=f"{CANARY}\u0000")]}
    ),
    "bulk-item-future": Case(
        "post", BULK, {"messages": [user_msg(), user_msg(createdAt="2999-01-01T00:00:00Z")]}
    ),
    "bulk-unknown-top-level-field": Case("post", BULK, {"messages": [user_msg()], "x": CANARY}),
    # --- edit ---
    "patch-content-number": Case("patch", MESSAGE, {"content": 1}),
    "patch-content-null": Case("patch", MESSAGE, {"content": None}),
    "patch-content-empty": Case("patch", MESSAGE, {"content": ""}),
    "patch-content-nul": Case("patch", MESSAGE, {"content": f"{CANARY}\u0000"}),
    "patch-content-too-long": Case("patch", MESSAGE, {"content": CANARY * 10_001}),
    "patch-unknown-field": Case("patch", MESSAGE, {"content": "ok", "role": CANARY}),
    "patch-lone-surrogate": Case("patch", MESSAGE, raw=b'{"content": "canary-zqx \\ud83d"}'),
    "patch-list-body": Case("patch", MESSAGE, raw=b'["canary-zqx"]'),
    # --- memberships ---
    "members-both-ids": Case("post", MEMBERS, {"accountId": "{alice}", "agentId": "{agent}"}),
    "members-no-id": Case("post", MEMBERS, {"joinedAt": "2026-01-01T00:00:00Z"}),
    "members-malformed-uuid": Case("post", MEMBERS, {"accountId": BAD_UUID}),
    "members-account-id-number": Case("post", MEMBERS, {"accountId": 99}),
    "members-joined-at-naive": Case(
        "post", MEMBERS, {"accountId": "{carol}", "joinedAt": "2026-01-01T00:00:00"}
    ),
    "members-joined-at-word": Case("post", MEMBERS, {"accountId": "{carol}", "joinedAt": CANARY}),
    "members-joined-at-future": Case(
        "post", MEMBERS, {"accountId": "{carol}", "joinedAt": "2999-01-01T00:00:00Z"}
    ),
    "members-joined-at-underflows-utc": Case(
        "post", MEMBERS, {"accountId": "{carol}", "joinedAt": "0001-01-01T00:00:00+01:00"}
    ),
    "members-unknown-field": Case("post", MEMBERS, {"accountId": "{carol}", "role": CANARY}),
    "leave-left-at-month-13": Case(
        "post", LEAVE, {"accountId": "{alice}", "leftAt": "2026-13-01T00:00:00Z"}
    ),
    "leave-left-at-bool": Case("post", LEAVE, {"accountId": "{alice}", "leftAt": True}),
    "leave-left-at-future": Case(
        "post", LEAVE, {"accountId": "{alice}", "leftAt": "2999-01-01T00:00:00Z"}
    ),
    # --- identity links ---
    "links-malformed-uuid": Case(
        "post", LINKS, {"accountId": BAD_UUID, "linkedAccountId": "{alice}"}
    ),
    "links-same-account": Case(
        "post", LINKS, {"accountId": "{alice}", "linkedAccountId": "{alice}"}
    ),
    "links-missing-linked": Case("post", LINKS, {"accountId": "{alice}"}),
    "links-unknown-field": Case(
        "post", LINKS, {"accountId": "{alice}", "linkedAccountId": "{bob}", "note": CANARY}
    ),
    "links-verify-with-body": Case("post", "/api/v1/identity-links/{link}/verify", {"x": CANARY}),
    # --- runs ---
    "runs-malformed-agent": Case(
        "post", RUNS, {"agentId": BAD_UUID, "conversationId": "{private}", "requesterId": "{alice}"}
    ),
    "runs-recent-string": Case(
        "post",
        RUNS,
        {
            "agentId": "{agent}",
            "conversationId": "{private}",
            "requesterId": "{alice}",
            "recentMessageIds": CANARY,
        },
    ),
    "runs-unknown-field": Case(
        "post",
        RUNS,
        {
            "agentId": "{agent}",
            "conversationId": "{private}",
            "requesterId": "{alice}",
            "prompt": CANARY,
        },
    ),
    "runs-too-many-recent": Case(
        "post",
        RUNS,
        {
            "agentId": "{agent}",
            "conversationId": "{private}",
            "requesterId": "{alice}",
            "recentMessageIds": [f"00000000-0000-4000-8000-{n:012d}" for n in range(1_001)],
        },
    ),
    "runs-missing-requester": Case(
        "post", RUNS, {"agentId": "{agent}", "conversationId": "{private}"}
    ),
    # --- list query strings ---
    "accounts-limit-0": Case("get", ACCOUNTS, query={"limit": "0", "displayName": CANARY}),
    "accounts-limit-negative": Case("get", ACCOUNTS, query={"limit": "-1", "displayName": CANARY}),
    "accounts-limit-huge": Case(
        "get", ACCOUNTS, query={"limit": str(10**9), "displayName": CANARY}
    ),
    "accounts-limit-word": Case("get", ACCOUNTS, query={"limit": "abc", "displayName": CANARY}),
    "accounts-limit-float": Case("get", ACCOUNTS, query={"limit": "1.5", "displayName": CANARY}),
    "accounts-limit-empty": Case("get", ACCOUNTS, query={"limit": "", "displayName": CANARY}),
    "accounts-offset-negative": Case(
        "get", ACCOUNTS, query={"offset": "-1", "displayName": CANARY}
    ),
    "accounts-offset-huge": Case("get", ACCOUNTS, query={"offset": str(10**9)}),
    "accounts-filter-nul": Case("get", ACCOUNTS, query={"displayName": f"{CANARY}\u0000"}),
    "accounts-external-id-filter-nul": Case(
        "get", ACCOUNTS, query={"externalId": f"\u0000{CANARY}"}
    ),
    "accounts-unknown-param": Case("get", ACCOUNTS, query={"display_name": CANARY}),
    "accounts-external-id-too-long": Case("get", ACCOUNTS, query={"externalId": CANARY * 30}),
    "agents-limit-0": Case("get", AGENTS, query={"limit": "0", "name": CANARY}),
    "agents-unknown-param": Case("get", AGENTS, query={"search": CANARY}),
    "conversations-limit-huge": Case("get", CONVERSATIONS, query={"limit": str(10**9)}),
    "conversations-limit-word": Case("get", CONVERSATIONS, query={"limit": "abc"}),
    "conversations-invalid-kind-filter": Case("get", CONVERSATIONS, query={"kind": CANARY}),
    "conversations-empty-kind-filter": Case(
        "get", CONVERSATIONS, query={"kind": "", "externalId": CANARY}
    ),
    "conversations-unknown-param": Case("get", CONVERSATIONS, query={"workspaceId": CANARY}),
    "members-limit-0": Case("get", MEMBERS, query={"limit": "0"}),
    "members-limit-negative": Case("get", MEMBERS, query={"limit": "-1"}),
    "members-limit-word": Case("get", MEMBERS, query={"limit": "abc"}),
    "members-account-filter-malformed": Case("get", MEMBERS, query={"accountId": BAD_UUID}),
    "members-current-not-boolean": Case("get", MEMBERS, query={"current": CANARY}),
    "members-unknown-param": Case("get", MEMBERS, query={"kind": CANARY}),
    "links-limit-huge": Case("get", LINKS, query={"limit": str(10**9)}),
    "links-invalid-status-filter": Case("get", LINKS, query={"status": CANARY}),
    "links-empty-status-filter": Case("get", LINKS, query={"status": ""}),
    "links-account-filter-malformed": Case("get", LINKS, query={"accountId": BAD_UUID}),
    "links-unknown-param": Case("get", LINKS, query={"linkedAccountId": CANARY}),
}


def _snapshot() -> dict[str, list]:
    """Every row of every model: a PATCH that changed a body would show up here too."""
    return {model.__name__: sorted(map(repr, model.objects.values_list())) for model in MODELS}


@pytest.fixture
def names(world) -> dict[str, str]:
    carol = factories.make_account(world.workspace, "Carol Example")
    message = factories.post(world.private, world.alice, "kept as it is")
    other_message = factories.post(world.public, world.bob, "said elsewhere")
    link = services.identity_link_create(
        workspace_id=world.workspace.id, account_id=world.alice.id, linked_account_id=carol.id
    )
    return {
        "private": str(world.private.id),
        "alice": str(world.alice.id),
        "bob": str(world.bob.id),
        "carol": str(carol.id),
        "agent": str(world.agent.id),
        "message": str(message.id),
        "other_message": str(other_message.id),
        "link": str(link.id),
    }


def _send(client, case: Case, names: dict[str, str]):
    path = factories.fill_placeholders(case.path, names)
    method = getattr(client, case.method)
    if case.method == "get":
        return method(path, case.query)
    if case.raw is not None:
        return method(
            path,
            data=factories.fill_placeholders_raw(case.raw, names),
            content_type=case.content_type,
        )
    return method(path, factories.fill_placeholders(case.body, names), format="json")


def test_there_are_enough_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_input_is_invalid_arguments_and_stores_nothing(world, names, case):
    before = _snapshot()
    response = _send(world.service, case, names)
    assert response.status_code != 500
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "invalid_arguments"
    assert isinstance(body["error"]["message"], str)
    assert isinstance(body["error"]["details"], dict)
    assert b"Traceback" not in response.content
    assert _snapshot() == before


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_input_error_never_echoes_what_was_sent(world, names, case):
    response = _send(world.service, case, names)
    assert response.status_code < 500, response.content[:300]
    assert CANARY.encode() not in response.content, response.content[:300]


def test_lone_surrogate_raw_body_reaches_no_row(world, names):
    """The surrogate escape is valid JSON syntax: only the field check can stop it."""
    raw = b'{"senderUserId": "%s", "content": "\\ud800"}' % names["alice"].encode()
    before = Message.objects.count()
    response = world.service.post(
        f"/api/v1/conversations/{world.private.id}/messages",
        data=raw,
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_arguments"
    assert Message.objects.count() == before


def test_valid_surrogate_pair_is_accepted(world, names):
    """Control: an escaped astral character (a proper surrogate pair) is ordinary text."""
    raw = b'{"senderUserId": "%s", "content": "ok \\ud83d\\ude00"}' % names["alice"].encode()
    response = world.service.post(
        f"/api/v1/conversations/{world.private.id}/messages",
        data=raw,
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["content"] == "ok \U0001f600"


def test_content_of_exactly_100000_chars_is_accepted(world, names):
    """Control for the length case: the limit itself is allowed."""
    response = world.service.post(
        f"/api/v1/conversations/{world.private.id}/messages",
        {"senderUserId": names["alice"], "content": "y" * 100_000},
        format="json",
    )
    assert response.status_code == 201, response.content[:300]
    assert len(response.json()["content"]) == 100_000


@pytest.mark.parametrize("limit", ["1", "200"])
def test_list_limit_bounds_are_accepted(world, limit):
    """Control for the limit cases: 1 and the maximum are fine."""
    response = world.service.get("/api/v1/accounts", {"limit": limit})
    assert response.status_code == 200, response.content
    assert response.json()["limit"] == int(limit)
