"""How well search_history finds the turns that answer a question, beside SQLite FTS5 BM25.

    .venv/bin/python bench/relevance.py --data ../shared/locomo/locomo-dev.json \
        [--sample conv-26 | --conversations N] [--limit Q] [--pooled [--kind public]] \
        [--distractors N [--when newer|older] [--seed S] [--candidates]] \
        [--output FILE] [--database NAME] [--keep]

Reads LoCoMo-format JSON (docs/relevance.md), loads each conversation through the services into
a fresh workspace of a database of its own, ``formation_relevance`` (or ``--database``), and
asks every answerable question through search_history from a run, and of FTS5 over the same
turns (``bench/relevance_core.py``). ``--pooled`` is the busy agent: every conversation in one
workspace, with one agent that is a member of them all, each question asked of it in its own
conversation, and FTS5 over every conversation's turns in one index (``--kind public``: the
conversations are public channels, so that every one is eligible for every run). Prints recall@8/20,
hit@8/20, MRR, recall@8 of hits with their neighbours and p50/p95 latency per category and
overall, then recall@8/20, hit@8 and recall@20 by category of each conversation, both systems
side by side; ``--output`` writes every figure as JSON.

``--distractors N`` (with ``--pooled``) is the busy agent that kept talking: leave-one-out, one
case per conversation, each the pool plus N messages of copies of the *other* conversations,
with fresh names, a year ``--when newer`` (or ``older``) than every conversation asked about
(``bench/relevance_distractors.py``); BM25 indexes every turn of the case. Each case starts
from an empty database (every table but Django's own is truncated), is loaded (the copies by
``COPY``), then ``ANALYZE``d, and search_history is asked through gunicorn as production
serves it (``formation/gunicorn_conf.py``, started for the case, rate limits off), one client
over one keep-alive connection: a fresh run per question (made through the services), then
``POST /api/v1/history/search``, timed from the request to the whole answer. A call cancelled
by the statement timeout (503) is counted and tried again, up to three times in all.

The database is on the embedded cluster (started if it is not running, and stopped again after),
or with DATABASE_URL set on that server; it is dropped and made again unless ``--keep`` reuses it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from formation import embedded_postgres  # noqa: E402

if TYPE_CHECKING:  # Annotations only: importing it needs Django set up, which measure() does.
    from bench import relevance_core

DATABASE = "formation_relevance"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo-format JSON file")
    parser.add_argument("--output", type=Path, help="write every figure here as JSON")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--sample", action="append", default=[], help="a sample_id (repeatable)")
    which.add_argument("--conversations", type=int, help="only the first N conversations")
    parser.add_argument("--limit", type=int, help="only the first N questions of each")
    parser.add_argument(
        "--pooled",
        action="store_true",
        help="one workspace and one agent that is a member of every conversation",
    )
    parser.add_argument(
        "--kind",
        choices=("private", "public"),
        default="private",
        help="with --pooled: what the conversations are (default private, as unpooled)",
    )
    parser.add_argument(
        "--distractors",
        type=int,
        metavar="N",
        help="with --pooled: N distractor messages per case, leave-one-out, served",
    )
    parser.add_argument(
        "--when",
        choices=("newer", "older"),
        default="newer",
        help="with --distractors: after every conversation asked about (default) or before",
    )
    parser.add_argument("--seed", type=int, default=1, help="the distractors' names")
    parser.add_argument(
        "--candidates",
        action="store_true",
        help="with --distractors: count the evidence turns search_history never held as "
        "candidates (one more statement per question, untimed)",
    )
    parser.add_argument(
        "--database", default=DATABASE, help=f"the database to use (default {DATABASE})"
    )
    parser.add_argument("--keep", action="store_true", help="reuse the database")
    options = parser.parse_args(argv)
    if options.kind != "private" and not options.pooled:
        parser.error("--kind is for --pooled only")
    if options.distractors is not None and (not options.pooled or options.distractors < 0):
        parser.error("--distractors is a count of messages, for --pooled only")
    if options.candidates and options.distractors is None:
        parser.error("--candidates is for --distractors only")
    return options


def with_database(url: str, name: str) -> str:
    """The same server's URL with another database name."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def prepare_database(server_url: str, *, keep: bool, name: str = DATABASE) -> str:
    """Make (or with ``keep`` reuse) the benchmark's database, so the dev one stays clean."""
    if '"' in name or not name:
        sys.exit(f"{name!r}: not a database name this script makes.")
    with psycopg.connect(with_database(server_url, "postgres"), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists and not keep:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        if not exists or not keep:
            admin.execute(f'CREATE DATABASE "{name}"')
    return with_database(server_url, name)


def main(argv: list[str] | None = None) -> int:
    options = arguments(argv)
    if not options.data.is_file():
        sys.exit(f"{options.data}: no such file (docs/relevance.md says where to get LoCoMo).")
    started_cluster = False
    if os.environ.get("DATABASE_URL"):
        server_url = os.environ["DATABASE_URL"]
    else:
        started_cluster = not embedded_postgres.is_running(embedded_postgres.locate())
        server_url = embedded_postgres.ensure_running().url()
    try:
        return measure(
            options, prepare_database(server_url, keep=options.keep, name=options.database)
        )
    finally:
        if started_cluster:
            embedded_postgres.stop()


def measure(options: argparse.Namespace, database_url: str) -> int:
    """Django on the benchmark's database, migrated; then the benchmark and its report."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production")
    os.environ.setdefault("SEARCH_AUDIT_KEYS", "k1:bench-only-audit-key-0123456789")
    os.environ["DEBUG"] = "0"
    import django

    django.setup()
    from django.core.management import call_command

    from bench import relevance_core

    began = time.perf_counter()
    call_command("migrate", verbosity=0)
    samples = relevance_core.read_samples(
        options.data, sample_ids=options.sample, count=options.conversations
    )
    migrated = time.perf_counter() - began
    served = Served(candidates=options.candidates) if options.distractors is not None else None
    try:
        report = relevance_core.run_benchmark(
            samples,
            limit=options.limit,
            pooled=options.pooled,
            kind=options.kind,
            distractors=options.distractors,
            when=options.when,
            seed=options.seed,
            searcher=served,
            progress=lambda line: print(line, file=sys.stderr),
        )
    finally:
        if served is not None:
            served.stop()
    seconds = time.perf_counter() - began
    questions = len(report.scores[relevance_core.SEARCH_HISTORY])
    mode = (
        f"pooled, {options.kind}, one agent of them all"
        if options.pooled
        else "an agent per conversation"
    )
    if options.distractors is not None:
        mode += (
            f"; leave-one-out, {options.distractors} distractor messages {options.when}, "
            "search_history served by gunicorn"
        )
    print(
        f"{len(report.samples)} conversations ({mode}), {report.turns} turns, "
        f"{questions} questions; "
        f"{seconds:.1f} s ({migrated:.1f} s of them migrating and reading the file)\n"
    )
    if options.distractors is not None:
        ours = report.scores[relevance_core.SEARCH_HISTORY]
        print(
            f"search_history: {sum(s.timeouts for s in ours)} calls cancelled by the statement "
            f"timeout (503), {sum(s.timeouts >= TRIES for s in ours)} questions on all "
            f"{TRIES} tries\n"
        )
        if options.candidates:
            print(candidates_line(report) + "\n")
    print(relevance_core.markdown_table(report))
    print("\nPer conversation:\n")
    print(relevance_core.per_conversation_table(report))
    if options.output:
        options.output.write_text(
            json.dumps(
                {
                    "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "data": str(options.data),
                    "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
                    "mode": "pooled" if options.pooled else "per-conversation",
                    "kind": options.kind,
                    "distractors": options.distractors,
                    "when": options.when if options.distractors is not None else None,
                    "samples": report.samples,
                    "turns": report.turns,
                    "questions": questions,
                    "seconds": round(seconds, 1),
                    "figures": report.figures(),
                    "per_conversation": report.per_conversation(),
                },
                indent=2,
            )
            + "\n"
        )
    return 0


# Tries of one question when the statement timeout cancels it (503).
TRIES = 3


def candidates_line(report: relevance_core.Report) -> str:
    """How many evidence turns search_history's statement never held, overall and for each
    conversation."""
    from bench import relevance_core

    per = report.per_conversation()[relevance_core.SEARCH_HISTORY]
    overall = report.figures()[relevance_core.SEARCH_HISTORY]["overall"]

    def counted(figures: dict) -> str:
        return (
            f"{figures['evidence_not_matched']:.0f} not among the terms' kept matches, "
            f"{figures['evidence_not_ranked']:.0f} not ranked at all, "
            f"of {figures['evidence_turns']:.0f}"
        )

    each = "; ".join(f"{sample} {counted(per[sample]['overall'])}" for sample in report.samples)
    return f"Evidence turns never candidates: {counted(overall)} ({each})"


class Served:
    """search_history through gunicorn with the production configuration, one client over
    one keep-alive connection (``relevance_core.Searcher``). ``reset`` stops the server and
    empties the database; ``ready`` runs ``ANALYZE`` and starts a server that reads the
    statistics afresh."""

    def __init__(self, *, candidates: bool = False) -> None:
        self.candidates = candidates
        self.server = None
        self.http: http.client.HTTPConnection | None = None
        # The server's own messages (it writes no access log), kept for a failed start.
        log = Path(tempfile.gettempdir()) / f"relevance-gunicorn-{os.getpid()}.log"
        self.log = log.open("wb")

    def reset(self) -> None:
        from django.db import connection

        self.stop()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT string_agg(format('%I.%I', schemaname, tablename), ', ') FROM pg_tables "
                "WHERE schemaname = current_schema() AND tablename !~ '^(django|auth)_'"
            )
            (tables,) = cursor.fetchone()
            cursor.execute(f"TRUNCATE {tables} CASCADE")

    def ready(self) -> None:
        from django.db import connection

        from bench.benchmark import Gunicorn, free_port
        from search_app.history import terms

        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        terms.forget_frequencies()
        port = free_port()
        os.environ.update(RATE_LIMIT_AGENT="off", RATE_LIMIT_SERVICE="off", LOG_LEVEL="WARNING")
        self.server = Gunicorn(
            port=port,
            workers=int(os.environ.get("WEB_CONCURRENCY", "2")),
            threads=int(os.environ.get("GUNICORN_THREADS", "4")),
            log=self.log,
        )
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None
        if self.server is not None:
            self.server.stop()
            self.server = None

    def _post(self, token: str, body: dict) -> tuple[int, bytes, float]:
        payload = json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        started = time.perf_counter()
        self.http.request("POST", "/api/v1/history/search", body=payload, headers=headers)
        response = self.http.getresponse()
        data = response.read()
        return response.status, data, (time.perf_counter() - started) * 1000

    def ranking(
        self, loaded: relevance_core.Loaded, question: relevance_core.Question
    ) -> relevance_core.Ranking:
        """As ``relevance_core.search_history_ranking``, served: the time is the first try's
        (a cancelled call's too), the answer the first that was not cancelled; with
        ``candidates``, what the statement held too (untimed, in this process)."""
        from bench import relevance_core

        found = self._served(loaded, question)
        if self.candidates:
            found.candidates = relevance_core.search_history_candidates(loaded, question)
        return found

    def _served(
        self, loaded: relevance_core.Loaded, question: relevance_core.Question
    ) -> relevance_core.Ranking:
        from bench import relevance_core
        from search_app.runs.services import run_create

        _, token = run_create(
            workspace_id=loaded.workspace_id,
            agent_id=loaded.agent_id,
            conversation_id=loaded.conversation_id,
            requester_id=loaded.requester_id,
        )
        body = {"query": question.text, "limit": relevance_core.LIMIT}
        timeouts, first = 0, None
        for _ in range(TRIES):
            status, data, milliseconds = self._post(token, body)
            first = milliseconds if first is None else first
            if status != 503:
                break
            timeouts += 1
        if status in (400, 503):
            # No searchable word (invalid_arguments), or every try cancelled: nothing found.
            return relevance_core.Ranking([], set(), first, timeouts)
        if status != 200:
            code = json.loads(data).get("error", {}).get("code") if data else None
            raise RuntimeError(f"search_history answered {status} {code}")
        items = json.loads(data)["items"]
        ranked = [loaded.dia_ids[uuid.UUID(item["id"])] for item in items]
        context = {
            loaded.dia_ids[uuid.UUID(message["id"])]
            for item in items[: relevance_core.CONTEXT_CUTOFF]
            for message in (item, *item["before"], *item["after"])
        }
        return relevance_core.Ranking(ranked, context, first, timeouts)


if __name__ == "__main__":
    raise SystemExit(main())
