"""search_history ranking on small fixed corpora: exact ranked lists and exact component values.

The contract is the docstring of ``search_app.history.ranking`` (SPEC §6, docs/search.md): seven
components with fixed weights, text = 0.9 x BM25-shaped wording (saturated term frequency and
length normalisation, idf over the eligible matches) + 0.1 x closeness, recency
1 / (1 + age / 90 days), ties newest first, then id descending. The context component reads a
message's neighbours, so messages compared "other things equal" are posted apart
(``factories.post_apart``): their neighbours are non-matching fillers and every context is 0.
Every search passes an explicit ``now`` so recency values are exact. All text is synthetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import pytest

from formation.errors import InvalidArguments
from messages_app import services
from messages_app.models import Account, Agent, Conversation, Message, Workspace
from search_app.query.parse import parse_query
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

DAY = 24 * 60  # minutes
NOW = at(30 * DAY)  # a fixed search time: thirty days after T0
EARLY = at(-600)  # memberships start well before every message
WEIGHTS = {
    "text": 0.37,
    "actor": 0.02,
    "conversation": 0.05,
    "participation": 0.02,
    "recency": 0.02,
    "speaker": 0.15,
    "context": 0.37,
}
REASONS = ["text", "actor", "conversation", "participation", "recency", "speaker", "context"]
K1, B = 0.9, 0.4  # BM25's saturation and length normalisation
SEARCH_URL = "/api/v1/history/search"


@dataclass
class Corpus:
    workspace: Workspace
    agent: Agent
    alice: Account  # the requester
    bob: Account
    room: Conversation  # the destination: private, agent + Alice + Bob


@pytest.fixture
def corpus(db) -> Corpus:
    """A destination room everyone joined long before any message, so old messages count."""
    workspace = factories.make_workspace("ranking")
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    bob = factories.make_account(workspace, "Bob Example")
    room = factories.make_conversation(workspace, "private", "destination")
    for member in (agent, alice, bob):
        factories.join(room, member, joined_at=EARLY)
    return Corpus(workspace, agent, alice, bob, room)


def run_for(c: Corpus, destination: Conversation | None = None):
    run, _ = factories.make_run(c.agent, destination or c.room, c.alice)
    return run


def search(run, query: str, limit: int = 20, now: datetime = NOW, **filters):
    return factories.history(run, query, limit, now=now, **filters)


def ids(result) -> list:
    return [hit.message.id for hit in result.hits]


def of(*messages: Message) -> list:
    return [message.id for message in messages]


def recency(created: datetime, now: datetime = NOW) -> float:
    age = max((now - created).total_seconds(), 0.0)
    return 1 / (1 + age / (90 * 86_400))


def closeness(gap: int) -> float:
    return 1 / (1 + (gap - 1) / 3)


def idf(matches: int, df: int) -> float:
    return math.log(1 + matches / df)


def bm25(tf: float, length: int, average: float) -> float:
    """One term's saturated share: tf / (tf + k1 (1 - b + b length / average length)), where a
    length counts a document's distinct lexemes and tf is 1 + 1/4 + ... for repeats."""
    return tf / (tf + K1 * (1 - B + B * length / average))


def assert_values(hit, **expected: float) -> None:
    """Each named component value is exact, and each contribution is weight x value."""
    for name, value in expected.items():
        assert hit.values[name] == pytest.approx(value, abs=1e-9), name
    for name in REASONS:
        assert hit.components[name] == pytest.approx(WEIGHTS[name] * hit.values[name], abs=1e-12)
    assert hit.score == pytest.approx(sum(hit.components.values()), abs=1e-12)


# --- text: coverage, rarity, closeness -------------------------------------------------------


def test_two_matched_terms_outrank_one(corpus):
    """Matching both alternatives beats matching one, even when the one-term hits are newer."""
    c = corpus
    both = factories.post_apart(c.room, c.bob, "alpha beta", created_at=at(0))
    only_alpha = factories.post_apart(c.room, c.bob, "alpha gamma", created_at=at(1))
    only_beta = factories.post_apart(c.room, c.bob, "beta delta", created_at=at(2))

    result = search(run_for(c), "alpha beta")

    assert ids(result) == of(both, only_beta, only_alpha)
    first, second, third = result.hits
    # N = 3 eligible matches, each term in 2 of them: equal rarity, so half the wording each;
    # every document is two lexemes long, the average.
    word = bm25(1, 2, 2)
    assert_values(first, text=0.9 * word + 0.1 * 1, recency=recency(at(0)), context=0)
    assert_values(second, text=0.9 * 0.5 * word, recency=recency(at(2)), context=0)
    assert_values(third, text=0.9 * 0.5 * word, recency=recency(at(1)), context=0)


