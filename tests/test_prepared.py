"""formation/prepared.py: a statement it runs fails as any statement run through Django does."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, connection, transaction

from formation import prepared


def prepared_statement_on_a_lost_connection() -> None:
    """``fetch_all`` in a transaction whose connection the server has just closed."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with transaction.atomic():
        with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
            other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        prepared.fetch_all("SELECT 1 AS one", {})


@pytest.mark.django_db(transaction=True)
def test_a_lost_connection_is_djangos_operational_error_so_the_api_answers_503():
    """PostgreSQL restarted under a search (bench/faults.py): the error must be the one the
    API's handler answers ``503 unavailable``, not psycopg's own, which it answers 500."""
    with pytest.raises(OperationalError):
        prepared_statement_on_a_lost_connection()
