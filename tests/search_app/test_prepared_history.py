"""search_history's statement runs prepared, and answers exactly as it does unprepared.

``formation/prepared.py`` runs it as a server-side prepared statement with a generic plan, so
that PostgreSQL plans it once per connection rather than per call, unless
``DATABASE_PREPARED_STATEMENTS=0`` turns that off. ``pg_prepared_statements`` counts each
prepared statement's plans, custom and generic, so the tests read there whether the search ran
prepared, and how. Synthetic text only.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

RUNS = 8  # beyond the five custom plans after which PostgreSQL's default may use a generic one


@pytest.fixture
def run(world):
    room = factories.joined_room(world.workspace, "Dana Example", "Eli Example")
    dana, eli = room.people
    for minute in range(12):
        sender = dana if minute % 2 else eli
        factories.post(room, sender, f"quartz harbor note {minute}", created_at=at(minute))
    factories.post(room, dana, "the harbor opens at noon", created_at=at(20))
    made, _ = factories.make_run(room.agent, room, dana)
    return made


def _plans() -> tuple[int, int]:
    """How many times the connection's prepared history statement has run from its generic
    plan, and from a custom plan made for its values (0, 0 when it was never prepared)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(sum(generic_plans), 0), COALESCE(sum(custom_plans), 0)"
            " FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%match_speakers AS MATERIALIZED%"],
        )
        generic, custom = cursor.fetchone()
        return int(generic), int(custom)


def _answer(run) -> list[tuple]:
    result = factories.history(run, "quartz harbor", limit=8, now=at(60))
    return [(hit.message.id, hit.score, tuple(sorted(hit.values.items()))) for hit in result.hits]


def test_the_statement_runs_prepared_and_answers_as_it_does_unprepared(run):
    generic, custom = _plans()
    with override_settings(DATABASE_PREPARED_STATEMENTS=False):
        unprepared = _answer(run)
    assert _plans() == (generic, custom)  # not prepared when turned off

    answers = [_answer(run) for _ in range(RUNS)]

    # Prepared by default, and every run from the one generic plan: none planned for its values.
    assert _plans() == (generic + RUNS, custom)
    assert len(unprepared) == 8
    assert all(answer == unprepared for answer in answers)
