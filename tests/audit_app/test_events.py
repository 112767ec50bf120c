"""One ``conversation_search_events`` row per search_history call (SPEC §7).

What a row holds: who searched for which audience (run, agent, workspace, destination,
requester), the query only as a keyed digest, the filters, the selected message ids, the ranking
components of every hit, and how many matches were withheld, by the first rule of SPEC §3 each
one fails. Searches refused before anything was searched (no searchable word, a finished run)
write nothing; a search refused because the run's budget is spent is still recorded.

Rooms are joined long before ``T0`` and messages are dated around it, so every rule is decided
by the dates the test chose. All text is synthetic.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from audit_app.models import ConversationSearchEvent
from messages_app import services
from messages_app.models import Account, Agent, Conversation, Message, Run
from messages_app.services import MessageDraft
from search_app.errors import SearchBudgetExhausted
from search_app.history import candidates
from search_app.models import SEARCH_CONFIG
from search_app.serializers import search_history_body
from tests import factories
from tests.audit_app.helpers import (
    NO_EXCLUSIONS,
    assert_error,
    delete_without_triggers,
    events,
    evidence_ids,
    keyed_digest,
    newest_key,
    pre_spend,
    search,
)
from tests.factories import at

pytestmark = pytest.mark.django_db

RANKING_NAMES = {
    "text",
    "actor",
    "conversation",
    "participation",
    "recency",
    "speaker",
    "context",
}


# --- a room with adjacent hits ------------------------------------------------------------


@dataclass
class Room:
    agent: Agent
    alice: Account
    room: Conversation
    messages: list[Message]


ROOM_TEXTS = [
    "plain opening words",
    "orbit alpha report",
    "orbit beta report",
    "plain middle words",
    "plain later words",
    "orbit gamma report",
    "plain closing words",
]


@pytest.fixture
def room() -> Room:
    """A public room the agent observed: three "orbit" hits, two of them side by side."""
    _, agent, alice, conversation = factories.observed_public_room()
    messages = [
        factories.post(conversation, alice, text, created_at=at(i))
        for i, text in enumerate(ROOM_TEXTS)
    ]
    return Room(agent=agent, alice=alice, room=conversation, messages=messages)


def test_every_search_writes_one_event_with_the_run_context(room):
    run, client = factories.make_run(room.agent, room.room, room.alice)

    response = search(client, {"query": "Orbit"})

    assert response.status_code == 200, response.content
    (event,) = events(run)
    assert event.run_id == run.id
    assert event.workspace_id == room.room.workspace_id
    assert event.agent_id == room.agent.id
    assert event.destination_id == room.room.id
    assert event.requester_id == room.alice.id
    assert event.outcome == "answered"
    assert event.result_count == len(response.json()["items"]) == 3
    assert event.budget_used == response.json()["budget"]["used"]
    assert timezone.now() - timedelta(minutes=1) < event.created_at <= timezone.now()

    # A second call is a second row; nothing else writes one.
    assert search(client, {"query": "report"}).status_code == 200
    assert events(run).count() == 2
    assert ConversationSearchEvent.objects.count() == 2


def test_the_digest_is_the_hmac_of_the_normalised_text_under_the_newest_key(room):
    key_id, secret = newest_key()
    assert key_id == "test2"  # formation/settings_test.py: test2 is the newest key
    run, client = factories.make_run(room.agent, room.room, room.alice)

    assert search(client, {"query": "Sample  PLAN orbit"}).status_code == 200
    (event,) = events(run)

    assert event.key_id == "test2"
    expected = keyed_digest("sample plan orbit", secret)
    assert event.query_digest == expected
    assert len(event.query_digest) == 64
    # Not a plain hash, and not under the older key.
    assert event.query_digest != hashlib.sha256(b"sample plan orbit").hexdigest()
    assert event.query_digest != keyed_digest("sample plan orbit", "test-only-audit-key-one")


def test_normalisation_makes_spacing_case_and_compatibility_forms_the_same_search(room, settings):
    settings.SEARCH_AUDIT_KEYS = [
        ("k-new", "synthetic-audit-secret-new-000"),
        ("k-old", "synthetic-audit-secret-old-000"),
    ]
    run, _ = factories.make_run(room.agent, room.room, room.alice)
    fullwidth = (
        "\uff33\uff41\uff4d\uff50\uff4c\uff45 \uff30\uff2c\uff21\uff2e"  # NFKC: "Sample PLAN"
    )
    spellings = ["Sample  PLAN", "sample plan", "\tSAMPLE plan \n", fullwidth]

    for text in spellings:
        factories.history(run, text)
    factories.history(run, "sample plans")

    rows = list(events(run))
    assert [row.key_id for row in rows] == ["k-new"] * 5
    same = {row.query_digest for row in rows[:4]}
    assert same == {keyed_digest("sample plan", "synthetic-audit-secret-new-000")}
    assert rows[4].query_digest == keyed_digest("sample plans", "synthetic-audit-secret-new-000")
    assert rows[4].query_digest not in same


def test_the_filters_are_recorded_in_rfc3339(room):
    run, client = factories.make_run(room.agent, room.room, room.alice)

    body = {
        "query": "orbit",
        "speaker": "requester",
        "after": "2026-01-01T00:00:00Z",
        "before": "2026-01-02T05:00:00+01:00",
        "limit": 5,
    }
    assert search(client, body).status_code == 200
    assert search(client, {"query": "orbit", "speaker": "you"}).status_code == 200

    first, second = events(run)
    assert first.filters == {
        "speaker": "requester",
        "after": "2026-01-01T00:00:00Z",
        "before": "2026-01-02T04:00:00Z",
        "limit": 5,
    }
    # Defaults are recorded as used: speaker anyone, no bounds, the default limit of 8.
    assert second.filters == {"speaker": "you", "after": None, "before": None, "limit": 8}


def test_selected_ids_are_the_hits_best_first_and_distinct_neighbours(room):
    run, client = factories.make_run(room.agent, room.room, room.alice)
    m = room.messages

    response = search(client, {"query": "orbit"})

    items = response.json()["items"]
    (event,) = events(run)
    hits = [uuid.UUID(item["id"]) for item in items]
    # Equal text and signals but context (docs/search.md): m2 takes m1's wording from just
    # before it (weight 0.5 of 1.1), m1 takes m2's from just after it (0.25 of 0.85), and m5,
    # among non-matches, none.
    assert hits == [m[2].id, m[1].id, m[5].id]
    assert event.hit_ids == hits
    expected_neighbours = []
    for item in items:
        for neighbour in (*item["before"], *item["after"]):
            neighbour_id = uuid.UUID(neighbour["id"])
            if neighbour_id not in hits and neighbour_id not in expected_neighbours:
                expected_neighbours.append(neighbour_id)
    assert event.neighbour_ids == expected_neighbours
    # m1 and m2 are each other's neighbours, but they are listed only as hits.
    assert set(event.neighbour_ids) == {m[0].id, m[3].id, m[4].id, m[6].id}
    assert len(event.neighbour_ids) == len(set(event.neighbour_ids))
    assert set(event.hit_ids) | set(event.neighbour_ids) == evidence_ids(run)
    assert event.budget_used == 7


def test_rankings_are_the_answers_reasons(room):
    factories.post(room.room, room.agent, "orbit report from the agent itself", at(8))
    run, client = factories.make_run(room.agent, room.room, room.alice)

    items = search(client, {"query": "orbit alpha report"}).json()["items"]

    (event,) = events(run)
    assert [ranking["messageId"] for ranking in event.rankings] == [item["id"] for item in items]
    for ranking, item in zip(event.rankings, items, strict=True):
        assert set(ranking) == {"messageId", "score", "components"}
        assert ranking["components"] == {r["name"]: r["contribution"] for r in item["reasons"]}
        assert set(ranking["components"]) == RANKING_NAMES
        assert ranking["score"] == item["score"]
        assert round(sum(ranking["components"].values()), 6) == ranking["score"]


def multi_term_corpus() -> tuple[Run, Account]:
    """200 messages with two of four words each, at varied gaps and dates, so text coverage,
    closeness and recency all take many different fractional values."""
    _, agent, alice, room = factories.observed_public_room()
    bob = factories.make_account(room.workspace, "Bob Example")
    factories.join(room, bob, joined_at=at(-600))
    words = ["orbit", "lunar", "comet", "nebula"]
    drafts = [
        MessageDraft(
            content=(
                words[i % 4]
                + " filler" * (i % 7)
                + " "
                + words[(i // 4) % 4]
                + " zz" * (i % 3)
                + (" nebula" if i % 11 == 0 else "")
            ),
            sender_account_id=(alice if i % 2 else bob).id,
            created_at=at(i * 37.3),
        )
        for i in range(200)
    ]
    services.messages_create(conversation=room, drafts=drafts)
    run, _ = factories.make_run(agent, room, alice)
    return run, alice


def test_rankings_add_up_to_the_score_the_answer_shows():
    """Rounded components must add up to the rounded score, exactly as the wire shows them.

    With a fixed clock the hits are deterministic; many of them have a text and a recency
    contribution whose rounding errors add up across the sixth decimal.
    """
    run, _ = multi_term_corpus()
    now = at(200 * 37.3 + 90)

    result = factories.history(run, "nebula comet lunar orbit", limit=20, now=now)
    body = search_history_body(result)

    (event,) = events(run)
    assert len(event.rankings) == len(body["items"]) == 20
    for ranking, item in zip(event.rankings, body["items"], strict=True):
        assert ranking["messageId"] == item["id"]
        assert ranking["components"] == {r["name"]: r["contribution"] for r in item["reasons"]}
        assert ranking["score"] == item["score"], ranking
        assert round(sum(ranking["components"].values()), 6) == ranking["score"]


def test_a_search_with_no_match_is_still_recorded(room):
    run, client = factories.make_run(room.agent, room.room, room.alice)

    response = search(client, {"query": "xylophone"})

    assert response.status_code == 200
    assert response.json()["items"] == []
    (event,) = events(run)
    assert event.outcome == "answered"
    assert (event.hit_ids, event.neighbour_ids, event.rankings) == ([], [], [])
    assert event.result_count == 0
    assert event.budget_used == 0
    assert event.exclusions == NO_EXCLUSIONS
    assert event.exclusions_capped is False


# --- a match for every reason -------------------------------------------------------------


@dataclass
class ExclusionWorld:
    agent: Agent
    alice: Account
    destination: Conversation
    current: Message
    recent: Message
    best: Message
    runner_up: Message


EVERY_REASON = {
    "not_observed": 3,
    "deleted": 1,
    "unknown_audience": 1,
    "audience": 1,
    "lineage": 1,
    "current_message": 1,
    "recent_history": 1,
}
# Every message of the workspace whose search document matches "orbit": the two eligible hits
# and one for each withheld case above.
ORBIT_MATCHES = 2 + sum(EVERY_REASON.values())


@pytest.fixture
def exclusion_world() -> ExclusionWorld:
    """Destination: a private room read by Alice (the requester) and Bob. One message matching
    "orbit" fails each rule of SPEC §3; two are eligible, each alone in its room (so no hit has
    eligible neighbours), and the one in a room Alice belongs to ranks first."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    bob = factories.make_account(workspace, "Bob Example")
    carol = factories.make_account(workspace, "Carol Example")
    long_ago = at(-600)

    def room(kind: str, title: str, *members, joined_at=long_ago) -> Conversation:
        conversation = factories.make_conversation(workspace, kind, title)
        for member in members:
            factories.join(conversation, member, joined_at=joined_at)
        return conversation

    destination = room("private", "destination", agent, alice, bob)
    near = room("public", "near", agent, alice)
    far = room("public", "far", agent)
    best = factories.post(near, bob, "orbit report", at(5))
    runner_up = factories.post(far, bob, "orbit report", at(5))

    # not_observed: before the agent joined, after it left, and a room it never joined.
    late = room("public", "late", agent, joined_at=at(100))
    factories.post(late, bob, "orbit before the agent came", at(1))
    left = room("public", "left", agent)
    services.membership_leave(conversation=left, agent_id=agent.id, left_at=at(30))
    factories.post(left, bob, "orbit after the agent went", at(60))
    never = room("public", "never", bob)
    factories.post(never, bob, "orbit out of sight", at(1))

    # deleted: a projection that drifted (its search document outlived the message).
    delete_without_triggers(factories.post(near, bob, "orbit soon erased", at(2)))

    # unknown_audience, and audience: Carol alone reads "secret", not Alice and Bob.
    unknown = room("unknown", "imported", agent, bob)
    factories.post(unknown, bob, "orbit imported long ago", at(3))
    secret = room("private", "secret", agent, carol)
    factories.post(secret, carol, "orbit confidential", at(3))
    source = factories.post(secret, carol, "quiet source words", at(3.5))

    # lineage: the agent's public summary of the secret source.
    factories.post(near, agent, "orbit summary", at(4), lineage=[source.id])

    # current_message and recent_history: already in the prompt.
    recent = factories.post(destination, bob, "orbit earlier remark", at(5.5))
    current = factories.post(destination, alice, "orbit question", at(6))

    # Another tenant's match is never even counted.
    _, stranger, elsewhere, _ = factories.other_workspace()
    factories.post(elsewhere, stranger, "orbit elsewhere", at(3))

    return ExclusionWorld(
        agent=agent,
        alice=alice,
        destination=destination,
        current=current,
        recent=recent,
        best=best,
        runner_up=runner_up,
    )


