"""Time bulk imports of a given shape through the API, in process or under bench/load.py's load.

    DATABASE_URL=postgresql://... python bench/bulk_import_limit.py 1000x10000 5000x2000 \
        [--repeat 3] [--lift-limit]
    DATABASE_URL=postgresql://... python bench/bulk_import_limit.py --under-load \
        [1000x5000] [--repeat 5] [--concurrency 16] [--seed 1] [--compare-tree DIR]

Each ``COUNTxCHARS`` posts COUNT messages of CHARS characters of corpus-like text (the corpus
vocabulary, Zipf-drawn) to ``POST /api/v1/conversations/{id}/messages/bulk`` under the production
statement timeout (``API_STATEMENT_TIMEOUT_MS``).

In process (the default), each import runs inside a transaction that is rolled back, so the
database keeps nothing. Prints, per import, the status, the whole request, its longest SQL
statement (an INSERT, with the search-document trigger and the GIN indexes), when PostgreSQL
runs on this machine the CPU time its backend spent, which does not depend on what else the
machine is doing, and the statements Django sent for the request (its SET of the timeout and
the savepoints included; here the transactions are savepoints of the rolled-back one).
``--lift-limit`` raises MAX_BULK_CHARS in this process, to time imports past it.

``--under-load`` (default shape: the documented maximum, 1,000 x 5,000) acts as an operator
would: on the corpus of ``manage.py generate_corpus --seed S`` it starts gunicorn with the
production configuration (``bench/load.py``), runs load.py's mix with ``--concurrency`` clients
(16: the load of the reliability issue) and, once it has run ``--warmup`` seconds, sends
``--repeat`` imports one after another through the same gunicorn, each stored for real in a
private room of its own. Each must answer 201 with consecutive seqs and leave exactly its
messages and their search documents, or leave nothing. ``--compare-tree DIR`` serves a second
gunicorn from another checkout (e.g. ``git archive BASE | tar -x -C DIR``) on the same database
and alternates the imports between the two (AB, BA, ...), under the same load. Prints each
import (status, request seconds, the longest INSERT into the messages table from
``pg_stat_statements``), then per tree the imports stored out of those tried and the median
request, then the load's own table. Writes to the database it loads: use one made for it.
Synthetic data only; nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.django_setup import setup_django  # noqa: E402

setup_django("Set DATABASE_URL to the database to import into (see the docstring).")

from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402

from messages_app import services  # noqa: E402
from messages_app.models import Message, TokenKind  # noqa: E402
from messages_app.services import messages as message_services  # noqa: E402
from synthetic.corpus import corpus_vocabulary  # noqa: E402

# The INSERT every message write runs, as pg_stat_statements normalises it (formation.bulk_insert).
MESSAGE_INSERT = "INSERT INTO messages_app_message %"


def corpus_text(rng: random.Random, words: list[str], weights: list[float], chars: int) -> str:
    text = ""
    while len(text) < chars:
        text += " ".join(rng.choices(words, weights, k=2_000)) + " "
    return text[:chars]


def backend_cpu_seconds() -> float | None:
    """User and system time of this connection's PostgreSQL backend, if it is a local process."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def import_once(
    count: int, chars: int, rng: random.Random, words, weights
) -> tuple[int, float, float, float | None, int]:
    """(status, request seconds, longest statement seconds, backend CPU seconds, statements) of
    one rolled-back import."""
    contents = [corpus_text(rng, words, weights, chars) for _ in range(count)]
    longest = 0.0
    statements = 0

    def timed(execute, sql, params, many, context):
        nonlocal longest, statements
        statements += 1
        started = time.monotonic()
        try:
            return execute(sql, params, many, context)
        finally:
            longest = max(longest, time.monotonic() - started)

    with transaction.atomic():
        workspace = services.workspace_create(slug=f"bulk-limit-{rng.getrandbits(48):x}")
        sender = services.account_create(workspace_id=workspace.id, display_name="Sender")
        room = services.conversation_create(workspace_id=workspace.id, kind="private", title="bulk")
        services.membership_join(conversation=room, account_id=sender.id)
        _, token = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
        body = json.dumps(
            {"messages": [{"senderUserId": str(sender.id), "content": c} for c in contents]}
        )
        client = Client(HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_HOST="localhost")
        cpu_before = backend_cpu_seconds()
        started = time.monotonic()
        with connection.execute_wrapper(timed):
            response = client.post(
                f"/api/v1/conversations/{room.id}/messages/bulk",
                body,
                content_type="application/json",
            )
        elapsed = time.monotonic() - started
        cpu_after = backend_cpu_seconds()
        transaction.set_rollback(True)
    cpu = None if cpu_before is None or cpu_after is None else cpu_after - cpu_before
    return response.status_code, elapsed, longest, cpu, statements


