"""search_history's statement reads a bounded number of rows under any plan: here, the generic
plan PostgreSQL made while the tables were small, kept after they grew forty times.

The service runs the statement prepared with a generic plan (``formation.prepared``), made once
per pooled connection from the statistics of that moment. A plan made on small tables and kept
after they grew is what once made a search read the whole workspace per candidate (38 s in CI).
So the statement is prepared here under ``plan_cache_mode = force_generic_plan`` and run once
on a small world, the world then grows by tens of thousands of messages without ANALYZE (which
would make PostgreSQL plan again), and ``EXPLAIN (ANALYZE)`` of the same prepared statement
shows how many rows each scan of the messages and their documents read: a few thousand at
most, where the tables hold over forty thousand. The words are routed as fresh statistics and
as statistics from before the growth would route them (the routes are parameters of the one
plan). Synthetic text only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django.utils import timezone

from formation.prepared import positional
from messages_app.models import Message
from search_app.history import candidates, terms
from search_app.history.results import HistoryFilters
from search_app.history.statement import hits_statement
from search_app.models import MessageSearchDocument
from search_app.query.parse import parse_query
from search_app.scope import Perspective
from tests import factories

pytestmark = pytest.mark.django_db

GROWTH = 20_000  # messages in the agent's room, and as many in a room it never joined
QUERY = "commonword midword rareword"
# Rows the statement may read from the messages and their documents, whatever the plan: each
# term's candidates (and the one read past them) with what their steps read beside them, the
# context of the best, the page, the neighbours, the exclusion scan.
READ_BOUND = 6_000
TABLES = {Message._meta.db_table, MessageSearchDocument._meta.db_table}
# One message in n holds each word; the rare word is in a few.
CONTENT = (
    "'n' || n || ' status'"
    " || CASE WHEN mod(n, 2) = 0 THEN ' commonword' ELSE '' END"
    " || CASE WHEN mod(n, 50) = 0 THEN ' midword' ELSE '' END"
    " || CASE WHEN mod(n, 4000) = 0 THEN ' rareword' ELSE '' END"
)


# A flood: every message holds the mid word, in a room the agent never joined.
FLOOD = "'n' || n || ' midword flood'"


def _perspective(run) -> Perspective:
    return Perspective(
        workspace_id=run.workspace_id,
        agent_id=run.agent_id,
        destination_id=run.conversation_id,
        destination_kind="",
        requester_id=run.requester_id,
        run_id=run.id,
    )


def _statement(run, routes: tuple[str, ...], text: str = QUERY) -> tuple[str, list[Any]]:
    query = parse_query(text, workspace_id=run.workspace_id)
    sql, params = hits_statement(
        _perspective(run), query, HistoryFilters(), limit=20, now=timezone.now(), routes=routes
    )
    text, names = positional(sql)
    return text, [params[name] for name in names]


def _execute(values: list[Any], *, explain: bool = False) -> Any:
    placeholders = ", ".join(["%s"] * len(values))
    prefix = "EXPLAIN (ANALYZE, FORMAT JSON) " if explain else ""
    with connection.cursor() as cursor:
        cursor.execute(f"{prefix}EXECUTE plan_safety({placeholders})", values)
        return cursor.fetchall()


def _nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def rows_read(plan: dict) -> int:
    """Rows every scan of the messages and their documents read, kept or filtered out."""
    return sum(
        (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0))
        * node.get("Actual Loops", 1)
        for node in _nodes(plan)
        if node.get("Relation Name") in TABLES
    )


def heavy_scans(plan: dict) -> list[tuple[str, str, str, int]]:
    """The scans that read the most, for a failure's message."""
    scans = [
        (
            node["Node Type"],
            node.get("Index Name", ""),
            node.get("Index Cond", node.get("Filter", ""))[:120],
            (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0))
            * node.get("Actual Loops", 1),
        )
        for node in _nodes(plan)
        if node.get("Relation Name") in TABLES
    ]
    return sorted(scans, key=lambda scan: -scan[3])[:5]


def _prepared_then_grown(new_run, grow, routes, text=QUERY, **growth) -> list[Any]:
    """The statement prepared under a generic plan and run on the small world, the world grown,
    and the values of the same statement for the grown world."""
    made, values = _statement(new_run(), routes, text)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE plan_safety AS {made}")
    _execute(values)
    grow(**growth)
    later, values = _statement(new_run(), routes, text)
    assert later == made  # the same statement, so the same prepared plan
    return values


@pytest.fixture(autouse=True)
def _deallocated() -> Iterator[None]:
    yield
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")