def fillers(w: ExclusionWorld, count: int) -> list[Message]:
    """Plain messages in a room of their own, to pre-spend a run's budget with."""
    archive = factories.make_conversation(w.destination.workspace, "public", "archive")
    return services.messages_create(
        conversation=archive,
        drafts=[
            MessageDraft(content="filler words", sender_account_id=w.alice.id, created_at=at(-1))
            for _ in range(count)
        ],
    )


def orbit_document_count(workspace_id) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM message_search_documents "
            "WHERE workspace_id = %s AND document @@ to_tsquery(%s::regconfig, 'orbit')",
            [workspace_id, SEARCH_CONFIG],
        )
        return cursor.fetchone()[0]


def exclusion_run(w: ExclusionWorld):
    return factories.make_run(
        w.agent, w.destination, w.alice, current=w.current, recent=(w.recent,)
    )


def test_exclusions_count_a_match_for_every_reason(exclusion_world):
    w = exclusion_world
    assert orbit_document_count(w.destination.workspace_id) == ORBIT_MATCHES
    run, client = exclusion_run(w)
    pre_spend(run, fillers(w, 399))

    response = search(client, {"query": "orbit"})

    assert response.status_code == 200, response.content
    body = response.json()
    assert [item["id"] for item in body["items"]] == [str(w.best.id)]
    assert body["budget"]["used"] == 400
    (event,) = events(run)
    assert event.exclusions == {**EVERY_REASON, "budget": 1}
    assert event.exclusions_capped is False
    assert event.hit_ids == [w.best.id]
    assert event.neighbour_ids == []
    assert event.result_count == 1
    assert event.budget_used == 400
    assert event.outcome == "answered"


