"""Statements run as server-side prepared statements with a generic plan: planned once per
connection, never per call.

Django binds parameters on the client, so PostgreSQL parses and plans every statement again on
every call. For most statements that costs a fraction of a millisecond; a statement of a few
dozen CTEs (search_history's) takes longer to plan than a rare-term search takes to run.
Prepared, it is planned once on each pooled connection, and generically
(``SET LOCAL plan_cache_mode = force_generic_plan`` in its transaction: PostgreSQL's default
would plan the first five calls with their values and then only maybe settle on the generic
plan, so the cost of a call would depend on its connection's history). A statement run here
must therefore be safe under any plan its tables' statistics can give it, which its own tests
show (``tests/search_app/test_plan_safety.py``).

The statement goes out in a pipeline with its transaction's ``BEGIN`` and that ``SET LOCAL``:
one round trip, whose only other one is the ``COMMIT`` the caller's ``atomic`` block sends
once it has done with the rows (so a failure while it reads them still keeps nothing).

``DATABASE_PREPARED_STATEMENTS=0`` turns preparing off (behind a pooler that cannot carry
prepared statements across transactions, PgBouncer in transaction mode before 1.21); a
connection that logs its queries (DEBUG, a test capturing them) runs the statement unprepared,
so the log holds it with its values. So does a Citus coordinator: Citus prunes the shards of a
statement with several tables or CTEs (a router query) only with the workspace's value in
hand, and defers that pruning to execution only for single-table statements and ``INSERT``s
(its "fast path"), so it refuses a generic plan of search_history's statement ("could not
create distributed plan") and, left to choose, plans it on every call anyway.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from psycopg.rows import namedtuple_row

from formation.sql import named_rows

GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan"


class _PreparingCursor(psycopg.RawCursor):
    """A server-binding cursor whose every statement is prepared (psycopg keeps the
    connection's prepared statements and deallocates the least recently used), written with
    PostgreSQL's own ``$n`` placeholders, so psycopg does not parse its text on every call."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


_NAMED = re.compile(r"%\((\w+)\)s|%%")


@lru_cache(maxsize=256)
def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with its ``%(name)s`` placeholders as ``$1``, ``$2``, … (one number per name)
    and ``%%`` as ``%``, and the names in their numbers' order: converted once per text, where
    psycopg would convert a statement this long on every call."""
    names: dict[str, int] = {}

    def number(match: re.Match) -> str:
        if match.group(1) is None:
            return "%"
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return _NAMED.sub(number, sql), tuple(names)


def fetch_all(sql: str, params: Mapping[str, Any]) -> list[Any]:
    """Every row of ``sql`` with ``params``, as named tuples (read by column name, like
    ``formation.sql.named_rows``), run prepared on Django's connection inside the caller's
    transaction, through Django's cursor wrapper (execute wrappers such as the statement
    timeout, and error translation, see it like any other statement)."""
    if not connection.in_atomic_block:
        raise RuntimeError("fetch_all runs its statement in the caller's transaction.")
    if (
        not settings.DATABASE_PREPARED_STATEMENTS
        or connection.queries_logged
        or connection.is_citus
    ):
        with named_rows() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    connection.ensure_connection()
    raw = connection.connection
    text, names = positional(sql)
    preparing = _PreparingCursor(raw, row_factory=namedtuple_row)
    # Errors of the pipeline and the SET LOCAL, outside Django's cursor, become Django's too
    # (a connection lost to a restart is then 503 unavailable, as for any other statement).
    with (
        connection.wrap_database_errors,
        raw.pipeline(),
        connection.make_cursor(preparing) as cursor,
    ):
        raw.execute(GENERIC_PLANS)
        cursor.execute(text, [params[name] for name in names])
        return cursor.fetchall()
