"""Gunicorn settings for production: ``gunicorn --config python:formation.gunicorn_conf``.

Sized for 2 cores: one process per core, each with a few threads, because a request spends
most of its time waiting for PostgreSQL rather than computing. Every value can be
changed from the environment; the README lists them.

Gunicorn writes no access log: ``formation.request_logging`` writes one JSON line per request
that names the route, never the path or its query string (search text travels in ``?query=``).
Gunicorn's own messages use the same JSON formatter.

Configuration errors stop gunicorn before it listens: this module's own values are read with
``formation.environment``'s readers, and ``on_starting`` runs the settings module the workers
load, so a bad value is one sentence from the master and a non-zero exit, never workers that
exit and are replaced forever.

Metrics: the master gives the workers one ``PROMETHEUS_MULTIPROC_DIR`` (the operator's, or a
fresh folder on tmpfs), named as this file loads and emptied when it starts, so ``/metrics`` adds
up every worker's values; a worker that exits has its live gauges dropped (formation/metrics.py).
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from gunicorn.glogging import Logger

from formation.environment import env_int
from formation.json_logging import JsonFormatter

wsgi_app = "formation.wsgi:application"

# "host:port", "unix:/path" or several, comma-separated. Behind a proxy on the same host the
# default is right; in a container bind 0.0.0.0:8000.
bind = [
    address.strip()
    for address in os.environ.get("GUNICORN_BIND", "127.0.0.1:8000").split(",")
    if address.strip()
]

# gunicorn's asyncio worker, serving wsgi_app with ``threads`` threads: a thread only runs the
# application, never waits for a slow client (formation/serving.py, with its deadlines).
worker_class = "formation.serving.BoundedWorker"
workers = env_int("WEB_CONCURRENCY", 2, minimum=1)
# Keep DATABASE_POOL_MAX_SIZE at least this, so a thread never waits for a connection.
threads = env_int("GUNICORN_THREADS", 4, minimum=1)

# A worker is replaced when its event loop is silent this long (a stuck process, not a
# slow request); each SQL statement of a request is bounded by API_STATEMENT_TIMEOUT_MS.
timeout = env_int("GUNICORN_TIMEOUT", 30)
# On SIGTERM (deploys, scale-down) requests in flight get this long to finish.
graceful_timeout = env_int("GUNICORN_GRACEFUL_TIMEOUT", 30)
# Seconds an idle proxy connection is kept open; the proxy's upstream idle timeout should be
# shorter, so it never reuses a connection gunicorn is closing.
keepalive = env_int("GUNICORN_KEEPALIVE", 5)

# Heartbeat files on tmpfs: a disk-backed /tmp can stall workers into the timeout above.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
# The gunicornc control socket (gunicorn 25.1+) is not used; a shared default path would also
# clash between two instances run by one user.
control_socket_disable = True

# search_messages and memories carry their query (up to 500 characters, 12 bytes each once a
# 4-byte character is percent-encoded) in the request line; gunicorn's 4,094-byte default
# would answer such a query with an HTML 414. 8,190 is gunicorn's largest bounded value.
limit_request_line = 8190

accesslog = None
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()


class JsonLogger(Logger):
    """Gunicorn's messages as JSON lines; its access log is never written."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(JsonFormatter())

    def access(self, resp: Any, req: Any, environ: dict, request_time: Any) -> None:
        """Not even with ``--access-logfile``: its request line carries the query string."""

    def _compute_access_log_enabled(self) -> bool:
        return False


logger_class = JsonLogger


def worker_exit(server: Any, worker: Any) -> None:
    """Close the worker's connection pools, so PostgreSQL sees clean disconnects."""
    from django.conf import settings

    if not settings.configured:
        # The settings refused to load (the worker is exiting for that): no pool was opened,
        # and touching the connections would load them, and refuse, again.
        return
    from django.db import connections

    for alias_connection in connections.all(initialized_only=True):
        close_pool = getattr(alias_connection, "close_pool", None)
        if close_pool is not None:
            close_pool()


METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"


def choose_metrics_folder() -> tuple[str | None, str | None]:
    """Name the workers' metrics folder now, as gunicorn loads this file: prometheus_client picks
    shared or per-process values once, when it is imported, and the master imports it with the
    worker class (formation.serving, formation.errors, formation.metrics) before any hook runs.

    Returns the folder made here (``on_exit`` removes it) and, when there is none, why (for
    ``on_starting`` to log: gunicorn's log is not set up yet).
    """
    if "prometheus_client" in sys.modules:
        # Too late: /metrics would read a folder the workers never write to.
        return None, "prometheus_client imported before the gunicorn configuration"
    named = os.environ.get(METRICS_DIR_ENV)
    try:
        if named:
            Path(named).mkdir(parents=True, exist_ok=True)
            return None, None
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        made = tempfile.mkdtemp(prefix="formation-metrics-", dir=base)
    except OSError as problem:
        os.environ.pop(METRICS_DIR_ENV, None)
        return None, type(problem).__name__
    os.environ[METRICS_DIR_ENV] = made
    return made, None


metrics_folder_made, metrics_folder_problem = choose_metrics_folder()


def refuse_a_bad_configuration(server: Any) -> None:
    """Run the settings module the workers will load, so a value it refuses stops gunicorn now.

    A worker that exits on a refused setting exits with status 1, which gunicorn answers by
    starting another, forever, while it listens with no worker able to answer: only a worker's
    boot failure (3), an application that fails to load (4) or the master's own refusal stops
    it. The settings module holds every rule
    (formation/settings.py); running it here, in a namespace of its own, checks them all without
    keeping it imported, so each worker still loads it fresh (``kill -HUP`` reloads it too).
    The module prints its one sentence and the master exits non-zero before it binds a socket
    (removing its pid file, if ``--pid`` made one).
    """
    module = os.environ.get("DJANGO_SETTINGS_MODULE", "formation.settings")
    try:
        runpy.run_module(module)
    except SystemExit:
        if server.pidfile is not None:
            server.pidfile.unlink()
        raise


def on_starting(server: Any) -> None:
    """Before any worker: the configuration checked, and the metrics folder, empty (a previous
    run's values would be added)."""
    refuse_a_bad_configuration(server)
    if metrics_folder_problem:
        # Not fatal: each worker keeps its own values (formation/metrics.py).
        server.log.warning(
            "metrics folder unusable (%s); metrics are per worker", metrics_folder_problem
        )
    folder = os.environ.get(METRICS_DIR_ENV)
    if not folder:
        return
    try:
        # Made again: ``--env`` may name a folder after this file was loaded.
        Path(folder).mkdir(parents=True, exist_ok=True)
        for stale in Path(folder).glob("*.db"):
            stale.unlink()
    except OSError as problem:
        # The workers write there all the same (prometheus_client chose at import).
        server.log.warning("metrics folder not emptied (%s)", type(problem).__name__)


def child_exit(server: Any, worker: Any) -> None:
    """A worker is gone: its live gauges (pool, open exports) stop counting."""
    if os.environ.get(METRICS_DIR_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def on_exit(server: Any) -> None:
    """Remove the metrics folder the master made (never one the operator named)."""
    if metrics_folder_made:
        shutil.rmtree(metrics_folder_made, ignore_errors=True)
