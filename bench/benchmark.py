"""Each agent tool through a real gunicorn process, against the raw-SQL floor of the same work.

    DATABASE_URL=postgresql://... .venv/bin/python bench/benchmark.py --seed 1 \
        [--messages 1000000] [--requests 30] [--output bench/results.md]

On the corpus of ``manage.py generate_corpus --seed S`` (loaded first with ``--messages N`` if
this database does not hold it yet), as the corpus's busy agent:

- **API**: sequential HTTP requests over one keep-alive loopback connection to gunicorn
  (``formation.wsgi:application``, gthread workers), timed from sending the request to reading
  the whole answer: routing, token lookup, validation, ORM, serialisation, JSON.
- **floor**: the same work as SQL on one psycopg connection, timed the same way: hand-written
  statements for the listing, reads and literal search; for search_history, the bare query the
  issue names (its terms OR-ed, ranked by ``ts_rank``, top 20, over every conversation the agent
  is a member of), which does none of the perspective rules, neighbours, evidence or audit; for
  bulk ingest, one transaction that reserves the seqs and inserts
  the rows with one ``INSERT ... SELECT FROM unnest(...)``, through the same indexes and
  triggers.

Prints p50/p95/p99 and the API/floor ratio (of medians) per row, and the workers' resident
memory, and writes the table as Markdown to ``--output``. It writes to the database it measures
(tokens, runs, evidence, audit rows, ingested messages): use a database made for it. All text
is synthetic.
"""

from __future__ import annotations

import argparse
import http.client
import json
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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")
# Bench-only secrets for this process and the gunicorn it starts, unless the caller set them.
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production")
os.environ.setdefault("SEARCH_AUDIT_KEYS", "k1:bench-only-audit-key-0123456789")
if not os.environ.get("DATABASE_URL"):
    sys.exit("Set DATABASE_URL to a database made for benchmarking: this script writes to it.")

import django  # noqa: E402

django.setup()

import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from messages_app.corpus import (  # noqa: E402
    BUSY_AGENT_NAME,
    DEFAULT_WORKERS,
    corpus_generate,
    corpus_vocabulary,
    workspace_slug,
)
from messages_app.models import (  # noqa: E402
    Agent,
    Conversation,
    ConversationKind,
    Membership,
    Message,
    TokenKind,
    Workspace,
)
from messages_app.services import token_create  # noqa: E402

# Ranks in the corpus vocabulary (rank r is drawn with weight 1/r).
BANDS = {"rare": (15_000, 12_000, 9_000), "mid": (300, 250, 200), "common": (2, 3, 5)}
SUBSTRINGS = {"rare": 15_000, "common": 1}
PAGE = 50
DEEP_OFFSET = 100_000  # list_messages' largest offset
SEARCH_LIMIT = 20
SUMMARY = (
    "m.id, m.conversation_id, m.seq, m.role, m.status, m.sender_account_id, m.sender_agent_id, "
    "m.reply_to_id, m.thread_id, m.content, m.created_at"
)
MEMBER = (
    "EXISTS (SELECT 1 FROM messages_app_membership AS a WHERE a.workspace_id = %(ws)s "
    "AND a.agent_id = %(agent)s AND a.conversation_id = {room} AND a.left_at IS NULL)"
)


@dataclass
class Row:
    tool: str
    case: str
    api: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    note: str = ""


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile of milliseconds."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


