"""Write services: deletion is final, seqs are never reused, bulk import is all or nothing,
tokens are stored hashed, and runs only open where the agent and requester belong."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from django.db import IntegrityError, OperationalError, connection
from django.db.models import Model

from formation.db_timeouts import api_statement_timeout
from formation.errors import InvalidArguments, NotFound
from messages_app import limits, services
from messages_app.models import (
    Account,
    Agent,
    ApiToken,
    Conversation,
    Message,
    MessageLineage,
    TokenKind,
)
from messages_app.services import messages as message_services
from search_app.runs.services import run_create
from tests import factories


def draft(
    sender: Account | Agent, content: str = "sample status", **extra
) -> services.MessageDraft:
    if isinstance(sender, Agent):
        return services.MessageDraft(content=content, sender_agent_id=sender.id, **extra)
    return services.MessageDraft(content=content, sender_account_id=sender.id, **extra)


def last_seq(conversation: Conversation) -> int:
    return Conversation.objects.values_list("last_seq", flat=True).get(pk=conversation.pk)


# --- delete and edit -----------------------------------------------------------------------


def tables_containing(text: str) -> list[str]:
    """Every table of the database with a row whose JSON form contains ``text``."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(
                f'SELECT 1 FROM "{table}" t WHERE row_to_json(t)::text LIKE %s LIMIT 1',
                [f"%{text}%"],
            )
            if cursor.fetchone():
                found.append(table)
    return found


def test_message_delete_erases_the_body_for_good(world):
    canary = "xq7kw9zz"
    message = factories.post(world.private, world.alice, f"sample secret {canary}")
    services.message_edit(message=message, content=f"sample secret {canary} edited")
    assert Message._meta.db_table in tables_containing(canary)  # the scan does see it

    services.message_delete(message=message)

    message.refresh_from_db()
    assert message.content == ""
    assert message.deleted_at is not None
    # Nothing restores it: editing a deleted message is not_found, and so is deleting it again.
    with pytest.raises(NotFound):
        services.message_edit(message=message, content=f"sample secret {canary}")
    with pytest.raises(NotFound):
        services.message_delete(message=message)
    message.refresh_from_db()
    assert message.content == ""
    assert message.deleted_at is not None
    # The text survives in no table: no copy, history or search document keeps it.
    assert tables_containing(canary) == []


def test_message_edit_changes_a_live_message(world):
    message = factories.post(world.private, world.alice, "sample draft")
    edited = services.message_edit(message=message, content="sample final")
    assert edited.content == "sample final"
    assert edited.edited_at is not None


def test_seq_is_never_reused_after_delete(world):
    first = factories.post(world.private, world.alice)
    second = factories.post(world.private, world.alice)
    services.message_delete(message=second)
    third = factories.post(world.private, world.bob)
    assert [first.seq, second.seq, third.seq] == [1, 2, 3]
    assert list(
        Message.objects.filter(conversation=world.private).values_list("seq", flat=True)
    ) == [1, 2, 3]
    assert last_seq(world.private) == 3


def test_seqs_are_per_conversation(world):
    factories.post(world.private, world.alice)
    factories.post(world.private, world.alice)
    assert factories.post(world.public, world.alice).seq == 1
    assert factories.post(world.private, world.alice).seq == 3


# --- bulk import ---------------------------------------------------------------------------


def test_messages_create_assigns_consecutive_seqs_in_order(world):
    factories.post(world.private, world.alice)
    created = services.messages_create(
        conversation=world.private,
        drafts=[draft(world.alice, f"sample line {i}") for i in range(4)],
    )
    assert [m.seq for m in created] == [2, 3, 4, 5]
    assert list(
        Message.objects.filter(conversation=world.private)
        .order_by("seq")
        .values_list("content", flat=True)
    )[1:] == [f"sample line {i}" for i in range(4)]


