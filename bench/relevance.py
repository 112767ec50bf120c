"""How well search_history finds the turns that answer a question, beside SQLite FTS5 BM25.

    .venv/bin/python bench/relevance.py --data ../shared/locomo/locomo-dev.json \
        [--sample conv-26 | --conversations N] [--limit Q] [--pooled [--kind public]] \
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

The database is on the embedded cluster (started if it is not running, and stopped again after),
or with DATABASE_URL set on that server; it is dropped and made again unless ``--keep`` reuses it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from formation import embedded_postgres  # noqa: E402

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
        "--database", default=DATABASE, help=f"the database to use (default {DATABASE})"
    )
    parser.add_argument("--keep", action="store_true", help="reuse the database")
    options = parser.parse_args(argv)
    if options.kind != "private" and not options.pooled:
        parser.error("--kind is for --pooled only")
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
    report = relevance_core.run_benchmark(
        samples,
        limit=options.limit,
        pooled=options.pooled,
        kind=options.kind,
        progress=lambda line: print(line, file=sys.stderr),
    )
    seconds = time.perf_counter() - began
    questions = len(report.scores[relevance_core.SEARCH_HISTORY])
    mode = (
        f"pooled, {options.kind}, one agent of them all"
        if options.pooled
        else "an agent per conversation"
    )
    print(
        f"{len(report.samples)} conversations ({mode}), {report.turns} turns, "
        f"{questions} questions; "
        f"{seconds:.1f} s ({migrated:.1f} s of them migrating and reading the file)\n"
    )
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


if __name__ == "__main__":
    raise SystemExit(main())
