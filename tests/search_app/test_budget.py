"""The per-run evidence budget of search_history (SPEC §6): at most 400 distinct messages.

Hits and neighbours both count; a message returned twice counts once; messages the run already
holds as evidence from another tool are free; a search that would cross the ceiling keeps its
hits before its neighbours; once nothing is left the endpoint answers
``search_budget_exhausted`` (429). The count must hold under concurrent searches on one run.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from messages_app import services
from messages_app.models import Message, RunEvidence
from messages_app.services import MessageDraft
from search_app.errors import SearchBudgetExhausted
from search_app.runs.services import run_create
from tests import factories
from tests.factories import at

URL = "/api/v1/history/search"
LIMIT = 400
WORDS = [f"w{i}" for i in range(30)]
SEARCH_TOOL = "search_history"
EXHAUSTED = {"used": LIMIT, "limit": LIMIT, "remaining": 0}


def make_corpus(size: int = 600):
    """A public room the agent observed, message ``i`` tagged with word ``w{i % 30}``.

    Hits of one word are 30 seqs apart, so each search brings ~20 hits and ~80 neighbours.
    """
    _, agent, alice, room = factories.observed_public_room()
    drafts = [
        MessageDraft(
            content=f"synthetic note {WORDS[i % len(WORDS)]} entry",
            sender_account_id=alice.id,
            created_at=at(i / 10),
        )
        for i in range(size)
    ]
    services.messages_create(conversation=room, drafts=drafts)
    return agent, alice, room


def make_needles(needles: int = 7):
    """A public room with ``needles`` "needle" messages, each between four plain ones of its
    own (so every hit has exactly two neighbours each side, shared with no other hit), and a
    second public room of 400 filler messages to pre-fill a run's evidence with."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    room = factories.make_conversation(workspace, "public", "general")
    archive = factories.make_conversation(workspace, "public", "archive")
    for conversation in (room, archive):
        factories.join(conversation, agent, joined_at=at(-600))
        factories.join(conversation, alice, joined_at=at(-600))
    size = 6 * needles + 1
    services.messages_create(
        conversation=room,
        drafts=[
            MessageDraft(
                content="needle found here" if i % 6 == 3 else "plain chatter",
                sender_account_id=alice.id,
                created_at=at(i),
            )
            for i in range(size)
        ],
    )
    fillers = services.messages_create(
        conversation=archive,
        drafts=[
            MessageDraft(content="filler words", sender_account_id=alice.id, created_at=at(-1))
            for _ in range(400)
        ],
    )
    return agent, alice, room, fillers


def pre_spend(run, messages, tool: str = SEARCH_TOOL) -> None:
    """Record messages as the run's evidence, as an earlier tool call would have."""
    RunEvidence.objects.bulk_create(
        RunEvidence(workspace_id=run.workspace_id, run=run, message=message, tool=tool)
        for message in messages
    )


def service_ids(result) -> set[uuid.UUID]:
    """Every message id a service result returns: hits and their neighbours."""
    ids = set()
    for hit in result.hits:
        ids.add(hit.message.id)
        ids.update(m.id for m in (*hit.before, *hit.after))
    return ids


def body_ids(body) -> set[uuid.UUID]:
    """Every message id an HTTP answer returns: hits and their neighbours."""
    ids = set()
    for item in body["items"]:
        ids.add(uuid.UUID(item["id"]))
        ids.update(uuid.UUID(m["id"]) for m in (*item["before"], *item["after"]))
    return ids


def evidence(run, tool: str | None = None) -> set[uuid.UUID]:
    rows = RunEvidence.objects.filter(run=run)
    if tool is not None:
        rows = rows.filter(tool=tool)
    return set(rows.values_list("message_id", flat=True))


def assert_exhausted(response) -> None:
    assert response.status_code == 429, response.content
    assert_exhausted_body(response.json())


def assert_exhausted_body(body) -> None:
    """The error envelope of SPEC §5, with the spent budget in its details."""
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "search_budget_exhausted"
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert body["error"]["details"] == {"budget": EXHAUSTED}