def test_rarer_term_outranks_common_term_by_idf_over_eligible_matches(corpus):
    """Rarity is counted over the eligible matches only: hidden, deleted and in-prompt copies of
    the rare word must not make it look common (that would flip the order and leak them)."""
    c = corpus
    rare = factories.post_apart(c.room, c.bob, "rare orchid", created_at=at(0))
    commons = [
        factories.post_apart(c.room, c.bob, "common fern", created_at=at(minute))
        for minute in (1, 2, 3)
    ]
    # Ineligible copies of "rare": a room the agent never joined, deleted messages, and a
    # message written before the agent joined its room.
    hidden = factories.make_conversation(c.workspace, "private", "hidden")
    factories.join(hidden, c.alice, joined_at=EARLY)
    for minute in range(6):
        factories.post(hidden, c.alice, "rare rare rare", created_at=at(minute))
    for minute in range(3):
        services.message_delete(
            message=factories.post_apart(c.room, c.bob, "rare deleted", created_at=at(minute))
        )
    late = factories.make_conversation(c.workspace, "private", "late-join")
    factories.join(late, c.alice, joined_at=EARLY)
    factories.join(late, c.bob, joined_at=EARLY)
    factories.post(late, c.bob, "rare before the agent", created_at=at(5))
    factories.join(late, c.agent, joined_at=at(10))
    # The run's current message and recent history are already in the prompt: not eligible.
    current = factories.post_apart(c.room, c.alice, "rare current", created_at=at(4))
    recent = factories.post_apart(c.room, c.alice, "rare recent", created_at=at(4))
    run, _ = factories.make_run(c.agent, c.room, c.alice, current=current, recent=(recent,))

    result = search(run, "common rare")

    assert ids(result) == of(rare, *reversed(commons))
    n = 4
    w_common, w_rare = idf(n, 3), idf(n, 1)
    word = bm25(1, 2, 2)  # every eligible match is two lexemes long
    assert_values(result.hits[0], text=0.9 * word * w_rare / (w_common + w_rare))
    for hit in result.hits[1:]:
        assert_values(hit, text=0.9 * word * w_common / (w_common + w_rare))


def test_closer_terms_outrank_the_same_terms_far_apart(corpus):
    """Closeness is 1 side by side and 1 / (1 + (gap - 1) / 3) further apart; stop words hold
    a position, so "alpha the beta" has a gap of 2."""
    c = corpus
    near = factories.post_apart(c.room, c.bob, "alpha beta red green blue", created_at=at(0))
    stopped = factories.post_apart(c.room, c.bob, "alpha the beta red green", created_at=at(1))
    far = factories.post_apart(c.room, c.bob, "alpha red green blue beta", created_at=at(2))

    result = search(run_for(c), "alpha beta")

    assert ids(result) == of(near, stopped, far)
    # Five, four (the stop word is no lexeme) and five lexemes.
    average = 14 / 3
    assert_values(result.hits[0], text=0.9 * bm25(1, 5, average) + 0.1 * closeness(1))
    assert_values(result.hits[1], text=0.9 * bm25(1, 4, average) + 0.1 * closeness(2))
    assert_values(result.hits[2], text=0.9 * bm25(1, 5, average) + 0.1 * closeness(4))
    assert closeness(2) == pytest.approx(0.75)
    assert closeness(4) == pytest.approx(0.5)
    # The closeness cut-off never drops the best hit when only one is asked for.
    assert ids(search(run_for(c), "alpha beta", limit=1)) == of(near)


def test_closeness_ignores_repeats_of_one_term(corpus):
    """The gap is between two *different* query terms; "alpha alpha" is no closeness at all."""
    c = corpus
    repeated = factories.post_apart(c.room, c.bob, "alpha alpha red green beta", created_at=at(0))
    mixed = factories.post_apart(c.room, c.bob, "alpha red beta", created_at=at(0))

    result = search(run_for(c), "alpha beta")

    assert ids(result) == of(mixed, repeated)
    # Three and four lexemes; "alpha" twice is a saturated frequency of 1 + 1/4.
    average = 3.5
    repeated_words = (bm25(1.25, 4, average) + bm25(1, 4, average)) / 2
    assert_values(result.hits[0], text=0.9 * bm25(1, 3, average) + 0.1 * closeness(2))
    assert_values(result.hits[1], text=0.9 * repeated_words + 0.1 * closeness(3))


# --- actor, conversation, participation -------------------------------------------------------


