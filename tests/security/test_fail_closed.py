"""Fail closed: a failure part-way through a call never widens what an agent sees.

Each test makes one thing fail for real (PostgreSQL refusing an INSERT through a trigger, a
statement cancelled by the API's ``statement_timeout``, a lost connection raised where the code
would meet it, a cache emptied, a projection row that lies) and checks that the agent gets an
error and nothing else, that nothing is left behind that a later call would trust, and that
the next call applies the rules again from the canonical tables.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from django.core.cache import caches
from django.db import OperationalError, connection
from mcp import Client
from psycopg.pq import TransactionStatus
from rest_framework.test import APIClient

from audit_app.models import ConversationSearchEvent
from formation.mcp_server import build_server
from formation.openapi import SchemaView
from messages_app import selectors, services
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    IdentityLink,
    Message,
    MessageLineage,
    Run,
    RunEvidence,
    Workspace,
)
from search_app.models import AgentMemory, MemoryLineage, MessageSearchDocument
from search_app.runs.services import run_create
from tests import factories
from tests.audit_app.helpers import assert_error, events, evidence_ids, pre_spend, search
from tests.conftest import World
from tests.factories import at

EARLY = at(-600)


# --- helpers ------------------------------------------------------------------------------------


def refuse_inserts(table: str) -> None:
    """A real database failure on ``table``; its text names a canary word, so a driver message
    leaking into an answer would show."""
    factories.refuse_inserts(table, "refusedcanary")


def allow_inserts(table: str, *, name: str = "test_refuse_insert") -> None:
    factories.allow_inserts(table, name=name)


def room(workspace: Workspace, kind: str, *members: Account | Agent) -> Conversation:
    """A conversation whose members joined long before the messages dated around ``T0``."""
    conversation = factories.make_conversation(workspace, kind)
    for member in members:
        factories.join(conversation, member, joined_at=EARLY)
    return conversation


def linked_direct_rooms() -> tuple[Agent, Account, IdentityLink, Message, Conversation]:
    """S: a direct room with R1; D: a direct room with R2, R2 linked to R1 (live).

    S's message may reach D only while the link is live (SPEC §3, direct continuity).
    """
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    r1, r2 = factories.make_account(workspace), factories.make_account(workspace)
    made = services.identity_link_create(
        workspace_id=workspace.id, account_id=r2.id, linked_account_id=r1.id
    )
    link = services.identity_link_verify(link=made)
    source = room(workspace, "direct", agent, r1)
    said = factories.post(source, r1, "probeword notes", created_at=at(1))
    destination = room(workspace, "direct", agent, r2)
    return agent, r2, link, said, destination


def reply(client: APIClient, run: Run, content: str = "sample reply") -> Any:
    return client.post(f"/api/v1/runs/{run.id}/reply", {"content": content}, format="json")


def agent_messages(conversation: Conversation) -> list[Message]:
    return list(Message.objects.filter(conversation=conversation, sender_agent__isnull=False))


def statement_timeout() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        return cursor.fetchone()[0]


def sleep_in_the_database() -> None:
    """A statement the API's statement_timeout cancels (a real ``QueryCanceled``)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(5)")


# --- evidence, lineage and memories that cannot be written ------------------------------------


@pytest.fixture
def secret_world(world: World) -> tuple[World, Message, Run, APIClient]:
    """A run in the private room, whose one message carries a canary word."""
    message = factories.post(world.private, world.alice, "zephyrcanary plan")
    run, client = factories.make_run(world.agent, world.private, world.alice)
    return world, message, run, client


TOOL_CALLS: dict[str, Callable[[APIClient, World, Message], Any]] = {
    "list_messages": lambda c, w, m: c.get("/api/v1/messages", {"conversationId": w.private.id}),
    "get_message": lambda c, w, m: c.get(f"/api/v1/messages/{m.id}"),
    "search_messages": lambda c, w, m: c.get("/api/v1/messages/search", {"query": "zephyrcanary"}),
    "search_history": lambda c, w, m: search(c, {"query": "zephyrcanary"}),
}


