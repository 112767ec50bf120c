"""Bounded candidates (docs/search.md, "Bounded work"): each term keeps its newest
``TERM_CANDIDATES`` eligible matches, and every route that finds them finds exactly those.

A route (``search_app.history.terms``) only decides how a term's matches are read: one scan of
the bucket index, the buckets newest first, or the agent's rooms in doubling time slices (and
on through the buckets when the slices run out). These tests force each route on the same
worlds and hold the answers equal, with few candidates per term so that the cut is exercised,
and hold the perspective's oracle property (a withheld message moves nothing) under each route
with the cut in place. Synthetic text only.
"""

from __future__ import annotations

import itertools
import uuid
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings

from messages_app.models import Message
from search_app.history import terms
from tests import factories
from tests.factories import at
from tests.search_app.test_oracle import (
    INTERVAL_EDGES,
    LINKS_DO_NOT_CHAIN,
    Oracle,
    ranked_scores,
    without_withheld,
    worlds,
)

pytestmark = pytest.mark.django_db

ROUTES = (terms.ALL, terms.BUCKETS, terms.SLICES)
DAY = 24 * 60


def day(number: float):
    """Day ``number`` of the fixture's year, which ended before ``T0`` (none is in the future)."""
    return at((number - 400) * DAY)


@contextmanager
def ids_in_creation_order():
    """Message ids that grow in the order messages are made. A cut between matches at the same
    moment goes by id; two worlds built one after the other (one without its withheld
    messages) must order their common messages alike for the cut to fall the same in both."""
    field = Message._meta.get_field("id")
    numbers = itertools.count(1)
    with mock.patch.dict(field.__dict__, {"_get_default": lambda: uuid.UUID(int=next(numbers))}):
        yield


@contextmanager
def routed(route: str, *, keep: int = terms.TERM_CANDIDATES, slices: int = terms.WALK_SLICES):
    """Every term of every search takes ``route``, keeping ``keep`` candidates, a walk through
    the rooms giving up after ``slices`` slices."""
    with (
        mock.patch.object(terms, "routes", lambda query, known: (route,) * len(query.terms)),
        mock.patch.object(terms, "TERM_CANDIDATES", keep),
        mock.patch.object(terms, "WALK_SLICES", slices),
    ):
        yield


def answer(run, query: str, **filters) -> list[tuple]:
    """Each hit's id, score, contributions and neighbours: everything the ranking decides."""
    result = factories.history(run, query, limit=20, now=day(400), **filters)
    return [
        (
            hit.message.id,
            round(hit.score, 9),
            tuple(sorted((name, round(value, 9)) for name, value in hit.components.items())),
            tuple(m.id for m in (*hit.before, *hit.after)),
        )
        for hit in result.hits
    ]


@pytest.fixture
def spread(world):
    """An agent's two rooms and a room it never joined, with a frequent word ("alpha") over
    a year (many time buckets), a rarer one ("omega") long ago, and both together now and then;
    a fresh run each time it is asked for."""
    room = factories.joined_room(
        world.workspace, "Dana Example", "Eli Example", kind="public", joined_at=day(-10)
    )
    other = factories.make_conversation(world.workspace, "public", "second")
    factories.join(other, room.agent, joined_at=day(-10))
    factories.join(other, room.people[0], joined_at=day(-10))
    unseen = factories.make_conversation(world.workspace, "public", "unseen")
    dana, eli = room.people
    for d in range(0, 360, 9):
        words = "alpha status" if d % 4 else "alpha omega status"
        factories.post(room, dana if d % 2 else eli, words, created_at=day(d))
        factories.post(other, dana, f"beta alpha {d}", created_at=day(d) + timedelta(minutes=30))
        later = day(d) + timedelta(minutes=60)
        factories.post(unseen, dana, "alpha omega withheld", created_at=later)
    factories.post(room, eli, "omega archive", created_at=day(2))

    def new_run():
        run, _ = factories.make_run(room.agent, room, dana)
        return run

    return new_run


@pytest.mark.parametrize("keep", [3, terms.TERM_CANDIDATES])
@pytest.mark.parametrize("query", ["alpha", "omega", "alpha omega", '"alpha omega"', "alph*"])
def test_every_route_finds_the_same_candidates(spread, keep, query):
    answers = {}
    for route in ROUTES:
        with routed(route, keep=keep):
            answers[route] = answer(spread(), query)
    assert answers[terms.ALL]
    assert answers[terms.BUCKETS] == answers[terms.ALL]
    assert answers[terms.SLICES] == answers[terms.ALL]


def test_rare_terms_with_more_matches_than_the_scan_reads_are_walked(spread):
    """Routed ``all`` on statistics that call them rare, words with more matches than the one
    scan reads are walked through the rooms instead, and found as every other route finds
    them."""
    with routed(terms.BUCKETS, keep=3):
        expected = answer(spread(), "alpha omega")
    with routed(terms.ALL, keep=3), mock.patch.object(terms, "RARE_READ", 5):
        assert answer(spread(), "alpha omega") == expected


def test_a_walk_whose_slices_run_out_goes_on_through_the_buckets(spread):
    """Two slices (an hour, then two more) hold none of these matches: the walk goes on
    through the buckets, newest first, and finds what every other route finds."""
    with routed(terms.ALL, keep=3):
        expected = answer(spread(), "omega")
    with routed(terms.SLICES, keep=3, slices=2):
        assert answer(spread(), "omega") == expected