def test_same_conversation_boost(corpus):
    """A hit in the run's destination outranks an equal, newer hit elsewhere."""
    c = corpus
    elsewhere_room = factories.make_conversation(c.workspace, "private", "sibling")
    for member in (c.agent, c.alice, c.bob):
        factories.join(elsewhere_room, member, joined_at=EARLY)
    elsewhere = factories.post(elsewhere_room, c.bob, "gamma report", created_at=at(5))
    here = factories.post(c.room, c.bob, "gamma report", created_at=at(0))

    result = search(run_for(c), "gamma")

    assert ids(result) == of(here, elsewhere)
    assert_values(result.hits[0], conversation=1, participation=1, actor=0)
    assert_values(result.hits[1], conversation=0, participation=1, actor=0)


def test_actor_boost_for_requester_and_verified_links_only(corpus, descending_ids):
    """The requester and accounts joined to them by one live (verified) link are the actor, in
    either link direction; pending, revoked and chained (two-hop) links are not."""
    c = corpus
    ws = c.workspace
    people = {
        name: factories.make_account(ws, f"{name.title()} Example")
        for name in ("carol", "frank", "dave", "erin", "gina")
    }
    for person in people.values():
        factories.join(c.room, person, joined_at=EARLY)

    def link(account, linked, *, verify=True):
        made = services.identity_link_create(
            workspace_id=ws.id, account_id=account.id, linked_account_id=linked.id
        )
        return services.identity_link_verify(link=made) if verify else made

    link(c.alice, people["carol"])
    link(people["frank"], c.alice)  # the other direction
    link(people["dave"], c.alice, verify=False)  # pending
    services.identity_link_revoke(link=link(people["erin"], c.alice))  # revoked
    link(people["gina"], people["carol"])  # two hops from Alice: links do not chain

    actors = [
        factories.post_apart(c.room, sender, "delta plan", created_at=at(0))
        for sender in (c.alice, people["carol"], people["frank"])
    ]
    # The others are newer, so only the actor boost can put the first group ahead.
    others = [
        factories.post_apart(c.room, sender, "delta plan", created_at=at(10))
        for sender in (c.bob, people["dave"], people["erin"], people["gina"])
    ]

    result = search(run_for(c), "delta")

    # Within a group the scores tie: descending_ids makes id order the creation order.
    assert ids(result) == of(*actors, *others)
    assert [hit.values["actor"] for hit in result.hits] == [1, 1, 1, 0, 0, 0, 0]


def test_participation_boost_for_current_membership_of_requester(corpus):
    """Participation: the requester is a *current* member of the hit's conversation."""
    c = corpus
    rooms = {}
    for name, with_alice in (("joined", True), ("never", False), ("left", True)):
        room = factories.make_conversation(c.workspace, "public", f"public-{name}")
        factories.join(room, c.agent, joined_at=EARLY)
        factories.join(room, c.bob, joined_at=EARLY)
        if with_alice:
            factories.join(room, c.alice, joined_at=EARLY)
        rooms[name] = room
    services.membership_leave(conversation=rooms["left"], account_id=c.alice.id, left_at=at(-10))
    joined = factories.post(rooms["joined"], c.bob, "epsilon", created_at=at(0))
    left = factories.post(rooms["left"], c.bob, "epsilon", created_at=at(3))
    never = factories.post(rooms["never"], c.bob, "epsilon", created_at=at(5))

    result = search(run_for(c), "epsilon")

    assert ids(result) == of(joined, never, left)
    assert [hit.values["participation"] for hit in result.hits] == [1, 0, 0]
    assert [hit.values["conversation"] for hit in result.hits] == [0, 0, 0]


# --- recency and ties -------------------------------------------------------------------------


def test_recency_newer_outranks_older_with_exact_values(corpus):
    """1 / (1 + age / 90 days): a month old is three quarters; a message after ``now`` counts as
    new."""
    c = corpus
    old = factories.post_apart(c.room, c.bob, "zeta", created_at=at(0))
    newer = factories.post_apart(c.room, c.bob, "zeta", created_at=at(5 * DAY))
    after_now = factories.post_apart(c.room, c.bob, "zeta", created_at=at(31 * DAY))

    result = search(run_for(c), "zeta")

    assert ids(result) == of(after_now, newer, old)
    assert_values(result.hits[0], recency=1.0)
    assert_values(result.hits[1], recency=1 / (1 + 25 / 90))
    assert_values(result.hits[2], recency=0.75)


def test_equal_scores_break_newest_first_then_id_descending(corpus, descending_ids):
    """With every signal equal (all after ``now``, so recency is 1 for all), the order is by
    time, newest first, then by id descending: never by insertion order or chance."""
    c = corpus
    early = factories.post_apart(c.room, c.bob, "eta", created_at=at(10))  # the largest id
    late = [factories.post_apart(c.room, c.bob, "eta", created_at=at(20)) for _ in range(3)]
    assert of(*late) == sorted(of(*late), reverse=True)
    run = run_for(c)

    first = search(run, "eta", now=at(0))
    second = search(run, "eta", now=at(0))

    assert ids(first) == of(*late, early)
    assert ids(second) == ids(first)
    assert len({hit.score for hit in first.hits}) == 1