def test_messages_create_is_all_or_nothing_on_a_bad_lineage_id(world):
    source = factories.post(world.private, world.alice)
    before = Message.objects.count()
    drafts = [
        draft(world.alice, "sample one"),
        draft(world.agent, "sample two", lineage=[source.id]),
        draft(world.agent, "sample three", lineage=[source.id, uuid.uuid4()]),
        draft(world.bob, "sample four"),
    ]
    with pytest.raises(InvalidArguments) as caught:
        services.messages_create(conversation=world.private, drafts=drafts)

    assert caught.value.details["index"] == 2
    assert set(caught.value.details["fields"]) == {"lineage"}
    assert Message.objects.count() == before
    assert MessageLineage.objects.count() == 0
    assert last_seq(world.private) == 1
    # The next message still gets seq 2: the failed import took no numbers.
    assert factories.post(world.private, world.alice).seq == 2


def test_messages_create_rejects_a_lineage_source_from_another_workspace(world):
    other = factories.make_workspace("svc-other")
    foreign_room = factories.make_conversation(other, "public")
    foreign = factories.post(foreign_room, factories.make_account(other))
    drafts = [draft(world.alice), draft(world.alice), draft(world.agent, lineage=[foreign.id])]
    with pytest.raises(InvalidArguments) as caught:
        services.messages_create(conversation=world.private, drafts=drafts)
    assert caught.value.details["index"] == 2
    assert not Message.objects.filter(conversation=world.private).exists()
    assert last_seq(world.private) == 0


def test_messages_create_refuses_more_characters_than_the_limit_before_any_query(
    world, django_assert_num_queries
):
    drafts = [draft(world.alice, "a" * 100_000)] * (limits.MAX_BULK_CHARS // 100_000)
    with django_assert_num_queries(0), pytest.raises(InvalidArguments) as caught:
        services.messages_create(
            conversation=world.private, drafts=[*drafts, draft(world.bob, "b")]
        )
    assert "5,000,000 characters" in caught.value.message
    assert set(caught.value.details["fields"]) == {"messages"}
    assert last_seq(world.private) == 0


def test_messages_create_rolls_back_when_the_database_refuses_a_row(world):
    # A row that passes the Python checks but not a CHECK constraint: nothing of the batch
    # stays and the reserved seqs are given back.
    drafts = [draft(world.alice), draft(world.alice), draft(world.alice, role="narrator")]
    with pytest.raises(IntegrityError):
        services.messages_create(conversation=world.private, drafts=drafts)
    assert not Message.objects.filter(conversation=world.private).exists()
    assert last_seq(world.private) == 0


def statements_that_wrote(conversation: Conversation) -> list[tuple[int, int, int, int]]:
    """(rows, characters, first seq, last seq) per statement that inserted the conversation's
    messages, in the order they ran: rows written by one statement share its command id
    (``cmin``) within the transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), sum(length(content)), min(seq), max(seq) "
            "FROM messages_app_message WHERE conversation_id = %s "
            "GROUP BY cmin::text::bigint ORDER BY cmin::text::bigint",
            [conversation.pk],
        )
        return cursor.fetchall()


def test_messages_create_splits_an_import_at_the_limit_into_bounded_statements(world):
    """1,000 messages of 5,000 characters (MAX_BULK_CHARS): each INSERT, and the search
    documents its triggers build, takes at most BULK_STATEMENT_CHARS, so no one statement
    holds the whole import's cost under the statement timeout; the parts keep the seq order."""
    drafts = [
        draft(world.alice, (f"sample line {n} of the import " * 200)[:5_000]) for n in range(1_000)
    ]
    assert sum(len(d.content) for d in drafts) == limits.MAX_BULK_CHARS
    created = services.messages_create(conversation=world.private, drafts=drafts)

    assert [m.seq for m in created] == list(range(1, 1_001))
    parts = statements_that_wrote(world.private)
    assert len(parts) == limits.MAX_BULK_CHARS // limits.BULK_STATEMENT_CHARS
    assert all(chars <= limits.BULK_STATEMENT_CHARS for _, chars, _, _ in parts), parts
    assert sum(rows for rows, _, _, _ in parts) == 1_000
    # Consecutive runs of the batch, in order.
    assert [first for _, _, first, _ in parts] == [1] + [last + 1 for *_, last in parts[:-1]]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM message_search_documents WHERE conversation_id = %s",
            [world.private.pk],
        )
        assert cursor.fetchone()[0] == 1_000


