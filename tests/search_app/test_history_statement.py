"""The hits statement's composition (``search_app.history``): its CTEs in the order its stages
run, and its one result set named by ``answer.ANSWER_COLUMNS``, as PostgreSQL names it too."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from formation.sql import named_rows
from search_app.history import answer
from search_app.history.results import HistoryFilters
from search_app.history.statement import hits_statement
from search_app.query.parse import parse_query
from search_app.scope import Perspective
from tests import factories

pytestmark = pytest.mark.django_db

PLAN = [
    # run
    "run",
    "destination_readers",
    "direct_reader",
    "direct_continuity",
    "permitted",
    "permitted_array",
    "agent_memberships",
    "agent_rooms",
    "unknown_rooms",
    "observed_intervals",
    "requester_accounts",
    "state",
    # matches (the requester's rooms, a signal)
    "requester_rooms",
    # terms
    "terms",
    "extent",
    "bucket_keys",
    # candidates
    "rare_matches",
    "rare_overflow",
    "walk",
    "walked",
    "named_people",
    "named_matches",
    "examined",
    "excluded",
    "exclusion_counts",
    "term_matches",
    "term_counts",
    "matches",
    # matches
    "match_speakers",
    "weights",
    "partial",
    # context
    "pool",
    "windows",
    "window_words",
    "receivers",
    "receiver_speakers",
    "candidates",
    # page
    "leaders",
    "floor",
    "contenders",
    "ranked",
    "page",
    "nearby",
    # spend
    "hit_spend",
    "kept_hits",
    "offered",
    "taken",
    "left_out",
    # record
    "page_scores",
    "recorded",
    "audited",
]


@pytest.fixture
def statement(world):
    factories.post(world.private, world.bob, "sample chatter before")
    factories.post(world.private, world.alice, "sample orbit launch window")
    factories.post(world.private, world.bob, "sample orbit launch notes")
    question = factories.post(world.private, world.alice, "sample orbit question")
    run, _ = factories.make_run(world.agent, world.private, world.alice, current=question)
    return hits_statement(
        Perspective.of_run(run),
        parse_query("orbit launch"),
        HistoryFilters(speaker="requester", after=timezone.now().replace(year=2000)),
        limit=5,
        now=timezone.now(),
    )


def test_the_ctes_come_in_the_plans_order_each_once(statement):
    sql, _ = statement
    defined = re.findall(
        r"(?:WITH RECURSIVE|,)\s+(\w+)\s*(?:\([^)]*\))?\s+AS (?:MATERIALIZED )?\(", sql
    )
    assert defined == PLAN


def test_the_result_set_is_named_by_the_answer_columns(statement):
    sql, params = statement
    with named_rows() as cursor:
        cursor.execute(sql, params)
        names = [column.name for column in cursor.description]
        rows = cursor.fetchall()
    assert names == list(answer.ANSWER_COLUMNS)
    assert {row.kind for row in rows} == {"state", "hit", "neighbour", "exclusion"}
    assert all(row.reason is None for row in rows if row.kind == "hit")
