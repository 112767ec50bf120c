"""The agent's memories (docs/design.md, "Evidence, delivery and memories"; SPEC §3 rule 4
applied to them).

``POST /api/v1/runs/{id}/memories {content}`` stores a memory of the run's agent whose lineage
is what the run has seen (its evidence, their lineage, and the lineage of memories it was
given); ``GET /api/v1/memories?query=`` returns the agent's matching memories whose every source
permits the current run's destination, and records them as the run's memories, so a reply or a
memory written afterwards inherits their lineage.

Rooms are joined long before ``T0`` and messages dated around it (observed by the agent); all
text is synthetic.
"""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest
from django.utils.dateparse import parse_datetime

from messages_app import services
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    Message,
    MessageLineage,
    MessageLineageRoom,
    Run,
)
from search_app.models import AgentMemory, MemoryLineage, MemoryRoom, RunMemory
from tests.factories import (
    agent_client,
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

EARLY = at(-600)
MEMORIES_URL = "/api/v1/memories"
MEMORY_KEYS = {"id", "agentId", "runId", "content", "createdAt"}


def room(workspace, kind: str, *members: Account | Agent, since: datetime = EARLY) -> Conversation:
    conversation = make_conversation(workspace, kind)
    for member in members:
        join(conversation, member, joined_at=since)
    return conversation


def remember(api, run: Run, content: str):
    return api.post(f"/api/v1/runs/{run.id}/memories", {"content": content}, format="json")


def remembered(api, run: Run, content: str) -> dict:
    response = remember(api, run, content)
    assert response.status_code == 201, response.content
    return response.json()


def recall(api, query: str, **params):
    return api.get(MEMORIES_URL, {"query": query, **params})


def recalled(api, query: str, **params) -> list[str]:
    """The contents returned, in order."""
    response = recall(api, query, **params)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"items", "total", "limit"}
    assert body["total"] == len(body["items"])
    return [item["content"] for item in body["items"]]


def memory_sources(memory_id) -> set:
    return set(
        MemoryLineage.objects.filter(memory_id=memory_id).values_list("source_id", flat=True)
    )


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    return body["error"]


@pytest.fixture
def scene():
    """Agent A; R and B; a private room {A, R} (B is not in it); a public room {A, R, B}; a
    second private room {A, R} (a destination the first permits)."""
    workspace = make_workspace()
    agent = make_agent(workspace)
    r, b = make_account(workspace, "Requester Example"), make_account(workspace, "Bob Example")
    secret = room(workspace, "private", agent, r)
    public = room(workspace, "public", agent, r, b)
    narrow = room(workspace, "private", agent, r)
    return workspace, agent, r, b, secret, public, narrow


# --- the contract -------------------------------------------------------------------------------


def test_a_memory_is_stored_with_the_runs_evidence_and_its_closure(scene):
    workspace, agent, r, _, secret, public, _ = scene
    origin = post(secret, r, "sample origin", created_at=at(1))
    derived = post(public, agent, "sample derived", created_at=at(2), lineage=[origin.id])
    plain = post(public, r, "sample plain", created_at=at(3))
    run, api = make_run(agent, public, r)
    for message in (derived, plain):
        assert api.get(f"/api/v1/messages/{message.id}").status_code == 200

    body = remembered(api, run, "memoryword the plan")
    assert set(body) == {*MEMORY_KEYS, "lineageCount"}
    memory = AgentMemory.objects.get(pk=body["id"])
    assert body == {
        "id": str(memory.id),
        "agentId": str(agent.id),
        "runId": str(run.id),
        "content": "memoryword the plan",
        "createdAt": body["createdAt"],
        "lineageCount": 3,
    }
    assert parse_datetime(body["createdAt"]) == memory.created_at
    assert memory_sources(memory.id) == {derived.id, plain.id, origin.id}
    assert memory.workspace_id == workspace.id


def test_a_memory_may_be_written_after_the_reply_and_twice(scene):
    _, agent, r, _, _, public, _ = scene
    said = post(public, r, "sample said", created_at=at(1))
    run, api = make_run(agent, public, r)
    assert hit_ids(run, "sample") == [said.id]
    answer = api.post(f"/api/v1/runs/{run.id}/reply", {"content": "ok"}, format="json")
    assert answer.status_code == 201, answer.content
    first = remembered(api, run, "memoryword one")
    second = remembered(api, run, "memoryword two")
    assert first["id"] != second["id"]
    assert memory_sources(first["id"]) == memory_sources(second["id"]) == {said.id}


