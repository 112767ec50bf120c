"""Whole search_history calls of an earlier commit against the working tree's, interleaved.

    DATABASE_URL=postgresql://... .venv/bin/python bench/history_ab.py --seed 1 \
        --before b5a3d2c [--calls 30] [--band rare --band mid ...]
    DATABASE_URL=postgresql://...citus... .venv/bin/python bench/history_ab.py --seed 1 \
        --before-database postgresql://...single-node... [--calls 30]

Each side is a process of its own on its own code (``--before`` exported with ``git archive``
into a temporary directory, the working tree as it is), on the same database and the corpus of
``manage.py generate_corpus --seed S``, as its busy agent: one call is a fresh run and
``search_app.services.search_history`` with the three words of a band of ``bench/benchmark.py``
(limit 20), timed in the process from the service's call to its answer. The parent asks the
two in turn, the order swapped every round, after untimed warm-ups, so the machine's drift
falls on both; it prints each side's p50 and p95 per band and the median of the pairwise
ratios. Both sides read one schema: the database must be migrated by the newer code, and the
older must run on it (a change of the statement's text, not of the tables). Writes runs,
evidence and audit rows: use a database made for benchmarks.

``--before-database`` runs the before side against another database holding the same corpus
(without ``--before``, both sides run the working tree): one engine against another, e.g. plain
PostgreSQL against a Citus coordinator, interleaved the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BANDS = ("rare", "mid", "common")
WARMUP = 3


def worker(seed: int) -> None:
    """One side: read a band per line, answer the call's milliseconds as JSON."""
    import random
    import time

    sys.path.insert(0, str(Path.cwd()))
    sys.path.insert(0, str(Path.cwd() / "bench"))
    from bench.django_setup import setup_django

    setup_django("Set DATABASE_URL to the corpus's database.")
    from benchmark import BANDS as WORDS
    from benchmark import corpus_vocabulary, prepare_scene

    from search_app import services
    from search_app.history.results import HistoryFilters
    from search_app.runs.services import run_create

    vocabulary = corpus_vocabulary(seed)
    scene = prepare_scene(seed, random.Random(seed), 1)
    texts = {band: " ".join(vocabulary[rank - 1] for rank in WORDS[band]) for band in WORDS}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        band = line.strip()
        run, _ = run_create(
            workspace_id=scene.workspace.id,
            agent_id=scene.agent.id,
            conversation_id=scene.destination.id,
            requester_id=scene.requester_id,
        )
        started = time.perf_counter()
        services.search_history(
            workspace_id=scene.workspace.id,
            run_id=run.id,
            query_text=texts[band],
            filters=HistoryFilters(),
            limit=20,
        )
        print(json.dumps({"ms": (time.perf_counter() - started) * 1000}), flush=True)


def exported(ref: str) -> Path:
    """The tree of commit ``ref`` in a new temporary directory."""
    archive = subprocess.run(
        ["git", "archive", ref], cwd=ROOT, check=True, capture_output=True
    ).stdout
    directory = Path(tempfile.mkdtemp(prefix="history-ab-"))
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        # The tree of one of our own commits; the "data" filter where this Python has it (it
        # came with 3.11.4, and Debian 12's python3 is 3.11.2).
        if hasattr(tarfile, "data_filter"):
            tar.extractall(directory, filter="data")
        else:
            tar.extractall(directory)
    return directory


class Side:
    def __init__(self, name: str, tree: Path, seed: int, database: str | None = None) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", "--seed", str(seed)],
            cwd=tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": str(tree),
                **({"DATABASE_URL": database} if database else {}),
            },
        )
        json.loads(self.process.stdout.readline())

    def call(self, band: str) -> float:
        self.process.stdin.write(band + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())["ms"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--before", help="the earlier commit")
    parser.add_argument("--before-database", help="the before side's DATABASE_URL")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per side and band")
    parser.add_argument("--band", action="append", choices=BANDS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.seed)
        return
    if not args.before and not args.before_database:
        parser.error("--before or --before-database is required")
    if args.calls < 2:
        parser.error("--calls must be at least 2 (a p95 needs two)")
    name = args.before or "before"
    tree = exported(args.before) if args.before else ROOT
    sides = [
        Side(name, tree, args.seed, args.before_database),
        Side("after", ROOT, args.seed),
    ]
    try:
        database = " on --before-database" if args.before_database else ""
        print(
            f"before {args.before or 'the working tree'}{database}, after: the working tree; "
            f"{args.calls} calls per band"
        )
        print("band    before p50  after p50  before p95  after p95  after/before (median)")
        for band in args.band or BANDS:
            times: dict[str, list[float]] = {side.name: [] for side in sides}
            for index in range(WARMUP + args.calls):
                for side in sides if index % 2 == 0 else reversed(sides):
                    elapsed = side.call(band)
                    if index >= WARMUP:
                        times[side.name].append(elapsed)
            before, after = times[name], times["after"]
            ratio = statistics.median(a / b for a, b in zip(after, before, strict=True))
            p95 = lambda values: statistics.quantiles(values, n=20)[-1]  # noqa: E731
            print(
                f"{band:7} {statistics.median(before):10.1f} {statistics.median(after):10.1f} "
                f"{p95(before):11.1f} {p95(after):10.1f}  {ratio:.3f}"
            )
    finally:
        for side in sides:
            side.close()


if __name__ == "__main__":
    main()
