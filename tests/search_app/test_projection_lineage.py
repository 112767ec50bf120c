"""Rule 4 on the projection row: ``message_search_documents.lineage_rooms`` (docs/search.md).

Each search document carries the rooms its message inherits, so search_history tests rule 4 on
the row instead of probing the lineage tables. These tests hold that copy against the canonical
lineage after every kind of write (create, bulk import, edit, delete, lineage written after the
message row, a run's reply, a reply drawn from a recalled memory, a reply of a reply), show that
``rebuild_search_documents`` finds and repairs a drifted copy, and that the hits statement reads
no lineage table at all.

The expected rooms are computed in SQL from the canonical tables alone, without the projection:
the conversations of every source reached through ``MessageLineage`` (recursively, so the stored
closure is checked as well) and the ``MessageLineageRoom`` rows of the message and of every
source it reaches (memories' rooms enter the lineage there). Rooms are joined long before
``T0`` and messages dated around it (observed by the agent); all text is synthetic.
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from messages_app import services
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    Message,
    MessageLineage,
    MessageLineageRoom,
    Workspace,
)
from messages_app.services import MessageDraft
from search_app.history.results import HistoryFilters
from search_app.history.statement import hits_statement
from search_app.models import MemoryLineage, MemoryRoom, MessageSearchDocument, RunMemory
from search_app.query.parse import parse_query
from search_app.scope import Perspective
from tests.factories import (
    at,
    hit_ids,
    join,
    make_account,
    make_agent,
    make_conversation,
    make_run,
    make_workspace,
    post,
    service_client,
)

pytestmark = pytest.mark.django_db

MESSAGES = Message._meta.db_table
LINEAGE = MessageLineage._meta.db_table
ROOMS = MessageLineageRoom._meta.db_table
DOCUMENTS = MessageSearchDocument._meta.db_table
# Every table holding lineage, of messages or of memories: the hits statement reads none.
LINEAGE_TABLES = frozenset(
    {LINEAGE, ROOMS, MemoryLineage._meta.db_table, MemoryRoom._meta.db_table}
)
EARLY = at(-600)


@dataclass
class Scene:
    """Agent A; R and B; ``secret`` a private room {A, R}; ``public`` {A, R, B}; ``narrow`` a
    second private room {A, R}, a destination ``secret`` permits."""

    workspace: Workspace
    agent: Agent
    r: Account
    b: Account
    secret: Conversation
    public: Conversation
    narrow: Conversation


def room(workspace: Workspace, kind: str, *members: Account | Agent) -> Conversation:
    conversation = make_conversation(workspace, kind)
    for member in members:
        join(conversation, member, joined_at=EARLY)
    return conversation


@pytest.fixture
def scene() -> Scene:
    workspace = make_workspace()
    agent = make_agent(workspace)
    r, b = make_account(workspace, "Requester Example"), make_account(workspace, "Bob Example")
    return Scene(
        workspace=workspace,
        agent=agent,
        r=r,
        b=b,
        secret=room(workspace, "private", agent, r),
        public=room(workspace, "public", agent, r, b),
        narrow=room(workspace, "private", agent, r),
    )


def sql(query: str, params: object = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


# Per message of the workspace: whether it is live, whether it has a document, the document's
# rooms, and the rooms the canonical lineage gives (sorted, null when none), from these alone.
AGREEMENT = f"""
WITH RECURSIVE reach (message_id, source_id) AS (
    SELECT lineage.message_id, lineage.source_id FROM {LINEAGE} AS lineage
    WHERE lineage.workspace_id = %(workspace)s
    UNION
    SELECT reach.message_id, lineage.source_id
    FROM reach JOIN {LINEAGE} AS lineage ON lineage.message_id = reach.source_id
), inherited (message_id, conversation_id) AS (
    SELECT reach.message_id, source.conversation_id
    FROM reach JOIN {MESSAGES} AS source ON source.id = reach.source_id
    UNION
    SELECT own.message_id, own.conversation_id FROM {ROOMS} AS own
    WHERE own.workspace_id = %(workspace)s
    UNION
    SELECT reach.message_id, through.conversation_id
    FROM reach JOIN {ROOMS} AS through ON through.message_id = reach.source_id
)
SELECT m.id, m.deleted_at IS NULL, d.message_id IS NOT NULL, d.lineage_rooms,
       (SELECT array_agg(i.conversation_id ORDER BY i.conversation_id)
        FROM inherited AS i WHERE i.message_id = m.id)