@pytest.mark.django_db
@pytest.mark.parametrize("tool", sorted(TOOL_CALLS))
def test_a_tool_whose_evidence_cannot_be_recorded_returns_nothing(
    secret_world: tuple[World, Message, Run, APIClient], tool: str
) -> None:
    """The read and its evidence share one transaction: if the evidence row is refused, the
    answer is an error, so the model never holds a message the delivery check cannot see.
    search_history writes its evidence and its audit event with one statement, so a refusal of
    either is the call's record refused: ``audit_unavailable``, as for the audit's own."""
    world, message, run, client = secret_world
    refuse_inserts(RunEvidence._meta.db_table)

    response = TOOL_CALLS[tool](client, world, message)

    if tool == "search_history":
        assert_error(response, 503, "audit_unavailable")
    else:
        assert_error(response, 500, "internal_error")
    text = response.content.decode()
    assert "zephyrcanary" not in text
    assert str(message.id) not in text
    assert "refusedcanary" not in text
    assert evidence_ids(run) == set()
    assert not events(run).exists()

    allow_inserts(RunEvidence._meta.db_table)
    assert TOOL_CALLS[tool](client, world, message).status_code == 200
    assert evidence_ids(run) == {message.id}


@pytest.mark.django_db
def test_a_reply_whose_lineage_cannot_be_stored_is_not_delivered(
    secret_world: tuple[World, Message, Run, APIClient],
) -> None:
    """A reply stored without its lineage would be eligible wherever its room is, so the
    message and its lineage are written together or not at all, and the run stays open."""
    world, message, run, client = secret_world
    assert client.get(f"/api/v1/messages/{message.id}").status_code == 200
    refuse_inserts(MessageLineage._meta.db_table)

    response = reply(client, run, "sample reply about the plan")

    assert_error(response, 500, "internal_error")
    assert agent_messages(world.private) == []
    run.refresh_from_db()
    assert run.finished_at is None

    allow_inserts(MessageLineage._meta.db_table)
    delivered = reply(client, run, "sample reply about the plan")
    assert delivered.status_code == 201, delivered.content
    (stored,) = agent_messages(world.private)
    sources = MessageLineage.objects.filter(message=stored).values_list("source_id", flat=True)
    assert set(sources) == {message.id}


@pytest.mark.django_db
def test_a_memory_whose_lineage_cannot_be_stored_is_not_kept(
    secret_world: tuple[World, Message, Run, APIClient],
) -> None:
    """A memory without lineage would be recalled wherever its run's own room may go, whatever
    it was drawn from: it is written with its lineage or not at all."""
    _, message, run, client = secret_world
    assert client.get(f"/api/v1/messages/{message.id}").status_code == 200
    refuse_inserts(MemoryLineage._meta.db_table)

    response = client.post(
        f"/api/v1/runs/{run.id}/memories", {"content": "zephyrcanary memo"}, format="json"
    )

    assert_error(response, 500, "internal_error")
    assert "refusedcanary" not in response.content.decode()
    assert not AgentMemory.objects.exists()
    assert not MemoryLineage.objects.exists()


# --- timeouts, lost connections and retries ----------------------------------------------------