def in_process(args: argparse.Namespace, shapes: list[tuple[int, int]]) -> None:
    if args.lift_limit:
        message_services.MAX_BULK_CHARS = 10**12
    words = corpus_vocabulary(0)
    weights = [1.0 / rank for rank in range(1, len(words) + 1)]
    rng = random.Random(0)
    limit = message_services.MAX_BULK_CHARS
    print(f"load average {os.getloadavg()[0]:.1f}; limit {limit:,} characters")
    for count, chars in shapes:
        for _ in range(args.repeat):
            status, elapsed, longest, cpu, statements = import_once(
                count, chars, rng, words, weights
            )
            backend = "n/a" if cpu is None else f"{cpu:5.2f} s"
            print(
                f"{count:>5} x {chars:>6} = {count * chars / 1e6:5.1f}M characters: {status}, "
                f"request {elapsed:5.2f} s, longest statement {longest:5.2f} s, "
                f"PostgreSQL CPU {backend}, {statements} statements",
                flush=True,
            )


# --- under load ---------------------------------------------------------------------------------


@dataclass
class Try:
    tree: str
    count: int
    chars: int
    status: int | str
    seconds: float
    longest_insert: float | None
    stored: int
    documents: int
    consecutive: bool

    @property
    def kept_its_promise(self) -> bool:
        """201 with every message and document stored in order, or an error storing nothing."""
        if self.status == 201:
            return self.consecutive and self.stored == self.documents == self.count
        return self.stored == self.documents == 0


