"""Statements run as server-side prepared statements, planned per connection, not per call.

Django binds parameters on the client, so PostgreSQL parses and plans every statement again on
every call. For most statements that costs a fraction of a millisecond; a statement of a dozen
CTEs (search_history's) takes longer to plan than a rare-term search takes to run. Prepared,
it is planned with its values for its first five runs on a connection and then, where
PostgreSQL finds a generic plan no worse, not planned at all; the pooled connection keeps it.

It is off unless ``DATABASE_PREPARED_STATEMENTS=1``. A generic plan is made from the tables'
statistics at the time; made while a table was nearly empty and kept after it grew, one read
each candidate's document through the GIN index rather than the primary key, once per row
(docs/search.md). Leave it off behind a pooler that cannot carry prepared statements across
transactions (PgBouncer in transaction mode before 1.21).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from psycopg.rows import namedtuple_row

from formation.sql import named_rows


class _PreparingCursor(psycopg.Cursor):
    """A server-binding cursor whose every statement is prepared (psycopg keeps the
    connection's prepared statements and deallocates the least recently used)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


def fetch_all(sql: str, params: Mapping[str, Any]) -> list[Any]:
    """Every row of ``sql`` with ``params``, as named tuples (read by column name, like
    ``formation.sql.named_rows``), run prepared on Django's connection, through
    Django's cursor wrapper (execute wrappers such as the statement timeout, and error
    translation, see it like any other statement). A connection that logs its queries (DEBUG,
    a test capturing them) runs it unprepared, so the log holds the statement with its values."""
    if not settings.DATABASE_PREPARED_STATEMENTS or connection.queries_logged:
        with named_rows() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    connection.ensure_connection()
    preparing = _PreparingCursor(connection.connection, row_factory=namedtuple_row)
    with connection.make_cursor(preparing) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
