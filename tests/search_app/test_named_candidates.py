"""A named participant's own matches are candidates (docs/search.md, "Bounded work"; issue 43).

A query that names a participant reads that person's newest ``candidates.NAMED_READ`` eligible
messages and keeps those that match a term beside each term's newest matches, so their answer
from long ago is found however many newer matches of its words others wrote since. Only the
agent's intervals are read and a withheld message is never counted, so none takes an eligible
one's place. Synthetic text only.
"""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings

from search_app.history import candidates, terms
from tests import factories
from tests.search_app import test_oracle
from tests.search_app.test_bounded_candidates import ROUTES, answer, day, routed

pytestmark = pytest.mark.django_db


def _world(*, withheld: bool):
    """A room of Audrey and Bob: Audrey's old answer holding "year", two newer messages of
    hers that hold no query word, then Bob's many newer "year" messages; with ``withheld``,
    newer messages of Audrey's holding "year" that the run may not receive (a room the agent
    never joined, and the run's recent history). A run, and the answer's id."""
    room = factories.joined_room(
        factories.make_workspace(),
        "Audrey Example",
        "Bob Example",
        kind="public",
        joined_at=day(-10),
    )
    audrey, bob = room.people
    answer_message = factories.post(
        room, audrey, "we adopted the dogs that year", created_at=day(10)
    )
    for d in (50, 51):
        factories.post(room, audrey, "hello there", created_at=day(d))
    for d in range(100, 110):
        factories.post(room, bob, f"another year passed {d}", created_at=day(d))
    recent = ()
    if withheld:
        unseen = factories.make_conversation(room.workspace, "public", "unseen")
        factories.join(unseen, audrey, joined_at=day(-10))
        for d in (200, 201, 202):
            factories.post(unseen, audrey, "a year elsewhere", created_at=day(d))
        recent = tuple(
            factories.post(room, audrey, "this year again", created_at=day(d) + timedelta(hours=1))
            for d in (300, 301, 302)
        )
    run, _ = factories.make_run(room.agent, room, bob, recent=recent)
    return run, answer_message.id


@pytest.mark.parametrize("route", ROUTES)
def test_a_named_participants_old_answer_is_a_candidate(route):
    with routed(route, keep=2):
        run, answer_id = _world(withheld=False)
        found = [hit[0] for hit in answer(run, "audrey year")]
    assert answer_id in found
    # Not a candidate of its word alone: Bob's newer "year" messages fill its place.
    with routed(route, keep=2):
        run, answer_id = _world(withheld=False)
        found = [hit[0] for hit in answer(run, "year")]
    assert answer_id not in found


@pytest.mark.parametrize("route", ROUTES)
def test_withheld_messages_of_the_named_take_no_place(route):
    """With room for three of Audrey's messages, her withheld newer ones would push the answer
    out if they were counted; they change no hit, order or score."""
    answers = {}
    for withheld in (False, True):
        with routed(route, keep=2), mock.patch.object(candidates, "NAMED_READ", 3):
            run, answer_id = _world(withheld=withheld)
            answers[withheld] = answer(run, "audrey year")
            assert answer_id in [hit[0] for hit in answers[withheld]]
    # Every message has a fresh id in each world: compare what the ranking decides about them.
    assert _without_ids(answers[True]) == _without_ids(answers[False])


def _without_ids(hits: list[tuple]) -> list[tuple]:
    """Each hit's score, contributions and number of neighbours, best first."""
    return [(score, components, len(neighbours)) for _, score, components, neighbours in hits]


def test_the_bound_counts_eligible_messages_only():
    """Past ``NAMED_READ`` of her newer eligible messages, the answer is no longer read."""
    with routed(terms.ALL, keep=2), mock.patch.object(candidates, "NAMED_READ", 2):
        run, answer_id = _world(withheld=False)
        found = [hit[0] for hit in answer(run, "audrey year")]
    assert answer_id not in found


@settings(
    max_examples=test_oracle.RANKING_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=test_oracle.worlds())
@example(plan=test_oracle.LINKS_DO_NOT_CHAIN)
@example(plan=test_oracle.INTERVAL_EDGES)
def test_withheld_messages_never_change_a_named_search(db, plan):
    """The oracle's ranking property (``test_oracle``) for a query that names every account
    (each is a "Person"), with room for only three of their messages: a withheld message
    changes no hit, score or order, the same world without them ranks every hit the same."""
    with (
        mock.patch.object(test_oracle, "RANKING_QUERY", "person migration report"),
        mock.patch.object(candidates, "NAMED_READ", 3),
    ):
        oracle = test_oracle.Oracle(plan, plan.runs()[0])
        smaller, new_index = test_oracle.without_withheld(plan, oracle)
        full = test_oracle.ranked_scores(plan)
        reduced = test_oracle.ranked_scores(smaller)
    renamed = {
        new_index[index]: (score, components, tuple(new_index[m] for m in neighbours))
        for index, (score, components, neighbours) in full.items()
    }
    assert renamed == reduced
