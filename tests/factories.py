"""Small factories for synthetic test data, built through the real services."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.apps import apps
from django.db import connection, transaction
from rest_framework.test import APIClient

from audit_app.lifecycle import Actor
from messages_app import services
from messages_app.lifecycle import holds
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    LegalHold,
    Membership,
    Message,
    Run,
    TokenKind,
    Workspace,
)
from search_app import services as search_services
from search_app.history.results import HistoryFilters
from search_app.runs.services import run_create

_counter = itertools.count(1)

# SPEC §5 message summary keys besides the one sender key (senderUserId or senderAgentId).
SUMMARY_KEYS = frozenset(
    {
        "id",
        "conversationId",
        "seq",
        "role",
        "status",
        "replyToId",
        "threadId",
        "content",
        "createdAt",
        "sourcesErased",
    }
)

# A fixed synthetic clock for tests that need a deterministic order.
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def at(minutes: float) -> datetime:
    """``T0`` plus some minutes."""
    return T0 + timedelta(minutes=minutes)


# Ten hours before ``T0``: memberships that began long before any message a test stamps.
EARLY = at(-600)


def make_workspace(slug: str | None = None) -> Workspace:
    return services.workspace_create(slug=slug or f"ws-{next(_counter)}")


def make_account(workspace: Workspace, name: str | None = None) -> Account:
    return services.account_create(
        workspace_id=workspace.id, display_name=name or f"Person {next(_counter)}"
    )


def make_agent(workspace: Workspace, name: str = "Helper agent") -> Agent:
    return services.agent_create(workspace_id=workspace.id, name=name)


def make_conversation(
    workspace: Workspace, kind: str = "private", title: str | None = None
) -> Conversation:
    return services.conversation_create(
        workspace_id=workspace.id, kind=kind, title=title or f"Room {next(_counter)}"
    )


def join(
    conversation: Conversation,
    member: Account | Agent,
    joined_at: datetime | None = None,
) -> Membership:
    if isinstance(member, Agent):
        return services.membership_join(
            conversation=conversation, agent_id=member.id, joined_at=joined_at
        )
    return services.membership_join(
        conversation=conversation, account_id=member.id, joined_at=joined_at
    )


def post(
    conversation: Conversation,
    sender: Account | Agent,
    content: str = "sample status",
    created_at: datetime | None = None,
    **extra,
) -> Message:
    if isinstance(sender, Agent):
        draft = services.MessageDraft(
            content=content, sender_agent_id=sender.id, created_at=created_at, **extra
        )
    else:
        draft = services.MessageDraft(
            content=content, sender_account_id=sender.id, created_at=created_at, **extra
        )
    return services.message_create(conversation=conversation, draft=draft)


# Ranking's context component reads a message's eligible neighbours (CONTEXT_OFFSETS, two
# each side): a fixture comparing matches posts each after this many non-matching fillers, so
# every compared message's neighbours carry the same (no) wording.
APART_FILLERS = 2
FILLER_TEXT = "interlude"


def post_apart(
    conversation: Conversation,
    sender: Account | Agent,
    content: str = "sample status",
    created_at: datetime | None = None,
    **extra,
) -> Message:
    """``post``, after ``APART_FILLERS`` filler messages that match no test query, so the
    message's context (its neighbours' wording) is the same as every other such message's."""
    for _ in range(APART_FILLERS):
        post(conversation, sender, FILLER_TEXT, created_at=created_at)
    return post(conversation, sender, content, created_at=created_at, **extra)


def hold_elsewhere(workspace: Workspace) -> LegalHold:
    """A legal hold on a room of its own: a real hold to read and release, while deletes and
    erasures in every other room still succeed."""
    archive = make_conversation(workspace, "private", "archive")
    return holds.hold_place(
        workspace_id=workspace.id,
        conversation_id=archive.id,
        reference="matter-1",
        actor=Actor(label="test"),
    )


def service_client(workspace: Workspace) -> APIClient:
    _, raw = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    return bearer_client(raw)


def agent_client(agent: Agent) -> APIClient:
    _, raw = services.token_create(
        workspace_id=agent.workspace_id, kind=TokenKind.AGENT, agent=agent
    )
    return bearer_client(raw)


