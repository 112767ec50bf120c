"""The threshold algorithm of the hits statement chooses what full scoring would (docs/search.md).

``queries._partial_cte`` reads term frequencies only for the matches whose upper bound can
reach the context pool; ``exhaustive=True`` scores every eligible match instead. On seeded
random worlds (words of a small vocabulary with repeats and lengths that vary, three speakers,
one of them named by some queries, two rooms, times spread over months) and many queries, the
two statements answer row for row the same: the same hits, in the same order, with the same
values, and the same neighbours. Synthetic text only.
"""

from __future__ import annotations

import random

import pytest
from django.db import connection

from search_app import perspective
from search_app.models import MessageSearchDocument
from search_app.queries import CONTEXT_POOL, HistoryFilters, hits_statement
from search_app.text import parse_query
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

VOCABULARY = ["harbor", "quartz", "ledger", "signal", "meadow", "copper", "lantern", "orbit"]
COMMON = "status"  # in nearly every message: more matches than the pool holds
MESSAGES = 160
QUERIES = 12


def _world(seed: int):
    """A destination and another room the run may read, ``MESSAGES`` random messages."""
    rng = random.Random(seed)
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    people = [factories.make_account(workspace, name) for name in ("Dana Example", "Eli", "Fay")]
    rooms = [factories.make_conversation(workspace, "private", title) for title in ("a", "b")]
    for room in rooms:
        for member in (agent, *people):
            factories.join(room, member, joined_at=at(-(10**6)))
    for number in range(MESSAGES):
        words = [rng.choice(VOCABULARY) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.9:
            words.insert(rng.randrange(len(words) + 1), COMMON)
        factories.post(
            rng.choice(rooms),
            rng.choice(people),
            " ".join(words),
            created_at=at(-rng.randint(0, 200 * 24 * 60) + number / 1000),
        )
    run, _ = factories.make_run(agent, rooms[0], people[1])
    return run, rng


def _answer(sql: str, params: dict) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row for row in cursor.fetchall() if row[0] != "exclusion"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_early_stop_answers_exactly_as_full_scoring(seed):
    run, rng = _world(seed)
    scope, _ = perspective.run_scope(workspace_id=run.workspace_id, run_id=run.id, lock=None)
    queries = [COMMON, f"{COMMON} harbor", "dana status quartz"]
    while len(queries) < QUERIES:
        words = rng.sample([*VOCABULARY, COMMON, "dana", "lant*"], rng.randint(1, 4))
        queries.append(" ".join(words))
    broad = 0
    for text in queries:
        query = parse_query(text, workspace_id=run.workspace_id)
        for limit in (1, 8, 20):
            statements = [
                hits_statement(
                    scope, query, HistoryFilters(), limit=limit, now=at(0), exhaustive=full
                )
                for full in (False, True)
            ]
            early, full = (_answer(*statement) for statement in statements)
            assert early == full, f"query {text!r}, limit {limit}"
            assert early
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM {MessageSearchDocument._meta.db_table}"
                " WHERE workspace_id = %s AND document @@ %s::tsquery",
                [run.workspace_id, query.tsquery],
            )
            broad += cursor.fetchone()[0] > CONTEXT_POOL
    # The pool really was cut short: most queries match more messages than it holds.
    assert broad >= QUERIES // 2
