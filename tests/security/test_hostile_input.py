"""Hostile input across the API, as one table: every case names its caller, its request and
the one answer it must get (SPEC §5, §8, §9).

Errors are the envelope with the exact code, never a 500 or an HTML page, never echo the
hostile value, and leave every table exactly as it was. Input that is weird but legitimate
(SQL or tsquery syntax as search text, LIKE wildcards, control characters in a body, extreme
but valid dates) gets its correct answer, and writes exactly the rows that answer implies: an
audit event per search, evidence per message a run was shown, a message per stored message.
Not-found and no-access must be the same bytes: such cases are sent twice, the second time with
a random UUID in place of the unreachable id, and the two answers compared.

``tests/api/test_bad_input.py`` covers the ingestion endpoints' validation in depth; this
table is about hostile values, the agent tools and the run endpoints. All text is synthetic.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.db import transaction
from django.http import HttpResponse
from django.test import Client

from messages_app import services
from messages_app.models import Message
from search_app import services as search_services
from tests import factories

pytestmark = pytest.mark.django_db

Caller = Literal["service", "agent", "run"]

CANARY = "canaryhx"
MIB = 1024 * 1024
DEEP = 10_000
HUGE = str(10**30)

# The public room's messages, oldest first; each is the only one holding its oddity.
PUBLIC_TEXTS = {
    "rollout": "rollout plan for friday",
    "percent": "discount 50% today",
    "underscore": "rename it to snake_case please",
    "backslash": "logs live in C:\\temp\\logs",
    "sql": "quote ' OR 1=1 -- here",
    "control": "bell\x07ring and \x1b[31mred\x1b[0m",
}
NEWEST_FIRST = tuple(reversed(PUBLIC_TEXTS))


@dataclass(frozen=True)
class Case:
    """One hostile request and its expected answer.

    ``request`` is ``"<caller> <METHOD> <path>"`` and ``expect`` is ``"<status>"`` or
    ``"<status> <error code>"``. The path, JSON string values, ``raw`` bodies and query values
    may name fixture objects as ``{public}``, ``{alice}``, ``{run}``, ``{other_message}``… (see
    ``build_scene``). ``found`` lists the names of the ids a successful answer's ``items`` must
    hold, in order. ``writes`` is how many rows each table gains on success. ``twin`` is
    (name, stand-in): the same request with the stand-in's id must answer the same bytes.
    ``never`` are further strings the answer must not contain (``CANARY`` always is, on errors).
    """

    id: str
    request: str
    expect: str
    json: Any = None
    raw: bytes | Callable[[], bytes] | None = None
    query: tuple[tuple[str, str], ...] = ()
    raw_query: str = ""
    content_type: str = "application/json"
    found: tuple[str, ...] | None = None
    writes: Mapping[str, int] = field(default_factory=dict)
    twin: tuple[str, str] | None = None
    never: tuple[str, ...] = ()

    @property
    def caller(self) -> Caller:
        return cast(Caller, self.request.split(" ", 2)[0])

    @property
    def method(self) -> str:
        return self.request.split(" ", 2)[1]

    @property
    def path(self) -> str:
        return self.request.split(" ", 2)[2]

    @property
    def status(self) -> int:
        return int(self.expect.split(" ", 1)[0])

    @property
    def code(self) -> str | None:
        parts = self.expect.split(" ", 1)
        return parts[1] if len(parts) == 2 else None


def nested(depth: int, inner: bytes = b"1") -> bytes:
    """``[[[…inner…]]]``: too deep for any recursive parser with default limits."""
    return b"[" * depth + inner + b"]" * depth


def nested_object(depth: int) -> bytes:
    """``{"a": {"a": …}}``: nesting a parser accepts but the depth limit must refuse."""
    return b'{"a": ' * depth + b'"' + CANARY.encode() + b'"' + b"}" * depth


def over_body_limit() -> bytes:
    """A well-formed message just over the configured body limit (the sender's id, filled in
    later, adds a few bytes more): refused before it is parsed."""
    head = b'{"senderUserId": "{alice}", "content": "' + CANARY.encode()
    filler = settings.MAX_REQUEST_BODY_BYTES + 1 - len(head) - 2
    return head + b"x" * filler + b'"}'


def big_bulk() -> bytes:
    """1,100 valid messages of 1,000 characters: a body over 1 MB that is entirely legitimate."""
    item = {"senderUserId": "{alice}", "content": "bulk " + "y" * 995}
    return json.dumps({"messages": [item] * 1_100}).encode()


def q(**params: str) -> tuple[tuple[str, str], ...]:
    """Query parameters in order, as ``Case.query`` takes them (repeats need the tuple form)."""
    return tuple(params.items())


def msg(**extra: Any) -> dict[str, Any]:
    """A valid message from Alice carrying the canary, with ``extra`` fields on top."""
    return {"senderUserId": "{alice}", "content": f"{CANARY} body", **extra}


def run_body(**extra: Any) -> dict[str, Any]:
    """A valid run in the public room for Alice, with ``extra`` fields on top."""
    return {"agentId": "{agent}", "conversationId": "{public}", "requesterId": "{alice}", **extra}


HISTORY = "/api/v1/history/search"
SEARCH = "/api/v1/messages/search"
LIST = "/api/v1/messages"
INGEST = "/api/v1/conversations/{public}/messages"
BULK = "/api/v1/conversations/{public}/messages/bulk"
REPLY = "/api/v1/runs/{run}/reply"
MEMORIES = "/api/v1/runs/{run}/memories"
RECALL = "/api/v1/memories"
TRACE = "/api/v1/runs/{run}/trace"
RUNS = "/api/v1/runs"
TOOLS = "/api/v1/tools"
LINKS = "/api/v1/identity-links"
OK = "200"
CREATED = "201"
BAD = "400 invalid_arguments"
MISSING = "404 not_found"
AUDITED = {"ConversationSearchEvent": 1}
STORED = {"Message": 1, "MessageSearchDocument": 1}
# A hit on ``rollout`` also returns its two newer neighbours as evidence.
ROLLOUT_EVIDENCE = {"ConversationSearchEvent": 1, "RunEvidence": 3}
IN_PUBLIC = ("conversationId", "{public}")

CASES: list[Case] = [
    # --- SQL metacharacters: inert as text, refused where an id or a choice is expected ---
    Case(
        "sql-search-messages-or-1-1",
        f"agent GET {SEARCH}",
        OK,
        query=q(query="' OR 1=1 --"),
        found=("sql",),
        writes=AUDITED,
    ),
    Case(
        "sql-search-messages-drop-table",
        f"agent GET {SEARCH}",
        OK,
        query=q(query="'; DROP TABLE messages_app_message; --"),
        found=(),
        writes=AUDITED,
    ),
    Case(
        "sql-history-drop-table",
        f"run POST {HISTORY}",
        OK,
        json={"query": "rollout'); DROP TABLE message_search_documents; --"},
        found=("rollout",),
        writes=ROLLOUT_EVIDENCE,
    ),
    Case(
        "sql-ingest-content-stored-verbatim",
        f"service POST {INGEST}",
        CREATED,
        json=msg(content="Robert'); DROP TABLE messages_app_message;-- \\' \" `"),
        writes=STORED,
    ),
    Case(
        "sql-reply-content-stored-verbatim",
        f"run POST {REPLY}",
        CREATED,
        json={"content": "done'); UPDATE messages_app_run SET finished_at = NULL; --"},
        writes=STORED,
    ),
    Case(
        "sql-accounts-filter-matches-nothing",
        "service GET /api/v1/accounts",
        OK,
        query=q(displayName="' OR '1'='1"),
        found=(),
    ),
    Case(
        "sql-list-conversation-id",
        f"agent GET {LIST}",
        BAD,
        query=q(conversationId=f"1' OR '1'='1 {CANARY}"),
    ),
    Case(
        "sql-runs-agent-id",
        f"service POST {RUNS}",
        BAD,
        json=run_body(agentId="00000000-0000-0000-0000-000000000000' OR 1=1--"),
    ),
    Case("sql-tools-style", f"agent GET {TOOLS}", BAD, query=q(style=f"mcp' OR '1'='1 {CANARY}")),
    # --- tsquery metacharacters: search_history never errors on them, others take them as text
    Case(
        "tsq-history-operators-around-a-word",
        f"run POST {HISTORY}",
        OK,
        json={"query": "rollout & | ! ( ) :* <->"},
        found=("rollout",),
        writes=ROLLOUT_EVIDENCE,
    ),
    Case(
        "tsq-history-prefix-quotes-backslashes",
        f"run POST {HISTORY}",
        OK,
        json={"query": "'rollout':* \\\\ \"friday\" \\'"},
        found=("rollout",),
        writes=ROLLOUT_EVIDENCE,
    ),
    Case(
        "tsq-history-operators-only",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "& | ! ( ) :* <-> ' \" \\"},
        never=("<->",),
    ),
    Case(
        "tsq-memories-recall-operators",
        f"run GET {RECALL}",
        OK,
        query=q(query="!rollout & memory:* <2>"),
        found=("memory",),
        writes={"RunMemory": 1, "ConversationSearchEvent": 1},
    ),
    Case(
        "tsq-search-messages-is-literal",
        f"agent GET {SEARCH}",
        OK,
        query=q(query="rollout & plan"),
        found=(),
        writes=AUDITED,
    ),
    Case(
        "tsq-ingest-content-stored-verbatim",
        f"service POST {INGEST}",
        CREATED,
        json=msg(content="a & b | !c :* <-> 'd':A (e)"),
        writes=STORED,
    ),
    # --- LIKE wildcards: search_messages matches them literally ---
    Case(
        "like-percent",
        f"agent GET {SEARCH}",
        OK,
        query=q(query="%"),
        found=("percent",),
        writes=AUDITED,
    ),
    Case(
        "like-underscore",
        f"agent GET {SEARCH}",
        OK,
        query=q(query="_"),
        found=("underscore",),
        writes=AUDITED,
    ),
    Case(
        "like-backslash",
        f"agent GET {SEARCH}",
        OK,
        query=q(query="\\"),
        found=("backslash",),
        writes=AUDITED,
    ),
    Case(
        "like-escaped-percent-is-two-characters",
        f"agent GET {SEARCH}",
        OK,
        query=q(query="\\%"),
        found=(),
        writes=AUDITED,
    ),
    Case(
        "like-percent-narrowed-to-a-room",
        f"agent GET {SEARCH}",
        OK,
        query=(("query", "%%"), IN_PUBLIC),
        found=(),
        writes=AUDITED,
    ),
    Case(
        "like-percent-run-token-records-evidence",
        f"run GET {SEARCH}",
        OK,
        query=q(query="50%"),
        found=("percent",),
        writes={"ConversationSearchEvent": 1, "RunEvidence": 1},
    ),
    Case(
        "like-accounts-filter-percent",
        "service GET /api/v1/accounts",
        OK,
        query=q(displayName="%"),
        found=(),
    ),
    Case(
        "like-ingest-content-stored-verbatim",
        f"service POST {INGEST}",
        CREATED,
        json=msg(content="100% _done_ \\%\\_ [a-z]*"),
        writes=STORED,
    ),
    # --- NUL and other control characters ---
    Case(
        "nul-ingest-content", f"service POST {INGEST}", BAD, json=msg(content=f"{CANARY}\x00tail")
    ),
    Case("nul-search-messages-query", f"agent GET {SEARCH}", BAD, query=q(query=f"{CANARY}\x00")),
    Case("nul-history-query", f"run POST {HISTORY}", BAD, json={"query": f"rollout\x00{CANARY}"}),
    Case("nul-reply-content", f"run POST {REPLY}", BAD, json={"content": f"\x00{CANARY}"}),
    Case("nul-memory-content", f"run POST {MEMORIES}", BAD, json={"content": f"{CANARY}\x00"}),
    Case("nul-recall-query", f"run GET {RECALL}", BAD, query=q(query=f"\x00{CANARY}")),
    Case("nul-list-conversation-id", f"agent GET {LIST}", BAD, query=q(conversationId="\x00")),
    Case("nul-path-id", "agent GET /api/v1/messages/%00", MISSING),
    Case(
        "ctrl-ingest-content-stored-verbatim",
        f"service POST {INGEST}",
        CREATED,
        json=msg(content="tab\t bell\x07 esc\x1b[2J del\x7f ls\u2028 zw\u200b bidi\u202e"),
        writes=STORED,
    ),
    Case(
        "ctrl-search-messages-finds-bell",
        f"agent GET {SEARCH}",
        OK,
        query=q(query="\x07"),
        found=("control",),
        writes=AUDITED,
    ),
    Case(
        "ctrl-history-escape-sequences",
        f"run POST {HISTORY}",
        OK,
        json={"query": "\x07\x1b\x08 rollout \x7f"},
        found=("rollout",),
        writes=ROLLOUT_EVIDENCE,
    ),
    Case(
        "ctrl-tools-style-header-injection",
        f"agent GET {TOOLS}",
        BAD,
        query=q(style=f"mcp\r\nX-Injected: {CANARY}"),
        never=("X-Injected",),
    ),
    # --- invalid UTF-8 ---
    Case(
        "utf8-ingest-encoded-surrogate",
        f"service POST {INGEST}",
        BAD,
        raw=b'{"senderUserId": "{alice}", "content": "canaryhx \xed\xa0\x80"}',
    ),
    Case(
        "utf8-history-stray-bytes",
        f"run POST {HISTORY}",
        BAD,
        raw=b'{"query": "rollout \xff\xfe canaryhx"}',
    ),
    Case(
        "utf8-runs-overlong-slash",
        f"service POST {RUNS}",
        BAD,
        raw=b'{"agentId": "\xc0\xaf{agent}", "conversationId": "{public}", '
        b'"requesterId": "{alice}"}',
    ),
    Case(
        "utf8-reply-latin1-charset",
        f"run POST {REPLY}",
        BAD,
        raw='{"content": "café canaryhx"}'.encode("latin-1"),
        content_type="application/json; charset=latin-1",
    ),
    Case(
        "utf8-history-utf16-body",
        f"run POST {HISTORY}",
        BAD,
        raw='{"query": "rollout canaryhx"}'.encode("utf-16"),
    ),
    Case(
        "utf8-search-messages-query-string",
        f"agent GET {SEARCH}",
        BAD,
        raw_query=f"query={CANARY}%FF%FE",
    ),
    Case(
        "utf8-list-conversation-id-query-string",
        f"agent GET {LIST}",
        BAD,
        raw_query="conversationId=%ED%A0%80",
    ),
    # --- lone surrogates (valid JSON escapes, not encodable text) ---
    Case(
        "surrogate-history-query",
        f"run POST {HISTORY}",
        BAD,
        json={"query": f"rollout \ud800 {CANARY}"},
    ),
    Case("surrogate-reply-content", f"run POST {REPLY}", BAD, json={"content": f"{CANARY} \udfff"}),
    Case(
        "surrogate-memory-content",
        f"run POST {MEMORIES}",
        BAD,
        json={"content": f"\ud83d {CANARY}"},
    ),
    Case(
        "surrogate-bulk-second-item",
        f"service POST {BULK}",
        BAD,
        json={"messages": [msg(), msg(content=f"{CANARY} \udc00")]},
    ),
    Case(
        "surrogate-conversation-title",
        "service POST /api/v1/conversations",
        BAD,
        json={"kind": "public", "title": f"{CANARY} \ud800"},
    ),
    # --- bodies and values of a megabyte and more ---
    Case("big-ingest-content", f"service POST {INGEST}", BAD, json=msg(content=CANARY + "x" * MIB)),
    Case(
        "big-history-query",
        f"run POST {HISTORY}",
        BAD,
        json={"query": f"rollout {CANARY} " * (MIB // 16)},
    ),
    Case(
        "big-search-messages-query-string",
        f"agent GET {SEARCH}",
        BAD,
        query=q(query=CANARY * (MIB // len(CANARY))),
    ),
    Case("big-reply-content", f"run POST {REPLY}", BAD, json={"content": CANARY + "z" * MIB}),
    Case(
        "big-bulk-over-1mb-is-accepted",
        f"service POST {BULK}",
        CREATED,
        raw=big_bulk,
        writes={"Message": 1_100, "MessageSearchDocument": 1_100},
    ),
    Case("big-body-over-the-limit", f"service POST {INGEST}", BAD, raw=over_body_limit),
    # --- deeply nested JSON ---
    Case(
        "deep-history-query-10000",
        f"run POST {HISTORY}",
        BAD,
        raw=b'{"query": ' + nested(DEEP, b'"canaryhx"') + b"}",
    ),
    Case("deep-runs-top-level-10000", f"service POST {RUNS}", BAD, raw=nested(DEEP)),
    Case(
        "deep-bulk-lineage-10000",
        f"service POST {BULK}",
        BAD,
        raw=b'{"messages": [{"senderAgentId": "{agent}", "content": "canaryhx", "lineage": '
        + nested(DEEP)
        + b"}]}",
    ),
    Case(
        "deep-memory-objects-100",
        f"run POST {MEMORIES}",
        BAD,
        raw=b'{"content": ' + nested_object(100) + b"}",
    ),
    Case(
        "deep-link-33",
        f"service POST {LINKS}",
        BAD,
        raw=b'{"accountId": "{alice}", "linkedAccountId": ' + nested(33, b'"canaryhx"') + b"}",
    ),
    # --- negative, zero and huge numbers ---
    Case("num-list-limit-negative", f"agent GET {LIST}", BAD, query=(IN_PUBLIC, ("limit", "-1"))),
    Case(
        "num-list-limit-huge",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("limit", HUGE)),
        never=(HUGE,),
    ),
    Case("num-list-limit-1e309", f"agent GET {LIST}", BAD, query=(IN_PUBLIC, ("limit", "1e309"))),
    Case("num-list-limit-nan", f"agent GET {LIST}", BAD, query=(IN_PUBLIC, ("limit", "NaN"))),
    Case(
        "num-list-offset-huge",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("offset", HUGE)),
        never=(HUGE,),
    ),
    Case(
        "num-search-messages-limit-zero",
        f"agent GET {SEARCH}",
        BAD,
        query=q(query="rollout", limit="0"),
    ),
    Case(
        "num-history-limit-huge",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "limit": 10**30},
        never=(HUGE,),
    ),
    Case(
        "num-history-limit-1e309",
        f"run POST {HISTORY}",
        BAD,
        raw=b'{"query": "rollout", "limit": 1e309}',
    ),
    Case(
        "num-history-limit-nan-literal",
        f"run POST {HISTORY}",
        BAD,
        raw=b'{"query": "rollout", "limit": NaN}',
    ),
    Case(
        "num-history-limit-negative",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "limit": -1},
    ),
    Case(
        "num-history-limit-fraction",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "limit": 2.5},
    ),
    Case("num-trace-limit-huge", f"service GET {TRACE}", BAD, query=q(limit=HUGE), never=(HUGE,)),
    Case("num-trace-offset-negative", f"run GET {TRACE}", BAD, query=q(offset="-1")),
    Case(
        "num-recall-limit-huge",
        f"run GET {RECALL}",
        BAD,
        query=q(query="rollout", limit=HUGE),
        never=(HUGE,),
    ),
    Case(
        "num-ingest-created-at-1e309",
        f"service POST {INGEST}",
        BAD,
        raw=b'{"senderUserId": "{alice}", "content": "canaryhx", "createdAt": 1e309}',
    ),
    # --- dates out of range ---
    Case(
        "date-list-before-date-year-0",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("beforeDate", "0000-01-01T00:00:00Z")),
    ),
    Case(
        "date-list-before-date-year-10000",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("beforeDate", "10000-01-01T00:00:00Z")),
    ),
    Case(
        "date-list-before-date-month-13-day-45",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("beforeDate", "2026-13-45T00:00:00Z")),
    ),
    Case(
        "date-list-before-date-underflows-utc",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("beforeDate", "0001-01-01T00:00:00+00:01")),
    ),
    Case(
        "date-list-legacy-before-not-a-date",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("before", f"' OR 1=1 {CANARY}")),
    ),
    Case(
        "date-list-before-date-unencoded-plus",
        f"agent GET {LIST}",
        BAD,
        raw_query="conversationId={public}&beforeDate=2026-01-01T00:00:00+01:00",
    ),
    Case(
        "date-list-before-date-earliest-is-empty",
        f"agent GET {LIST}",
        OK,
        query=(IN_PUBLIC, ("beforeDate", "0001-01-01T00:00:00Z")),
        found=(),
    ),
    Case(
        "date-list-before-date-latest-is-everything",
        f"agent GET {LIST}",
        OK,
        query=(IN_PUBLIC, ("beforeDate", "9999-12-31T23:59:59.999999Z")),
        found=NEWEST_FIRST,
    ),
    Case(
        "date-history-after-year-0",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "after": "0000-01-01T00:00:00Z"},
    ),
    Case(
        "date-history-before-leap-second",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "before": "2026-06-30T23:59:60Z"},
    ),
    Case(
        "date-history-after-epoch-number",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "after": 0},
    ),
    Case(
        "date-history-after-not-before-before",
        f"run POST {HISTORY}",
        BAD,
        json={
            "query": "rollout",
            "after": "2026-01-02T00:00:00Z",
            "before": "2026-01-01T00:00:00Z",
        },
    ),
    Case(
        "date-history-extreme-bounds",
        f"run POST {HISTORY}",
        OK,
        json={
            "query": "rollout",
            "after": "0001-01-01T00:00:00Z",
            "before": "9999-12-31T23:59:59Z",
        },
        found=("rollout",),
        writes=ROLLOUT_EVIDENCE,
    ),
    Case(
        "date-ingest-created-at-expanded-year",
        f"service POST {INGEST}",
        BAD,
        json=msg(createdAt="+002026-01-01T00:00:00Z"),
    ),
    Case(
        "date-leave-left-at-year-10000",
        "service POST /api/v1/conversations/{public}/members/leave",
        BAD,
        json={"accountId": "{alice}", "leftAt": "10000-01-01T00:00:00Z"},
    ),
    # --- ids of the wrong type, or of things the caller may not see ---
    Case("id-get-message-integer", "agent GET /api/v1/messages/12345", MISSING),
    Case(
        "id-get-message-other-workspace",
        "agent GET /api/v1/messages/{other_message}",
        MISSING,
        twin=("other_message", "random"),
    ),
    Case(
        "id-get-message-unseen-room",
        "agent GET /api/v1/messages/{unseen_message}",
        MISSING,
        twin=("unseen_message", "random"),
    ),
    Case(
        "id-get-message-left-room-run-token",
        "run GET /api/v1/messages/{left_message}",
        MISSING,
        twin=("left_message", "random"),
    ),
    Case(
        "id-list-other-workspace-conversation",
        f"agent GET {LIST}",
        MISSING,
        query=q(conversationId="{other_conversation}"),
        twin=("other_conversation", "random"),
    ),
    Case(
        "id-list-around-unseen-anchor",
        f"agent GET {LIST}",
        MISSING,
        query=(IN_PUBLIC, ("around", "{unseen_message}")),
        twin=("unseen_message", "random"),
    ),
    Case("id-list-conversation-integer", f"agent GET {LIST}", BAD, query=q(conversationId="42")),
    Case(
        "id-search-messages-unseen-room",
        f"run GET {SEARCH}",
        MISSING,
        query=q(query="sample", conversationId="{unseen_conversation}"),
        twin=("unseen_conversation", "random"),
    ),
    Case(
        "id-reply-other-run",
        "run POST /api/v1/runs/{other_run}/reply",
        MISSING,
        json={"content": "hello"},
        twin=("other_run", "random"),
    ),
    Case(
        "id-memories-other-workspace-run",
        "run POST /api/v1/runs/{other_ws_run}/memories",
        MISSING,
        json={"content": "note"},
        twin=("other_ws_run", "random"),
    ),
    Case(
        "id-trace-other-workspace-run",
        "service GET /api/v1/runs/{other_ws_run}/trace",
        MISSING,
        twin=("other_ws_run", "random"),
    ),
    Case(
        "id-trace-other-run-with-run-token",
        "run GET /api/v1/runs/{other_run}/trace",
        MISSING,
        twin=("other_run", "random"),
    ),
    Case("id-trace-integer", "service GET /api/v1/runs/12345/trace", MISSING),
    Case(
        "id-ingest-other-workspace-conversation",
        "service POST /api/v1/conversations/{other_conversation}/messages",
        MISSING,
        json=msg(),
        twin=("other_conversation", "random"),
    ),
    Case(
        "id-ingest-sender-other-workspace",
        f"service POST {INGEST}",
        BAD,
        json=msg(senderUserId="{other_person}"),
        twin=("other_person", "random"),
    ),
    Case(
        "id-ingest-lineage-other-workspace",
        f"service POST {INGEST}",
        BAD,
        json={"senderAgentId": "{agent}", "content": CANARY, "lineage": ["{other_message}"]},
        twin=("other_message", "random"),
    ),
    Case(
        "id-runs-agent-other-workspace",
        f"service POST {RUNS}",
        BAD,
        json=run_body(agentId="{other_agent}"),
        twin=("other_agent", "random"),
    ),
    Case(
        "id-runs-current-message-of-another-room",
        f"service POST {RUNS}",
        BAD,
        json=run_body(currentMessageId="{unseen_message}"),
        twin=("unseen_message", "random"),
    ),
    Case(
        "id-link-other-workspace-account",
        f"service POST {LINKS}",
        BAD,
        json={"accountId": "{alice}", "linkedAccountId": "{other_person}"},
        twin=("other_person", "random"),
    ),
    Case("id-runs-agent-integer", f"service POST {RUNS}", BAD, json=run_body(agentId=12345)),
    # --- wrong JSON types ---
    Case("type-history-query-list", f"run POST {HISTORY}", BAD, json={"query": [CANARY]}),
    Case("type-history-query-null", f"run POST {HISTORY}", BAD, json={"query": None}),
    Case(
        "type-history-limit-bool",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "limit": True},
    ),
    Case(
        "type-history-limit-string",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "limit": "5"},
    ),
    Case(
        "type-history-speaker-object",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "speaker": {"type": CANARY}},
    ),
    Case("type-history-body-array", f"run POST {HISTORY}", BAD, raw=b'["rollout", "canaryhx"]'),
    Case("type-reply-content-list", f"run POST {REPLY}", BAD, json={"content": [CANARY]}),
    Case(
        "type-runs-recent-ids-object",
        f"service POST {RUNS}",
        BAD,
        json=run_body(recentMessageIds={"0": CANARY}),
    ),
    Case(
        "type-ingest-lineage-comma-string",
        f"service POST {INGEST}",
        BAD,
        json={"senderAgentId": "{agent}", "content": "x", "lineage": f"{CANARY},{CANARY}"},
    ),
    # --- unknown fields: nothing widens what the run fixed ---
    Case(
        "unknown-history-conversation-id",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "conversationId": "{private}"},
    ),
    Case(
        "unknown-history-requester-override",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout", "requesterId": "{bob}"},
    ),
    Case(
        "unknown-list-agent-id-param",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("agentId", "{other_agent}")),
    ),
    Case(
        "unknown-search-messages-workspace-param",
        f"agent GET {SEARCH}",
        BAD,
        query=q(query="rollout", workspaceId="{other_conversation}"),
    ),
    Case(
        "unknown-reply-lineage",
        f"run POST {REPLY}",
        BAD,
        json={"content": CANARY, "lineage": ["{unseen_message}"]},
    ),
    Case("unknown-ingest-seq", f"service POST {INGEST}", BAD, json=msg(seq=1)),
    Case(
        "unknown-ingest-query-param", f"service POST {INGEST}", BAD, json=msg(), raw_query="seq=1"
    ),
    # --- duplicate query keys ---
    Case(
        "dup-search-messages-query",
        f"agent GET {SEARCH}",
        BAD,
        query=(("query", "rollout"), ("query", CANARY)),
    ),
    Case(
        "dup-list-conversation-id",
        f"agent GET {LIST}",
        BAD,
        query=(IN_PUBLIC, ("conversationId", "{unseen_conversation}")),
    ),
    Case(
        "dup-tools-style", f"agent GET {TOOLS}", BAD, query=(("style", "mcp"), ("style", "openai"))
    ),
    Case(
        "dup-history-query-in-url",
        f"run POST {HISTORY}",
        BAD,
        json={"query": "rollout"},
        query=q(query=CANARY),
    ),
    # --- wrong content type, empty body ---
    Case(
        "ctype-history-text-plain",
        f"run POST {HISTORY}",
        BAD,
        raw=b'{"query": "rollout canaryhx"}',
        content_type="text/plain",
    ),
    Case(
        "ctype-history-named-in-the-type",
        f"run POST {HISTORY}",
        BAD,
        raw=b'{"query": "rollout"}',
        content_type=f"text/{CANARY}",
    ),
    Case(
        "ctype-history-form",
        f"run POST {HISTORY}",
        BAD,
        raw=b"query=rollout+canaryhx",
        content_type="application/x-www-form-urlencoded",
    ),
    Case(
        "ctype-reply-multipart",
        f"run POST {REPLY}",
        BAD,
        raw=b'--b\r\nContent-Disposition: form-data; name="content"\r\n\r\ncanaryhx\r\n--b--\r\n',
        content_type="multipart/form-data; boundary=b",
    ),
    Case(
        "ctype-bulk-xml",
        f"service POST {BULK}",
        BAD,
        raw=b"<messages><m>canaryhx</m></messages>",
        content_type="application/xml",
    ),
    Case(
        "ctype-history-utf8-bom",
        f"run POST {HISTORY}",
        BAD,
        raw=b'\xef\xbb\xbf{"query": "rollout canaryhx"}',
    ),
    Case("empty-history-body", f"run POST {HISTORY}", BAD, raw=b""),
    Case("empty-reply-body", f"run POST {REPLY}", BAD, raw=b""),
    Case("empty-ingest-body", f"service POST {INGEST}", BAD, raw=b""),
    Case("empty-runs-json-null", f"service POST {RUNS}", BAD, raw=b"null"),
]


@dataclass
class Scene:
    """The names cases may use, and a client per caller kind."""

    names: dict[str, str]
    clients: dict[str, Client]


def build_scene() -> Scene:
    """A workspace whose agent, Alice and Bob share a public and a private room; the public
    room's odd messages; a run (with a memory) in it and another run; a room the agent never
    joined and one it left; and a second workspace with its own agent, person, room, message
    and run."""
    workspace = factories.make_workspace("hostile")
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    bob = factories.make_account(workspace, "Bob Example")
    public = factories.make_conversation(workspace, "public", "general")
    private = factories.make_conversation(workspace, "private", "planning")
    for room in (public, private):
        for member in (agent, alice, bob):
            factories.join(room, member)
    names: dict[str, str] = {"random": str(uuid.uuid4())}
    for name, text in PUBLIC_TEXTS.items():
        names[name] = str(factories.post(public, bob, text).id)
    run, run_client = factories.make_run(agent, public, alice)
    other_run, _ = factories.make_run(agent, private, alice)
    memory = search_services.memory_create(
        workspace_id=workspace.id, run_id=run.id, content="rollout memory note"
    )
    unseen_room, unseen_message = factories.never_joined_room(workspace, bob)
    _, left_message = factories.left_room(workspace, agent, bob)
    other_ws, other_agent, other_room, other_message = factories.other_workspace()
    other_person = factories.make_account(other_ws, "Dana Example")
    services.membership_join(conversation=other_room, account_id=other_person.id)
    other_ws_run, _ = factories.make_run(other_agent, other_room, other_person)
    names.update(
        {
            "public": str(public.id),
            "private": str(private.id),
            "alice": str(alice.id),
            "bob": str(bob.id),
            "agent": str(agent.id),
            "run": str(run.id),
            "memory": str(memory.id),
            "other_run": str(other_run.id),
            "unseen_conversation": str(unseen_room.id),
            "unseen_message": str(unseen_message.id),
            "left_message": str(left_message.id),
            "other_agent": str(other_agent.id),
            "other_person": str(other_person.id),
            "other_conversation": str(other_room.id),
            "other_message": str(other_message.id),
            "other_ws_run": str(other_ws_run.id),
        }
    )
    clients = {
        "service": factories.service_client(workspace),
        "agent": factories.agent_client(agent),
        "run": run_client,
    }
    return Scene(names=names, clients=clients)


@pytest.fixture(scope="module")
def shared_scene(django_db_setup: None, django_db_blocker: Any) -> Iterator[Scene]:
    """Built once, inside a transaction rolled back after the module: each test's own
    transaction (the ``db`` fixture) nests in it and undoes whatever the test wrote."""
    with django_db_blocker.unblock():
        outer = transaction.atomic()
        outer.__enter__()
        try:
            yield build_scene()
        finally:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture
def scene(shared_scene: Scene, db: None) -> Scene:
    """The shared scene, inside this test's own rolled-back transaction."""
    return shared_scene