def test_same_time_ties_use_id_descending_with_random_ids(corpus):
    """Ordinary random UUIDs: identical hits at one instant come back in id order, descending."""
    c = corpus
    tied = [factories.post_apart(c.room, c.bob, "theta", created_at=at(0)) for _ in range(5)]

    result = search(run_for(c), "theta")

    assert ids(result) == sorted(of(*tied), reverse=True)


# --- reasons --------------------------------------------------------------------------------


def test_reasons_explain_every_score_and_scores_never_increase(corpus):
    """On a corpus mixing every signal: seven named reasons in order, contributions adding up to
    the score, and scores non-increasing down the list (service and HTTP body)."""
    c = corpus
    other = factories.make_conversation(c.workspace, "public", "open")
    factories.join(other, c.agent, joined_at=EARLY)
    factories.post(c.room, c.alice, "kappa lambda", created_at=at(0))
    factories.post(c.room, c.bob, "kappa red green lambda", created_at=at(DAY))
    factories.post(other, c.bob, "kappa", created_at=at(20 * DAY))
    factories.post(other, c.agent, "lambda", created_at=at(2 * DAY))
    factories.post(c.room, c.agent, "kappa kappa", created_at=at(3 * DAY))
    run, client = factories.make_run(c.agent, c.room, c.alice)

    result = search(run, "kappa lambda")
    assert len(result.hits) == 5
    for hit in result.hits:
        assert list(hit.components) == REASONS
        assert list(hit.values) == REASONS
        assert all(0 <= value <= 1 for value in hit.values.values())
        assert abs(hit.score - sum(hit.components.values())) < 1e-9
    scores = [hit.score for hit in result.hits]
    assert scores == sorted(scores, reverse=True)

    body = client.post(SEARCH_URL, {"query": "kappa lambda"}, format="json").json()
    assert len(body["items"]) == 5
    for item in body["items"]:
        assert [reason["name"] for reason in item["reasons"]] == REASONS
        for reason in item["reasons"]:
            assert set(reason) == {"name", "value", "contribution"}
            assert reason["contribution"] == pytest.approx(
                WEIGHTS[reason["name"]] * reason["value"], abs=1e-6
            )
        total = sum(reason["contribution"] for reason in item["reasons"])
        assert abs(total - item["score"]) < 1e-6
    wire_scores = [item["score"] for item in body["items"]]
    assert wire_scores == sorted(wire_scores, reverse=True)


# --- the text-search configuration ------------------------------------------------------------


def test_stemming_and_accents_of_formation_english(corpus):
    """formation_english is english + unaccent: inflections and accents fold to one lexeme."""
    c = corpus
    migration = factories.post(c.room, c.bob, "migration plan", created_at=at(0))
    accented = factories.post(c.room, c.bob, "café opening", created_at=at(1))
    shouted = factories.post(c.room, c.bob, "CAFÉ SIGN", created_at=at(2))
    plain = factories.post(c.room, c.bob, "cafe menu", created_at=at(3))
    run = run_for(c)

    assert ids(search(run, "migrations")) == of(migration)
    assert ids(search(run, "Migrating")) == of(migration)
    assert ids(search(run, "the migrations")) == of(migration)
    assert ids(search(run, "cafe")) == of(plain, shouted, accented)
    assert ids(search(run, "Café")) == of(plain, shouted, accented)


@pytest.mark.parametrize("query", ["the", "the and of", "  is it THE  ", "!!! ?? ...", ""])
def test_stop_words_or_punctuation_alone_are_invalid(db, query):
    """A query with nothing searchable left is invalid_arguments, not an empty result."""
    with pytest.raises(InvalidArguments) as raised:
        parse_query(query)
    assert raised.value.code == "invalid_arguments"
    assert raised.value.status == 400


def test_query_operators_are_plain_text(corpus):
    """tsquery syntax in the user's text is just words: no error, same hits as the words."""
    c = corpus
    hit = factories.post(c.room, c.bob, "iota rollout", created_at=at(0))

    result = search(run_for(c), "iota & | ! : * ( ) ' \" \\ <-> rollout:*")

    assert ids(result) == of(hit)
    # Both terms, side by side, in a document of average length (the only match).
    assert result.hits[0].values["text"] == pytest.approx(0.9 * bm25(1, 2, 2) + 0.1)