class Api:
    """One keep-alive HTTP connection to the gunicorn under test."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def call(self, method: str, path: str, token: str, body: object = None) -> dict:
        headers = {"Authorization": f"Bearer {token}"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            self.http.request(method, path, body=payload, headers=headers)
            response = self.http.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed an idle keep-alive connection before reading this request.
            self.http.close()
            self.http.request(method, path, body=payload, headers=headers)
            response = self.http.getresponse()
        data = response.read()
        if response.status >= 400:
            code = json.loads(data).get("error", {}).get("code") if data else None
            raise RuntimeError(f"{method} {path.split('?')[0]} answered {response.status} {code}")
        return json.loads(data) if data else {}


class Gunicorn:
    """A gunicorn master with gthread workers on loopback, stopped by its process id."""

    def __init__(self, *, port: int, workers: int, threads: int, log: IO[bytes]) -> None:
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("gunicorn")),
                "formation.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                str(workers),
                "--worker-class",
                "gthread",
                "--threads",
                str(threads),
                "--log-level",
                "warning",
                # Floors run between API calls; keep the client's connection open meanwhile.
                "--keep-alive",
                "300",
            ],
            cwd=ROOT,
            env={**os.environ, "DEBUG": "0"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                probe = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                probe.request("GET", "/readyz")
                if probe.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited while starting; see {log.name}")
            time.sleep(0.3)
        raise RuntimeError("gunicorn did not become ready in 60 s")

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in children.read_text().split()]

    def worker_rss_mib(self) -> list[float]:
        sizes = []
        for pid in self.worker_pids():
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    sizes.append(int(line.split()[1]) / 1024)
        return sizes

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


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


def measure(
    row: Row,
    api: Callable[[int], object],
    floor: Callable[[int], object],
    *,
    n: int,
    warm: int,
    describe: Callable[[object], str] | None = None,
) -> Row:
    """Warm both sides up, then time ``n`` API calls and ``n`` floor runs."""
    answer = None
    for i in range(warm):
        answer = api(i)
        floor(i)
    if describe is not None and answer is not None:
        row.note = describe(answer)
    row.api = [timed(lambda i=i: api(i)) for i in range(warm, warm + n)]
    row.floor = [timed(lambda i=i: floor(i)) for i in range(warm, warm + n)]
    print(
        f"  {row.tool}, {row.case}: API p50 {statistics.median(row.api):.1f} ms, "
        f"floor p50 {statistics.median(row.floor):.1f} ms",
        flush=True,
    )
    return row


def found(answer: object) -> str:
    return f"{len(answer['items'])} items"


def benchmark(args: argparse.Namespace) -> tuple[list[Row], dict[str, object]]:
    rng = random.Random(args.seed)
    scene = prepare_scene(args.seed, rng, samples=args.requests + args.warmup)
    words = corpus_vocabulary(args.seed)
    # No server-side prepared statements: a generic plan cannot see the search pattern, and
    # Django (client-side binding) never uses one either; the floor gets the same plans.
    raw = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True, prepare_threshold=None)
    sql = floor_runner(raw)
    ws, agent = scene.workspace.id, scene.agent.id
    base = {"ws": ws, "agent": agent}
    n, warm = args.requests, args.warmup
    log_path = Path(tempfile.gettempdir()) / f"formation-bench-gunicorn-{os.getpid()}.log"
    log = log_path.open("wb")
    # Request logs go to a file, as in production: written, but not to a terminal.
    server = Gunicorn(port=args.port, workers=args.gunicorn_workers, threads=args.threads, log=log)
    rows: list[Row] = []
    try:
        client = Api(args.port)
        agent_call = lambda path: client.call("GET", path, scene.agent_token)  # noqa: E731

        # search_history: a fresh run per call (the evidence budget is per run), created
        # outside the timing.
        for band, ranks in BANDS.items():
            query = " ".join(words[rank - 1] for rank in ranks)
            runs = [
                client.call(
                    "POST",
                    "/api/v1/runs",
                    scene.service_token,
                    {
                        "agentId": str(agent),
                        "conversationId": str(scene.destination.id),
                        "requesterId": str(scene.requester_id),
                    },
                )["token"]
                for _ in range(n + warm)
            ]
            # The floor (the issue's): the bare OR-of-terms query ranked top 20 by ts_rank
            # over every conversation the agent is a member of, on the same projection.
            floor = sql(
                "SELECT d.message_id, ts_rank(d.document, q) AS rank "
                "FROM message_search_documents AS d, "
                "     to_tsquery('formation_english', %(terms)s) AS q "
                "WHERE d.workspace_id = %(ws)s AND d.document @@ q AND d.conversation_id IN ("
                "SELECT conversation_id FROM messages_app_membership WHERE agent_id = %(agent)s) "
                "ORDER BY rank DESC LIMIT %(limit)s",
                {**base, "terms": " | ".join(words[rank - 1] for rank in ranks), "limit": 20},
            )
            rows.append(
                measure(
                    Row("search_history", f"{band} terms"),
                    lambda i, runs=runs, query=query: client.call(
                        "POST", "/api/v1/history/search", runs[i], {"query": query, "limit": 20}
                    ),
                    floor,
                    n=n,
                    warm=warm,
                    describe=lambda answer: f"{found(answer)}; floor: OR query, ts_rank top 20",
                )
            )

        mine = MEMBER.format(room="m.conversation_id")
        for band, rank in SUBSTRINGS.items():
            needle = words[rank - 1].upper()
            literal = sql(
                f"SELECT {SUMMARY} FROM messages_app_message AS m "
                f"WHERE m.workspace_id = %(ws)s AND m.deleted_at IS NULL AND {mine} "
                "AND upper(m.content) LIKE %(pattern)s "
                "ORDER BY m.created_at DESC, m.seq DESC, m.id DESC LIMIT %(limit)s",
                {**base, "pattern": f"%{needle}%", "limit": SEARCH_LIMIT},
            )
            api = lambda _, needle=needle: agent_call(  # noqa: E731
                f"/api/v1/messages/search?query={needle}&limit={SEARCH_LIMIT}"
            )
            rows.append(
                measure(
                    Row("search_messages", f"{band} substring"),
                    api,
                    literal,
                    n=n,
                    warm=warm,
                    describe=found,
                )
            )

            def unindexed(i: int, literal=literal) -> object:
                """The same statement with the trigram index out of reach, on one core."""
                with raw.transaction():
                    raw.execute("SET LOCAL enable_bitmapscan = off")
                    raw.execute("SET LOCAL max_parallel_workers_per_gather = 0")
                    return literal(i)

            rows.append(
                measure(
                    Row("search_messages", f"{band} substring, floor without its index"),
                    api,
                    unindexed,
                    n=max(n // 3, 5),
                    warm=1,
                    describe=lambda _: "the API against an unindexed scan",
                )
            )

        room = scene.big_room
        page_sql = (
            f"SELECT {SUMMARY}, c.live_message_count FROM messages_app_conversation AS c "
            f"JOIN messages_app_message AS m ON m.conversation_id = c.id "
            f"WHERE c.id = %(room)s AND c.workspace_id = %(ws)s AND {MEMBER.format(room='c.id')} "
            "AND m.workspace_id = %(ws)s AND m.deleted_at IS NULL "
            "ORDER BY m.created_at DESC, m.seq DESC LIMIT %(limit)s OFFSET %(offset)s"
        )
        deep = max(0, min(DEEP_OFFSET, room.live_message_count - PAGE))
        for case, offset in (("first page", 0), (f"offset {deep:,}", deep)):
            rows.append(
                measure(
                    Row("list_messages", case, note=f"{room.live_message_count:,} messages"),
                    lambda _, offset=offset: agent_call(
                        f"/api/v1/messages?conversationId={room.id}&limit={PAGE}&offset={offset}"
                    ),
                    sql(page_sql, {**base, "room": room.id, "limit": PAGE, "offset": offset}),
                    n=n,
                    warm=warm,
                )
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
        rows.append(
            measure(
                Row("list_messages", "before an anchor", note="random anchors"),
                lambda i: agent_call(
                    f"/api/v1/messages?conversationId={room.id}&limit={PAGE}"
                    f"&before={scene.anchors[i]}"
                ),
                lambda i: sql(
                    positional_sql,
                    {**base, "room": room.id, "anchor": scene.anchors[i], "limit": PAGE + 1},
                )(),
                n=n,
                warm=warm,
            )
        )
        get_sql = (
            f"SELECT {SUMMARY} FROM messages_app_message AS m WHERE m.id = %(id)s "
            f"AND m.workspace_id = %(ws)s AND m.deleted_at IS NULL AND {mine}"
        )
        rows.append(
            measure(
                Row("get_message", "by id", note="random visible messages"),
                lambda i: agent_call(f"/api/v1/messages/{scene.message_ids[i]}"),
                lambda i: sql(get_sql, {**base, "id": scene.message_ids[i]})(),
                n=n,
                warm=warm,
            )
        )
        rows.append(bulk_ingest(client, raw, scene, words, rng, args))
        rss = server.worker_rss_mib()
    finally:
        server.stop()
        raw.close()
        log.close()
    context = {
        "messages": Message.objects.count(),
        "workspace": scene.workspace.slug,
        "big_room": room.live_message_count,
        "rss": rss,
    }
    return rows, context


def bulk_ingest(
    client: Api,
    raw: psycopg.Connection,
    scene: Scene,
    words: list[str],
    rng: random.Random,
    args: argparse.Namespace,
) -> Row:
    """POST .../messages/bulk against reserving seqs and one INSERT ... SELECT FROM unnest."""
    size = args.bulk_size
    token = scene.service_token
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    rooms = []
    for side in ("api", "floor"):
        room = client.call(
            "POST",
            "/api/v1/conversations",
            token,
            {"kind": "private", "title": f"bench ingest {side} {stamp}"},
        )
        client.call(
            "POST",
            f"/api/v1/conversations/{room['id']}/members",
            token,
            {"accountId": str(scene.sender_id)},
        )
        rooms.append(room["id"])
    api_room, floor_room = rooms

    def text() -> str:
        return " ".join(rng.choices(words[:5_000], k=rng.randint(5, 40))).capitalize() + "."

    requests = max(3, args.requests // 3)
    # Built before the clock starts, for both sides alike.
    api_batches = [
        {
            "messages": [
                {"senderUserId": str(scene.sender_id), "content": text()} for _ in range(size)
            ]
        }
        for _ in range(requests + 1)
    ]
    floor_batches = [
        ([uuid.uuid4() for _ in range(size)], [text() for _ in range(size)])
        for _ in range(requests + 1)
    ]

    def api(i: int) -> None:
        client.call(
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
                    "ws": scene.workspace.id,
                    "room": floor_room,
                    "first": last - size + 1,
                    "sender": scene.sender_id,
                    "ids": ids,
                    "contents": contents,
                },
            )

    return measure(
        Row("bulk ingest", f"{size:,} messages per request", note="text built outside timing"),
        api,
        floor,
        n=requests,
        warm=1,
    )


def report(rows: list[Row], context: dict[str, object], args: argparse.Namespace) -> str:
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rss = ", ".join(f"{size:.0f}" for size in context["rss"])
    lines = [
        f"Corpus seed {args.seed}: {context['messages']:,} messages; busy agent of "
        f"`{context['workspace']}`; list_messages reads its largest room "
        f"({context['big_room']:,} live messages).",
        f"gunicorn: {args.gunicorn_workers} gthread workers x {args.threads} threads; "
        f"{args.requests} timed requests per row after {args.warmup} warm-up; sequential "
        f"client on loopback; load average at the end {load}. Worker RSS (MiB): {rss}.",
        "",
        "| tool | case | API p50 | p95 | p99 | floor p50 | p95 | p99 | API/floor | note |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for row in rows:
        api = [percentile(row.api, q) for q in (0.5, 0.95, 0.99)]
        floor = [percentile(row.floor, q) for q in (0.5, 0.95, 0.99)]
        ratio = statistics.median(row.api) / statistics.median(row.floor)
        cells = [f"{value:.1f}" for value in (*api, *floor)]
        lines.append(
            f"| {row.tool} | {row.case} | {' | '.join(cells)} | {ratio:.1f}x | {row.note} |"
        )
    lines.append("")
    lines.append("Times in milliseconds, nearest-rank percentiles; the ratio is of the medians.")
    return "\n".join(lines) + "\n"


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
    parser.add_argument("--bulk-size", type=int, default=1_000, help="Messages per bulk request.")
    parser.add_argument(
        "--port", type=int, default=0, help="Loopback port for gunicorn (default: a free one)."
    )
    parser.add_argument("--gunicorn-workers", type=int, default=2, help="gunicorn workers.")
    parser.add_argument("--threads", type=int, default=2, help="Threads per gunicorn worker.")
    parser.add_argument("--output", type=Path, help="Write the Markdown table here too.")
    args = parser.parse_args()
    if not args.port:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            args.port = probe.getsockname()[1]
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
