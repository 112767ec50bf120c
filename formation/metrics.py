"""Prometheus metrics: the families every layer records into, and ``/metrics``.

The metric objects live here, in the bottom layer, so the apps record into them (search hits,
exclusions, delivery blocks, lifecycle runs) without ``formation`` importing any app. Requests
are recorded by ``formation.request_logging`` and tool calls by ``formation.tools``.

Privacy (SPEC §9). A label value is one of a fixed, small set that this code chooses: a route
pattern (never a path), a method, a status code, a tool name from the registry, an error code,
an exclusion or block reason from the lists below. Never an id, a name, query or message text.

Several gunicorn workers. gunicorn_conf.py points ``PROMETHEUS_MULTIPROC_DIR`` at a fresh
folder as gunicorn loads it, before the master imports this module (prometheus_client picks its
value store at import), so each worker writes its values to memory-mapped files there and a
scrape, whichever worker answers it, adds them up (prometheus_client's multiprocess mode).
Without it (``runserver``, tests) a process keeps its own values. A folder that is named but
cannot be created is not fatal: a warning, and per-process values.
"""

from __future__ import annotations

import hmac
import logging
import os
import time

logger = logging.getLogger("formation.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _usable_multiproc_dir() -> None:
    """Before prometheus_client is imported (it picks its value store then): drop a folder it
    could not write to, rather than fail on the first metric."""
    folder = os.environ.get(MULTIPROC_ENV)
    if not folder:
        return
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as problem:
        logger.warning(
            "%s cannot be created (%s); metrics are per process",
            MULTIPROC_ENV,
            type(problem).__name__,
        )
        del os.environ[MULTIPROC_ENV]


_usable_multiproc_dir()

# Imported after the check above, on purpose.
from django.conf import settings  # noqa: E402
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound  # noqa: E402
from prometheus_client import (  # noqa: E402
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

PREFIX = "formation"
# Request and tool latency: 2.5 ms (a get_message) to 10 s (the statement timeout).
LATENCY_BUCKETS = (0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Hits per search_history call (at most 20) and neighbours (at most four per hit).
HIT_BUCKETS = (0, 1, 2, 4, 8, 12, 16, 20)
NEIGHBOUR_BUCKETS = (0, 2, 4, 8, 16, 32, 48, 64, 80)

# The reasons SPEC §3 names, as search_app/perspective.py spells them, and the budget; any
# other value is counted as "other" rather than becoming a label.
EXCLUSION_REASONS = frozenset(
    {
        "not_observed",
        "deleted",
        "audience",
        "unknown_audience",
        "lineage",
        "current_message",
        "recent_history",
        "budget",
    }
)

REQUESTS = Counter(
    f"{PREFIX}_http_requests",
    "HTTP requests by route pattern, method and status.",
    ["endpoint", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    f"{PREFIX}_http_request_duration_seconds",
    "Time from the outermost middleware in to its answer, by route pattern.",
    ["endpoint"],
    buckets=LATENCY_BUCKETS,
)
TOOL_CALLS = Counter(
    f"{PREFIX}_tool_calls",
    "Agent tool calls (REST and MCP) by tool and outcome: ok or the error code.",
    ["tool", "outcome"],
)
TOOL_SECONDS = Histogram(
    f"{PREFIX}_tool_duration_seconds",
    "Time a tool's body took (REST and MCP), retries included, by tool.",
    ["tool"],
    buckets=LATENCY_BUCKETS,
)
API_ERRORS = Counter(
    f"{PREFIX}_api_errors",
    "Error envelopes answered, by error code.",
    ["code"],
)
SEARCH_HITS = Histogram(
    f"{PREFIX}_search_history_hits",
    "Hits returned per answered search_history call.",
    buckets=HIT_BUCKETS,
)
SEARCH_NEIGHBOURS = Histogram(
    f"{PREFIX}_search_history_neighbours",
    "Neighbour messages returned per answered search_history call.",
    buckets=NEIGHBOUR_BUCKETS,
)
SEARCH_BUDGET_EXHAUSTED = Counter(
    f"{PREFIX}_search_budget_exhausted",
    "search_history calls refused because the run's evidence budget was spent.",
)
SEARCH_BUDGET_TRIMMED = Counter(
    f"{PREFIX}_search_budget_trimmed_messages",
    "Messages left out of answered searches because the budget ran out during the call.",
)
SEARCH_EXCLUSIONS = Counter(
    f"{PREFIX}_search_exclusions",
    "Matching messages withheld from search_history and memory searches, by reason.",
    ["reason"],
)
AUDIT_FAILURES = Counter(
    f"{PREFIX}_audit_failures",
    "Searches refused with audit_unavailable, by when the audit failed (write or commit).",
    ["stage"],
)
DELIVERY_BLOCKED = Counter(
    f"{PREFIX}_delivery_blocked",
    "Replies refused by the final delivery check, once per blocking reason.",
    ["reason"],
)
STATEMENT_TIMEOUTS = Counter(
    f"{PREFIX}_statement_timeouts",
    "API statements cancelled by API_STATEMENT_TIMEOUT_MS (answered 503 unavailable).",
)
DATABASE_UNAVAILABLE = Counter(
    f"{PREFIX}_database_unavailable",
    "API requests answered 503 because the database could not be reached.",
)
POOL_SIZE = Gauge(
    f"{PREFIX}_db_pool_connections",
    "Connections the workers' psycopg pools hold open, sampled at most once a second.",
    multiprocess_mode="livesum",
)
POOL_IDLE = Gauge(
    f"{PREFIX}_db_pool_idle_connections",
    "Connections idle in the workers' pools, sampled at most once a second.",
    multiprocess_mode="livesum",
)
POOL_WAITING = Gauge(
    f"{PREFIX}_db_pool_waiting_requests",
    "Requests waiting for a connection at the last sample.",
    multiprocess_mode="livesum",
)
POOL_WAITS = Counter(
    f"{PREFIX}_db_pool_waits",
    "Connection requests that had to wait for a connection.",
)
POOL_WAIT_SECONDS = Counter(
    f"{PREFIX}_db_pool_wait_seconds",
    "Time requests spent waiting for a pool connection.",
)
POOL_ERRORS = Counter(
    f"{PREFIX}_db_pool_errors",
    "Connection requests that failed (DATABASE_POOL_TIMEOUT passed or the database is down).",
)
EXPORT_STREAMS = Gauge(
    f"{PREFIX}_export_streams_open",
    "Exports being written to their clients now.",
    multiprocess_mode="livesum",
)
LIFECYCLE_RUNS = Counter(
    f"{PREFIX}_lifecycle_runs",
    "Retention, erasure, hold and export runs finished, by action and outcome.",
    ["action", "outcome"],
)
RATE_LIMITED = Counter(
    f"{PREFIX}_rate_limited",
    "Requests refused with rate_limited, by token scope (service or agent).",
    ["scope"],
)
THROTTLE_STORE_ERRORS = Counter(
    f"{PREFIX}_throttle_store_errors",
    "Rate-limit counts the shared store could not make: the request was let through.",
)


def exclusion_reason(reason: str) -> str:
    """A reason as a label value: one of ``EXCLUSION_REASONS``, else ``other``."""
    return reason if reason in EXCLUSION_REASONS else "other"


def count_exclusions(exclusions: dict[str, int]) -> None:
    for reason, count in exclusions.items():
        if count:
            SEARCH_EXCLUSIONS.labels(exclusion_reason(reason)).inc(count)


# --- the connection pool, sampled by the request middleware ---------------------------------

POOL_SAMPLE_SECONDS = 1.0
_pool_sampled_at = [0.0]


def sample_pool() -> None:
    """At most once a second per process, the pool's gauges and its counters since the last
    sample (psycopg_pool's ``pop_stats``, which resets them)."""
    now = time.monotonic()
    if now - _pool_sampled_at[0] < POOL_SAMPLE_SECONDS:
        return
    _pool_sampled_at[0] = now
    from django.db import connection

    pool = connection.pool
    if pool is None:
        return
    stats = pool.pop_stats()
    POOL_SIZE.set(stats.get("pool_size", 0))
    POOL_IDLE.set(stats.get("pool_available", 0))
    POOL_WAITING.set(stats.get("requests_waiting", 0))
    POOL_WAITS.inc(stats.get("requests_queued", 0))
    POOL_WAIT_SECONDS.inc(stats.get("requests_wait_ms", 0) / 1000)
    POOL_ERRORS.inc(stats.get("requests_errors", 0))


# --- /metrics ------------------------------------------------------------------------------


def registry() -> CollectorRegistry:
    """Every worker's values in multiprocess mode, else this process's."""
    if os.environ.get(MULTIPROC_ENV):
        combined = CollectorRegistry()
        MultiProcessCollector(combined)
        return combined
    return REGISTRY


def _authorized(request: HttpRequest) -> bool:
    expected = f"Bearer {settings.METRICS_TOKEN}".encode()
    sent = request.META.get("HTTP_AUTHORIZATION", "").encode()
    return hmac.compare_digest(sent, expected)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics`` with ``Authorization: Bearer $METRICS_TOKEN``; without a token
    configured it does not exist (404), so nothing is public by default."""
    if request.method not in ("GET", "HEAD"):
        response = HttpResponse(b"", status=405, content_type="text/plain")
        response["Allow"] = "GET, HEAD"
        return response
    if not settings.METRICS_ENABLED or not settings.METRICS_TOKEN:
        return HttpResponseNotFound(b"", content_type="text/plain")
    if not _authorized(request):
        response = HttpResponse(b"", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