FROM {MESSAGES} AS m LEFT JOIN {DOCUMENTS} AS d ON d.message_id = m.id
WHERE m.workspace_id = %(workspace)s
"""


def assert_projection_agrees(workspace: Workspace) -> dict[uuid.UUID, set[uuid.UUID]]:
    """Every live message of the workspace has a document whose ``lineage_rooms`` is exactly
    the canonical lineage's rooms (sorted, null when none) and no deleted one has a document;
    returns each live message's rooms, for the test's own expectations."""
    rows = sql(AGREEMENT, {"workspace": workspace.id})
    assert rows
    assert {row[0] for row in rows if row[1] != row[2]} == set()
    projected = {row[0]: row[3] for row in rows if row[1]}
    expected = {row[0]: row[4] for row in rows if row[1]}
    assert projected == expected
    return {message: set(rooms or ()) for message, rooms in projected.items()}


def said(conversation: Conversation, sender: Account | Agent, content: str, minute: float):
    return post(conversation, sender, content, created_at=at(minute))


def derived(conversation: Conversation, agent: Agent, content: str, minute: float, *sources):
    """An agent's message stored through the service with ``sources`` as its lineage."""
    return post(
        conversation, agent, content, created_at=at(minute), lineage=[s.id for s in sources]
    )


def replied(api, run, content: str = "replyword") -> uuid.UUID:
    """The run's reply through ``POST /api/v1/runs/{id}/reply``."""
    answer = api.post(f"/api/v1/runs/{run.id}/reply", {"content": content}, format="json")
    assert answer.status_code == 201, answer.content
    return uuid.UUID(answer.json()["id"])


def remembered_and_recalled(scene: Scene, writer_room: Conversation, reader_room: Conversation):
    """A memory written by a run in ``writer_room`` that saw no message, recalled by a new run
    in ``reader_room``; returns that run and its API client."""
    writer, writer_api = make_run(scene.agent, writer_room, scene.r)
    written = writer_api.post(
        f"/api/v1/runs/{writer.id}/memories", {"content": "memoryword plan"}, format="json"
    )
    assert written.status_code == 201, written.content
    reader, reader_api = make_run(scene.agent, reader_room, scene.r)
    recalled = reader_api.get("/api/v1/memories", {"query": "memoryword"})
    assert recalled.status_code == 200, recalled.content
    assert [item["content"] for item in recalled.json()["items"]] == ["memoryword plan"]
    return reader, reader_api


# --- the projection agrees with the lineage after every kind of write ---------------------------


def test_messages_created_through_the_services_carry_their_sources_rooms(scene):
    secret_note = said(scene.secret, scene.r, "sample secret", 1)
    public_note = said(scene.public, scene.b, "sample public", 2)
    plain = derived(scene.public, scene.agent, "sample plain", 3)
    both = derived(scene.narrow, scene.agent, "sample both", 4, secret_note, public_note)
    rooms = assert_projection_agrees(scene.workspace)
    assert rooms[secret_note.id] == rooms[public_note.id] == rooms[plain.id] == set()
    assert rooms[both.id] == {scene.secret.id, scene.public.id}


def bulk_through_the_endpoint(scene: Scene, conversation, drafts) -> list[uuid.UUID]:
    items = [
        {"content": draft.content, "createdAt": draft.created_at.isoformat()}
        | (
            {
                "senderAgentId": str(draft.sender_agent_id),
                "lineage": [str(s) for s in draft.lineage],
            }
            if draft.sender_agent_id
            else {"senderUserId": str(draft.sender_account_id)}
        )
        for draft in drafts
    ]
    response = service_client(scene.workspace).post(
        f"/api/v1/conversations/{conversation.id}/messages/bulk", {"messages": items}, format="json"
    )
    assert response.status_code == 201, response.content
    return [uuid.UUID(item["id"]) for item in response.json()["items"]]


def bulk_through_the_service(_: Scene, conversation, drafts) -> list[uuid.UUID]:
    return [m.id for m in services.messages_create(conversation=conversation, drafts=drafts)]