@pytest.mark.django_db
def test_a_run_never_gets_more_than_400_distinct_messages():
    """Searching word after word fills the budget to exactly 400, then answers 429."""
    agent, alice, room = make_corpus()
    run, client = factories.make_run(agent, room, alice)

    returned: set[uuid.UUID] = set()
    used_so_far = []
    # w0, w5, w10, ... first: their hits and neighbours do not overlap, so each search brings
    # ~100 new messages and the fifth one crosses the ceiling (and is trimmed).
    for word in sorted(WORDS, key=lambda word: (int(word[1:]) % 5, int(word[1:]))):
        response = client.post(URL, {"query": word, "limit": 20}, format="json")
        if response.status_code == 429:
            break
        assert response.status_code == 200, response.content
        body = response.json()
        returned |= body_ids(body)
        budget = body["budget"]
        # Distinct messages count once, whether they came back as a hit or as a neighbour.
        assert budget["used"] == len(returned)
        assert budget == {"used": len(returned), "limit": LIMIT, "remaining": LIMIT - len(returned)}
        used_so_far.append(budget["used"])
    else:
        pytest.fail("the budget was never exhausted")

    assert_exhausted(response)
    assert len(used_so_far) >= 4  # several searches shared the budget
    assert used_so_far == sorted(used_so_far)
    assert used_so_far[-1] == LIMIT
    assert RunEvidence.objects.filter(run=run).count() == LIMIT
    assert evidence(run) == returned
    assert evidence(run, SEARCH_TOOL) == returned
    # Still exhausted, whatever the query.
    assert_exhausted(client.post(URL, {"query": "synthetic"}, format="json"))
    assert RunEvidence.objects.filter(run=run).count() == LIMIT


@pytest.mark.django_db
def test_a_message_returned_twice_counts_once():
    """The same search twice returns the same messages and spends nothing the second time."""
    agent, alice, room = make_corpus(120)
    run, _ = factories.make_run(agent, room, alice)

    first = factories.history(run, "w3")
    second = factories.history(run, "w3")

    assert first.hits
    assert first.budget.used == len(service_ids(first))
    assert second.budget.used == first.budget.used
    assert service_ids(second) == service_ids(first)
    assert second.trimmed == 0
    assert evidence(run) == service_ids(first)

    # An overlapping search pays only for what it adds: w4's hits were w3's neighbours.
    third = factories.history(run, "w4")
    assert third.budget.used == len(service_ids(first) | service_ids(third))
    assert third.budget.used < first.budget.used + len(service_ids(third))


@pytest.mark.django_db
def test_a_search_crossing_the_ceiling_keeps_its_best_hits_and_drops_neighbours():
    """With 5 left, a search with 7 hits returns its 5 best hits and no neighbours."""
    agent, alice, room, fillers = make_needles()
    reference_run, _ = factories.make_run(agent, room, alice)
    full = factories.history(reference_run, "needle")
    assert len(full.hits) == 7
    assert all(len(hit.before) == 2 and len(hit.after) == 2 for hit in full.hits)

    run, client = factories.make_run(agent, room, alice)
    pre_spend(run, fillers[:395])

    result = factories.history(run, "needle")

    assert [hit.message.id for hit in result.hits] == [hit.message.id for hit in full.hits[:5]]
    assert all(hit.before == [] and hit.after == [] for hit in result.hits)
    assert result.budget.used == LIMIT
    assert result.budget.remaining == 0
    assert result.trimmed == 2 + 5 * 4  # two hits, and the four neighbours of each kept hit
    assert evidence(run) - {m.id for m in fillers[:395]} == service_ids(result)
    assert RunEvidence.objects.filter(run=run).count() == LIMIT

    with pytest.raises(SearchBudgetExhausted) as exhausted:
        factories.history(run, "plain")
    assert exhausted.value.details == {"budget": EXHAUSTED}
    assert_exhausted(client.post(URL, {"query": "needle"}, format="json"))
    assert RunEvidence.objects.filter(run=run).count() == LIMIT


@pytest.mark.django_db
def test_neighbours_fill_only_what_is_left_after_every_hit():
    """With 10 left and 7 hits, all hits come back and only 3 neighbours, never more."""
    agent, alice, room, fillers = make_needles()
    reference_run, _ = factories.make_run(agent, room, alice)
    full = factories.history(reference_run, "needle")
    full_neighbours = {
        hit.message.id: {m.id for m in (*hit.before, *hit.after)} for hit in full.hits
    }

    run, _ = factories.make_run(agent, room, alice)
    pre_spend(run, fillers[:390])
    result = factories.history(run, "needle")

    assert [hit.message.id for hit in result.hits] == [hit.message.id for hit in full.hits]
    kept_neighbours = []
    for hit in result.hits:
        mine = [m.id for m in (*hit.before, *hit.after)]
        assert set(mine) <= full_neighbours[hit.message.id]
        assert [m.seq for m in hit.before] == sorted(m.seq for m in hit.before)
        assert [m.seq for m in hit.after] == sorted(m.seq for m in hit.after)
        kept_neighbours += mine
    assert len(kept_neighbours) == 3
    assert result.budget.used == LIMIT
    assert result.budget.remaining == 0
    assert RunEvidence.objects.filter(run=run).count() == LIMIT