def test_without_budget_pressure_nothing_is_withheld_for_the_budget(exclusion_world):
    w = exclusion_world
    run, client = exclusion_run(w)

    body = search(client, {"query": "orbit"}).json()

    assert [item["id"] for item in body["items"]] == [str(w.best.id), str(w.runner_up.id)]
    (event,) = events(run)
    assert event.exclusions == {**EVERY_REASON, "budget": 0}
    assert event.result_count == 2
    assert event.budget_used == 2


def test_exclusions_respect_the_callers_filters(exclusion_world):
    """Only matches inside the caller's filters are classified: "you" keeps the agent's own."""
    w = exclusion_world
    run, _ = exclusion_run(w)

    factories.history(run, "orbit", speaker="you")
    factories.history(run, "orbit", after=at(5.2))

    by_agent, recent_only = events(run)
    assert by_agent.exclusions == {**NO_EXCLUSIONS, "lineage": 1}
    assert recent_only.exclusions == {
        **NO_EXCLUSIONS,
        "not_observed": 1,  # the message after the agent left
        "current_message": 1,
        "recent_history": 1,
    }


def test_a_capped_scan_says_so(exclusion_world, monkeypatch):
    w = exclusion_world
    run, _ = exclusion_run(w)
    monkeypatch.setattr(candidates, "EXCLUSION_SCAN", 4)

    factories.history(run, "orbit")

    (event,) = events(run)
    assert event.exclusions_capped is True
    classified = sum(event.exclusions.values())
    assert 0 < classified <= 4
    assert set(event.exclusions) == set(NO_EXCLUSIONS)
    assert all(event.exclusions[reason] <= EVERY_REASON.get(reason, 0) for reason in EVERY_REASON)


