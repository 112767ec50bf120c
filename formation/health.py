"""Probes for an orchestrator or load balancer, outside ``/api/v1`` and without a token.

``/healthz`` says the process is up and answers without touching the database, so a database
outage never gets healthy workers restarted. ``/readyz`` says this process can serve: the
database answers and every migration on disk is applied (a new release waits for ``migrate``).
Both answer small fixed JSON that names no host, database or migration.
"""

from __future__ import annotations

from django.db import DatabaseError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse

PROBE_METHODS = ("GET", "HEAD")
# A probe must answer quickly or not at all; a stuck database is "not ready".
READINESS_STATEMENT_TIMEOUT = "2s"


def _probe_response(body: dict, status: int = 200) -> JsonResponse:
    return JsonResponse(body, status=status, headers={"Cache-Control": "no-store"})


def _not_allowed() -> JsonResponse:
    response = _probe_response({"status": "method_not_allowed"}, status=405)
    response["Allow"] = ", ".join(PROBE_METHODS)
    return response


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the worker is up and handling requests."""
    if request.method not in PROBE_METHODS:
        return _not_allowed()
    return _probe_response({"status": "ok"})


def pending_migration_count() -> int:
    """Migrations on disk not yet recorded as applied in the database."""
    executor = MigrationExecutor(connection)
    return len(executor.migration_plan(executor.loader.graph.leaf_nodes()))


def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: the database is reachable and fully migrated; 503 otherwise."""
    if request.method not in PROBE_METHODS:
        return _not_allowed()
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true)", [READINESS_STATEMENT_TIMEOUT]
            )
            pending = pending_migration_count()
            # Nothing to commit; rolling back also ends the local timeout when the probe runs
            # inside an outer transaction (a savepoint, as in tests).
            transaction.set_rollback(True)
    except DatabaseError:
        return _probe_response(
            {"status": "unavailable", "checks": {"database": "unreachable"}}, status=503
        )
    if pending:
        return _probe_response(
            {
                "status": "unavailable",
                "checks": {"database": "ok", "migrations": "pending", "pendingMigrations": pending},
            },
            status=503,
        )
    return _probe_response({"status": "ok", "checks": {"database": "ok", "migrations": "ok"}})