@pytest.mark.parametrize("route", ROUTES)
def test_a_flood_of_withheld_matches_newer_than_everything_moves_nothing(world, spread, route):
    """Sixty messages holding the words, in a room the agent never joined, newer than all it
    may see: each route answers as before the flood, though a bucket holds more of them than a
    bucket walk reads (it goes on through the rooms) and the workspace's newest message is one
    of them (the slices start at the agent's own newest)."""
    with routed(route, keep=3):
        expected = {query: answer(spread(), query) for query in ("alpha", "alpha omega")}
    flooded = factories.make_conversation(world.workspace, "public", "flooded")
    speaker = factories.make_account(world.workspace, "Flo Example")
    for minute in range(60):
        factories.post(
            flooded, speaker, "alpha omega flood", created_at=day(390) + timedelta(minutes=minute)
        )
    with (
        routed(route, keep=3),
        mock.patch.object(terms, "RARE_READ", 20),
        mock.patch.object(terms, "BUCKET_READ", 20),
    ):
        for query, hits in expected.items():
            assert answer(spread(), query) == hits, query


@pytest.mark.parametrize("route", ROUTES)
def test_the_filters_narrow_every_route_alike(spread, route):
    with routed(terms.ALL, keep=3):
        expected = answer(spread(), "alpha omega", after=day(100), before=day(200))
    with routed(route, keep=3):
        got = answer(spread(), "alpha omega", after=day(100), before=day(200))
    assert got == expected
    assert all(day(100) < message_time(hit[0]) < day(200) for hit in got)


def message_time(message_id):
    return Message.objects.get(id=message_id).created_at


def test_a_term_keeps_only_its_newest_matches_and_a_rare_one_all_of_its(spread):
    """Three candidates per term: "omega" keeps all of its own, the oldest too, however many
    "alpha" has; "alpha" only its three newest eligible matches, and with them what the context
    reads around the best candidates (a message up to two away that holds a query word)."""
    run = spread()
    with routed(terms.ALL, keep=3):
        result = factories.history(run, "alpha omega", limit=20, now=day(400))
        alone = factories.history(spread(), "alpha", limit=20, now=day(400))
    assert "omega archive" in {hit.message.content for hit in result.hits}
    assert all("withheld" not in hit.message.content for hit in result.hits)

    newest = (
        Message.objects.filter(
            conversation__in=[hit.message.conversation_id for hit in alone.hits],
            content__contains="alpha",
        )
        .exclude(content__contains="withheld")
        .order_by("-created_at", "-id")[:3]
    )
    reach = [(m.conversation_id, m.seq) for m in newest]
    for hit in alone.hits:
        assert any(
            hit.message.conversation_id == room and abs(hit.message.seq - seq) <= 2
            for room, seq in reach
        ), hit.message.content


def test_a_term_with_more_than_it_keeps_is_rated_from_what_was_read(spread):
    """With every match kept the rarities are exact; with three kept they are estimated from
    the window after the latest cut, so a rare word still outweighs a frequent one."""
    with routed(terms.ALL, keep=3):
        (first, *_) = factories.history(spread(), "alpha omega", now=day(400)).hits
    assert "omega" in first.message.content


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=worlds())
@example(plan=LINKS_DO_NOT_CHAIN)
@example(plan=INTERVAL_EDGES)
@pytest.mark.parametrize("route", ROUTES)
def test_withheld_messages_move_nothing_on_any_route_with_the_cut(db, route, plan):
    """The oracle property of ``test_oracle`` (a withheld message changes no score and no
    order), with two candidates per term, so that its cut and its estimated rarities are what
    decides, on each route."""
    oracle = Oracle(plan, plan.runs()[0])
    smaller, new_index = without_withheld(plan, oracle)
    with routed(route, keep=2):
        with ids_in_creation_order():
            full = ranked_scores(plan)
        with ids_in_creation_order():
            reduced = ranked_scores(smaller)
    renamed = {
        new_index[index]: (score, components, tuple(new_index[m] for m in neighbours))
        for index, (score, components, neighbours) in full.items()
    }
    assert renamed == reduced


def test_the_cut_is_by_time_then_id(world):
    """Matches at the very same moment (one per room, so that none is another's context) are
    cut by id, as every route orders them."""
    agent = factories.make_agent(world.workspace)
    dana = factories.make_account(world.workspace, "Dana Example")
    same = at(10)
    posted = []
    for number in range(6):
        room = factories.make_conversation(world.workspace, "public", f"room {number}")
        factories.join(room, agent, joined_at=factories.EARLY)
        posted.append(factories.post(room, dana, "alpha status", created_at=same))
    answers = {}
    for route in ROUTES:
        with routed(route, keep=3):
            run, _ = factories.make_run(agent, room, dana)
            answers[route] = {
                hit.message.id
                for hit in factories.history(run, "alpha", now=same + timedelta(days=1)).hits
            }
    assert answers[terms.ALL] == {m.id for m in sorted(posted, key=lambda m: m.id)[-3:]}
    assert answers[terms.BUCKETS] == answers[terms.SLICES] == answers[terms.ALL]