def test_a_run_without_evidence_writes_a_memory_without_lineage(scene):
    _, agent, r, _, _, public, _ = scene
    run, api = make_run(agent, public, r)
    assert remembered(api, run, "memoryword nothing read")["lineageCount"] == 0


BAD_BODIES = {
    "missing": {},
    "blank": {"content": ""},
    "null": {"content": None},
    "number": {"content": 7},
    "unknown field": {"content": "memoryword", "runId": str(uuid.uuid4())},
    "too long": {"content": "x" * 100_001},
    "not an object": ["memoryword"],
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_a_bad_memory_body_is_invalid_and_stores_nothing(scene, body):
    _, agent, r, _, _, public, _ = scene
    run, api = make_run(agent, public, r)
    response = api.post(f"/api/v1/runs/{run.id}/memories", body, format="json")
    assert_error(response, 400, "invalid_arguments")
    assert AgentMemory.objects.count() == 0


def test_only_the_runs_own_token_may_write_its_memories(scene):
    workspace, agent, r, _, _, public, _ = scene
    mine, my_api = make_run(agent, public, r)
    other, _ = make_run(agent, public, r)
    not_found = [remember(my_api, other, "memoryword"), remember(my_api, Run(id=uuid.uuid4()), "x")]
    for response in not_found:
        assert_error(response, 404, "not_found")
    assert not_found[0].content == not_found[1].content
    assert_error(remember(agent_client(agent), mine, "memoryword"), 403, "forbidden")
    assert_error(remember(service_client(workspace), mine, "memoryword"), 403, "forbidden")
    assert AgentMemory.objects.count() == 0


BAD_QUERIES = {
    "missing query": {},
    "empty query": {"query": ""},
    "stop words only": {"query": "the and of"},
    "punctuation only": {"query": "&|!():*"},
    "limit zero": {"query": "memoryword", "limit": "0"},
    "limit too big": {"query": "memoryword", "limit": "51"},
    "limit not a number": {"query": "memoryword", "limit": "ten"},
    "unknown parameter": {"query": "memoryword", "agentId": str(uuid.uuid4())},
    "query too long": {"query": "memoryword " * 60},
}


@pytest.mark.parametrize("params", BAD_QUERIES.values(), ids=BAD_QUERIES.keys())
def test_bad_memory_search_parameters_are_invalid(scene, params):
    _, agent, r, _, _, public, _ = scene
    run, api = make_run(agent, public, r)
    remembered(api, run, "memoryword kept")
    assert_error(api.get(MEMORIES_URL, params), 400, "invalid_arguments")
    assert RunMemory.objects.count() == 0


def test_a_repeated_query_parameter_is_invalid(scene):
    _, agent, r, _, _, public, _ = scene
    _, api = make_run(agent, public, r)
    assert_error(api.get(f"{MEMORIES_URL}?query=alpha&query=bravo"), 400, "invalid_arguments")


def test_memory_search_needs_a_run_token(scene):
    workspace, agent, *_ = scene
    assert_error(recall(agent_client(agent), "memoryword"), 403, "forbidden")
    assert_error(recall(service_client(workspace), "memoryword"), 403, "forbidden")


def test_memory_search_answers_items_total_and_limit(scene):
    _, agent, r, _, _, public, _ = scene
    run, api = make_run(agent, public, r)
    written = remembered(api, run, "memoryword kept")
    response = recall(api, "memoryword")
    assert response.json() == {
        "items": [{key: written[key] for key in MEMORY_KEYS}],
        "total": 1,
        "limit": 10,
    }
    for index in range(3):
        remembered(api, run, f"memoryword more {index}")
    assert len(recalled(api, "memoryword", limit="2")) == 2


def test_an_agent_recalls_only_its_own_memories(scene):
    workspace, agent, r, _, _, public, _ = scene
    other_agent = make_agent(workspace, "Second agent")
    join(public, other_agent, joined_at=EARLY)
    run, api = make_run(agent, public, r)
    other_run, other_api = make_run(other_agent, public, r)
    remembered(api, run, "memoryword of the first agent")
    remembered(other_api, other_run, "memoryword of the second agent")
    assert recalled(api, "memoryword") == ["memoryword of the first agent"]
    assert recalled(other_api, "memoryword") == ["memoryword of the second agent"]


def test_better_matches_come_first(scene):
    _, agent, r, _, _, public, _ = scene
    run, api = make_run(agent, public, r)
    # Written best last, so recency alone would give the opposite order.
    remembered(api, run, "alphaword only")
    remembered(api, run, "unrelated words entirely")
    remembered(api, run, "alphaword and bravoword together")
    assert recalled(api, "alphaword bravoword") == [
        "alphaword and bravoword together",
        "alphaword only",
    ]
    # One term matched by all three: equally good, so the newer first.
    remembered(api, run, "alphaword only again")
    assert recalled(api, "alphaword") == [
        "alphaword only again",
        "alphaword and bravoword together",
        "alphaword only",
    ]


def test_any_user_text_is_a_safe_memory_query(scene):
    _, agent, r, _, _, public, _ = scene
    run, api = make_run(agent, public, r)
    remembered(api, run, "alphaword kept")
    for query in ("alphaword & (bravo | !charlie)", "alphaword:* 'quoted' \\ \"x\"", "ALPHAWORDS"):
        assert recalled(api, query) == ["alphaword kept"], query


def test_memories_searched_become_the_runs_memories_once(scene):
    _, agent, r, _, _, public, _ = scene
    writer, writer_api = make_run(agent, public, r)
    written = remembered(writer_api, writer, "memoryword kept")
    reader, reader_api = make_run(agent, public, r)
    assert recalled(reader_api, "memoryword") == ["memoryword kept"]
    assert recalled(reader_api, "memoryword kept") == ["memoryword kept"]
    assert list(RunMemory.objects.filter(run=reader).values_list("memory_id", flat=True)) == [
        uuid.UUID(written["id"])
    ]
    assert not RunMemory.objects.filter(run=writer).exists()


# --- visibility: never more visible than the sources -------------------------------------------


def test_a_memory_of_a_private_source_is_withheld_from_a_public_destination(scene):
    _, agent, r, _, secret, public, narrow = scene
    origin = post(secret, r, "secretword plan", created_at=at(1))
    writer, writer_api = make_run(agent, narrow, r)
    assert hit_ids(writer, "secretword") == [origin.id]
    remembered(writer_api, writer, "memoryword about the plan")

    _, public_api = make_run(agent, public, r)
    assert recalled(public_api, "memoryword") == []
    _, narrow_api = make_run(agent, narrow, r)
    assert recalled(narrow_api, "memoryword") == ["memoryword about the plan"]


def test_a_memory_of_a_reply_inherits_the_replys_sources(scene):
    """The run read a reply (based on a private source); the memory carries both."""
    _, agent, r, _, secret, public, narrow = scene
    origin = post(secret, r, "secretword plan", created_at=at(1))
    replier, replier_api = make_run(agent, narrow, r)
    assert hit_ids(replier, "secretword") == [origin.id]
    answer = replier_api.post(
        f"/api/v1/runs/{replier.id}/reply", {"content": "replyword summary"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    writer, writer_api = make_run(agent, narrow, r)
    assert hit_ids(writer, "replyword") == [uuid.UUID(answer.json()["id"])]
    written = remembered(writer_api, writer, "memoryword from the reply")
    assert written["lineageCount"] == 2
    assert memory_sources(written["id"]) == {uuid.UUID(answer.json()["id"]), origin.id}
    _, public_api = make_run(agent, public, r)
    assert recalled(public_api, "memoryword") == []


def test_a_memory_written_after_recalling_a_restricted_one_inherits_its_restriction(scene):
    _, agent, r, _, secret, public, narrow = scene
    origin = post(secret, r, "secretword plan", created_at=at(1))
    writer, writer_api = make_run(agent, narrow, r)
    assert hit_ids(writer, "secretword") == [origin.id]
    remembered(writer_api, writer, "firstword about the plan")

    # A run that read nothing but recalled the first memory writes a second one.
    second_writer, second_api = make_run(agent, narrow, r)
    assert recalled(second_api, "firstword") == ["firstword about the plan"]
    second = remembered(second_api, second_writer, "secondword about the memory")
    assert memory_sources(second["id"]) == {origin.id}
    # And a third, from a run that recalled only the second.
    third_writer, third_api = make_run(agent, narrow, r)
    assert recalled(third_api, "secondword") == ["secondword about the memory"]
    assert memory_sources(remembered(third_api, third_writer, "thirdword")["id"]) == {origin.id}

    _, public_api = make_run(agent, public, r)
    assert recalled(public_api, "firstword secondword thirdword") == []
    _, narrow_api = make_run(agent, narrow, r)
    assert len(recalled(narrow_api, "firstword secondword thirdword")) == 3


def test_a_reply_after_recalling_a_memory_carries_its_sources(scene):
    _, agent, r, _, secret, _, narrow = scene
    origin = post(secret, r, "secretword plan", created_at=at(1))
    writer, writer_api = make_run(agent, narrow, r)
    assert hit_ids(writer, "secretword") == [origin.id]
    remembered(writer_api, writer, "memoryword about the plan")

    replier, replier_api = make_run(agent, narrow, r)
    assert recalled(replier_api, "memoryword") == ["memoryword about the plan"]
    answer = replier_api.post(
        f"/api/v1/runs/{replier.id}/reply", {"content": "replyword"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    assert set(
        MessageLineage.objects.filter(message_id=answer.json()["id"]).values_list(
            "source_id", flat=True
        )
    ) == {origin.id}


def test_a_recalled_memory_that_stops_permitting_blocks_the_reply(scene):
    _, agent, r, b, secret, _, narrow = scene
    origin = post(secret, r, "secretword plan", created_at=at(1))
    writer, writer_api = make_run(agent, narrow, r)
    assert hit_ids(writer, "secretword") == [origin.id]
    remembered(writer_api, writer, "memoryword about the plan")

    replier, replier_api = make_run(agent, narrow, r)
    assert recalled(replier_api, "memoryword") == ["memoryword about the plan"]
    join(narrow, b)  # B does not read the memory's source
    response = replier_api.post(
        f"/api/v1/runs/{replier.id}/reply", {"content": "replyword"}, format="json"
    )
    assert response.status_code == 409, response.content
    assert response.json()["error"]["details"] == {"blocked": 1, "reasons": {"lineage": 1}}
    replier.refresh_from_db()
    assert replier.finished_at is None
    assert not Message.objects.filter(conversation=narrow, sender_agent=agent).exists()


def test_a_memory_follows_its_sources_at_search_time(scene):
    """The check runs when memories are searched: a reader added later hides a memory that
    was visible before, and a memory is found from a direct room only through a live link."""
    workspace, agent, r, b, secret, _, narrow = scene
    origin = post(secret, r, "secretword plan", created_at=at(1))
    writer, writer_api = make_run(agent, narrow, r)
    assert hit_ids(writer, "secretword") == [origin.id]
    remembered(writer_api, writer, "memoryword about the plan")

    _, before_api = make_run(agent, narrow, r)
    assert recalled(before_api, "memoryword") == ["memoryword about the plan"]
    join(narrow, b)
    _, after_api = make_run(agent, narrow, r)
    assert recalled(after_api, "memoryword") == []
    # A direct room with R: R reads the source, so it qualifies (private rule: subset).
    direct = room(workspace, "direct", agent, r)
    _, direct_api = make_run(agent, direct, r)
    assert recalled(direct_api, "memoryword") == ["memoryword about the plan"]
    # B's direct room: B does not read the source.
    b_direct = room(workspace, "direct", agent, b)
    _, b_api = make_run(agent, b_direct, b)
    assert recalled(b_api, "memoryword") == []


def test_a_memory_of_an_unknown_audience_is_never_recalled(scene):
    workspace, agent, r, _, _, public, narrow = scene
    unknown = room(workspace, "unknown", agent, r)
    post(unknown, r, "sample unknown", created_at=at(1))
    writer, writer_api = make_run(agent, narrow, r)
    listed = writer_api.get("/api/v1/messages", {"conversationId": str(unknown.id)})
    assert listed.status_code == 200
    remembered(writer_api, writer, "memoryword from an unknown room")
    for destination in (public, narrow, unknown):
        _, api = make_run(agent, destination, r)
        assert recalled(api, "memoryword") == []


# --- what the run was shown without a tool ------------------------------------------------------


def test_a_memory_of_the_current_message_in_a_private_room_is_withheld_from_a_public_one(scene):
    """The run's prompt (its current message and recent history) is part of what the run has
    seen: a memory drawn from it is as restricted as the private room it came from."""
    _, agent, r, _, secret, public, _ = scene
    question = post(secret, r, "please remember the secret code", created_at=at(1))
    writer, writer_api = make_run(agent, secret, r, current=question)
    remembered(writer_api, writer, "memoryword the secret code")
    _, public_api = make_run(agent, public, r)
    assert recalled(public_api, "memoryword") == []


def test_a_memory_of_recent_history_in_a_private_room_is_withheld_from_a_public_one(scene):
    """As above, for the recent history the runtime loaded into the prompt."""
    _, agent, r, _, secret, public, _ = scene
    earlier = post(secret, r, "the secret code is synthetic", created_at=at(1))
    question = post(secret, r, "please remember it", created_at=at(2))
    writer, writer_api = make_run(agent, secret, r, current=question, recent=(earlier,))
    remembered(writer_api, writer, "memoryword the secret code")
    _, public_api = make_run(agent, public, r)
    assert recalled(public_api, "memoryword") == []


def test_a_memory_written_in_a_private_room_stays_there_without_any_lineage(scene):
    """A run is given its destination's context even when the runtime names no prompt ids,
    so a memory is never more visible than the room of the run that wrote it."""
    workspace, agent, r, b, secret, public, narrow = scene
    writer, writer_api = make_run(agent, secret, r)
    assert remembered(writer_api, writer, "memoryword the acquisition")["lineageCount"] == 0
    _, public_api = make_run(agent, public, r)
    assert recalled(public_api, "memoryword") == []
    # Another private room R alone reads (with the agent) permits it; one B joined does not.
    _, narrow_api = make_run(agent, narrow, r)
    assert recalled(narrow_api, "memoryword") == ["memoryword the acquisition"]
    b_direct = room(workspace, "direct", agent, b)
    _, b_api = make_run(agent, b_direct, b)
    assert recalled(b_api, "memoryword") == []


def test_a_memory_of_a_deleted_message_is_no_longer_recalled(scene):
    """Deletion is final: a memory drawn from a message deleted since is withheld, and a run
    that recalled it before the deletion cannot deliver a reply carrying it."""
    _, agent, r, _, _, public, _ = scene
    said = post(public, r, "pinword the door code", created_at=at(1))
    writer, writer_api = make_run(agent, public, r)
    assert hit_ids(writer, "pinword") == [said.id]
    remembered(writer_api, writer, "memoryword door code")
    replier, replier_api = make_run(agent, public, r)
    assert recalled(replier_api, "memoryword") == ["memoryword door code"]

    deleted = service_client(said.workspace).delete(f"/api/v1/messages/{said.id}")
    assert deleted.status_code == 204
    _, later_api = make_run(agent, public, r)
    assert recalled(later_api, "memoryword") == []
    response = replier_api.post(
        f"/api/v1/runs/{replier.id}/reply", {"content": "replyword"}, format="json"
    )
    assert response.status_code == 409, response.content
    assert response.json()["error"]["details"] == {"blocked": 1, "reasons": {"deleted": 1}}


# --- chains of memories: the restriction a memory carries travels with what is built on it -------


@pytest.fixture
def linked_scene():
    """D1 a private room {R, X, A}; D2 the direct room (R, A); D3 the direct room (R2, A), with R
    and R2 joined by a verified identity link (the issue's reproduction)."""
    workspace = make_workspace()
    agent = make_agent(workspace)
    r, r2 = make_account(workspace, "Requester Example"), make_account(workspace, "Second Self")
    x = make_account(workspace, "Xavier Example")
    d1 = room(workspace, "private", agent, r, x)
    d2 = room(workspace, "direct", agent, r)
    d3 = room(workspace, "direct", agent, r2)
    link = services.identity_link_create(
        workspace_id=workspace.id, account_id=r.id, linked_account_id=r2.id
    )
    services.identity_link_verify(link=link)
    return agent, r, r2, d1, d2, d3


def test_a_memory_of_a_recalled_memory_keeps_the_first_ones_room(linked_scene):
    agent, r, r2, d1, d2, d3 = linked_scene
    writer, writer_api = make_run(agent, d1, r)
    assert remembered(writer_api, writer, "firstword the plan")["lineageCount"] == 0
    _, d3_api = make_run(agent, d3, r2)
    assert recalled(d3_api, "firstword") == []

    second_writer, second_api = make_run(agent, d2, r)
    assert recalled(second_api, "firstword") == ["firstword the plan"]
    assert remembered(second_api, second_writer, "secondword")["lineageCount"] == 0
    # D2 itself may see the second memory; D3 may see D2's room (a live link) but not D1's.
    _, d2_api = make_run(agent, d2, r)
    assert recalled(d2_api, "secondword") == ["secondword"]
    _, d3_api = make_run(agent, d3, r2)
    assert recalled(d3_api, "secondword") == []
    assert set(
        MemoryRoom.objects.filter(memory__content="secondword").values_list(
            "conversation_id", flat=True
        )
    ) == {d1.id, d2.id}


def test_a_chain_of_memories_keeps_the_first_room_however_long(linked_scene):
    agent, r, r2, d1, d2, _ = linked_scene
    writer, writer_api = make_run(agent, d1, r)
    remembered(writer_api, writer, "chainword 0")
    for step in range(1, 4):
        link_writer, link_api = make_run(agent, d2, r)
        assert recalled(link_api, f"chainword {step - 1}") != []
        remembered(link_api, link_writer, f"chainword {step}")
    third = AgentMemory.objects.get(content="chainword 3")
    assert set(third.rooms.values_list("conversation_id", flat=True)) == {d1.id, d2.id}
    public = room(d1.workspace, "public", agent, r, r2)
    _, public_api = make_run(agent, public, r)
    assert recalled(public_api, "chainword") == []


def test_a_reply_built_on_a_recalled_memory_keeps_its_room(linked_scene):
    agent, r, r2, d1, d2, d3 = linked_scene
    writer, writer_api = make_run(agent, d1, r)
    remembered(writer_api, writer, "memoryword the plan")

    replier, replier_api = make_run(agent, d2, r)
    assert recalled(replier_api, "memoryword") == ["memoryword the plan"]
    answer = replier_api.post(
        f"/api/v1/runs/{replier.id}/reply", {"content": "replyword summary"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    reply_id = uuid.UUID(answer.json()["id"])
    assert set(
        MessageLineageRoom.objects.filter(message_id=reply_id).values_list(
            "conversation_id", flat=True
        )
    ) == {d1.id}

    d3_run, _ = make_run(agent, d3, r2)
    assert hit_ids(d3_run, "replyword") == []
    # Its own room still receives it.
    assert hit_ids(make_run(agent, d2, r)[0], "replyword") == [reply_id]
    # A later reply that was shown this reply inherits D1 as well, through its lineage.
    reader, reader_api = make_run(agent, d2, r)
    assert hit_ids(reader, "replyword") == [reply_id]
    second = reader_api.post(
        f"/api/v1/runs/{reader.id}/reply", {"content": "echoword"}, format="json"
    )
    assert second.status_code == 201, second.content
    assert hit_ids(make_run(agent, d3, r2)[0], "echoword") == []
    # And a memory written after reading the reply does too.
    memo_writer, memo_api = make_run(agent, d2, r)
    assert hit_ids(memo_writer, "replyword") == [reply_id]
    remembered(memo_api, memo_writer, "laterword")
    assert recalled(make_run(agent, d3, r2)[1], "laterword") == []


def test_a_recalled_memory_without_sources_blocks_a_reply_its_room_does_not_permit(linked_scene):
    """The delivery check holds the recalled memory's room against the destination as it is at
    delivery: once a second person reads D2, D1's memory may not go there."""
    agent, r, _, d1, d2, _ = linked_scene
    writer, writer_api = make_run(agent, d1, r)
    remembered(writer_api, writer, "memoryword the plan")
    replier, replier_api = make_run(agent, d2, r)
    assert recalled(replier_api, "memoryword") == ["memoryword the plan"]
    join(d2, make_account(d1.workspace, "Newcomer Example"))
    response = replier_api.post(
        f"/api/v1/runs/{replier.id}/reply", {"content": "replyword"}, format="json"
    )
    assert response.status_code == 409, response.content
    assert response.json()["error"]["details"] == {"blocked": 1, "reasons": {"lineage": 1}}
