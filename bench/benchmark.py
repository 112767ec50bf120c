"""Each agent tool through gunicorn, in-process, and against the HTTP floor and raw-SQL floor.

    DATABASE_URL=postgresql://... .venv/bin/python bench/benchmark.py --seed 1 \
        [--messages 1000000] [--requests 30] [--history-query 'label=text' ...] \
        [--cjk-messages 3000] [--only TOOL ...] [--output bench/results.md]

On the corpus of ``manage.py generate_corpus --seed S`` (loaded first with ``--messages N`` if
this database does not hold it yet), as the corpus's busy agent, every row does one piece of
work three ways, next to the HTTP floor. The first row is ``/healthz``, which runs no SQL.
search_history has a row per frequency band, then one per part of its query syntax: a quoted
phrase of two common words, a prefix of a mid word, and a CJK word found inside sentences
without spaces (synthetic CJK messages are added to the agent's destination for it, once).
``--only`` runs a subset of the tools (the common-term rows take minutes):

- **API**: an HTTP request over one keep-alive loopback connection to gunicorn
  (``formation/gunicorn_conf.py``: its asyncio workers), timed from sending the request to reading
  the whole answer: HTTP, routing, token lookup, validation, SQL, serialisation.
- **in-process**: the same request handed to the same WSGI application inside this process
  (Django's handler, every middleware, the request signals, the connection pool): Python and SQL
  without HTTP and gunicorn.
- **floor**: the same work as SQL on one psycopg connection: hand-written statements for the
  listing, reads and literal search; for search_history, the bare query the issue names (its
  terms OR-ed, ranked by ``ts_rank``, top 20, over every conversation the agent is a member
  of), which does none of the perspective rules, neighbours, evidence or audit, and in a second
  row the *perspective floor*: the product's own ranked hits statement
  (``search_app.history.statement.hits_statement``, every perspective rule included) alone,
  its scope resolved outside the timing; for bulk ingest, one transaction that reserves the
  seqs and inserts the rows with one ``INSERT ... SELECT FROM unnest(...)``, through the same
  indexes and triggers; for ``/healthz``, nothing (zero).
- **HTTP floor**: ``GET /`` over one keep-alive loopback connection to ``bench/http_floor.py``,
  an application that answers a fixed 12-byte JSON body and does nothing else, under gunicorn's
  threaded worker (1 worker x 1 thread): what any Python server on this machine costs for a
  request, so a target can read "API p50 <= HTTP floor + SQL floor + X ms" and a faster or
  slower machine moves both sides.

The sides are interleaved request by request (API, in-process, HTTP floor, SQL floor, then the
other way round for the next index, so no side always runs last), because the shared machine
drifts over seconds; each ratio is reported pair by pair (median and p95 of API_i / floor_i)
besides the ratio of the medians, and so is the margin over both floors (median and p95 of
API_i - HTTP floor_i - floor_i). Warm-ups are untimed. The floors may use every parallel worker
the server allows (its ``max_parallel_workers_per_gather`` is in the header); only the
search_messages row "floor without its index" turns the index and parallelism off, as its name
says.

Latency alone does not tell round trips from Python, so each row also counts the SQL statements
one request costs on the server: after the timed requests a few more run untimed, one side at a
time with the others idle, and ``pg_stat_statements`` (preloaded, with ``track_utility`` on, so
BEGIN, COMMIT, SAVEPOINT and SET count) gives the top-level statements run in this database,
minus the counting query itself.

Prints p50/p95/p99 per side, the in-process and HTTP-floor p50, both ratios, the margin over
both floors, the statements per request (the HTTP floor runs none and is not counted), and
the gunicorn workers' and this process's resident memory at the start and the end, and writes
the table as Markdown to ``--output``. It writes to the database it measures (tokens, runs,
evidence, audit rows, ingested messages): use a database made for it. All text is synthetic.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import logging
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Protocol

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import setup_django  # noqa: E402

setup_django("Set DATABASE_URL to a database made for benchmarking: this script writes to it.")

import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from formation.errors import InvalidArguments  # noqa: E402
from formation.prepared import GENERIC_PLANS  # noqa: E402
from messages_app.models import (  # noqa: E402
    Agent,
    Conversation,
    ConversationKind,
    Membership,
    Message,
    Run,
    TokenKind,
    Workspace,
)
from messages_app.services import (  # noqa: E402
    MessageDraft,
    account_create,
    messages_create,
    token_create,
    workspace_create,
)
from search_app.history import terms  # noqa: E402
from search_app.history.results import HistoryFilters  # noqa: E402
from search_app.history.statement import hits_statement  # noqa: E402
from search_app.query.parse import parse_query  # noqa: E402
from search_app.scope import Perspective  # noqa: E402
from synthetic.corpus import (  # noqa: E402
    BUSY_AGENT_NAME,
    DEFAULT_WORKERS,
    corpus_generate,
    corpus_vocabulary,
    workspace_slug,
)

# Ranks in the corpus vocabulary (rank r is drawn with weight 1/r).
BANDS = {"rare": (15_000, 12_000, 9_000), "mid": (300, 250, 200), "common": (2, 3, 5)}
# The query syntax's rows: a phrase of two common words (adjacent in many messages, apart in
# many more: the costly case of the position check) and the prefix of a mid word.
PHRASE_RANKS = (2, 3)
PREFIX_RANK = 250
# The CJK row: synthetic Japanese-like sentences (ideographs, kana particles, no spaces, no
# real words) mixed into the busy agent's destination over the corpus's last half year, so they
# are neither the newest rows nor outside the agent's membership; a mid-frequency word of them.
CJK_MESSAGES = 3_000
CJK_MARK = "\u3013"  # starts every such message, so a later run finds them already there
CJK_QUERY_RANK = 40
SUBSTRINGS = {"rare": 15_000, "common": 1}
PAGE = 50
INGEST_WORKSPACE = "bench-ingest"
DEEP_OFFSET = 100_000  # list_messages' largest offset
SEARCH_LIMIT = 20
SUMMARY = (
    "m.id, m.conversation_id, m.seq, m.role, m.status, m.sender_account_id, m.sender_agent_id, "
    "m.reply_to_id, m.thread_id, m.content, m.created_at, m.sources_erased"
)
MEMBER = (
    "EXISTS (SELECT 1 FROM messages_app_membership AS a WHERE a.workspace_id = %(ws)s "
    "AND a.agent_id = %(agent)s AND a.conversation_id = {room} AND a.left_at IS NULL)"
)
# The search_history floor: the terms OR-ed, ranked by ts_rank, top 20, over every
# conversation the agent is a member of; ``{tsquery}`` is how the OR query is written.
BARE_HISTORY_FLOOR = (
    "SELECT d.message_id, ts_rank(d.document, q) AS rank "
    "FROM message_search_documents AS d, {tsquery} AS q "
    "WHERE d.workspace_id = %(ws)s AND d.document @@ q AND d.conversation_id IN ("
    "SELECT conversation_id FROM messages_app_membership WHERE agent_id = %(agent)s) "
    "ORDER BY rank DESC LIMIT %(limit)s"
)
# Statement counts are read this long after the last request of a window, so nothing the
# server runs as a request winds down (a connection going back to its pool) is missed.
COUNT_SETTLE_SECONDS = 0.1
SIDES = ("api", "in_process")
# The margin column's "API - ", with a true minus sign.
MARGIN = "API \N{MINUS SIGN}"
# What ``--only`` picks from, in the order the rows run: the liveness probe first, as it is quick.
TOOLS = ("healthz", "search_history", "search_messages", "list_messages", "get_message", "bulk")
# The text of PostgreSQL's own foreign-key check (ri_triggers.c), as pg_stat_statements
# normalises it.
FOREIGN_KEY_CHECK = r"^SELECT \$[0-9]+ FROM (ONLY )?.+ x WHERE .+ FOR KEY SHARE OF x$"


@dataclass
class Row:
    """One line of the table: a tool and case, its four series of milliseconds, its counts."""

    tool: str
    case: str
    note: str = ""
    api: list[float] = field(default_factory=list)
    in_process: list[float] = field(default_factory=list)
    http_floor: list[float] = field(default_factory=list)
    # Zeros for work that runs no SQL (``/healthz``): its floor is the HTTP floor alone.
    floor: list[float] = field(default_factory=list)
    # Statements per request, by side: "api", "in_process", "floor".
    statements: dict[str, float] = field(default_factory=dict)

    @property
    def has_sql_floor(self) -> bool:
        return any(self.floor)

    def pair_ratios(self) -> list[float]:
        """API_i / floor_i: each pair ran back to back, so the machine's drift cancels. Empty
        without a SQL floor: a ratio to zero says nothing."""
        if not self.has_sql_floor:
            return []
        return [api / floor for api, floor in zip(self.api, self.floor, strict=True)]

    def margins(self) -> list[float]:
        """API_i - HTTP floor_i - floor_i: what the service adds to the least any Python server
        and the bare SQL cost, in milliseconds, each triple run back to back."""
        return [
            api - http - floor
            for api, http, floor in zip(self.api, self.http_floor, self.floor, strict=True)
        ]


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile of milliseconds."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mib(pid: int | str = "self") -> float:
    """Resident memory of a process, so a run shows what its requests left behind."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def encoded(body: object) -> bytes | None:
    """A JSON body; bytes pass through, so large bodies can be encoded outside the timing."""
    if body is None or isinstance(body, bytes):
        return body
    return json.dumps(body).encode()


