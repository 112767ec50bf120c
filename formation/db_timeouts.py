"""A PostgreSQL ``statement_timeout`` for API requests, and only for them.

Why per request rather than a connection option (``options=-c statement_timeout=…``): an
option would bind every statement of the process, so it would have to be kept out of
``migrate``, ``rebuild_search_documents`` and the admin by knowing which process is which, and
a pooled connection keeps its options for life. Here the timeout is set on the request's
connection before the view's first statement and reset after it, so management commands, the
admin and the health probes never see it, and the pool lends every request a clean session.

It costs no round trip of its own to set: ``set_statement_timeout`` only records the value,
and the request's first statement carries it (``claim_statement_timeout``: the token look-up
reads it into its own statement as ``set_config``, session level, because the view's
transactions open and close after it). Any other first statement gets a ``SET`` of its own
just before it (``apply_pending_timeout``), so no statement of the request ever runs
unbounded. The reset is one short round trip when the response is closed, before the
connection goes back to the pool: the server has handed the answer to the client by then.

A cancelled statement raises ``psycopg.errors.QueryCanceled`` (an ``OperationalError``), which
``formation.errors`` answers as 503 ``unavailable``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse

from formation.errors import Unavailable, api_error_response

logger = logging.getLogger("formation.db")

API_PREFIX = "/api/"
# Where the value waits on the connection (Django's wrapper, one per thread; ``connection``
# forwards attributes to it) until a statement carries it.
PENDING = "formation_pending_statement_timeout"


def set_statement_timeout(milliseconds: int) -> None:
    """Bound every statement from the next one on: recorded now, sent with that statement.

    The connection is taken now (from the pool: no round trip), so a database that cannot be
    reached answers before the view runs."""
    connection.ensure_connection()
    setattr(connection, PENDING, f"{milliseconds}ms")


def claim_statement_timeout() -> str | None:
    """The value to send with the statement about to run (``set_config(..., false)``), if one
    is pending; the caller's statement then carries it, so nothing else will."""
    pending = getattr(connection, PENDING, None)
    if pending is not None:
        setattr(connection, PENDING, None)
    return pending


def apply_pending_timeout(execute, sql, params, many, context):
    """An execute wrapper: a statement that finds the timeout still pending sets it first."""
    pending = claim_statement_timeout()
    if pending is not None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, false)", [pending])
    return execute(sql, params, many, context)


def reset_statement_timeout() -> None:
    """Back to the server's default before the connection returns to the pool.

    If that fails the session's state is unknown, so the connection is dropped rather than
    handed, still limited, to the next user of the pool. Inside an enclosing transaction (only
    tests wrap requests in one) the SET belongs to it, and its rollback undoes both.
    """
    setattr(connection, PENDING, None)
    if connection.connection is None:
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("RESET statement_timeout")
    except DatabaseError:
        if connection.in_atomic_block:
            return
        logger.warning("statement_timeout reset failed; discarding the connection")
        connection.connection.close()
        connection.close()


@contextmanager
def api_statement_timeout(milliseconds: int) -> Iterator[None]:
    """Every statement inside the block bounded by ``milliseconds``, reset after it."""
    set_statement_timeout(milliseconds)
    try:
        with connection.execute_wrapper(apply_pending_timeout):
            yield
    finally:
        reset_statement_timeout()


class StatementTimeoutMiddleware:
    """Bound every SQL statement of an ``/api/`` request by ``API_STATEMENT_TIMEOUT_MS``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        milliseconds = settings.API_STATEMENT_TIMEOUT_MS
        if not milliseconds or not request.path_info.startswith(API_PREFIX):
            return self.get_response(request)
        try:
            set_statement_timeout(milliseconds)
        except DatabaseError as error:
            logger.warning("database unavailable: %s", type(error).__name__)
            return api_error_response(Unavailable())
        try:
            with connection.execute_wrapper(apply_pending_timeout):
                response = self.get_response(request)
        except BaseException:
            reset_statement_timeout()
            raise
        if response.streaming:
            # Its statements run while it is written, after this returns: unbounded, as before.
            reset_statement_timeout()
        else:
            # Django runs a response's closers when the server closes it, before
            # ``request_finished`` returns the connection to the pool (the test client does
            # the same before it returns): the reset is done by then, but the client no
            # longer waits for it (formation/serving.py writes the answer first).
            response._resource_closers.append(reset_statement_timeout)
        return response
