"""Where one search_history call spends its time: each statement's wall time, in process.

    DATABASE_URL=postgresql://... SECRET_KEY=... SEARCH_AUDIT_KEYS=... \
        .venv/bin/python bench/history_statements.py --seed 1 [--band rare|mid|common] \
        [--calls 20] [--explain N]

On the corpus of ``manage.py generate_corpus --seed S``, as its busy agent, opens a fresh run per
call and calls ``search_app.services.search_history`` with the three words of the band
(``bench/benchmark.py``'s ``BANDS``), timing each SQL statement with
``connection.execute_wrapper``. Prints the median of each statement by position, their sum and
the rest of the call (Python, BEGIN and COMMIT, which Django sends outside the wrapper).
``--explain N`` also prints ``EXPLAIN (ANALYZE, BUFFERS)`` of statement N of one more call, on a
run of its own, rolled back. Writes runs, evidence and audit rows: use a database made for it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")

import django

django.setup()

from benchmark import BANDS, Scene, corpus_vocabulary, prepare_scene  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from search_app import services  # noqa: E402
from search_app.history.results import HistoryFilters  # noqa: E402
from search_app.runs.services import run_create  # noqa: E402

WARMUP = 3


def new_run(scene: Scene) -> uuid.UUID:
    run, _ = run_create(
        workspace_id=scene.workspace.id,
        agent_id=scene.agent.id,
        conversation_id=scene.destination.id,
        requester_id=scene.requester_id,
    )
    return run.id


def search(scene: Scene, run_id: uuid.UUID, text: str) -> None:
    services.search_history(
        workspace_id=scene.workspace.id,
        run_id=run_id,
        query_text=text,
        filters=HistoryFilters(),
        limit=20,
    )


def timed_call(scene: Scene, text: str) -> tuple[float, list[tuple[str, float]]]:
    """The whole call's milliseconds and each statement's (its first words, milliseconds)."""
    statements: list[tuple[str, float]] = []

    def timing(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            statements.append((" ".join(sql.split())[:60], elapsed))

    run_id = new_run(scene)
    started = time.perf_counter()
    with connection.execute_wrapper(timing):
        search(scene, run_id, text)
    return (time.perf_counter() - started) * 1000, statements


def explain(scene: Scene, text: str, position: int) -> str:
    """The plan of statement ``position`` as one call ran it, replayed on a fresh run."""
    captured: list[tuple[str, object]] = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    first = new_run(scene)
    with connection.execute_wrapper(capture):
        search(scene, first, text)
    sql, params = captured[position]
    second = new_run(scene)

    def swapped(value: object) -> object:
        if value == first:
            return second
        if isinstance(value, list):
            return [swapped(item) for item in value]
        if isinstance(value, dict):
            return {key: swapped(item) for key, item in value.items()}
        return value

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, swapped(params))
        plan = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    return plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--band", choices=sorted(BANDS), default="rare")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--explain", type=int, metavar="N")
    args = parser.parse_args()
    words = corpus_vocabulary(args.seed)
    scene = prepare_scene(args.seed, random.Random(args.seed), 1)
    text = " ".join(words[rank - 1] for rank in BANDS[args.band])
    totals: list[float] = []
    by_statement: dict[tuple[int, str], list[float]] = defaultdict(list)
    for index in range(WARMUP + args.calls):
        total, statements = timed_call(scene, text)
        if index < WARMUP:
            continue
        totals.append(total)
        for position, (words_of, elapsed) in enumerate(statements):
            by_statement[(position, words_of)].append(elapsed)
    whole = statistics.median(totals)
    print(f"{args.band} terms, {args.calls} calls: whole call p50 {whole:.1f} ms")
    summed = 0.0
    for (position, words_of), times in sorted(by_statement.items()):
        summed += statistics.median(times)
        print(f"  {position}  {statistics.median(times):7.2f} ms  {words_of}")
    rest = whole - summed
    print(f"  statements {summed:.1f} ms; the rest (Python, BEGIN, COMMIT) {rest:.1f} ms")
    if args.explain is not None:
        print(explain(scene, text, args.explain))


if __name__ == "__main__":
    main()
