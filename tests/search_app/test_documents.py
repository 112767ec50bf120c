"""The search projection ``message_search_documents`` stays in step with the messages (SPEC §6).

One row per live message, holding ``to_tsvector('formation_english', content)`` and copies of
workspace, conversation and created_at. The triggers live in the database, so writes that bypass
Django (a raw INSERT, a COPY, a hand-written UPDATE) are covered too; rolled-back writes leave
the projection as it was; ``rebuild_search_documents`` finds and repairs injected drift.
"""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Callable

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.utils import timezone

from messages_app import services
from messages_app.models import Message
from messages_app.services import MessageDraft
from search_app.management.commands import rebuild_search_documents
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

URL = "/api/v1/history/search"
MESSAGES = Message._meta.db_table
DOCUMENTS = "message_search_documents"
CONFIG = "formation_english"


class Abandoned(Exception):
    """Raised inside a transaction to roll it back on purpose."""


def sql(query: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def document(message_id) -> tuple | None:
    """The message's document row, its tsvector compared with the body's in SQL."""
    rows = sql(
        f"""
        SELECT d.workspace_id, d.conversation_id, d.created_at,
               d.document = to_tsvector('{CONFIG}'::regconfig, m.content)
        FROM {DOCUMENTS} AS d JOIN {MESSAGES} AS m ON m.id = d.message_id
        WHERE d.message_id = %s
        """,
        [message_id],
    )
    return rows[0] if rows else None


def has_document(message_id) -> bool:
    return bool(sql(f"SELECT 1 FROM {DOCUMENTS} WHERE message_id = %s", [message_id]))


def assert_in_step(message: Message) -> None:
    """The message (as stored now) has exactly the document its body gives."""
    message = Message.objects.get(pk=message.pk)
    assert message.deleted_at is None
    assert document(message.id) == (
        message.workspace_id,
        message.conversation_id,
        message.created_at,
        True,
    )


def matches(message_id, word: str) -> bool:
    rows = sql(
        f"SELECT document @@ to_tsquery('{CONFIG}'::regconfig, %s) FROM {DOCUMENTS} "
        "WHERE message_id = %s",
        [word, message_id],
    )
    return bool(rows and rows[0][0])


def drift() -> dict[str, int]:
    """Every way the projection can differ from the messages, over the whole database."""
    ((missing, wrong, orphaned),) = sql(
        f"""
        SELECT
          (SELECT count(*) FROM {MESSAGES} AS m
           WHERE m.deleted_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM {DOCUMENTS} AS d WHERE d.message_id = m.id)),
          (SELECT count(*) FROM {DOCUMENTS} AS d JOIN {MESSAGES} AS m ON m.id = d.message_id
           WHERE m.deleted_at IS NULL
             AND (d.workspace_id, d.conversation_id, d.created_at, d.document)
                 IS DISTINCT FROM (m.workspace_id, m.conversation_id, m.created_at,
                                   to_tsvector('{CONFIG}'::regconfig, m.content))),
          (SELECT count(*) FROM {DOCUMENTS} AS d JOIN {MESSAGES} AS m ON m.id = d.message_id
           WHERE m.deleted_at IS NOT NULL)
        """
    )
    return {"missing": missing, "wrong": wrong, "orphaned": orphaned}


IN_STEP = {"missing": 0, "wrong": 0, "orphaned": 0}


def snapshot() -> list[tuple]:
    return sql(
        f"SELECT message_id, workspace_id, conversation_id, created_at, document::text "
        f"FROM {DOCUMENTS} ORDER BY message_id"
    )


make_room = factories.observed_public_room


def test_a_created_message_gets_its_document():
    """A single create writes the document in the same statement, with the copied columns."""
    _, _, alice, room = make_room()
    message = factories.post(room, alice, "The orchard harvest went well", created_at=at(5))

    assert_in_step(message)
    assert matches(message.id, "harvest")
    assert matches(message.id, "orchards")  # same stem, same configuration
    assert not matches(message.id, "vineyard")
    assert drift() == IN_STEP


def test_a_bulk_create_gets_one_document_per_message():
    """messages_create with many drafts: one document each, no more, no fewer."""
    workspace, agent, alice, room = make_room()
    drafts = [
        MessageDraft(
            content=f"bulk entry number{i} about topic{i % 7}",
            sender_account_id=alice.id if i % 2 else None,
            sender_agent_id=None if i % 2 else agent.id,
            created_at=at(i),
        )
        for i in range(250)
    ]
    messages = services.messages_create(conversation=room, drafts=drafts)

    ((count,),) = sql(f"SELECT count(*) FROM {DOCUMENTS} WHERE workspace_id = %s", [workspace.id])
    assert count == 250
    for message in messages[::25]:
        assert_in_step(message)
    assert matches(messages[17].id, "number17")
    assert not matches(messages[17].id, "number18")
    assert drift() == IN_STEP


def test_an_edit_rewrites_the_document():
    """After message_edit the old word no longer matches and the new one does."""
    _, _, alice, room = make_room()
    message = factories.post(room, alice, "Meet at the lighthouse", created_at=at(1))
    before = snapshot()

    edited = services.message_edit(message=message, content="Meet at the harbour")

    assert snapshot() != before
    assert_in_step(edited)
    assert not matches(message.id, "lighthouse")
    assert matches(message.id, "harbour")
    assert document(message.id)[2] == message.created_at  # created_at is not the edit time
    assert drift() == IN_STEP


def test_a_delete_removes_the_document():
    """message_delete erases the body and the document goes with it; other rows stay."""
    _, _, alice, room = make_room()
    kept = factories.post(room, alice, "kept synthetic words", created_at=at(1))
    gone = factories.post(room, alice, "erased synthetic words", created_at=at(2))

    services.message_delete(message=gone)

    assert not has_document(gone.id)
    assert_in_step(kept)
    assert drift() == IN_STEP


def test_one_document_per_live_message_through_a_mix_of_writes():
    """Create, bulk create, edit and delete together leave exactly the live messages indexed."""
    workspace, _, alice, room = make_room()
    single = factories.post(room, alice, "first single note", created_at=at(1))
    bulk = services.messages_create(
        conversation=room,
        drafts=[
            MessageDraft(content=f"bulk note {i}", sender_account_id=alice.id, created_at=at(2 + i))
            for i in range(20)
        ],
    )
    services.message_edit(message=bulk[3], content="rewritten note")
    services.message_delete(message=bulk[5])
    services.message_delete(message=single)

    live = set(
        Message.objects.filter(workspace=workspace, deleted_at__isnull=True).values_list(
            "id", flat=True
        )
    )
    indexed = {
        row[0]
        for row in sql(
            f"SELECT message_id FROM {DOCUMENTS} WHERE workspace_id = %s", [workspace.id]
        )
    }
    assert indexed == live
    assert len(live) == 19
    assert drift() == IN_STEP


def test_a_raw_insert_and_a_copy_get_their_documents():
    """Rows written without Django (INSERT, COPY) are indexed by the database's triggers."""
    workspace, _, alice, room = make_room()
    columns = (
        "id, workspace_id, conversation_id, seq, role, status, sender_account_id, content, "
        "created_at"
    )
    inserted = [uuid.uuid4() for _ in range(3)]
    sql(
        f"INSERT INTO {MESSAGES} ({columns}) VALUES "
        + ", ".join(["(%s, %s, %s, %s, 'user', 'sent', %s, %s, %s)"] * 3),
        [
            value
            for n, message_id in enumerate(inserted)
            for value in (
                message_id,
                workspace.id,
                room.id,
                100 + n,
                alice.id,
                f"imported walrus line {n}",
                at(n),
            )
        ],
    )
    copied = [uuid.uuid4() for _ in range(4)]
    with connection.cursor() as cursor:
        copy_sql = f"COPY {MESSAGES} ({columns}) FROM STDIN"
        with cursor.cursor.copy(copy_sql) as copy:
            for n, message_id in enumerate(copied):
                copy.write_row(
                    (
                        message_id,
                        workspace.id,
                        room.id,
                        200 + n,
                        "user",
                        "sent",
                        alice.id,
                        f"copied pelican line {n}",
                        at(10 + n),
                    )
                )

    for message_id in inserted + copied:
        assert_in_step(Message.objects.get(pk=message_id))
    assert matches(inserted[0], "walrus")
    assert matches(copied[0], "pelican")
    assert drift() == IN_STEP


def test_a_raw_update_rewrites_the_document():
    """A hand-written UPDATE of content (one row, many rows) is mirrored; a soft delete by hand
    removes the document; an update that leaves the body alone leaves the document right."""
    _, _, alice, room = make_room()
    one = factories.post(room, alice, "original otter text", created_at=at(1))
    many = [
        factories.post(room, alice, f"group badger text {i}", created_at=at(2 + i))
        for i in range(5)
    ]

    sql(f"UPDATE {MESSAGES} SET content = %s WHERE id = %s", ["changed heron text", one.id])
    assert not matches(one.id, "otter")
    assert matches(one.id, "heron")
    assert_in_step(one)

    sql(
        f"UPDATE {MESSAGES} SET content = content || ' and a falcon' WHERE id = ANY(%s)",
        [[m.id for m in many]],
    )
    for message in many:
        assert matches(message.id, "falcon")
        assert matches(message.id, "badger")
        assert_in_step(message)

    sql(f"UPDATE {MESSAGES} SET status = 'failed' WHERE id = %s", [one.id])
    assert_in_step(one)

    sql(
        f"UPDATE {MESSAGES} SET content = '', deleted_at = %s WHERE id = %s",
        [timezone.now(), many[0].id],
    )
    assert not has_document(many[0].id)
    assert drift() == IN_STEP


def in_abandoned_transaction(work: Callable[[], object]) -> None:
    """Run ``work`` in a transaction that then fails and rolls back, as a failing request's."""
    with pytest.raises(Abandoned):
        _fail_after(work)


def _fail_after(work: Callable[[], object]) -> None:
    with transaction.atomic():
        work()
        raise Abandoned


def test_a_rolled_back_edit_leaves_the_old_document():
    """An edit inside a transaction that fails leaves the document of the old body."""
    _, _, alice, room = make_room()
    message = factories.post(room, alice, "the kiwi crate", created_at=at(1))
    before = snapshot()

    def edit() -> None:
        services.message_edit(message=message, content="the mango crate")
        assert matches(message.id, "mango")  # the trigger ran inside the transaction

    in_abandoned_transaction(edit)

    assert snapshot() == before
    assert matches(message.id, "kiwi")
    assert not matches(message.id, "mango")
    assert drift() == IN_STEP


def test_a_rolled_back_create_leaves_no_document():
    """A create inside a transaction that fails leaves neither a message nor a document."""
    _, _, alice, room = make_room()
    before = snapshot()
    created: list[Message] = []

    def create() -> None:
        created.extend(
            services.messages_create(
                conversation=room,
                drafts=[
                    MessageDraft(content=f"abandoned note {i}", sender_account_id=alice.id)
                    for i in range(3)
                ],
            )
        )
        assert all(has_document(m.id) for m in created)

    in_abandoned_transaction(create)

    assert len(created) == 3
    assert not Message.objects.filter(pk__in=[m.id for m in created]).exists()
    assert not any(has_document(m.id) for m in created)
    assert snapshot() == before


def test_a_rolled_back_delete_keeps_the_document():
    """A delete inside a transaction that fails leaves the message indexed."""
    _, _, alice, room = make_room()
    message = factories.post(room, alice, "still here", created_at=at(1))

    def delete() -> None:
        services.message_delete(message=message)
        assert not has_document(message.id)

    in_abandoned_transaction(delete)

    assert_in_step(message)
    assert drift() == IN_STEP


def rebuild(*args: str) -> list[str]:
    out = io.StringIO()
    call_command("rebuild_search_documents", *args, stdout=out)
    return out.getvalue().splitlines()


PROGRESS = re.compile(r"^\s+\d+/\d+ messages checked, \d+ (fixed|drifted)$")


def test_rebuild_finds_and_repairs_injected_drift(monkeypatch):
    """Healthy: fixes 0. After a missing, a stale and an orphaned row: --check reports them and
    changes nothing; a run fixes exactly those three; the next run fixes 0."""
    # Show progress after every batch (normally at most once a second).
    monkeypatch.setattr(rebuild_search_documents, "PROGRESS_EVERY_SECONDS", 0.0)
    _, agent, alice, room = make_room()
    messages = [
        factories.post(room, alice if i % 2 else agent, f"rebuild corpus line {i}", at(i))
        for i in range(9)
    ]
    missing, stale, orphan = messages[1], messages[4], messages[7]
    services.message_delete(message=orphan)
    total = Message.objects.count()

    lines = rebuild("--batch-size", "2")
    assert lines[0] == f"Checking {total} messages in batches of 2..."
    assert any(PROGRESS.match(line) for line in lines[1:-1])
    assert "fixed 0 rows" in lines[-1]
    assert lines[-1] == (
        f"Checked {total} messages: fixed 0 rows (0 missing, 0 stale, 0 for deleted messages)."
    )

    # Inject drift by hand, as a restore from elsewhere might leave it.
    sql(f"DELETE FROM {DOCUMENTS} WHERE message_id = %s", [missing.id])
    sql(
        f"UPDATE {DOCUMENTS} SET document = to_tsvector('{CONFIG}'::regconfig, 'wrong') "
        "WHERE message_id = %s",
        [stale.id],
    )
    sql(
        f"INSERT INTO {DOCUMENTS} "
        "(message_id, workspace_id, conversation_id, created_at, document) "
        f"SELECT id, workspace_id, conversation_id, created_at, "
        f"to_tsvector('{CONFIG}'::regconfig, 'ghost words') FROM {MESSAGES} WHERE id = %s",
        [orphan.id],
    )
    assert drift() == {"missing": 1, "wrong": 1, "orphaned": 1}
    drifted = snapshot()

    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("rebuild_search_documents", "--check", "--batch-size", "2", stdout=out)
    lines = out.getvalue().splitlines()
    assert any(PROGRESS.match(line) and line.endswith("drifted") for line in lines[1:-1])
    assert lines[-1] == (
        f"Checked {total} messages: 3 rows drifted (1 missing, 1 stale, 1 for deleted messages)."
    )
    assert snapshot() == drifted  # --check changes nothing

    lines = rebuild("--batch-size", "2")
    assert any(PROGRESS.match(line) and line.endswith("fixed") for line in lines[1:-1])
    assert lines[-1] == (
        f"Checked {total} messages: fixed 3 rows (1 missing, 1 stale, 1 for deleted messages)."
    )
    assert drift() == IN_STEP
    assert_in_step(missing)
    assert_in_step(stale)
    assert not has_document(orphan.id)

    assert "fixed 0 rows" in rebuild("--batch-size", "2")[-1]
    # And --check now agrees, without raising.
    assert "0 rows drifted" in rebuild("--check")[-1]


def test_rebuild_rejects_a_bad_batch_size():
    with pytest.raises(CommandError):
        call_command("rebuild_search_documents", "--batch-size", "0", stdout=io.StringIO())


def history_texts(client, query: str) -> dict[str, str]:
    response = client.post(URL, {"query": query}, format="json")
    assert response.status_code == 200, response.content
    return {item["id"]: item["text"] for item in response.json()["items"]}


def test_search_follows_edits_and_deletes(world):
    """search_history finds the edited text, not the old one, and nothing once deleted."""
    before = factories.post(world.public, world.alice, "unrelated opening remark")
    message = factories.post(world.public, world.alice, "The quokka census is due")
    after = factories.post(world.public, world.bob, "unrelated closing remark")
    run, client = factories.make_run(world.agent, world.public, world.alice)

    assert factories.hit_ids(run, "quokka") == [message.id]
    assert history_texts(client, "quokka") == {str(message.id): "The quokka census is due"}

    services.message_edit(message=message, content="The wombat census is due")
    assert factories.hit_ids(run, "quokka") == []
    assert factories.hit_ids(run, "wombat") == [message.id]
    assert history_texts(client, "wombat") == {str(message.id): "The wombat census is due"}
    assert history_texts(client, "quokka") == {}

    services.message_delete(message=message)
    assert factories.hit_ids(run, "wombat") == []
    assert factories.hit_ids(run, "census") == []
    assert history_texts(client, "wombat census") == {}
    # Nor does it come back as a neighbour of the messages around it.
    result = factories.history(run, "remark")
    assert {hit.message.id for hit in result.hits} == {before.id, after.id}
    for hit in result.hits:
        assert message.id not in {m.id for m in (*hit.before, *hit.after)}