def stall_audit_after_evidence(run: Run, evidence: int) -> None:
    """After the statement that writes the run's audit event, stall it in the database (so
    that the API's statement_timeout cancels it) if, and only if, the run's ``evidence`` rows
    exist then: the partial state was there when it failed. Otherwise fail loudly. Test
    transaction only; ``allow_inserts`` with the same name removes it."""
    events_table = ConversationSearchEvent._meta.db_table
    checked = f"""
                IF (SELECT count(*) FROM {RunEvidence._meta.db_table}
                    WHERE run_id = '{run.id}') = {evidence} THEN
                    PERFORM pg_sleep(5);
                ELSE
                    RAISE EXCEPTION 'the evidence was not written before the audit';
                END IF;"""
    # On Citus the trigger runs on the events' shard, where no distributed table can be read
    # ("cannot execute a distributed query from a query on a shard"): it only stalls there.
    body = "PERFORM pg_sleep(5);" if connection.is_citus else checked
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE FUNCTION test_stall_audit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                {body}
                RETURN NULL;
            END $$
            """
        )
        cursor.execute(
            f"CREATE TRIGGER test_stall_audit AFTER INSERT ON {events_table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION test_stall_audit()"
        )


@pytest.mark.django_db
def test_a_search_cancelled_after_its_evidence_was_written_leaves_nothing(
    settings: Any,
) -> None:
    """The statement timeout fires after the hits, neighbours and evidence rows exist and
    while the audit is written: 503, no items, no evidence, no event, and a retry starts from
    zero."""
    _, agent, alice, public = factories.observed_public_room()
    hits = [factories.post(public, alice, f"orbit report {i}", created_at=at(i)) for i in (1, 2)]
    run, client = factories.make_run(agent, public, alice)
    settings.API_STATEMENT_TIMEOUT_MS = 500
    # The partial state existed when it failed: the trigger stalls only if both rows are there.
    stall_audit_after_evidence(run, evidence=len(hits))
    started = time.monotonic()

    response = search(client, {"query": "orbit"})

    assert time.monotonic() - started < 4
    body = assert_error(response, 503, "unavailable")
    assert set(body) == {"error"}
    assert "orbit" not in response.content.decode()
    assert evidence_ids(run) == set()
    assert not events(run).exists()
    assert statement_timeout() == "0"

    allow_inserts(ConversationSearchEvent._meta.db_table, name="test_stall_audit")
    retried = search(client, {"query": "orbit"})
    assert retried.status_code == 200, retried.content
    assert retried.json()["budget"]["used"] == 2
    assert evidence_ids(run) == {m.id for m in hits}
    assert events(run).count() == 1


@pytest.mark.django_db
def test_a_reply_retried_after_a_503_is_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection lost after the delivery check passed stores nothing and leaves the run
    open; the client's retry runs the whole check again, so a link revoked in between blocks
    it. Nothing of the first attempt's check is kept."""
    agent, r2, link, said, destination = linked_direct_rooms()
    run, client = factories.make_run(agent, destination, r2)
    assert factories.hit_ids(run, "probeword") == [said.id]

    def connection_lost(**kwargs: Any) -> Message:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("search_app.runs.services.message_create", connection_lost)
    assert_error(reply(client, run), 503, "unavailable")
    run.refresh_from_db()
    assert run.finished_at is None
    monkeypatch.undo()

    services.identity_link_revoke(link=link)
    blocked = assert_error(reply(client, run), 409, "delivery_blocked")

    assert blocked["error"]["details"] == {"blocked": 1, "reasons": {"audience": 1}}
    assert agent_messages(destination) == []
    run.refresh_from_db()
    assert run.finished_at is None


# --- state kept between calls --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_link_revoked_between_two_searches_of_one_run_applies_to_the_second() -> None:
    """The perspective's scope (a ``cached_property``) lives for one call: the run's next
    search reads memberships and links again."""
    agent, r2, link, said, destination = linked_direct_rooms()
    run, client = factories.make_run(agent, destination, r2)
    first = search(client, {"query": "probeword"})
    assert [item["id"] for item in first.json()["items"]] == [str(said.id)]

    services.identity_link_revoke(link=link)
    second = search(client, {"query": "probeword notes"})

    assert second.status_code == 200, second.content
    assert second.json()["items"] == []
    assert str(said.id) not in second.content.decode()
    assert [event.hit_ids for event in events(run)] == [[said.id], []]


@pytest.fixture
def secret_and_public(db: None) -> tuple[Run, Message, Message]:
    """A public destination; a private room whose audience does not permit it (Carol is not in
    it); a secret message there and an agent's public summary of it (lineage)."""
    workspace, agent, alice, public = factories.observed_public_room()
    carol = factories.make_account(workspace, "Carol Example")
    factories.join(public, carol, joined_at=EARLY)
    secret = room(workspace, "private", agent, alice)
    source = factories.post(secret, alice, "zephyr secret figures", created_at=at(1))
    summary = factories.post(
        public, agent, "zephyr summary of the figures", created_at=at(2), lineage=[source.id]
    )
    run, _ = factories.make_run(agent, public, alice)
    return run, source, summary


