"""Write services: deletion is final, seqs are never reused, bulk import is all or nothing,
tokens are stored hashed, and runs only open where the agent and requester belong."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from django.db import IntegrityError, connection
from django.db.models import Model

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