def test_a_scan_that_classified_every_match_is_not_capped(exclusion_world, monkeypatch):
    """BUG (search_app.history.candidates.excluded_cte): ``capped`` is set when the scan reads
    exactly EXCLUSION_SCAN rows, although no match was left unclassified ("more existed" is
    false)."""
    w = exclusion_world
    run, _ = exclusion_run(w)
    monkeypatch.setattr(candidates, "EXCLUSION_SCAN", ORBIT_MATCHES + 1)
    factories.history(run, "orbit")
    monkeypatch.setattr(candidates, "EXCLUSION_SCAN", ORBIT_MATCHES)
    factories.history(run, "orbit")

    roomy, exact = events(run)
    assert roomy.exclusions_capped is False
    assert exact.exclusions == roomy.exclusions == {**EVERY_REASON, "budget": 0}
    assert exact.exclusions_capped is False


# --- the budget ---------------------------------------------------------------------------


def test_a_budget_exhausted_call_is_audited(exclusion_world):
    w = exclusion_world
    run, client = exclusion_run(w)
    pre_spend(run, fillers(w, 400))

    response = search(client, {"query": "Orbit  Report", "limit": 3})

    assert_error(response, 429, "search_budget_exhausted")
    (event,) = events(run)
    assert event.outcome == "budget_exhausted"
    assert event.key_id == newest_key()[0]
    assert event.query_digest == keyed_digest("orbit report", newest_key()[1])
    assert event.filters == {"speaker": "anyone", "after": None, "before": None, "limit": 3}
    assert (event.hit_ids, event.neighbour_ids, event.rankings) == ([], [], [])
    assert event.result_count == 0
    assert event.budget_used == 400
    assert event.exclusions == NO_EXCLUSIONS

    # Through the service too: the refusal is raised after the event is committed.
    with pytest.raises(SearchBudgetExhausted):
        factories.history(run, "orbit")
    assert [e.outcome for e in events(run)] == ["budget_exhausted", "budget_exhausted"]


