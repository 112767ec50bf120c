"""Running a request's database work again when that is safe: its first statement on a fresh
connection when the pool lent a dead one (``on_a_live_connection``), and whole transactions
that PostgreSQL rolled back to break a deadlock or a serialization conflict
(``retrying_conflicts``). Each retries only where nothing of the request has been kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import psycopg
from django.db import OperationalError, connection

from formation.db_timeouts import PENDING

logger = logging.getLogger("formation.db")

T = TypeVar("T")


def on_a_live_connection(first_statement: Callable[[], T]) -> T:
    """Run a request's first statement, once more on a fresh connection if the one lent was dead.

    The pool hands connections out without a round trip to test them (``CONN_HEALTH_CHECKS``
    is off with it), so after a PostgreSQL restart its idle connections are dead until used.
    When the first statement finds its connection broken, nothing of the request has run yet:
    the pool tests its other idle connections (one round trip each, only now), the dead one is
    dropped, and the statement runs again on a fresh connection with the same pending timeout.
    A database that is really down fails the second attempt too, and the request answers 503.
    """
    pending = getattr(connection, PENDING, None)
    try:
        return first_statement()
    except OperationalError:
        raw = connection.connection
        if connection.in_atomic_block or raw is None or not raw.broken:
            raise
    logger.warning("the pool lent a closed connection; retrying on a fresh one")
    pool = getattr(connection, "pool", None)
    connection.close()
    if pool is not None:
        pool.check()
    connection.ensure_connection()
    setattr(connection, PENDING, pending)
    return first_statement()


# Transactions PostgreSQL (or Citus, across nodes) rolled back to break a deadlock or a
# serialization conflict: nothing of them is left, so running them again is safe.
CONFLICTS = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
CONFLICT_ATTEMPTS = 3


def retrying_conflicts(work: Callable[[], T]) -> T:
    """Run ``work`` (whole transactions), again when one was rolled back by a deadlock or a
    serialization failure: at most ``CONFLICT_ATTEMPTS`` times, and only outside any
    transaction, where the rollback undid everything ``work`` did. On Citus a shard move's
    switch-over can break such a deadlock between two calls of one run."""
    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return work()
        except OperationalError as problem:
            if (
                attempt == CONFLICT_ATTEMPTS
                or connection.in_atomic_block
                or not isinstance(problem.__cause__, CONFLICTS)
            ):
                raise
            logger.warning(
                "transaction rolled back by %s; running it again", type(problem.__cause__).__name__
            )
    raise AssertionError("unreachable")