def test_messages_create_cuts_statements_by_characters_and_never_splits_a_message(
    world, monkeypatch
):
    monkeypatch.setattr(message_services, "BULK_STATEMENT_CHARS", 10)
    sizes = [4, 4, 2, 1, 12, 3, 7, 10, 1]
    services.messages_create(
        conversation=world.private, drafts=[draft(world.alice, "x" * size) for size in sizes]
    )
    assert statements_that_wrote(world.private) == [
        (3, 10, 1, 3),
        (1, 1, 4, 4),
        (1, 12, 5, 5),
        (2, 10, 6, 7),
        (1, 10, 8, 8),
        (1, 1, 9, 9),
    ]


def stall_the_import_statement_holding(
    conversation: Conversation, content: str, *, rows: int, stored: int
) -> None:
    """Make the INSERT that carries ``content`` stall in the database (so the statement timeout
    cancels it), if, and only if, it carries ``rows`` rows and ``stored`` messages of
    ``conversation`` exist when it ends (those of the parts before it included); otherwise fail
    loudly. Test transaction only."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE FUNCTION test_stall_import() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF EXISTS (SELECT 1 FROM added WHERE content = '{content}') THEN
                    IF (SELECT count(*) FROM added) = {rows}
                       AND (SELECT count(*) FROM messages_app_message
                            WHERE conversation_id = '{conversation.pk}') = {stored} THEN
                        PERFORM pg_sleep(5);
                    ELSE
                        RAISE EXCEPTION 'the import was not split as expected';
                    END IF;
                END IF;
                RETURN NULL;
            END $$
            """
        )
        cursor.execute(
            "CREATE TRIGGER test_stall_import AFTER INSERT ON messages_app_message "
            "REFERENCING NEW TABLE AS added "
            "FOR EACH STATEMENT EXECUTE FUNCTION test_stall_import()"
        )


def search_documents_of(conversation: Conversation) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM message_search_documents WHERE conversation_id = %s",
            [conversation.pk],
        )
        return cursor.fetchone()[0]


def test_an_import_cancelled_in_its_third_statement_stores_nothing(world, monkeypatch):
    """The parts are one transaction: the first two are written (and their documents built)
    when the third runs past the statement timeout, and none of them stays."""
    source = factories.post(world.private, world.alice, "already here")
    monkeypatch.setattr(message_services, "BULK_STATEMENT_CHARS", 20)
    drafts = [
        draft(world.alice, "line one.."),
        draft(world.agent, "line two..", lineage=[source.id]),
        draft(world.alice, "line three"),
        draft(world.alice, "line four."),
        draft(world.alice, "stall here"),
        draft(world.alice, "line six.."),
    ]
    stall_the_import_statement_holding(world.private, "stall here", rows=2, stored=7)
    with api_statement_timeout(1_000), pytest.raises(OperationalError):
        services.messages_create(conversation=world.private, drafts=drafts)

    assert list(Message.objects.filter(conversation=world.private)) == [source]
    assert search_documents_of(world.private) == 1
    assert not MessageLineage.objects.exists()
    world.private.refresh_from_db()
    assert (world.private.last_seq, world.private.live_message_count) == (1, 1)
    assert factories.post(world.private, world.alice).seq == 2


def test_message_create_stores_lineage(world):
    source = factories.post(world.private, world.alice)
    reply = services.message_create(
        conversation=world.private, draft=draft(world.agent, lineage=[source.id, source.id])
    )
    assert list(reply.lineage.values_list("id", flat=True)) == [source.id]
    assert reply.role == "assistant"