def doctor_projection(message: Message, **columns: object) -> None:
    """Make the projection row of ``message`` lie, as a bad restore might leave it."""
    assert MessageSearchDocument.objects.filter(message_id=message.id).update(**columns) == 1


@pytest.mark.parametrize("lie", ["conversation", "sender"])
def test_a_projection_row_that_lies_is_rechecked_on_the_message(
    secret_and_public: tuple[Run, Message, Message], lie: str
) -> None:
    """The search projection is a copy; every hit is checked again on the canonical message.
    A row claiming the secret message sits in the public room, or that the summary was not
    written by the agent (so its lineage is not looked up), still returns nothing."""
    run, source, summary = secret_and_public
    if lie == "conversation":
        doctor_projection(source, conversation_id=run.conversation_id)
    else:
        doctor_projection(summary, sender_agent_id=None, sender_account_id=run.requester_id)

    result = factories.history(run, "zephyr figures")

    assert result.hits == []
    assert evidence_ids(run) == set()


@pytest.mark.django_db
def test_the_cached_schema_does_not_depend_on_who_asked_first(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/api/schema/`` is generated once per process from the first request; a service token
    on that request must not put anything of its workspace into what everyone is served."""
    canary = factories.make_account(world.workspace, "Schemacanary Person")
    monkeypatch.setattr(SchemaView, "generated", None)
    as_service = world.service.get("/api/schema/", HTTP_ACCEPT="application/json")
    monkeypatch.setattr(SchemaView, "generated", None)
    anonymous = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json")

    assert as_service.status_code == anonymous.status_code == 200
    assert as_service.json() == anonymous.json()
    text = as_service.content.decode()
    for private in ("Schemacanary", str(canary.id), str(world.workspace.id), "acme"):
        assert private not in text


@pytest.mark.django_db
def test_losing_the_throttle_cache_does_not_reset_the_evidence_budget() -> None:
    """Rate counts live in a per-process cache that may be emptied; the evidence budget is
    counted from the database, so a run past it stays refused."""
    _, agent, alice, public = factories.observed_public_room()
    factories.post(public, alice, "orbit report", created_at=at(1))
    archive = room(public.workspace, "public", agent)
    fillers = services.messages_create(
        conversation=archive,
        drafts=[
            services.MessageDraft(content="filler words", sender_account_id=alice.id)
            for _ in range(400)
        ],
    )
    run, client = factories.make_run(agent, public, alice)
    pre_spend(run, fillers)

    caches["throttle"].clear()
    response = search(client, {"query": "orbit"})

    assert_error(response, 429, "search_budget_exhausted")
    assert "orbit" not in response.content.decode()
    assert RunEvidence.objects.filter(run=run).count() == 400


# --- pooled connections --------------------------------------------------------------------------


def session_state() -> dict[str, object]:
    """What a pooled connection would carry to its next borrower."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), current_user = session_user")
        pid, same_role = cursor.fetchone()
        cursor.execute("SELECT name FROM pg_settings WHERE source = 'session' ORDER BY name")
        settings_set = [name for (name,) in cursor.fetchall()]
    return {
        "pid": pid,
        "same_role": same_role,
        "session_settings": settings_set,
        "idle": connection.connection.info.transaction_status == TransactionStatus.IDLE,
    }