def bearer_client(raw_token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_token}")
    return client


def never_joined_room(workspace: Workspace, member: Account) -> tuple[Conversation, Message]:
    """A private room with one message, which the test's agent never joined."""
    room = make_conversation(workspace, "private", "no-agent")
    join(room, member, joined_at=at(-60))
    return room, post(room, member, "sample status never seen", created_at=at(1))


def observed_public_room() -> tuple[Workspace, Agent, Account, Conversation]:
    """A workspace whose agent and Alice have been in a public room since long before ``T0``,
    so messages stamped around ``T0`` are observed (rule 1 of SPEC §3)."""
    workspace = make_workspace()
    agent = make_agent(workspace)
    alice = make_account(workspace, "Alice Example")
    room = make_conversation(workspace, "public", "general")
    join(room, agent, joined_at=at(-600))
    join(room, alice, joined_at=at(-600))
    return workspace, agent, alice, room


def left_room(workspace: Workspace, agent: Agent, member: Account) -> tuple[Conversation, Message]:
    """A private room the agent was in when a message was written, and has since left."""
    room = make_conversation(workspace, "private", "agent-left")
    join(room, agent, joined_at=at(-60))
    join(room, member, joined_at=at(-60))
    message = post(room, member, "sample status left behind", created_at=at(1))
    services.membership_leave(conversation=room, agent_id=agent.id, left_at=at(30))
    return room, message


def other_workspace() -> tuple[Workspace, Agent, Conversation, Message]:
    """A second tenant whose agent is a member of a room holding a matching message."""
    workspace = make_workspace("elsewhere")
    agent = make_agent(workspace, "Other agent")
    person = make_account(workspace, "Carol Example")
    room = make_conversation(workspace, "public", "other-general")
    join(room, agent, joined_at=at(-60))
    join(room, person, joined_at=at(-60))
    message = post(room, person, "sample status from elsewhere", created_at=at(2))
    return workspace, agent, room, message


def joined_room(
    workspace: Workspace, *names: str, kind: str = "private", joined_at: datetime = EARLY
) -> Conversation:
    """A room that a new agent and new accounts named ``names`` joined at ``joined_at`` (long
    before the times tests stamp around ``T0``), with them as ``room.agent`` and
    ``room.people``."""
    agent = make_agent(workspace)
    people = [make_account(workspace, name) for name in names]
    room = make_conversation(workspace, kind, "destination")
    for member in (agent, *people):
        join(room, member, joined_at=joined_at)
    room.agent, room.people = agent, people
    return room


def room_history(room: Conversation, query: str, now: datetime):
    """search_history from a new run of ``joined_room``'s agent there, asked by its first
    person."""
    run, _ = make_run(room.agent, room, room.people[0])
    return history(run, query, now=now)


def make_run(
    agent: Agent,
    destination: Conversation,
    requester: Account,
    current: Message | None = None,
    recent: tuple[Message, ...] = (),
    tool_scope: str = "membership",
) -> tuple[Run, APIClient]:
    """A run through the real service, with an API client holding its run token."""
    run, raw = run_create(
        workspace_id=agent.workspace_id,
        agent_id=agent.id,
        conversation_id=destination.id,
        requester_id=requester.id,
        current_message_id=current.id if current else None,
        recent_message_ids=[m.id for m in recent],
        tool_scope=tool_scope,
    )
    return run, bearer_client(raw)


def history(
    run: Run, query: str = "sample", limit: int = 20, now: datetime | None = None, **filters
):
    """search_history through the service (records evidence like the endpoint does)."""
    return search_services.search_history(
        workspace_id=run.workspace_id,
        run_id=run.id,
        query_text=query,
        filters=HistoryFilters(**filters),
        limit=limit,
        now=now,
    )


def hit_ids(run: Run, query: str = "sample", limit: int = 20, **filters) -> list:
    """The ids search_history returns as hits, best first."""
    return [hit.message.id for hit in history(run, query, limit, **filters).hits]


class _RolledBack(Exception):
    pass


def rolled_back(work: Callable[[], Any]) -> Any:
    """What ``work`` returns, with every row it wrote rolled back: for tests that compare two
    worlds built in one test."""
    try:
        with transaction.atomic():
            raise _RolledBack(work())
    except _RolledBack as undone:
        return undone.args[0]