def test_the_budget_count_names_each_withheld_message_once():
    """BUG (search_app.services._spend): a message left out both as a hit and as a neighbour
    of a kept hit is counted twice in ``exclusions["budget"]``.

    P0, A, B, P1 in a row; "orbit" matches A and B. With one message of budget left, B (newer)
    is kept; A, P0 and P1 (three messages) are left out, but A is counted as a dropped hit and
    again as B's neighbour.
    """
    workspace, agent, alice, conversation = factories.observed_public_room()
    texts = ["plain opening", "orbit alpha", "orbit beta", "plain closing"]
    row = [factories.post(conversation, alice, t, created_at=at(i)) for i, t in enumerate(texts)]
    reference, _ = factories.make_run(agent, conversation, alice)
    factories.history(reference, "orbit")
    assert evidence_ids(reference) == {m.id for m in row}

    run, _ = factories.make_run(agent, conversation, alice)
    archive = factories.make_conversation(workspace, "public", "archive")
    fillers = services.messages_create(
        conversation=archive,
        drafts=[
            MessageDraft(content="filler words", sender_account_id=alice.id, created_at=at(-5))
            for _ in range(399)
        ],
    )
    pre_spend(run, fillers)
    assert len(evidence_ids(run)) == 399

    result = factories.history(run, "orbit")

    assert [hit.message.id for hit in result.hits] == [row[2].id]
    left_out = {m.id for m in row} - {row[2].id}
    (event,) = events(run)
    assert event.exclusions["budget"] == len(left_out) == 3


# --- calls that write nothing -------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"query": "the and of"},
        {"query": "!!! ??? ..."},
        {"query": ""},
        {"query": "orbit", "limit": 21},
        {"query": "orbit", "speaker": "everyone"},
    ],
)
def test_an_invalid_search_writes_no_event(room, body):
    run, client = factories.make_run(room.agent, room.room, room.alice)

    assert_error(search(client, body), 400, "invalid_arguments")

    assert not events(run).exists()
    assert evidence_ids(run) == set()


def test_a_finished_run_writes_no_event(room):
    run, client = factories.make_run(room.agent, room.room, room.alice)
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now())

    assert_error(search(client, {"query": "orbit"}), 403, "forbidden")

    assert not events(run).exists()
    assert evidence_ids(run) == set()