# --- tokens --------------------------------------------------------------------------------


def concrete_values(row: Model) -> list[object]:
    return [getattr(row, f.attname) for f in row._meta.concrete_fields]


@pytest.mark.parametrize("kind", [TokenKind.SERVICE, TokenKind.AGENT])
def test_token_create_stores_only_the_sha256_digest(world, kind):
    agent = world.agent if kind == TokenKind.AGENT else None
    token, raw = services.token_create(workspace_id=world.workspace.id, kind=kind, agent=agent)

    row = ApiToken.objects.get(pk=token.pk)
    assert row.digest == hashlib.sha256(raw.encode()).hexdigest()
    assert len(raw) >= 40
    for value in concrete_values(row):
        assert raw not in str(value)
    # The prefix only helps recognise a token (its kind and the secret's first characters):
    # it is far too short to be used as one.
    assert row.prefix == f"fmn_{kind}_" + raw.partition(".")[2][:6]
    assert len(row.prefix) <= len(raw) - 32
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT row_to_json(t)::text FROM {ApiToken._meta.db_table} t WHERE id = %s",
            [token.pk],
        )
        (stored,) = cursor.fetchone()
    assert raw not in stored


def test_token_create_makes_distinct_tokens(world):
    raws = {services.token_create(workspace_id=world.workspace.id, kind="service")[1] for _ in "ab"}
    assert len(raws) == 2


def test_tokens_revoke_revokes_the_live_ones_at_one_time_and_keeps_earlier_revocations(world):
    live, _ = services.token_create(workspace_id=world.workspace.id, kind="service")
    other, _ = services.token_create(
        workspace_id=world.workspace.id, kind="agent", agent=world.agent
    )
    earlier, _ = services.token_create(workspace_id=world.workspace.id, kind="service")
    earlier = services.token_revoke(token=earlier)
    kept, _ = services.token_create(workspace_id=world.workspace.id, kind="service")

    revoked = services.tokens_revoke(
        tokens=ApiToken.objects.filter(pk__in=[live.pk, other.pk, earlier.pk])
    )

    assert {token.pk for token in revoked} == {live.pk, other.pk}
    rows = {token.pk: token.revoked_at for token in ApiToken.objects.all()}
    assert rows[live.pk] is not None
    assert rows[live.pk] == rows[other.pk]
    assert rows[earlier.pk] == earlier.revoked_at
    assert rows[kept.pk] is None
    assert services.tokens_revoke(tokens=ApiToken.objects.filter(pk=live.pk)) == []


def test_token_revoke_revokes_one_token_once(world):
    token, _ = services.token_create(workspace_id=world.workspace.id, kind="service")
    first = services.token_revoke(token=token).revoked_at
    assert first is not None
    assert services.token_revoke(token=token).revoked_at == first


# --- runs ----------------------------------------------------------------------------------


def open_run(world, conversation: Conversation, requester=None, **extra):
    return run_create(
        workspace_id=world.workspace.id,
        agent_id=world.agent.id,
        conversation_id=conversation.id,
        requester_id=(requester or world.alice).id,
        **extra,
    )


def test_run_create_returns_a_run_token(world):
    current = factories.post(world.private, world.alice)
    run, raw = open_run(world, world.private, current_message_id=current.id)
    token = ApiToken.objects.get(digest=hashlib.sha256(raw.encode()).hexdigest())
    assert (token.kind, token.run_id, token.agent_id) == ("run", run.id, world.agent.id)
    assert run.current_message_id == current.id
    assert (run.agent_id, run.conversation_id, run.requester_id) == (
        world.agent.id,
        world.private.id,
        world.alice.id,
    )


