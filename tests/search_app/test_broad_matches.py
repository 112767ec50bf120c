"""search_history stays linear in its matches whatever the planner estimates.

PostgreSQL estimates a prefix's matches, and a word it has no statistics for, at a handful of
rows. Each aggregate of the history statement must still be computed once: an aggregate
re-evaluated per match (a nested loop around an inlined CTE) made a 10,000-match prefix take
5 s and a 15,000-match one hit the statement timeout. The plan is read from
``EXPLAIN (ANALYZE, FORMAT JSON)``; the time bound is generous (the quadratic plan took over
10 s here, the linear one a few hundred milliseconds) and only backs the plan test up.
Synthetic text only.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from search_app import scope as run_scopes
from search_app.history.results import HistoryFilters
from search_app.history.statement import hits_statement
from search_app.query.parse import parse_query
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

MATCHES = 15_000
GENEROUS_SECONDS = 5.0
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
    scope, _ = run_scopes.run_scope(workspace_id=run.workspace_id, run_id=run.id, lock=None)
    return hits_statement(scope, query, HistoryFilters(), limit=8, now=at(10**6))


def _assert_linear(room, query_text: str) -> None:
    run, _ = factories.make_run(room.agent, room, room.people[0])
    sql, params = _statement(run, query_text)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0][0]["Plan"]
    repeated = [
        (node["Node Type"], node.get("CTE Name"), node["Actual Loops"])
        for node in _nodes(plan)
        if node["Actual Loops"] > 1 and _reads_all_matches(node)
    ]
    assert not repeated, f"a pass over all matches was repeated: {repeated}"
    started = time.perf_counter()
    result = factories.history(run, query_text, limit=8, now=at(10**6))
    elapsed = time.perf_counter() - started
    assert len(result.hits) == 8
    assert elapsed < GENEROUS_SECONDS, f"{MATCHES} matches took {elapsed:.1f} s"


def test_a_prefix_of_fifteen_thousand_words_is_linear(room):
    factories.fill_messages(
        room, room.people[0].id, MATCHES, content_sql="'vm' || n || ' synthetic status'"
    )
    _assert_linear(room, "vm*")


def test_a_fresh_word_in_fifteen_thousand_messages_is_linear(room):
    factories.fill_messages(
        room,
        room.people[0].id,
        MATCHES,
        content_sql="'zephyrine status number ' || n",
        analyze=False,
    )
    _assert_linear(room, "zephyrine")
