"""A transaction PostgreSQL rolled back to break a deadlock runs again, whole, and only when
nothing outside it could have kept part of it (formation.db_retries.retrying_conflicts)."""

import pytest
from django.db import OperationalError, connection, transaction

from formation.db_retries import CONFLICT_ATTEMPTS, retrying_conflicts
from messages_app.models import Workspace

pytestmark = pytest.mark.django_db(transaction=True)


def _raise_from_the_server(sqlstate: str) -> None:
    """The error PostgreSQL raises when it breaks a deadlock (40P01) or a serialization
    conflict (40001), raised by the server itself."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '{sqlstate}'; END $$"
        )


def _work_failing(times: int, sqlstate: str = "40P01"):
    attempts = []

    def work() -> int:
        attempts.append(1)
        with transaction.atomic():
            Workspace.objects.create(slug=f"retry-{len(attempts)}", name="Retry")
            if len(attempts) <= times:
                _raise_from_the_server(sqlstate)
        return len(attempts)

    return work, attempts


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])
def test_a_rolled_back_transaction_runs_again_and_keeps_only_its_last_run(sqlstate):
    work, _ = _work_failing(1, sqlstate)
    assert retrying_conflicts(work) == 2
    assert list(
        Workspace.objects.filter(slug__startswith="retry-").values_list("slug", flat=True)
    ) == ["retry-2"]


def test_it_gives_up_after_its_attempts():
    work, attempts = _work_failing(CONFLICT_ATTEMPTS)
    with pytest.raises(OperationalError):
        retrying_conflicts(work)
    assert len(attempts) == CONFLICT_ATTEMPTS
    assert not Workspace.objects.filter(slug__startswith="retry-").exists()


def test_inside_a_transaction_nothing_runs_again():
    work, attempts = _work_failing(1)
    with pytest.raises(OperationalError), transaction.atomic():
        retrying_conflicts(work)
    assert len(attempts) == 1


def test_other_database_errors_are_not_run_again():
    attempts = []

    def work() -> None:
        attempts.append(1)
        _raise_from_the_server("08006")

    with pytest.raises(OperationalError):
        retrying_conflicts(work)
    assert len(attempts) == 1
