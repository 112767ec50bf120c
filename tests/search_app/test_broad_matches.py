"""search_history stays linear in its matches whatever the planner estimates.

PostgreSQL estimates a prefix's matches, and a word it has no statistics for, at a handful of
rows. Each aggregate of the history statement must still be computed once: an aggregate
re-evaluated per match (a nested loop around an inlined CTE) made a 10,000-match prefix take
5 s and a 15,000-match one hit the statement timeout. The plan is read from
``EXPLAIN (ANALYZE, FORMAT JSON)``, for the plan made with the search's values and for the
generic plan a prepared statement falls back to (``formation/prepared.py``: after five runs on
a connection PostgreSQL may stop planning with values at all). The time bound is generous (the
quadratic plan took over 10 s here, the linear one a few hundred milliseconds) and only backs
the plan test up.

The search is first run on the empty room with generic plans forced, as earlier tests of the
suite leave it on their shared connection, so the prepared statement holds a generic plan made
on nearly empty tables; the timed search runs with a generic plan too. Once a table's statistics
change, PostgreSQL drops such plans (autovacuum's ANALYZE does that in production); the suite's
rolled-back transactions never let autovacuum run, so ``DISCARD PLANS`` stands in for it. In
CI, a plan kept from earlier tests took 38 s for these matches. Made on nearly empty tables,
such a plan can read each candidate's document through the GIN index's ``workspace_id``
column: every document of the workspace, per candidate.
Synthetic text only.
"""

from __future__ import annotations

import re
import time

import pytest
from django.db import connection

from search_app import perspective
from search_app.queries import HistoryFilters, hits_statement
from search_app.text import parse_query
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

MATCHES = 15_000
GENEROUS_SECONDS = 5.0
WARM_RUNS = 3
# Rows a step repeated per row may read in all: a few passes over the matches, never one per
# match (that is quadratic: a look-up reading the whole workspace per candidate).
MOST_REPEATED_ROWS = 20 * MATCHES
# The CTEs that hold a row per match: each is read in one pass, and so is every aggregate
# over them.
ALL_MATCHES = ("matches", "partial")


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _reads_all_matches(node: dict) -> bool:
    return any(
        inner["Node Type"] == "CTE Scan" and inner["CTE Name"] in ALL_MATCHES
        for inner in _nodes(node)
    )


@pytest.fixture
def room(world):
    return factories.joined_room(world.workspace, "Dana Example")


def _statement(run, query_text: str):
    query = parse_query(query_text, workspace_id=run.workspace_id)
    scope, _ = perspective.run_scope(workspace_id=run.workspace_id, run_id=run.id, lock=None)
    return hits_statement(scope, query, HistoryFilters(), limit=8, now=at(10**6))


def _custom_plan(sql: str, params: dict) -> dict:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        return cursor.fetchone()[0][0]["Plan"]


def _generic_plan(sql: str, params: dict) -> dict:
    """The plan of the statement prepared with ``$n`` parameters and planned without their
    values, as PostgreSQL's plan cache does once it prefers a generic plan."""
    names: list[str] = []

    def numbered(match: re.Match) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", numbered, sql).replace("%%", "%")
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("PREPARE broad_probe AS " + text)
        try:
            cursor.execute(
                "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE broad_probe("
                + ", ".join(["%s"] * len(names))
                + ")",
                [params[name] for name in names],
            )
            return cursor.fetchone()[0][0]["Plan"]
        finally:
            cursor.execute("DEALLOCATE broad_probe")
            cursor.execute("RESET plan_cache_mode")


def _force_generic_plans() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")


def _warm(room, query_text: str) -> None:
    """The search on the still empty room, so the prepared statement's generic plan is made
    on nearly empty tables."""
    run, _ = factories.make_run(room.agent, room, room.people[0])
    _force_generic_plans()
    for _ in range(WARM_RUNS):
        factories.history(run, query_text, limit=8, now=at(10**6))


def _assert_linear(room, query_text: str) -> None:
    run, _ = factories.make_run(room.agent, room, room.people[0])
    sql, params = _statement(run, query_text)
    for name, plan in (
        ("custom", _custom_plan(sql, params)),
        ("generic", _generic_plan(sql, params)),
    ):
        repeated = [
            (node["Node Type"], node.get("CTE Name"), node["Actual Loops"])
            for node in _nodes(plan)
            if node["Actual Loops"] > 1 and _reads_all_matches(node)
        ]
        assert not repeated, f"the {name} plan repeated a pass over all matches: {repeated}"
        wide = [
            (node["Node Type"], node.get("Index Name"), node["Actual Loops"], node["Actual Rows"])
            for node in _nodes(plan)
            if node["Actual Loops"] > 1
            and node["Actual Loops"] * node["Actual Rows"] > MOST_REPEATED_ROWS
        ]
        assert not wide, f"a step repeated per row in the {name} plan read too much: {wide}"
    with connection.cursor() as cursor:
        cursor.execute("DISCARD PLANS")
    _force_generic_plans()
    started = time.perf_counter()
    result = factories.history(run, query_text, limit=8, now=at(10**6))
    elapsed = time.perf_counter() - started
    assert len(result.hits) == 8
    assert elapsed < GENEROUS_SECONDS, f"{MATCHES} matches took {elapsed:.1f} s"


def test_a_prefix_of_fifteen_thousand_words_is_linear(room):
    _warm(room, "vm*")
    factories.fill_messages(
        room, room.people[0].id, MATCHES, content_sql="'vm' || n || ' synthetic status'"
    )
    _assert_linear(room, "vm*")


def test_a_fresh_word_in_fifteen_thousand_messages_is_linear(room):
    _warm(room, "zephyrine")
    factories.fill_messages(
        room,
        room.people[0].id,
        MATCHES,
        content_sql="'zephyrine status number ' || n",
        analyze=False,
    )
    _assert_linear(room, "zephyrine")