def send(client: Client, case: Case, names: Mapping[str, str]) -> HttpResponse:
    """The case's request, sent as bytes, exactly as a hostile client would."""
    path = factories.fill_placeholders(case.path, names)
    query = "&".join(
        part
        for part in (
            urlencode([(k, factories.fill_placeholders(v, names)) for k, v in case.query]),
            case.raw_query,
        )
        if part
    )
    if query:
        path = f"{path}?{factories.fill_placeholders(query, names)}"
    if case.raw is not None:
        raw = case.raw() if callable(case.raw) else case.raw
        body = factories.fill_placeholders_raw(raw, names)
    elif case.json is not None:
        body = json.dumps(factories.fill_placeholders(case.json, names)).encode()
    else:
        body = b""
    return client.generic(case.method, path, body, content_type=case.content_type)


def assert_error(response: HttpResponse, status: int, code: str) -> None:
    """SPEC §5's envelope, as JSON, with exactly this status and code."""
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert isinstance(body["error"]["details"], dict)


CATEGORIES = frozenset(
    {"sql", "tsq", "like", "nul", "ctrl", "utf8", "surrogate", "big", "deep", "num", "date"}
    | {"id", "type", "unknown", "dup", "ctype", "empty"}
)
# Categories with at least one case against message ingestion, where "stored" means something.
INGEST_CATEGORIES = CATEGORIES - {"dup"}