def checked(method: str, path: str, status: int, data: bytes) -> bytes:
    """The answer's body, or an error naming the route and the error code (never the query)."""
    if status >= 400:
        code = json.loads(data).get("error", {}).get("code") if data else None
        raise RuntimeError(f"{method} {path.split('?')[0]} answered {status} {code}")
    return data


class Transport(Protocol):
    def call(self, method: str, path: str, token: str | None, body: object = None) -> bytes: ...


def authorization(token: str | None) -> dict[str, str]:
    """The bearer header; none for the routes that need no token (``/healthz``, the HTTP floor)."""
    return {} if token is None else {"Authorization": f"Bearer {token}"}


class Api:
    """One keep-alive HTTP connection to the gunicorn under test.

    Answers are returned unparsed: decoding JSON is the client's work, not the service's.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def call(self, method: str, path: str, token: str | None, body: object = None) -> bytes:
        headers = authorization(token)
        payload = encoded(body)
        if payload is not None:
            headers["Content-Type"] = "application/json"
        try:
            self.http.request(method, path, body=payload, headers=headers)
            response = self.http.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed an idle keep-alive connection before reading this request.
            self.http.close()
            self.http.request(method, path, body=payload, headers=headers)
            response = self.http.getresponse()
        return checked(method, path, response.status, response.read())

    def close(self) -> None:
        self.http.close()


class InProcess:
    """The WSGI application gunicorn serves, called in this process: Django's handler, every
    middleware, the request signals and the connection pool, without HTTP or gunicorn.

    Not ``django.test.Client``: it keeps the request signals from closing (returning to the
    pool) the connection, so it would run fewer statements than a real request.
    """

    def __init__(self, log: IO[str]) -> None:
        with warnings.catch_warnings():
            # WhiteNoise's note that collectstatic never ran: the API serves no static files.
            warnings.filterwarnings("ignore", message="No directory at", category=UserWarning)
            # Imported here: it sets Django up again (logging included); only this side needs it.
            from formation.wsgi import application

        self.application = application
        # Request logs go to a file, as gunicorn's do: written, but not to the terminal.
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler):
                handler.setStream(log)

    def call(self, method: str, path: str, token: str | None, body: object = None) -> bytes:
        route, _, query = path.partition("?")
        payload = encoded(body) or b""
        environ = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": route,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1",
            "CONTENT_TYPE": "application/json" if payload else "",
            "CONTENT_LENGTH": str(len(payload)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(payload),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": False,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        if token is not None:
            environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
        statuses: list[int] = []

        def start_response(status: str, headers: list, exc_info: object = None) -> Callable:
            statuses.append(int(status.split()[0]))
            return lambda _data: None

        answer = self.application(environ, start_response)
        try:
            data = b"".join(answer)
        finally:
            # As a WSGI server does: fires request_finished, which returns the connection.
            if hasattr(answer, "close"):
                answer.close()
        return checked(method, path, statuses[-1], data)


class StatementMeter:
    """Top-level SQL statements the server ran in this database, from ``pg_stat_statements``.

    Counts are deltas of ``sum(calls)`` around a window of requests, with every other side idle.
    The counting query is itself counted once per window (measured, not assumed, at the start).
    A window in which the extension evicted entries (``dealloc`` moved) lost calls, so it is run
    again.
    """

    def __init__(self, url: str) -> None:
        self.connection = psycopg.connect(url, autocommit=True)
        preloaded = self.connection.execute(
            "SELECT 'pg_stat_statements' = ANY(string_to_array("
            "replace(current_setting('shared_preload_libraries'), ' ', ''), ','))"
        ).fetchone()[0]
        if not preloaded:
            sys.exit(
                "pg_stat_statements is not preloaded on this server: add it to "
                "shared_preload_libraries with pg_stat_statements.track_utility = on and restart "
                "PostgreSQL (the embedded cluster: make db-stop && make db-start)."
            )
        self.connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        track, utility = self.connection.execute(
            "SELECT current_setting('pg_stat_statements.track'), "
            "current_setting('pg_stat_statements.track_utility')"
        ).fetchone()
        if track != "top" or utility != "on":
            sys.exit(
                "Statement counts need pg_stat_statements.track = top (round trips, not the "
                "statements inside functions) and pg_stat_statements.track_utility = on."
            )
        first, _ = self.snapshot()
        second, _ = self.snapshot()
        self.own_calls = second - first

    def snapshot(self) -> tuple[int, int]:
        """Calls so far in this database, and how many times entries were evicted.

        The foreign-key checks of Django's deferred constraints run at COMMIT, outside any
        statement, so the extension records them as top-level too (four per ingested message);
        the server runs them, no client sends them, so they are left out by their text.
        """
        return self.connection.execute(
            "SELECT coalesce(sum(calls), 0)::bigint, "
            "(SELECT dealloc FROM pg_stat_statements_info) "
            "FROM pg_stat_statements(true) "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            f"AND query !~ '{FOREIGN_KEY_CHECK}'"
        ).fetchone()

    def per_request(self, action: Callable[[int], object], indexes: range) -> float:
        """Statements per call of ``action(i)`` over ``indexes``."""
        for _ in range(3):
            calls, evictions = self.snapshot()
            for i in indexes:
                action(i)
            time.sleep(COUNT_SETTLE_SECONDS)
            after, evictions_after = self.snapshot()
            if evictions_after == evictions:
                return (after - calls - self.own_calls) / len(indexes)
        raise RuntimeError(
            "pg_stat_statements evicted entries in three count windows running; raise "
            "pg_stat_statements.max."
        )

    def close(self) -> None:
        self.connection.close()


class Gunicorn:
    """gunicorn with the production configuration (``formation/gunicorn_conf.py``: its worker
    class, deadlines and logging) on loopback, with the benchmark's worker and thread counts;
    stopped by its process id."""

    def __init__(self, *, port: int, workers: int, threads: int, log: IO[bytes]) -> None:
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("gunicorn")),
                "--config",
                "python:formation.gunicorn_conf",
            ],
            cwd=ROOT,
            env={
                **os.environ,
                "DEBUG": "0",
                "LOG_LEVEL": "WARNING",
                "GUNICORN_BIND": f"127.0.0.1:{port}",
                "WEB_CONCURRENCY": str(workers),
                "GUNICORN_THREADS": str(threads),
                # The other sides run between API calls; keep the client's connection open.
                "GUNICORN_KEEPALIVE": "300",
                # Capacity, not throttling, is measured: one agent token makes every request.
                "RATE_LIMIT_AGENT": "off",
                "RATE_LIMIT_SERVICE": "off",
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until_answering(self.process, port, "/readyz", log)

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]

    def worker_rss_mib(self) -> dict[int, float]:
        """Resident memory by worker pid (a worker replaced during the run shows a new pid)."""
        return {pid: rss_mib(pid) for pid in self.worker_pids()}

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class HttpFloorGunicorn(Gunicorn):
    """``bench/http_floor.py`` under gunicorn's threaded worker, one process and one thread, with
    the API side's long keep-alive and no access log: the HTTP floor's server."""

    def __init__(self, *, port: int, log: IO[bytes]) -> None:
        self.process = subprocess.Popen(
            gthread_command(HTTP_FLOOR_APP, f"127.0.0.1:{port}", threads=1),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_until_answering(self.process, port, "/", log)


HTTP_FLOOR_APP = "bench.http_floor:application"


def gthread_command(app: str, bind: str, *, threads: int) -> list[str]:
    """gunicorn's threaded worker serving ``app``: one process of ``threads`` threads, the API
    side's long keep-alive, no access log."""
    return [
        str(Path(sys.executable).with_name("gunicorn")),
        "--worker-class",
        "gthread",
        "--workers",
        "1",
        "--threads",
        str(threads),
        "--keep-alive",
        "300",
        # gunicorn 27's control socket has one default path per user: two would clash.
        "--no-control-socket",
        "--bind",
        bind,
        app,
    ]