@pytest.mark.django_db
def test_messages_already_in_the_evidence_are_free():
    """Messages another tool already returned come back without spending the budget."""
    agent, alice, room, _ = make_needles()
    run, _ = factories.make_run(agent, room, alice)
    needles = list(Message.objects.filter(conversation=room, content__startswith="needle"))
    assert len(needles) == 7
    pre_spend(run, needles, tool="list_messages")

    result = factories.history(run, "needle")

    assert {hit.message.id for hit in result.hits} == {m.id for m in needles}
    assert result.budget.used == 7 * 4  # only the neighbours were new
    assert evidence(run, SEARCH_TOOL) == service_ids(result) - {m.id for m in needles}
    # The earlier tool stays recorded as the one that first returned them.
    assert evidence(run, "list_messages") == {m.id for m in needles}


@pytest.mark.django_db
def test_free_messages_are_returned_even_when_the_budget_is_nearly_gone():
    """With 5 left, 7 hits already in the evidence all come back, plus 5 new neighbours."""
    agent, alice, room, fillers = make_needles()
    run, _ = factories.make_run(agent, room, alice)
    needles = list(Message.objects.filter(conversation=room, content__startswith="needle"))
    pre_spend(run, needles, tool="list_messages")
    pre_spend(run, fillers[:395])

    result = factories.history(run, "needle")

    assert len(result.hits) == 7
    assert sum(len(hit.before) + len(hit.after) for hit in result.hits) == 5
    assert result.budget.used == LIMIT
    assert len(evidence(run, SEARCH_TOOL)) == LIMIT
    assert RunEvidence.objects.filter(run=run).count() == LIMIT + 7
    with pytest.raises(SearchBudgetExhausted):
        factories.history(run, "needle")


THREADS = 8


@pytest.mark.django_db(transaction=True)
def test_concurrent_searches_on_one_run_never_pass_the_budget():
    """Eight searches at once on one run, each looping until 429: exactly 400 messages in all,
    every one of them recorded, and no answer but 200 or 429 (SPEC §6: correct under
    concurrent searches)."""
    agent, alice, room = make_corpus()
    run, raw_token = run_create(
        workspace_id=agent.workspace_id,
        agent_id=agent.id,
        conversation_id=room.id,
        requester_id=alice.id,
    )
    lock = threading.Lock()
    answers: list[tuple[int, int, dict]] = []

    def search_until_refused(index: int) -> None:
        client = factories.bearer_client(raw_token)
        # Each thread starts at a different word, so they compete for different messages.
        for step in range(len(WORDS)):
            word = WORDS[(index * 4 + step) % len(WORDS)]
            response = client.post(URL, {"query": word, "limit": 20}, format="json")
            with lock:
                answers.append((index, response.status_code, response.json()))
            if response.status_code != 200:
                break

    errors = factories.run_in_threads(THREADS, search_until_refused)
    assert errors == []

    statuses = {status for _, status, _ in answers}
    assert statuses <= {200, 429}, [body for _, status, body in answers if status not in (200, 429)]
    for index in range(THREADS):
        mine = [(status, body) for i, status, body in answers if i == index]
        assert mine[-1][0] == 429  # every thread ran until the budget was gone
        assert_exhausted_body(mine[-1][1])

    successes = [body for _, status, body in answers if status == 200]
    assert successes
    assert all(body["budget"]["used"] <= LIMIT for body in successes)
    assert all(body["budget"]["remaining"] == LIMIT - body["budget"]["used"] for body in successes)
    assert max(body["budget"]["used"] for body in successes) == LIMIT

    returned = set().union(*(body_ids(body) for body in successes))
    assert RunEvidence.objects.filter(run=run).count() == LIMIT
    assert evidence(run) == returned
    assert len(returned) == LIMIT