@pytest.mark.parametrize("store", [bulk_through_the_service, bulk_through_the_endpoint])
def test_a_bulk_import_gives_each_message_its_own_rooms(scene, store):
    """One import, one statement of lineage: every message gets its own sources' rooms (and the
    rooms a source inherited), none another's."""
    secret_note = said(scene.secret, scene.r, "sample secret", 1)
    narrow_note = said(scene.narrow, scene.r, "sample narrow", 2)
    earlier = derived(scene.narrow, scene.agent, "sample earlier", 3, secret_note)
    agent, person = scene.agent.id, scene.r.id
    drafts = [
        MessageDraft(
            "sample one", sender_agent_id=agent, created_at=at(5), lineage=[secret_note.id]
        ),
        MessageDraft("sample two", sender_account_id=person, created_at=at(6)),
        MessageDraft(
            "sample three", sender_agent_id=agent, created_at=at(7), lineage=[narrow_note.id]
        ),
        MessageDraft("sample four", sender_agent_id=agent, created_at=at(8), lineage=[earlier.id]),
        MessageDraft("sample five", sender_agent_id=agent, created_at=at(9)),
    ]
    one, two, three, four, five = store(scene, scene.public, drafts)
    rooms = assert_projection_agrees(scene.workspace)
    assert rooms[one] == {scene.secret.id}
    assert rooms[two] == rooms[five] == set()
    assert rooms[three] == {scene.narrow.id}
    assert rooms[four] == {scene.secret.id, scene.narrow.id}


def test_editing_a_message_or_its_source_keeps_the_rooms(scene):
    """An edit rewrites the document (new words) and must keep the rooms on it."""
    service = service_client(scene.workspace)
    secret_note = said(scene.secret, scene.r, "sample secret", 1)
    reply = derived(scene.public, scene.agent, "sample reply", 2, secret_note)
    person = said(scene.public, scene.b, "sample person", 3)
    for message, text in [(reply, "edited reply"), (secret_note, "edited secret"), (person, "x")]:
        response = service.patch(f"/api/v1/messages/{message.id}", {"content": text}, format="json")
        assert response.status_code == 200, response.content
    rooms = assert_projection_agrees(scene.workspace)
    assert rooms[reply.id] == {scene.secret.id}
    assert rooms[person.id] == rooms[secret_note.id] == set()
    ((rewritten,),) = sql(
        f"SELECT document @@ 'edit'::tsquery FROM {DOCUMENTS} WHERE message_id = %s", [reply.id]
    )
    assert rewritten


def test_a_message_restored_by_hand_gets_its_rooms_back(scene):
    """A deleted message has no document; a hand-written UPDATE that brings it back (a restore
    from elsewhere) writes the document again, with the rooms its lineage still holds."""
    secret_note = said(scene.secret, scene.r, "sample secret", 1)
    reply = derived(scene.public, scene.agent, "sample reply", 2, secret_note)
    services.message_delete(message=reply)
    assert reply.id not in assert_projection_agrees(scene.workspace)
    sql(
        f"UPDATE {MESSAGES} SET deleted_at = NULL, content = 'restored' WHERE id = %s",
        [reply.id],
    )
    assert assert_projection_agrees(scene.workspace)[reply.id] == {scene.secret.id}


def test_a_deleted_sources_restriction_stays_on_the_derived_row(scene):
    """Deletion erases the source's body and its document, never the restriction it handed on:
    a message derived from it (and one derived from that) stays withheld where the source was."""
    service = service_client(scene.workspace)
    secret_note = said(scene.secret, scene.r, "sample secret", 1)
    first = derived(scene.narrow, scene.agent, "derivedword first", 2, secret_note)
    second = derived(scene.public, scene.agent, "derivedword second", 3, first)
    gone = derived(scene.public, scene.agent, "derivedword gone", 4, secret_note)
    for message in (secret_note, gone):
        assert service.delete(f"/api/v1/messages/{message.id}").status_code == 204
    rooms = assert_projection_agrees(scene.workspace)
    assert secret_note.id not in rooms
    assert gone.id not in rooms
    assert rooms[first.id] == {scene.secret.id}
    assert rooms[second.id] == {scene.secret.id, scene.narrow.id}
    public_run, _ = make_run(scene.agent, scene.public, scene.r)
    assert hit_ids(public_run, "derivedword") == []
    narrow_run, _ = make_run(scene.agent, scene.narrow, scene.r)
    assert set(hit_ids(narrow_run, "derivedword")) == {first.id, second.id}