def wait_until_answering(
    process: subprocess.Popen, port: int, path: str, log: IO[bytes], timeout: float = 60
) -> None:
    """Return once ``GET path`` answers 200 on the port; fail if the server exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        probe = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            probe.request("GET", path)
            if probe.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            probe.close()
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited while starting; see {log.name}")
        time.sleep(0.3)
    raise RuntimeError(f"gunicorn did not become ready in {timeout:.0f} s")


@dataclass
class Scene:
    """Where the benchmark acts: the busy agent, its rooms, people and tokens."""

    workspace: Workspace
    agent: Agent
    big_room: Conversation
    destination: Conversation
    requester_id: uuid.UUID
    sender_id: uuid.UUID
    service_token: str
    agent_token: str
    message_ids: list[uuid.UUID]
    anchors: list[uuid.UUID]


def prepare_scene(seed: int, rng: random.Random, samples: int) -> Scene:
    workspace = Workspace.objects.get(slug=workspace_slug(seed, 0))
    agent = Agent.objects.get(workspace=workspace, name=BUSY_AGENT_NAME)
    current = Membership.objects.filter(agent=agent, left_at__isnull=True).values("conversation_id")
    rooms = Conversation.objects.filter(id__in=current)
    big_room = rooms.order_by("-live_message_count", "id").first()
    destination = None
    requester_id = None
    for room in rooms.filter(kind=ConversationKind.PRIVATE).order_by("-live_message_count"):
        readers = room.memberships.filter(account__isnull=False, left_at__isnull=True)
        requester_id = readers.order_by("account_id").values_list("account_id", flat=True).first()
        if requester_id is not None:
            destination = room
            break
    if destination is None:
        raise RuntimeError("The busy agent has no private room with a current reader.")
    visible = Message.objects.filter(
        workspace=workspace, conversation__in=rooms, deleted_at__isnull=True
    )
    message_ids = random_ids(visible, rng, samples)
    anchors = random_ids(visible.filter(conversation=big_room), rng, samples)
    _, service_token = token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    _, agent_token = token_create(workspace_id=workspace.id, kind=TokenKind.AGENT, agent=agent)
    return Scene(
        workspace=workspace,
        agent=agent,
        big_room=big_room,
        destination=destination,
        requester_id=requester_id,
        sender_id=requester_id,
        service_token=service_token,
        agent_token=agent_token,
        message_ids=message_ids,
        anchors=anchors,
    )


def random_ids(queryset, rng: random.Random, count: int) -> list[uuid.UUID]:
    """Random rows without ``ORDER BY random()`` over them all: corpus ids are time-ordered,
    so the first row at or after a random id can be anywhere in the corpus."""
    ordered = queryset.order_by("id").values_list("id", flat=True)
    low, high = ordered.first(), queryset.order_by("-id").values_list("id", flat=True).first()
    picks = []
    for _ in range(count):
        probe = uuid.UUID(int=rng.randrange(low.int, high.int + 1))
        picks.append(ordered.filter(id__gte=probe).first() or low)
    return picks


def floor_runner(raw: psycopg.Connection) -> Callable[[str, dict], Callable[..., object]]:
    """Statements on the raw connection, bound by the server each time."""

    def statement(sql: str, params: dict) -> Callable[..., object]:
        def run(*_: object) -> object:
            with raw.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.fetchall()

        return run

    return statement


def planned_workers(raw: psycopg.Connection, sql: str, params: dict) -> int:
    """Parallel workers the planner gives the statement in the floor's session.

    Zero with parallelism allowed means the planner found it not worth it, not that the session
    forbade it; the header shows what the server allows.
    """
    ((plan,),) = raw.execute(f"EXPLAIN (FORMAT JSON) {sql}", params).fetchall()
    nodes, workers = [plan[0]["Plan"]], 0
    while nodes:
        node = nodes.pop()
        workers += node.get("Workers Planned", 0)
        nodes.extend(node.get("Plans", []))
    return workers


Request = Callable[[Transport, int], bytes]
# A row's floor: the same work as bare SQL for sample ``i``, or None for work that runs no SQL.
Floor = Callable[[int], object] | None


@dataclass
class Harness:
    """The sides a row runs on, and how many samples of each it takes."""

    http: Api
    local: InProcess
    http_floor: Api
    meter: StatementMeter
    n: int
    warm: int
    counted: int

    def measure(
        self,
        request: Request,
        floors: list[tuple[Row, Floor]],
        *,
        n: int | None = None,
        warm: int | None = None,
        counted: int | None = None,
        describe: Callable[[bytes], str] | None = None,
    ) -> list[Row]:
        """Warm up, time the sides interleaved, then count each side's statements.

        ``request(transport, i)`` is the API's work for sample ``i``; it runs over HTTP and in
        this process alike. The HTTP floor runs between them and the SQL floors, so every row
        has its own next to its API samples. Each floor makes one row; the rows share the API,
        in-process and HTTP-floor timings, so each floor is paired with the very same requests.
        A floor of None (work that runs no SQL) is recorded as zero milliseconds and statements.
        """
        n = self.n if n is None else n
        warm = self.warm if warm is None else warm
        counted = self.counted if counted is None else counted
        sql_floors = [
            (f"floor {number}", floor)
            for number, (_, floor) in enumerate(floors)
            if floor is not None
        ]
        api: tuple[str, Callable[[int], object]] = ("api", lambda i: request(self.http, i))
        in_process = ("in_process", lambda i: request(self.local, i))
        http_floor = ("http_floor", lambda _: self.http_floor.call("GET", "/", None))
        sides = [api, in_process, http_floor, *sql_floors]
        # The HTTP floor runs no statements: timed, never counted.
        counted_sides = [api, in_process, *sql_floors]
        answer = None
        for i in range(warm):
            for name, side in sides:
                result = side(i)
                if name == "api":
                    answer = result
        times: dict[str, list[float]] = {name: [] for name, _ in sides}
        for pair, i in enumerate(range(warm, warm + n)):
            for name, side in sides if pair % 2 == 0 else reversed(sides):
                times[name].append(timed(lambda side=side, i=i: side(i)))
        extra = range(warm + n, warm + n + counted)
        statements = {name: self.meter.per_request(side, extra) for name, side in counted_sides}
        described = describe(answer) if describe is not None and answer is not None else ""
        rows = []
        for number, (row, floor) in enumerate(floors):
            name = f"floor {number}"
            row.api, row.in_process = times["api"], times["in_process"]
            row.http_floor = times["http_floor"]
            row.floor = [0.0] * n if floor is None else times[name]
            row.statements = {side: statements[side] for side in SIDES}
            row.statements["floor"] = 0.0 if floor is None else statements[name]
            row.note = "; ".join(part for part in (described, row.note) if part)
            pairs = row.pair_ratios()
            print(
                f"  {row.tool}, {row.case}: API p50 {statistics.median(row.api):.1f} ms, "
                f"in-process {statistics.median(row.in_process):.1f} ms, "
                f"HTTP floor {statistics.median(row.http_floor):.2f} ms, "
                f"floor {statistics.median(row.floor):.1f} ms, "
                + (f"pairs {statistics.median(pairs):.1f}x, " if pairs else "")
                + f"margin {statistics.median(row.margins()):.2f} ms, "
                f"statements {count_cell(row.statements)}",
                flush=True,
            )
            rows.append(row)
        return rows


def found(answer: bytes) -> str:
    return f"{len(json.loads(answer)['items'])} items"


@dataclass(frozen=True)
class HistoryCase:
    """A search_history row: its query text, and how the bare floor writes its OR query."""

    case: str
    text: str
    floor_tsquery: str
    floor_terms: str


def cjk_vocabulary(seed: int) -> list[str]:
    """Synthetic CJK words of two or three ideographs, most frequent first."""
    rng = random.Random(f"formation-bench-cjk:{seed}")
    words: dict[str, None] = {}
    while len(words) < 2_000:
        length = rng.choice((2, 2, 3))
        words["".join(chr(0x4E00 + rng.randrange(600)) for _ in range(length))] = None
    return list(words)


def seed_cjk(scene: Scene, seed: int, count: int) -> str:
    """Make sure the destination holds ``count`` synthetic CJK messages; their query word."""
    vocabulary = cjk_vocabulary(seed)
    have = Message.objects.filter(
        conversation=scene.destination, content__startswith=CJK_MARK
    ).count()
    if have < count:
        rng = random.Random(f"formation-bench-cjk-text:{seed}:{have}")
        joined = (
            Membership.objects.filter(conversation=scene.destination, agent=scene.agent)
            .order_by("-joined_at")
            .values_list("joined_at", flat=True)
            .first()
        )
        end = timezone.now() - timedelta(days=1)
        start = max(joined, end - timedelta(days=180))
        weights = [1 / rank for rank in range(1, len(vocabulary) + 1)]
        particles = ("の", "を", "に", "は", "で", "と", "が")

        def sentence() -> str:
            chosen = rng.choices(vocabulary, weights=weights, k=rng.randint(6, 24))
            return CJK_MARK + "".join(word + rng.choice(particles) for word in chosen) + "。"

        for first in range(have, count, 1_000):
            drafts = [
                MessageDraft(
                    content=sentence(),
                    sender_account_id=scene.requester_id,
                    created_at=start + (end - start) * rng.random(),
                )
                for _ in range(min(1_000, count - first))
            ]
            messages_create(conversation=scene.destination, drafts=drafts)
    return vocabulary[CJK_QUERY_RANK - 1]


def history_cases(
    words: list[str], extra: list[tuple[str, str]], cjk_word: str | None
) -> list[HistoryCase]:
    """The three frequency bands, as the issue defined their floors, the query syntax's rows
    (a phrase, a prefix, a CJK word when ``cjk_word``), then ``--history-query``.

    The syntax rows' and an extra text's bare floor use the product's own OR of its terms
    (``parse_query``), since arbitrary text (CJK, phrases) has no corpus word list to OR.
    """
    cases = []
    for band, ranks in BANDS.items():
        terms = [words[rank - 1] for rank in ranks]
        cases.append(
            HistoryCase(
                f"{band} terms",
                " ".join(terms),
                "to_tsquery('formation_english', %(terms)s)",
                " | ".join(terms),
            )
        )
    syntax = [
        ("phrase", '"' + " ".join(words[rank - 1] for rank in PHRASE_RANKS) + '"'),
        ("prefix", words[PREFIX_RANK - 1][:4] + "*"),
    ]
    if cjk_word is not None:
        syntax.append(("CJK word", cjk_word))
    for label, text in [*syntax, *extra]:
        try:
            query = parse_query(text)
        except InvalidArguments:
            sys.exit(f"--history-query {label}: the text has no searchable words, or too many.")
        cases.append(HistoryCase(label, text, "CAST(%(terms)s AS tsquery)", query.tsquery))
    return cases


def open_runs(client: Api, scene: Scene, count: int) -> list[dict]:
    """Fresh runs of the busy agent (the evidence budget is per run), outside the timing."""
    body = {
        "agentId": str(scene.agent.id),
        "conversationId": str(scene.destination.id),
        "requesterId": str(scene.requester_id),
    }
    return [
        json.loads(client.call("POST", "/api/v1/runs", scene.service_token, body))
        for _ in range(count)
    ]


def search_history_rows(
    harness: Harness,
    raw: psycopg.Connection,
    scene: Scene,
    case: HistoryCase,
) -> list[Row]:
    """One search_history query against the bare floor and against the perspective floor."""
    sql = floor_runner(raw)
    samples = harness.warm + harness.n + harness.counted
    runs = {side: open_runs(harness.http, scene, samples) for side in SIDES}
    bare_sql = BARE_HISTORY_FLOOR.format(tsquery=case.floor_tsquery)
    bare_params = {
        "ws": scene.workspace.id,
        "agent": scene.agent.id,
        "terms": case.floor_terms,
        "limit": SEARCH_LIMIT,
    }
    # The perspective floor is the product's own statement alone (lock, scope, ranking,
    # context, page, evidence, audit), prepared with a generic plan as the service runs it, on
    # a fresh run per sample (each spends its own budget), its parameters built outside the
    # timing.
    floor_runs = open_runs(harness.http, scene, samples)
    prepared_raw = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
    query = parse_query(case.text, workspace_id=scene.workspace.id)
    routes = terms.routes(query, terms.frequencies(scene.workspace.id))
    statements = []
    for made in floor_runs:
        run = Run.objects.filter(workspace_id=scene.workspace.id).get(id=made["id"])
        statements.append(
            hits_statement(
                Perspective(
                    workspace_id=run.workspace_id,
                    agent_id=run.agent_id,
                    destination_id=run.conversation_id,
                    destination_kind="",
                    requester_id=run.requester_id,
                    current_message_id=run.current_message_id,
                    recent_message_ids=tuple(run.recent_message_ids),
                    run_id=run.id,
                ),
                query,
                HistoryFilters(),
                limit=SEARCH_LIMIT,
                now=timezone.now(),
                routes=routes,
            )
        )
    hits_sql = statements[0][0]
    # Citus refuses a generic plan of the statement and plans it per call (formation/prepared.py),
    # so there the floor runs it unprepared, as the service does.
    generic = not connection.is_citus

    def perspective_floor(i: int) -> object:
        _, params = statements[i]
        with prepared_raw.transaction():
            if generic:
                prepared_raw.execute(GENERIC_PLANS)
            return prepared_raw.execute(hits_sql, params, prepare=generic).fetchall()

    def search(transport: Transport, i: int) -> bytes:
        side = "api" if transport is harness.http else "in_process"
        body = {"query": case.text, "limit": SEARCH_LIMIT}
        return transport.call("POST", "/api/v1/history/search", runs[side][i]["token"], body)

    bare = Row(
        "search_history",
        case.case,
        note=f"floor: OR query, ts_rank top 20, "
        f"{planned_workers(raw, bare_sql, bare_params)} parallel workers planned",
    )
    perspective = Row(
        "search_history",
        f"{case.case}, perspective floor",
        note="floor: hits_statement alone, "
        + ("prepared, generic plan" if generic else "planned per call (Citus)"),
    )
    return harness.measure(
        search,
        [(bare, sql(bare_sql, bare_params)), (perspective, perspective_floor)],
        describe=found,
    )


def benchmark(args: argparse.Namespace) -> tuple[list[Row], dict[str, object]]:
    rng = random.Random(args.seed)
    n, warm, counted = args.requests, args.warmup, args.statement_samples
    scene = prepare_scene(args.seed, rng, samples=n + warm + counted)
    words = corpus_vocabulary(args.seed)
    selected = set(args.only or TOOLS)
    cases: list[HistoryCase] = []
    if "search_history" in selected:
        cjk_word = seed_cjk(scene, args.seed, args.cjk_messages) if args.cjk_messages else None
        cases = history_cases(words, args.history_query, cjk_word)
    # No server-side prepared statements: a generic plan cannot see the search pattern, and
    # Django (client-side binding) never uses one either; the floor gets the same plans.
    raw = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, prepare_threshold=None)
    parallel = {
        name: raw.execute(f"SHOW {name}").fetchone()[0]
        for name in ("max_parallel_workers_per_gather", "max_parallel_workers")
    }
    meter = StatementMeter(os.environ["DATABASE_URL"])
    sql = floor_runner(raw)
    ws, agent = scene.workspace.id, scene.agent.id
    base = {"ws": ws, "agent": agent}
    logs = Path(tempfile.gettempdir()) / f"formation-bench-{os.getpid()}"
    log = logs.with_suffix(".gunicorn.log").open("wb")
    floor_log = logs.with_suffix(".http-floor.log").open("wb")
    local_log = logs.with_suffix(".in-process.log").open("w")
    own_rss_start = rss_mib()
    # Request logs go to a file, as in production: written, but not to a terminal.
    server = Gunicorn(port=args.port, workers=args.gunicorn_workers, threads=args.threads, log=log)
    rss_start = server.worker_rss_mib()
    floor_server: HttpFloorGunicorn | None = None
    rows: list[Row] = []
    clients: list[Api] = []
    try:
        floor_port = free_port()
        floor_server = HttpFloorGunicorn(port=floor_port, log=floor_log)
        clients = [Api(args.port), Api(floor_port)]
        harness = Harness(
            http=clients[0],
            local=InProcess(local_log),
            http_floor=clients[1],
            meter=meter,
            n=n,
            warm=warm,
            counted=counted,
        )

        def agent_call(path: str) -> Request:
            return lambda transport, _: transport.call("GET", path, scene.agent_token)

        if "healthz" in selected:
            rows += harness.measure(
                lambda transport, _: transport.call("GET", "/healthz", None),
                [
                    (
                        Row(
                            "healthz", "liveness probe", note="no SQL: its floor is the HTTP floor"
                        ),
                        None,
                    )
                ],
            )

        for case in cases:
            rows.extend(search_history_rows(harness, raw, scene, case))

        mine = MEMBER.format(room="m.conversation_id")
        if "search_messages" in selected:
            for band, rank in SUBSTRINGS.items():
                needle = words[rank - 1].upper()
                literal = sql(
                    f"SELECT {SUMMARY} FROM messages_app_message AS m "
                    f"WHERE m.workspace_id = %(ws)s AND m.deleted_at IS NULL AND {mine} "
                    "AND upper(m.content) LIKE %(pattern)s "
                    "ORDER BY m.created_at DESC, m.seq DESC, m.id DESC LIMIT %(limit)s",
                    {**base, "pattern": f"%{needle}%", "limit": SEARCH_LIMIT},
                )
                search = agent_call(f"/api/v1/messages/search?query={needle}&limit={SEARCH_LIMIT}")
                rows += harness.measure(
                    search, [(Row("search_messages", f"{band} substring"), literal)], describe=found
                )

                def unindexed(i: int, literal=literal) -> object:
                    """The same statement with the trigram index out of reach, on one core."""
                    with raw.transaction():
                        raw.execute("SET LOCAL enable_bitmapscan = off")
                        raw.execute("SET LOCAL max_parallel_workers_per_gather = 0")
                        return literal(i)

                without_index = Row(
                    "search_messages",
                    f"{band} substring, floor without its index",
                    note="the API against an unindexed scan on one core",
                )
                rows += harness.measure(
                    search, [(without_index, unindexed)], n=max(n // 3, 5), warm=1
                )

        if "list_messages" in selected:
            room = scene.big_room
            page_sql = (
                f"SELECT {SUMMARY}, c.live_message_count FROM messages_app_conversation AS c "
                f"JOIN messages_app_message AS m ON m.conversation_id = c.id "
                f"WHERE c.id = %(room)s AND c.workspace_id = %(ws)s "
                f"AND {MEMBER.format(room='c.id')} "
                "AND m.workspace_id = %(ws)s AND m.deleted_at IS NULL "
                "ORDER BY m.created_at DESC, m.seq DESC LIMIT %(limit)s OFFSET %(offset)s"
            )
            deep = max(0, min(DEEP_OFFSET, room.live_message_count - PAGE))
            for case, offset in (("first page", 0), (f"offset {deep:,}", deep)):
                page = Row("list_messages", case, note=f"{room.live_message_count:,} messages")
                rows += harness.measure(
                    agent_call(
                        f"/api/v1/messages?conversationId={room.id}&limit={PAGE}&offset={offset}"
                    ),
                    [
                        (
                            page,
                            sql(
                                page_sql, {**base, "room": room.id, "limit": PAGE, "offset": offset}
                            ),
                        )
                    ],
                )
            # LATERAL, so the anchor's time bounds the timeline index scan instead of filtering it.
            positional_sql = (
                f"SELECT page.* FROM messages_app_message AS anchor CROSS JOIN LATERAL ("
                f"SELECT {SUMMARY} FROM messages_app_message AS m "
                "WHERE m.workspace_id = %(ws)s AND m.conversation_id = %(room)s "
                "AND m.deleted_at IS NULL AND m.created_at <= anchor.created_at "
                "AND (m.created_at < anchor.created_at OR m.seq < anchor.seq) "
                "ORDER BY m.created_at DESC, m.seq DESC LIMIT %(limit)s) AS page "
                "WHERE anchor.id = %(anchor)s AND anchor.conversation_id = %(room)s "
                "AND anchor.workspace_id = %(ws)s AND anchor.deleted_at IS NULL AND "
                + MEMBER.format(room="anchor.conversation_id")
            )
            before = f"/api/v1/messages?conversationId={room.id}&limit={PAGE}&before="
            rows += harness.measure(
                lambda transport, i: transport.call(
                    "GET", f"{before}{scene.anchors[i]}", scene.agent_token
                ),
                [
                    (
                        Row("list_messages", "before an anchor", note="random anchors"),
                        lambda i: sql(
                            positional_sql,
                            {
                                **base,
                                "room": room.id,
                                "anchor": scene.anchors[i],
                                "limit": PAGE + 1,
                            },
                        )(),
                    )
                ],
            )
        if "get_message" in selected:
            get_sql = (
                f"SELECT {SUMMARY} FROM messages_app_message AS m WHERE m.id = %(id)s "
                f"AND m.workspace_id = %(ws)s AND m.deleted_at IS NULL AND {mine}"
            )
            rows += harness.measure(
                lambda transport, i: transport.call(
                    "GET", f"/api/v1/messages/{scene.message_ids[i]}", scene.agent_token
                ),
                [
                    (
                        Row("get_message", "by id", note="random visible messages"),
                        lambda i: sql(get_sql, {**base, "id": scene.message_ids[i]})(),
                    )
                ],
            )
        if "bulk" in selected:
            rows.append(bulk_ingest(harness, raw, scene, words, rng, args))
        rss_end = server.worker_rss_mib()
    finally:
        # Kept-alive connections left open would hold gunicorn's graceful stop for its
        # graceful_timeout (30 s).
        for client in clients:
            client.close()
        if floor_server is not None:
            floor_server.stop()
        server.stop()
        floor_log.close()
        raw.close()
        meter.close()
        log.close()
        local_log.close()
    context = {
        "messages": Message.objects.count(),
        "workspace": scene.workspace.slug,
        "big_room": scene.big_room.live_message_count,
        "rss_start": rss_start,
        "rss_end": rss_end,
        "own_rss": (own_rss_start, rss_mib()),
        "parallel": parallel,
        "own_calls": meter.own_calls,
    }
    return rows, context


def bulk_ingest(
    harness: Harness,
    raw: psycopg.Connection,
    scene: Scene,
    words: list[str],
    rng: random.Random,
    args: argparse.Namespace,
) -> Row:
    """POST .../messages/bulk against reserving seqs and one INSERT ... SELECT FROM unnest.

    Into a workspace of the benchmark's own, never the busy agent's: tens of thousands of
    ingested messages would otherwise become the newest rows of the workspace every other row
    reads newest first, and change what the next run measures.
    """
    size = args.bulk_size
    client = harness.http
    workspace = Workspace.objects.filter(slug=INGEST_WORKSPACE).first() or workspace_create(
        slug=INGEST_WORKSPACE
    )
    sender = account_create(workspace_id=workspace.id, display_name="Bench ingest sender")
    _, token = token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    rooms = []
    for side in ("api", "floor"):
        room = json.loads(
            client.call(
                "POST",
                "/api/v1/conversations",
                token,
                {"kind": "private", "title": f"bench ingest {side} {stamp}"},
            )
        )
        client.call(
            "POST",
            f"/api/v1/conversations/{room['id']}/members",
            token,
            {"accountId": str(sender.id)},
        )
        rooms.append(room["id"])
    api_room, floor_room = rooms

    def text() -> str:
        return " ".join(rng.choices(words[:5_000], k=rng.randint(5, 40))).capitalize() + "."

    requests, warm, counted = max(3, args.requests // 3), 1, 1
    # Built and encoded before the clock starts, for every side alike. HTTP and in-process
    # post the same batches into the same room, one after the other.
    api_batches = [
        encoded(
            {"messages": [{"senderUserId": str(sender.id), "content": text()} for _ in range(size)]}
        )
        for _ in range(warm + requests + counted)
    ]
    floor_batches = [
        ([uuid.uuid4() for _ in range(size)], [text() for _ in range(size)])
        for _ in range(warm + requests + counted)
    ]

    def api(transport: Transport, i: int) -> bytes:
        return transport.call(
            "POST", f"/api/v1/conversations/{api_room}/messages/bulk", token, api_batches[i]
        )

    def floor(i: int) -> None:
        ids, contents = floor_batches[i]
        with raw.transaction(), raw.cursor() as cursor:
            cursor.execute(
                "UPDATE messages_app_conversation SET last_seq = last_seq + %(n)s, "
                "live_message_count = live_message_count + %(n)s WHERE id = %(room)s "
                "RETURNING last_seq",
                {"n": size, "room": floor_room},
            )
            (last,) = cursor.fetchone()
            cursor.execute(
                "INSERT INTO messages_app_message (id, workspace_id, conversation_id, seq, role, "
                "status, sender_account_id, content, created_at) "
                "SELECT i.id, %(ws)s, %(room)s, %(first)s + i.n - 1, 'user', 'sent', "
                "%(sender)s, i.content, now() "
                "FROM unnest(%(ids)s::uuid[], %(contents)s::text[]) WITH ORDINALITY "
                "AS i(id, content, n)",
                {
                    "ws": workspace.id,
                    "room": floor_room,
                    "first": last - size + 1,
                    "sender": sender.id,
                    "ids": ids,
                    "contents": contents,
                },
            )

    row = Row("bulk ingest", f"{size:,} messages per request", note="text built outside timing")
    (row,) = harness.measure(api, [(row, floor)], n=requests, warm=warm, counted=counted)
    return row


def count_cell(statements: dict[str, float]) -> str:
    """``API / floor`` statements per request; the in-process count only where it differs."""

    def number(value: float) -> str:
        return f"{value:.0f}" if value == round(value) else f"{value:.1f}"

    api = number(statements["api"])
    if statements["in_process"] != statements["api"]:
        api += f" (in-process {number(statements['in_process'])})"
    return f"{api} / {number(statements['floor'])}"


def rss_text(sizes: dict[int, float]) -> str:
    return ", ".join(f"{size:.0f}" for size in sizes.values())


def report(rows: list[Row], context: dict[str, object], args: argparse.Namespace) -> str:
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    start, end = context["rss_start"], context["rss_end"]
    replaced = "" if set(start) == set(end) else " (a worker was replaced during the run)"
    own_start, own_end = context["own_rss"]
    parallel = context["parallel"]
    lines = [
        f"Corpus seed {args.seed}: {context['messages']:,} messages; busy agent of "
        f"`{context['workspace']}`; list_messages reads its largest room "
        f"({context['big_room']:,} live messages).",
        f"gunicorn (formation/gunicorn_conf.py): {args.gunicorn_workers} workers x "
        f"{args.threads} threads; HTTP floor (bench/http_floor.py, a fixed 12-byte JSON answer): "
        f"gunicorn gthread, 1 worker x 1 thread. "
        f"{args.requests} timed requests per row after {args.warmup} warm-up, API, in-process, "
        f"HTTP floor and SQL floor interleaved request by request (A B B A); sequential client "
        f"on loopback, one keep-alive connection per server; load average at the end {load}."
        + (f" Only {', '.join(args.only)} (--only)." if args.only else ""),
        f"PostgreSQL: max_parallel_workers_per_gather = "
        f"{parallel['max_parallel_workers_per_gather']}, max_parallel_workers = "
        f"{parallel['max_parallel_workers']}; statements per request from pg_stat_statements "
        f"over {args.statement_samples} more untimed requests per side (bulk ingest: 1), "
        f"one side at a time.",
        f"Worker RSS (MiB): {rss_text(end)}; at the start {rss_text(start)}{replaced}. "
        f"This process (in-process side): {own_start:.0f} at the start, {own_end:.0f} at the end.",
        "",
        "| tool | case | API p50 | p95 | p99 | in-process p50 | HTTP floor p50 | floor p50 | p95 "
        "| p99 | ratio (median of pairs) | ratio of medians "
        f"| {MARGIN} (HTTP + SQL floor), median of pairs | statements/request | note |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        api = [f"{percentile(row.api, q):.1f}" for q in (0.5, 0.95, 0.99)]
        floor = [f"{percentile(row.floor, q):.1f}" for q in (0.5, 0.95, 0.99)]
        cells = [
            *api,
            f"{percentile(row.in_process, 0.5):.1f}",
            f"{percentile(row.http_floor, 0.5):.2f}",
            *floor,
        ]
        if row.has_sql_floor:
            pairs = row.pair_ratios()
            ratio = f"{statistics.median(pairs):.1f}x (p95 {percentile(pairs, 0.95):.1f}x)"
            of_medians = f"{statistics.median(row.api) / statistics.median(row.floor):.1f}x"
        else:
            ratio = of_medians = "n/a"
        margins = row.margins()
        margin = f"{statistics.median(margins):.2f} (p95 {percentile(margins, 0.95):.2f})"
        lines.append(
            f"| {row.tool} | {row.case} | {' | '.join(cells)} | {ratio} | {of_medians} "
            f"| {margin} | {count_cell(row.statements)} | {row.note} |"
        )
    lines += relative_to_rare(rows)
    lines += [
        "",
        "Times in milliseconds, nearest-rank percentiles. API: HTTP through gunicorn; "
        "in-process: the same request through the WSGI application in the benchmark's process; "
        "HTTP floor: a request to an application that does nothing (bench/http_floor.py) under "
        "gunicorn on loopback, timed next to every API request: what any Python server on this "
        "machine costs at that moment. Floor: the same work as bare SQL (zero for healthz, which "
        "runs none). The ratios are API over floor (n/a where the floor is zero). "
        f"{MARGIN} (HTTP + SQL floor) is, sample by sample, what the service adds to both "
        'floors (median, p95 in brackets), so a target stated as "API p50 ≤ HTTP floor + SQL '
        'floor + X ms" moves with the machine on both sides. Statements: top-level SQL '
        "statements the server ran per request (BEGIN, COMMIT, SAVEPOINT and SET included), "
        "API / floor, the in-process count shown where it differs from the API's; the HTTP "
        "floor runs none and is not counted.",
    ]
    return "\n".join(lines) + "\n"


def relative_to_rare(rows: list[Row]) -> list[str]:
    """Each search_history row's API p50 and p95 over the rare-term row's p50 of the same run
    (how a search's cost grows with its words' matches), as lines under the table."""
    history = [row for row in rows if row.tool == "search_history" and row.api]
    rare = next((row for row in history if row.case == "rare terms"), None)
    if rare is None:
        return []
    base = statistics.median(rare.api)
    cells = ", ".join(
        f"{row.case} {statistics.median(row.api) / base:.2f}x (p95 "
        f"{percentile(row.api, 0.95) / base:.2f}x)"
        for row in history
        if row is not rare
    )
    return ["", f"search_history API over the rare-term API p50 ({base:.1f} ms): {cells}."]


def history_query(value: str) -> tuple[str, str]:
    """``label=text`` for ``--history-query``."""
    label, sign, text = value.partition("=")
    if not sign or not label.strip() or not text.strip():
        raise argparse.ArgumentTypeError("expected label=text, both non-empty")
    return label.strip(), text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="Corpus seed (default 1).")
    parser.add_argument(
        "--messages",
        type=int,
        help="Load a corpus of this many messages first if the seed is not loaded here yet.",
    )
    parser.add_argument("--requests", type=int, default=30, help="Timed requests per row.")
    parser.add_argument("--warmup", type=int, default=3, help="Untimed requests per row first.")
    parser.add_argument(
        "--statement-samples",
        type=int,
        default=3,
        help="Untimed requests per side and row whose SQL statements are counted (default 3).",
    )
    parser.add_argument(
        "--history-query",
        type=history_query,
        action="append",
        default=[],
        metavar="LABEL=TEXT",
        help="An extra search_history row for this query text, named LABEL (repeatable).",
    )
    parser.add_argument(
        "--cjk-messages",
        type=int,
        default=CJK_MESSAGES,
        help="Synthetic CJK messages in the busy agent's destination for the CJK row, added "
        f"once (default {CJK_MESSAGES:,}; 0: no CJK row).",
    )
    parser.add_argument("--bulk-size", type=int, default=1_000, help="Messages per bulk request.")
    parser.add_argument(
        "--port", type=int, default=0, help="Loopback port for gunicorn (default: a free one)."
    )
    parser.add_argument("--gunicorn-workers", type=int, default=2, help="gunicorn workers.")
    parser.add_argument("--threads", type=int, default=2, help="Threads per gunicorn worker.")
    parser.add_argument(
        "--only",
        choices=TOOLS,
        action="append",
        default=[],
        metavar="TOOL",
        help=f"Run only this tool's rows (repeatable; one of {', '.join(TOOLS)}; default all).",
    )
    parser.add_argument("--output", type=Path, help="Write the Markdown table here too.")
    args = parser.parse_args()
    if args.requests < 1 or args.warmup < 0 or args.statement_samples < 1:
        parser.error("--requests and --statement-samples must be at least 1, --warmup at least 0")
    if not args.port:
        args.port = free_port()
    # A terminated benchmark still stops the gunicorn it started (the finally blocks run).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))

    call_command("migrate", verbosity=0)
    if not Workspace.objects.filter(slug=workspace_slug(args.seed, 0)).exists():
        if not args.messages:
            sys.exit(f"No corpus with seed {args.seed} here: pass --messages N to load one.")
        print(f"Loading a corpus of {args.messages:,} messages (seed {args.seed})...")
        corpus_generate(
            messages=args.messages,
            workspaces=4,
            conversations=2_000,
            seed=args.seed,
            workers=DEFAULT_WORKERS,
            progress=lambda done: print(f"  {done.loaded:,} messages, {done.seconds:.0f} s"),
        )
    with connection.cursor() as cursor:
        # Visibility maps and statistics as a settled database has them.
        cursor.execute("VACUUM (ANALYZE) messages_app_message, message_search_documents")
    rows, context = benchmark(args)
    table = report(rows, context, args)
    print(table)
    if args.output:
        args.output.write_text(table)


if __name__ == "__main__":
    main()