@pytest.fixture
def world_to_grow(world):
    """The agent's public room and a room it never joined, a thousand messages in each, with
    statistics for them; and a way to grow both by ``GROWTH`` messages without ANALYZE."""
    room = factories.joined_room(world.workspace, "Dana Example", kind="public")
    (dana,) = room.people
    unseen = factories.make_conversation(world.workspace, "public", "unseen")
    factories.fill_messages(room, dana.id, 1_000, content_sql=CONTENT)
    factories.fill_messages(unseen, dana.id, 1_000, content_sql=CONTENT)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {', '.join(sorted(TABLES))}")

    def grow(*, flood: bool = False) -> None:
        """Both rooms grow alike, or (``flood``) the room the agent never joined grows after
        everything else by messages that all hold the mid word."""
        with connection.cursor() as cursor:
            for conversation in (room, unseen):
                content = FLOOD if flood and conversation == unseen else CONTENT
                later = GROWTH if flood and conversation == unseen else 0
                cursor.execute(
                    f"""INSERT INTO {Message._meta.db_table}
                            (id, workspace_id, conversation_id, seq, role, status,
                             sender_account_id, content, created_at)
                        SELECT gen_random_uuid(), %s, %s, n, 'user', 'sent', %s, {content},
                               %s::timestamptz + (n + %s) * interval '1 second'
                        FROM generate_series(1001, %s) AS n""",
                    [
                        conversation.workspace_id,
                        conversation.id,
                        dana.id,
                        factories.T0,
                        later,
                        1_000 + GROWTH,
                    ],
                )

    def new_run():
        run, _ = factories.make_run(room.agent, room, dana)
        return run

    return new_run, grow


# The routes fresh statistics give the grown world's words (common, mid, rare), and the routes
# of statistics made before it grew, which call every word rare: the one scan of them then
# reads its bound and the words are walked instead.
FRESH = (terms.SLICES, terms.BUCKETS, terms.ALL)
STALE = (terms.ALL, terms.ALL, terms.ALL)


@pytest.mark.parametrize("routes", [FRESH, STALE], ids=["fresh statistics", "stale statistics"])
def test_a_generic_plan_made_on_small_tables_reads_a_bounded_number_of_rows(world_to_grow, routes):
    new_run, grow = world_to_grow
    with mock.patch.object(terms, "RARE_READ", 1_000):
        values = _prepared_then_grown(new_run, grow, routes)

    ((explained,),) = _execute(values, explain=True)
    (plan,) = explained

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE name = 'plan_safety'"
        )
        assert cursor.fetchone() == (2, 0)  # both runs from the one plan made before growth
    assert rows_read(plan["Plan"]) <= READ_BOUND, heavy_scans(plan["Plan"])
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {Message._meta.db_table}")
        assert cursor.fetchone()[0] > 2 * GROWTH  # what a search over all of them would read


@pytest.mark.parametrize("route", [terms.BUCKETS, terms.ALL])
def test_a_flood_of_withheld_matches_newer_than_everything_is_not_read_past_the_bound(
    world_to_grow, route
):
    """Twenty thousand withheld messages holding the word, newer than every eligible one, all
    in the newest bucket: the bucket walk reads its bound of them and walks the agent's room
    instead, from the agent's own newest message, whose mid word is in one in fifty."""
    new_run, grow = world_to_grow
    with (
        mock.patch.object(terms, "RARE_READ", 500),
        mock.patch.object(terms, "BUCKET_READ", 1_000),
        mock.patch.object(terms, "TERM_CANDIDATES", 32),
    ):
        values = _prepared_then_grown(new_run, grow, (route,), "midword", flood=True)
        ((explained,),) = _execute(values, explain=True)
        (plan,) = explained
    assert rows_read(plan["Plan"]) <= READ_BOUND, heavy_scans(plan["Plan"])
    assert plan["Plan"]["Actual Rows"] > 0  # it answered (its hits are the oracle tests' concern)


def test_a_named_participants_messages_are_read_within_their_bound(world_to_grow):
    """A query naming Dana, who wrote every message: a generic plan made on the small world
    reads her newest ``NAMED_READ`` eligible messages, not her twenty thousand in the agent's
    room (nor those in the room it never joined). (Here she wrote every message, so the plan
    may read them through the timeline index as cheaply as through the sender index.)"""
    new_run, grow = world_to_grow
    with mock.patch.object(candidates, "NAMED_READ", 1_000):
        values = _prepared_then_grown(new_run, grow, (terms.ALL,) * 2, "dana midword")
        ((explained,),) = _execute(values, explain=True)
        (plan,) = explained
    assert rows_read(plan["Plan"]) <= READ_BOUND, heavy_scans(plan["Plan"])