def test_lineage_written_after_the_message_row_reaches_its_document(scene):
    """Lineage rows stored later, by hand-written SQL as a ``COPY`` would: each one (and the
    rooms its source inherited) reaches the document already written for the message."""
    secret_note = said(scene.secret, scene.r, "sample secret", 1)
    narrow_note = said(scene.narrow, scene.r, "sample narrow", 2)
    middle = derived(scene.narrow, scene.agent, "sample middle", 3, secret_note)
    late = derived(scene.public, scene.agent, "sample late", 4)
    assert assert_projection_agrees(scene.workspace)[late.id] == set()
    for source in (narrow_note, middle):
        sql(
            f"INSERT INTO {LINEAGE} (workspace_id, message_id, source_id, direct) "
            "VALUES (%s, %s, %s, true)",
            [scene.workspace.id, late.id, source.id],
        )
    rooms = assert_projection_agrees(scene.workspace)
    assert rooms[late.id] == {scene.secret.id, scene.narrow.id}


def test_a_runs_reply_carries_the_rooms_of_what_it_read(scene):
    """``POST /runs/{id}/reply`` stores the message, then its lineage, then the recalled
    memories' rooms: all of it reaches the reply's document."""
    secret_note = said(scene.secret, scene.r, "findword secret", 1)
    question = said(scene.narrow, scene.r, "what was it", 2)
    run, api = make_run(scene.agent, scene.narrow, scene.r, current=question)
    assert hit_ids(run, "findword") == [secret_note.id]
    reply = replied(api, run)
    rooms = assert_projection_agrees(scene.workspace)
    assert rooms[reply] == {scene.secret.id, scene.narrow.id}


def test_a_reply_from_a_recalled_memory_inherits_the_memorys_rooms(scene):
    """A memory written in the secret room with no message evidence still carries that room;
    a reply drawn from it has no lineage rows, only the memory's rooms, on its document too."""
    replier, replier_api = remembered_and_recalled(scene, scene.secret, scene.narrow)
    reply = replied(replier_api, replier)
    rooms = assert_projection_agrees(scene.workspace)
    recalled_rooms = set(
        MemoryRoom.objects.filter(
            memory__in=RunMemory.objects.filter(run=replier).values("memory")
        ).values_list("conversation_id", flat=True)
    )
    assert recalled_rooms == {scene.secret.id}
    assert not MessageLineage.objects.filter(message_id=reply).exists()
    assert rooms[reply] == recalled_rooms
    public_run, _ = make_run(scene.agent, scene.public, scene.r)
    assert hit_ids(public_run, "replyword") == []


def test_a_reply_of_a_reply_keeps_the_first_replys_rooms(scene):
    """A chain of runs, each reading only the previous reply: the first reply's room came from
    a recalled memory alone (no message of the secret room was read), and every later reply
    still carries it, beside the room of the reply it read."""
    first_run, first_api = remembered_and_recalled(scene, scene.secret, scene.narrow)
    first = replied(first_api, first_run, "firstword")
    second_run, second_api = make_run(scene.agent, scene.narrow, scene.r)
    assert hit_ids(second_run, "firstword") == [first]
    second = replied(second_api, second_run, "secondword")
    third_run, third_api = make_run(scene.agent, scene.narrow, scene.r)
    assert hit_ids(third_run, "secondword") == [second]
    third = replied(third_api, third_run, "thirdword")
    rooms = assert_projection_agrees(scene.workspace)
    assert rooms[first] == {scene.secret.id}
    assert rooms[second] == rooms[third] == {scene.secret.id, scene.narrow.id}
    public_run, _ = make_run(scene.agent, scene.public, scene.r)
    for word in ("firstword", "secondword", "thirdword"):
        assert hit_ids(public_run, word) == []


# --- rebuild_search_documents repairs drifted rooms ----------------------------------------------


def rebuild(*args: str) -> str:
    """The command's last line (its summary)."""
    out = io.StringIO()
    call_command("rebuild_search_documents", *args, stdout=out)
    return out.getvalue().splitlines()[-1]


def projected_rooms() -> list[tuple]:
    return sql(f"SELECT message_id, lineage_rooms FROM {DOCUMENTS} ORDER BY message_id")


