"""A PostgreSQL ``statement_timeout`` for API requests, and only for them.

Why a middleware rather than a connection option (``options=-c statement_timeout=…``): an
option would bind every statement of the process, so it would have to be kept out of
``migrate``, ``rebuild_search_documents`` and the admin by knowing which process is which, and
a pooled connection keeps its options for life. Here the timeout is set on the request's
connection (``SET``, committed at once: no transaction is open yet, as ``ATOMIC_REQUESTS`` is
off) before the view runs and reset after it, so management commands, the admin and the
health probes never see it. The price is two short round trips per API request.

A cancelled statement raises ``psycopg.errors.QueryCanceled`` (an ``OperationalError``), which
``formation.errors`` answers as 503 ``unavailable``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse

from formation.errors import Unavailable, api_error_response

logger = logging.getLogger("formation.db")

API_PREFIX = "/api/"


def set_statement_timeout(milliseconds: int) -> None:
    """Session-level (``false``): it must outlive the transactions the view opens and closes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, false)", [f"{milliseconds}ms"])


def reset_statement_timeout() -> None:
    """Back to the server's default before the connection returns to the pool.

    If that fails the session's state is unknown, so the connection is dropped rather than
    handed, still limited, to the next user of the pool. Inside an enclosing transaction (only
    tests wrap requests in one) the SET belongs to it, and its rollback undoes both.
    """
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
            # The first statement of the request: this is where an outage shows up first.
            logger.warning("database unavailable: %s", type(error).__name__)
            return api_error_response(Unavailable())
        try:
            return self.get_response(request)
        finally:
            reset_statement_timeout()