def test_run_create_needs_the_agent_to_be_a_current_member(world):
    room = factories.make_conversation(world.workspace, "public", "no agent here")
    factories.join(room, world.alice)
    with pytest.raises(InvalidArguments) as caught:
        open_run(world, room)
    assert set(caught.value.details["fields"]) == {"agentId"}


def test_run_create_refuses_an_agent_that_left(world):
    services.membership_leave(conversation=world.private, agent_id=world.agent.id)
    with pytest.raises(InvalidArguments) as caught:
        open_run(world, world.private)
    assert set(caught.value.details["fields"]) == {"agentId"}


@pytest.mark.parametrize("kind", ["direct", "private"])
def test_run_create_needs_the_requester_to_be_a_member_of_a_closed_conversation(world, kind):
    room = factories.make_conversation(world.workspace, kind)
    factories.join(room, world.agent)
    factories.join(room, world.alice)
    with pytest.raises(InvalidArguments) as caught:
        open_run(world, room, requester=world.bob)
    assert set(caught.value.details["fields"]) == {"requesterId"}
    # A requester who has left is no longer a reader either.
    services.membership_leave(conversation=room, account_id=world.alice.id)
    with pytest.raises(InvalidArguments):
        open_run(world, room, requester=world.alice)


def test_run_create_lets_any_workspace_account_request_in_a_public_conversation(world):
    room = factories.make_conversation(world.workspace, "public", "announcements")
    factories.join(room, world.agent)
    carol = factories.make_account(world.workspace, "Carol Example")
    run, _ = open_run(world, room, requester=carol)
    assert run.requester_id == carol.id


def test_run_create_refuses_a_requester_from_another_workspace(world):
    other = factories.make_workspace("svc-run-other")
    stranger = factories.make_account(other, "Dana Example")
    with pytest.raises(InvalidArguments) as caught:
        open_run(world, world.public, requester=stranger)
    assert set(caught.value.details["fields"]) == {"requesterId"}


def test_run_create_needs_the_current_message_in_the_conversation(world):
    elsewhere = factories.post(world.public, world.alice)
    with pytest.raises(InvalidArguments) as caught:
        open_run(world, world.private, current_message_id=elsewhere.id)
    assert set(caught.value.details["fields"]) == {"currentMessageId"}
    with pytest.raises(InvalidArguments):
        open_run(world, world.private, current_message_id=uuid.uuid4())


def test_run_create_needs_recent_messages_in_the_conversation(world):
    here = factories.post(world.private, world.alice)
    elsewhere = factories.post(world.public, world.alice)
    with pytest.raises(InvalidArguments) as caught:
        open_run(world, world.private, recent_message_ids=[here.id, elsewhere.id])
    assert set(caught.value.details["fields"]) == {"recentMessageIds"}
    run, _ = open_run(world, world.private, recent_message_ids=[here.id, here.id])
    assert run.recent_message_ids == [here.id]


def test_live_message_count_follows_creates_bulk_failures_and_deletes(db):
    """list_messages answers `total` from this counter, so it must never drift."""
    workspace = factories.make_workspace()
    account = factories.make_account(workspace)
    room = factories.make_conversation(workspace, "private")

    def live_count() -> int:
        room.refresh_from_db()
        return room.live_message_count

    def actual() -> int:
        return Message.objects.filter(conversation=room, deleted_at__isnull=True).count()

    first = factories.post(room, account, "sample one")
    services.messages_create(
        conversation=room,
        drafts=[services.MessageDraft(content="sample", sender_account_id=account.id)] * 3,
    )
    assert live_count() == actual() == 4
    with pytest.raises(InvalidArguments):
        services.messages_create(
            conversation=room,
            drafts=[
                services.MessageDraft(content="sample", sender_account_id=account.id),
                services.MessageDraft(content="sample", sender_account_id=uuid.uuid4()),
            ],
        )
    assert live_count() == actual() == 4
    services.message_delete(message=first)
    with pytest.raises(NotFound):
        services.message_delete(message=first)
    assert live_count() == actual() == 3