def test_rebuild_finds_and_repairs_drifted_lineage_rooms(scene):
    """Rooms lost (the leaking direction), rooms a person's message never inherits, and one
    room of two dropped: ``--check`` counts the three as stale and changes nothing; a run
    repairs exactly those, and the search withholds the reply again."""
    secret_note = said(scene.secret, scene.r, "sample secret", 1)
    narrow_note = said(scene.narrow, scene.r, "sample narrow", 2)
    lost = derived(scene.public, scene.agent, "driftword lost", 3, secret_note)
    halved = derived(scene.public, scene.agent, "driftword halved", 4, secret_note, narrow_note)
    person = said(scene.public, scene.b, "driftword person", 5)
    healthy = projected_rooms()
    total = Message.objects.count()
    assert rebuild("--check") == (
        f"Checked {total} messages: 0 rows drifted (0 missing, 0 stale, 0 for deleted messages)."
    )

    sql(f"UPDATE {DOCUMENTS} SET lineage_rooms = NULL WHERE message_id = %s", [lost.id])
    sql(
        f"UPDATE {DOCUMENTS} SET lineage_rooms = ARRAY[%s]::uuid[] WHERE message_id = %s",
        [scene.secret.id, person.id],
    )
    sql(
        f"UPDATE {DOCUMENTS} SET lineage_rooms = lineage_rooms[1:1] WHERE message_id = %s",
        [halved.id],
    )
    drifted = projected_rooms()
    assert drifted != healthy
    with pytest.raises(CommandError):
        rebuild("--check")
    assert projected_rooms() == drifted

    assert rebuild() == (
        f"Checked {total} messages: fixed 3 rows (0 missing, 3 stale, 0 for deleted messages)."
    )
    assert projected_rooms() == healthy
    rooms = assert_projection_agrees(scene.workspace)
    assert rooms[lost.id] == {scene.secret.id}
    assert rooms[halved.id] == {scene.secret.id, scene.narrow.id}
    assert rooms[person.id] == set()
    public_run, _ = make_run(scene.agent, scene.public, scene.r)
    assert hit_ids(public_run, "driftword") == [person.id]
    assert rebuild().startswith(f"Checked {total} messages: fixed 0 rows")


# --- the hits statement reads no lineage table ---------------------------------------------------


def relations(plan: object) -> set[str]:
    """Every ``Relation Name`` anywhere in an ``EXPLAIN (FORMAT JSON)`` plan."""
    if isinstance(plan, dict):
        found = {plan["Relation Name"]} if "Relation Name" in plan else set()
        return found.union(*(relations(value) for value in plan.values()))
    if isinstance(plan, list):
        return set().union(*(relations(item) for item in plan))
    return set()


def test_the_hits_statement_reads_rule_4_from_the_documents_not_the_lineage(scene):
    """Many matches derived from private sources, a memory and its rooms in the tables, fresh
    statistics, sequential scans off: the plan of the whole statement (hits, recheck,
    neighbours, exclusion counts) names the documents and no lineage table; and the statement
    still withholds what rule 4 forbids."""
    sources = [said(scene.secret, scene.r, f"sample source {i}", i) for i in range(20)]
    writer, writer_api = make_run(scene.agent, scene.secret, scene.r, current=sources[0])
    remembered = writer_api.post(
        f"/api/v1/runs/{writer.id}/memories", {"content": "planword"}, format="json"
    )
    assert remembered.status_code == 201, remembered.content
    withheld = [
        derived(scene.public, scene.agent, f"sample withheld {i}", 30 + i, source)
        for i, source in enumerate(sources)
    ]
    shown = [said(scene.public, scene.b, f"sample shown {i}", 60 + i) for i in range(5)]
    assert MessageLineage.objects.count() == MessageLineageRoom.objects.count() == 20
    assert MemoryLineage.objects.exists()
    assert MemoryRoom.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {MESSAGES}, {DOCUMENTS}, {', '.join(sorted(LINEAGE_TABLES))}")

    run, _ = make_run(scene.agent, scene.public, scene.r)
    statement, params = hits_statement(
        Perspective.of_run(run),
        parse_query("sample"),
        HistoryFilters(),
        limit=30,
        now=timezone.now(),
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        kinds = [(row[0], row[3]) for row in cursor.fetchall()]
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
        (plan,) = cursor.fetchone()
    hits = {message_id for kind, message_id in kinds if kind == "hit"}
    assert hits == {message.id for message in shown}
    assert not hits & {message.id for message in withheld}

    read = relations(json.loads(plan) if isinstance(plan, str) else plan)
    assert DOCUMENTS in read
    assert MESSAGES in read
    assert read & LINEAGE_TABLES == set()