def longest_message_insert() -> float | None:
    """Seconds of the longest INSERT into the messages table since the last reset (None when
    pg_stat_statements is missing or saw none: a cancelled statement is not recorded)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT max(max_exec_time) FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND query LIKE %s",
            [MESSAGE_INSERT],
        )
        (milliseconds,) = cursor.fetchone()
    return None if milliseconds is None else milliseconds / 1000


def statement_statistics_available() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'pg_stat_statements' = ANY(string_to_array("
            "replace(current_setting('shared_preload_libraries'), ' ', ''), ','))"
        )
        if not cursor.fetchone()[0]:
            return False
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return True


def reset_statement_statistics(enabled: bool) -> None:
    if enabled:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_statements_reset()")


def under_load(args: argparse.Namespace, shapes: list[tuple[int, int]]) -> int:
    import httpx
    import load

    rng = random.Random(args.seed)
    trees = {"this tree": ROOT}
    if args.compare_tree:
        trees[str(args.compare_tree)] = args.compare_tree.resolve()
    imports = len(shapes) * args.repeat * len(trees)
    # Runs enough for 30 s an import at load.py's 250 requests per second (a run reused past
    # its budget would answer 429, an error of the load).
    searches = (args.warmup + 30 * imports) * 250 * load.MIX["search_history"] / 100
    plan = load.make_plan(args.seed, rng, runs=int(searches / load.SEARCHES_PER_RUN) + 100)
    scene = plan.scene
    # A private room of the import's own, which the load's agent does not read.
    room = services.conversation_create(
        workspace_id=scene.workspace.id, kind="private", title="bulk import under load"
    )
    services.membership_join(conversation=room, account_id=scene.requester_id)
    words = corpus_vocabulary(args.seed)
    weights = [1.0 / rank for rank in range(1, len(words) + 1)]
    order = [
        tree
        for index in range(args.repeat)
        for tree in (list(trees) if index % 2 == 0 else list(reversed(trees)))
    ]
    # Bodies built before the load starts, so building them takes nothing from it.
    bodies = [
        (
            tree,
            count,
            chars,
            json.dumps(
                {
                    "messages": [
                        {
                            "senderUserId": str(scene.requester_id),
                            "content": corpus_text(rng, words, weights, chars),
                        }
                        for _ in range(count)
                    ]
                }
            ).encode(),
        )
        for count, chars in shapes
        for tree in order
    ]
    with_statistics = statement_statistics_available()
    print(
        f"{Message.objects.count():,} messages; {args.concurrency} clients of bench/load.py's mix; "
        f"{len(bodies)} imports ({', '.join(f'{c:,} x {n:,}' for c, n in shapes)}) in "
        f"{', '.join(trees)}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    ports = {tree: args.port + offset for offset, tree in enumerate(trees)}
    tries: list[Try] = []

    def room_counts() -> tuple[int, int]:
        """(messages, search documents) in the import's room."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT (SELECT count(*) FROM messages_app_message "
                "        WHERE workspace_id = %s AND conversation_id = %s), "
                "       (SELECT count(*) FROM message_search_documents "
                "        WHERE workspace_id = %s AND conversation_id = %s)",
                [scene.workspace.id, room.id] * 2,
            )
            return cursor.fetchone()

    def before_try() -> tuple[int, int]:
        reset_statement_statistics(with_statistics)
        return room_counts()

    # The script's own queries run on one thread of their own, off the event loop the load's
    # clients share.
    database = ThreadPoolExecutor(max_workers=1)

    async def in_database(function):
        return await asyncio.get_running_loop().run_in_executor(database, function)

    async def send(client: httpx.AsyncClient, tree: str, count: int, chars: int, body: bytes):
        messages_before, documents_before = await in_database(before_try)
        started = time.monotonic()
        seqs: list[int] = []
        try:
            response = await client.post(
                f"http://127.0.0.1:{ports[tree]}/api/v1/conversations/{room.id}/messages/bulk",
                content=body,
                headers={
                    "Authorization": f"Bearer {scene.service_token}",
                    "Content-Type": "application/json",
                },
                timeout=600,
            )
            status: int | str = response.status_code
            if status == 201:
                seqs = [item["seq"] for item in response.json()["items"]]
            else:
                status = f"{status} {load.error_code(response)}"
        except httpx.HTTPError as error:
            status = type(error).__name__
        seconds = time.monotonic() - started
        messages_after, documents_after = await in_database(room_counts)
        longest_insert = await in_database(longest_message_insert) if with_statistics else None
        attempt = Try(
            tree=tree,
            count=count,
            chars=chars,
            status=status,
            seconds=seconds,
            longest_insert=longest_insert,
            stored=messages_after - messages_before,
            documents=documents_after - documents_before,
            consecutive=bool(seqs) and seqs == list(range(seqs[0], seqs[0] + count)),
        )
        tries.append(attempt)
        longest = "n/a" if longest_insert is None else f"{longest_insert:5.2f} s"
        print(
            f"{tree}: {count:,} x {chars:,}: {status}, request {seconds:5.2f} s, longest INSERT "
            f"{longest}; {attempt.stored:,} stored, {attempt.documents:,} documents, load "
            f"average {os.getloadavg()[0]:.1f}",
            flush=True,
        )

    async def run(client: httpx.AsyncClient) -> tuple[load.Recorder, float, float]:
        recorder = load.Recorder()
        clients = [
            asyncio.ensure_future(
                load.client_loop(
                    client, plan, recorder, random.Random(args.seed * 1000 + i), float("inf")
                )
            )
            for i in range(args.concurrency)
        ]
        await asyncio.sleep(args.warmup)
        busy0, total0 = load.cpu_times()
        started = time.monotonic()
        async with httpx.AsyncClient() as importer:
            for tree, count, chars, body in bodies:
                await send(importer, tree, count, chars, body)
        seconds = time.monotonic() - started
        busy1, total1 = load.cpu_times()
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
        measured = [o for o in recorder.outcomes if o.started >= started]
        recorder.outcomes = measured
        return recorder, seconds, (busy1 - busy0) / max(1, total1 - total0)

    log_path = Path(tempfile.gettempdir()) / f"formation-bulk-load-{os.getpid()}.log"
    servers = []
    with log_path.open("wb") as log:
        try:
            for tree, root in trees.items():
                servers.append(load.ProductionGunicorn(port=ports[tree], log=log, root=root))
            limits = httpx.Limits(
                max_connections=args.concurrency, max_keepalive_connections=args.concurrency
            )
            main_port = ports["this tree"]

            async def main() -> tuple[load.Recorder, float, float]:
                async with httpx.AsyncClient(
                    base_url=f"http://127.0.0.1:{main_port}", limits=limits, timeout=60
                ) as client:
                    return await run(client)

            recorder, seconds, busy = asyncio.run(main())
        finally:
            for server in servers:
                server.stop()
    print()
    failed = False
    for tree in trees:
        mine = [t for t in tries if t.tree == tree]
        stored = sum(t.status == 201 for t in mine)
        broken = [t for t in mine if not t.kept_its_promise]
        failed |= bool(broken) or stored < len(mine)
        inserts = [t.longest_insert for t in mine if t.longest_insert is not None]
        print(
            f"{tree}: bulk import {', '.join(f'{c:,} x {n:,}' for c, n in shapes)} under "
            f"{args.concurrency}-client load: stored (201) {stored} of {len(mine)} tries; "
            f"median request {statistics.median(t.seconds for t in mine):.1f} s; longest INSERT "
            + (f"{max(inserts):.2f} s" if inserts else "n/a")
            + (f"; {len(broken)} left a partial import" if broken else "")
        )
    print()
    load_args = argparse.Namespace(concurrency=args.concurrency)
    print("The load while the imports ran (gunicorn of this tree):")
    print(load.report(recorder, seconds, busy, load_args))
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", help="COUNTxCHARS, e.g. 1000x10000")
    parser.add_argument("--repeat", type=int, default=None, help="imports per shape (and tree)")
    parser.add_argument("--lift-limit", action="store_true", help="raise MAX_BULK_CHARS")
    parser.add_argument(
        "--under-load", action="store_true", help="through gunicorn, under bench/load.py's mix"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="load clients (--under-load)")
    parser.add_argument("--seed", type=int, default=1, help="the corpus seed (--under-load)")
    parser.add_argument("--warmup", type=float, default=15, help="seconds of load first")
    parser.add_argument("--port", type=int, default=8767, help="gunicorn's (the next: DIR's)")
    parser.add_argument(
        "--compare-tree", type=Path, help="also serve this checkout and alternate between them"
    )
    args = parser.parse_args()
    shapes = [
        tuple(int(part) for part in shape.split("x"))
        for shape in args.shapes or (["1000x5000"] if args.under_load else [])
    ]
    if not shapes:
        parser.error("name at least one COUNTxCHARS")
    if args.under_load:
        args.repeat = args.repeat or 5
        sys.exit(under_load(args, shapes))
    args.repeat = args.repeat or 3
    in_process(args, shapes)


if __name__ == "__main__":
    main()