def run_in_threads(count: int, work: Callable[[int], None]) -> list[BaseException]:
    """Start ``count`` workers at the same moment, each with its own database connection
    (closed at the end); return whatever they raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            work(index)
        except BaseException as error:  # collected and asserted on in the main thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return errors


def fill_placeholders(value: Any, names: Mapping[str, str]) -> Any:
    """Replace ``{name}`` placeholders in strings at any depth of lists and dict values, so a
    table of requests can name the ids its fixture makes."""
    if isinstance(value, str):
        for key, name in names.items():
            value = value.replace("{" + key + "}", name)
        return value
    if isinstance(value, list):
        return [fill_placeholders(item, names) for item in value]
    if isinstance(value, dict):
        return {key: fill_placeholders(item, names) for key, item in value.items()}
    return value


def fill_placeholders_raw(raw: bytes, names: Mapping[str, str]) -> bytes:
    """``fill_placeholders`` for raw bodies, which must otherwise stay exactly as written."""
    for key, name in names.items():
        raw = raw.replace(b"{" + key.encode() + b"}", name.encode())
    return raw


def table_snapshot() -> dict[str, list[str]]:
    """Every row of every table of the apps, so an update (a run marked finished) shows as well
    as an insert: a refused request must leave this exactly as it was."""
    return {
        model.__name__: sorted(map(repr, model.objects.values_list()))
        for label in ("messages_app", "search_app", "audit_app")
        for model in apps.get_app_config(label).get_models()
    }


def refuse_inserts(table: str, message: str, *, name: str = "test_refuse_insert") -> None:
    """A real PostgreSQL failure: a ``BEFORE INSERT`` trigger on ``table`` that raises (test
    transaction only). The error quotes ``message`` and the whole new row, so a driver message
    leaking into an answer or a log would show."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION '{message}: %', NEW::text;
            END $$
            """
        )
        cursor.execute(
            f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()"
        )


def allow_inserts(table: str, *, name: str = "test_refuse_insert") -> None:
    """Undo ``refuse_inserts``."""
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        cursor.execute(f"DROP FUNCTION IF EXISTS {name}()")


SAMPLE_CONTENT = "'sample status number ' || n || ' of a long synthetic conversation'"


def fill_messages(
    conversation: Conversation,
    sender_id: object,
    count: int,
    *,
    content_sql: str = SAMPLE_CONTENT,
    analyze: bool = True,
) -> None:
    """``count`` short messages from one account, seq 1 to ``count``, in two statements (the
    search triggers run as for any insert): fast enough for 100,000. ``content_sql`` is the
    text as an SQL expression of the message's number ``n``.

    Each message's search document checks its foreign key to the message, once per row, with a
    plan the connection caches. Made while the suite's tables are nearly empty (their
    rolled-back transactions never let autovacuum's ANALYZE run), that plan reads the message
    by the first column of ``message_seq_unique`` alone, ``workspace_id``, which for 100,000
    messages of one workspace makes the insert quadratic: minutes here, eight on Citus, where
    the plans live in the workers' sessions. So a first thousand rows go in, then ANALYZE
    (which counts this transaction's rows, and which Citus runs on the shards over this
    transaction's connections) gives every plan that reads the table statistics in which the
    primary key is the better index, and the rest follow.
    """
    first = min(count, 1_000)
    with connection.cursor() as cursor:
        for start, stop in ((1, first), (first + 1, count)):
            cursor.execute(
                f"""INSERT INTO {Message._meta.db_table}
                        (id, workspace_id, conversation_id, seq, role, status,
                         sender_account_id, content, created_at)
                    SELECT gen_random_uuid(), %s, %s, n, 'user', 'sent', %s,
                           {content_sql},
                           %s::timestamptz + n * interval '1 second'
                    FROM generate_series(%s, %s) AS n""",
                [conversation.workspace_id, conversation.id, sender_id, T0, start, stop],
            )
            if start == 1 and analyze:
                cursor.execute(f"ANALYZE {Message._meta.db_table}")
    Conversation.objects.filter(pk=conversation.pk).update(last_seq=count, live_message_count=count)