@pytest.mark.django_db(transaction=True)
def test_no_session_state_survives_an_api_request(
    world: World, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a test transaction, as in production: after successful, cancelled and failed
    requests the connection holds no setting but Django's own time zone, no role and no open
    transaction, so the pool lends the next request a clean session."""
    settings.API_STATEMENT_TIMEOUT_MS = 500
    message = factories.post(world.private, world.alice, "orbit report")
    run, client = factories.make_run(world.agent, world.private, world.alice)
    before = session_state()

    assert search(client, {"query": "orbit"}).status_code == 200
    monkeypatch.setattr(selectors, "message_get", lambda **kwargs: sleep_in_the_database())
    assert_error(client.get(f"/api/v1/messages/{message.id}"), 503, "unavailable")
    monkeypatch.undo()
    refuse_inserts(RunEvidence._meta.db_table)
    try:
        assert_error(client.get(f"/api/v1/messages/{message.id}"), 500, "internal_error")
    finally:
        allow_inserts(RunEvidence._meta.db_table)
    assert reply(client, run).status_code == 201

    after = session_state()
    assert after["pid"] == before["pid"]  # the very connection the requests used
    assert after == {**before, "session_settings": ["TimeZone"], "same_role": True, "idle": True}


# --- MCP ----------------------------------------------------------------------------------------


def mcp_calls(server_token: str | None, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The SDK's client against the server in this process, as the stdio command builds it
    (``server_token=None``: as mounted for HTTP, without its authenticating front)."""

    async def session() -> list[Any]:
        async with Client(build_server(token=server_token)) as client:
            return [await client.call_tool(tool, arguments) for tool, arguments in calls]

    return anyio.run(session)


@pytest.mark.django_db
def test_the_mcp_server_without_its_http_front_refuses_every_call(world: World) -> None:
    """Served over a transport that did not authenticate a caller, a tool call is refused
    before any database work; it never runs without a caller."""
    factories.post(world.public, world.alice, "migration plan")

    results = mcp_calls(None, [("search_messages", {"query": "migration"})])

    (result,) = results
    assert result.is_error
    assert json.loads(result.content[0].text)["error"]["code"] == "unauthenticated"
    assert "migration" not in json.dumps(json.loads(result.content[0].text))


@pytest.fixture
def audit_refused(transactional_db: None) -> Iterator[None]:
    """Audit inserts refused for the whole test, committed (the MCP worker threads have
    connections of their own); removed afterwards."""
    table = ConversationSearchEvent._meta.db_table
    refuse_inserts(table)
    try:
        yield
    finally:
        allow_inserts(table)


@pytest.mark.django_db(transaction=True)
def test_an_mcp_tool_call_that_cannot_be_audited_is_only_an_error(
    world: World, audit_refused: None
) -> None:
    """Over MCP a failure is a tool error holding the REST envelope and nothing else; the
    run records no evidence."""
    factories.post(world.public, world.alice, "migration plan")
    run, raw = run_create(
        workspace_id=world.workspace.id,
        agent_id=world.agent.id,
        conversation_id=world.public.id,
        requester_id=world.alice.id,
    )

    results = mcp_calls(
        raw, [("search_history", {"query": "migration"}), ("search_messages", {"query": "plan"})]
    )

    for result in results:
        assert result.is_error
        assert set(json.loads(result.content[0].text)) == {"error"}
        assert json.loads(result.content[0].text)["error"]["code"] == "audit_unavailable"
        assert "migration" not in result.content[0].text
        assert "refusedcanary" not in result.content[0].text
    assert evidence_ids(run) == set()
    assert not events(run).exists()


@pytest.mark.parametrize(
    ("caller", "path"),
    [
        ("agent", "/api/v1/messages/search?query=sample"),
        ("agent", "/api/v1/messages/00000000-0000-0000-0000-000000000000"),
        (None, "/api/v1/messages/search?query=sample"),
    ],
)
def test_api_answers_tell_every_cache_not_to_store_them(world, caller, path) -> None:
    """A shared cache in front of the API must not keep one caller's view (or refusal) for the
    next caller: every /api/v1/ answer, success or error, says ``no-store, private``."""
    client = world.agent_api if caller else APIClient()
    response = client.get(path)
    directives = {part.strip() for part in response["Cache-Control"].split(",")}
    assert {"no-store", "private"} <= directives, response["Cache-Control"]