def test_the_table_is_large_and_covers_every_category() -> None:
    """The issue asks for at least 40 cases across these categories and endpoints."""
    assert len(CASES) >= 45
    assert len({case.id for case in CASES}) == len(CASES)
    assert {case.id.split("-")[0] for case in CASES} >= CATEGORIES
    ingest = {
        case.id.split("-")[0]
        for case in CASES
        if case.path.startswith("/api/v1/conversations/") and "/messages" in case.path
    }
    assert ingest >= INGEST_CATEGORIES, sorted(INGEST_CATEGORIES - ingest)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input_gets_its_expected_answer(scene: Scene, case: Case) -> None:
    """The exact answer; never a 500; an error echoes nothing and stores nothing; a success
    writes exactly ``case.writes``."""
    before = factories.table_snapshot()
    counts = {name: len(rows) for name, rows in before.items()}
    response = send(scene.clients[case.caller], case, scene.names)

    assert response.status_code != 500, response.content[:300]
    assert b"Traceback" not in response.content
    assert "X-Injected" not in response.headers
    if case.code is not None:
        assert_error(response, case.status, case.code)
        for secret in (CANARY, *case.never):
            assert secret.encode() not in response.content, response.content[:300]
        assert factories.table_snapshot() == before, "an error must store nothing"
        return

    assert response.status_code == case.status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    if case.found is not None:
        assert [item["id"] for item in body["items"]] == [scene.names[n] for n in case.found]
        assert body["total"] == len(case.found)
    if case.status == 201 and isinstance(case.json, dict) and "content" in case.json:
        sent = case.json["content"]
        assert body["content"] == sent
        assert Message.objects.get(pk=body["id"]).content == sent
    after = {name: len(rows) for name, rows in factories.table_snapshot().items()}
    grown = {name: after[name] - counts[name] for name in after if after[name] != counts[name]}
    assert grown == dict(case.writes)


TWINS = [case for case in CASES if case.twin is not None]


@pytest.mark.parametrize("case", TWINS, ids=[case.id for case in TWINS])
def test_no_access_answers_the_same_bytes_as_no_such_id(scene: Scene, case: Case) -> None:
    """Another workspace's id, or one the agent cannot see, must be indistinguishable from an id
    that exists nowhere: same status, same body, and the id itself never echoed."""
    assert case.twin is not None
    name, stand_in = case.twin
    client = scene.clients[case.caller]
    real = send(client, case, scene.names)
    fake = send(client, case, {**scene.names, name: scene.names[stand_in]})
    assert (real.status_code, real.content) == (fake.status_code, fake.content)
    assert scene.names[name].encode() not in real.content
