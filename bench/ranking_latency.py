"""The search_history statement of an earlier commit against today's, interleaved, on the corpus.

    DATABASE_URL=postgresql://... .venv/bin/python bench/ranking_latency.py --seed 1 \
        --before b5a3d2c [--requests 30]

A ranking change is judged by what it costs where it runs: this times search_history's statement
(``search_app.history.statement.hits_statement``: the run's lock and scope, every perspective
rule, ranking, neighbours, evidence and the audit event) as ``--before`` wrote it and as the
working tree writes it, for the corpus's busy agent from runs in its busiest private room, on the
frequency bands of ``bench/benchmark.py`` (rare, mid and common terms). Each side runs as the
product runs it: ``--before`` bound on the client as Django binds every statement (planned on
every call), today's both that way and prepared (``formation/prepared.py``: planned per
connection). The three run in turn (the order rotates), after untimed warm-ups, so the machine's
drift falls on all; it prints each one's p50 and p95 and the median of the pairwise ratios to
``--before``. The statement writes (evidence, an audit row with its own id) and spends its run's
budget, so every call is a fresh run with its own statement, both made outside the timing.
``--before`` must be a commit whose ``hits_statement`` takes a run's ``Perspective`` and writes
its own audit event (12e2859, search_history as one statement, or later); whole calls of any
earlier commit are ``bench/history_ab.py``'s. Writes runs, evidence and audit rows: use a
database made for benchmarks.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.django_setup import setup_django  # noqa: E402

setup_django("Set DATABASE_URL to the corpus's database.")

import psycopg  # noqa: E402
from django.utils import timezone  # noqa: E402

from messages_app.models import (  # noqa: E402
    Agent,
    Conversation,
    ConversationKind,
    Membership,
    Workspace,
)
from search_app.history import statement  # noqa: E402
from search_app.history.results import HistoryFilters  # noqa: E402
from search_app.query.parse import parse_query  # noqa: E402
from search_app.runs.services import run_create  # noqa: E402
from search_app.scope import run_scope  # noqa: E402
from synthetic.corpus import BUSY_AGENT_NAME, corpus_vocabulary, workspace_slug  # noqa: E402

# The bands of bench/benchmark.py: ranks in the corpus vocabulary.
BANDS = {"rare": (15_000, 12_000, 9_000), "mid": (300, 250, 200), "common": (2, 3, 5)}
LIMIT = 20


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


# Before search_app/history/ (issue 26), the hits statement lived in search_app/queries.py
# beside the perspective and the query parser it imports; they are copied with it.
FLAT_LAYOUT = ("queries", "perspective", "text")


def module_at(ref: str):
    """The module with ``hits_statement`` as commit ``ref`` wrote it, imported beside today's:
    its ``search_app/history`` package, copied as ``history_before`` with its imports of its
    own modules pointed at the copy (or, before that package, its ``search_app/queries.py``
    with the perspective and parser modules of that commit, copied as ``search_before``)."""
    copy = Path(tempfile.mkdtemp())
    names = git("ls-tree", "--name-only", ref, "search_app/history/").split()
    if names:
        package, renamed = "history_before", {"search_app.history": "history_before"}
    else:
        names = [f"search_app/{name}.py" for name in FLAT_LAYOUT]
        package = "search_before"
        renamed = {f"search_app.{name}": f"search_before.{name}" for name in FLAT_LAYOUT}
    (copy / package).mkdir()
    (copy / package / "__init__.py").write_text("")
    for name in names:
        source = git("show", f"{ref}:{name}")
        for module, copied in renamed.items():
            source = source.replace(module, copied)
        (copy / package / Path(name).name).write_text(source)
    sys.path.insert(0, str(copy))
    return importlib.import_module(
        f"{package}.{'statement' if names[0].startswith('search_app/history') else 'queries'}"
    )


def scene(seed: int):
    """The busy agent's busiest private room with a current reader: its workspace, and a
    function that opens a fresh run there and returns its perspective (scope included)."""
    workspace = Workspace.objects.get(slug=workspace_slug(seed, 0))
    agent = Agent.objects.get(workspace=workspace, name=BUSY_AGENT_NAME)
    current = Membership.objects.filter(agent=agent, left_at__isnull=True).values("conversation_id")
    rooms = Conversation.objects.filter(id__in=current, kind=ConversationKind.PRIVATE)
    for room in rooms.order_by("-live_message_count", "id"):
        reader = (
            room.memberships.filter(account__isnull=False, left_at__isnull=True)
            .order_by("account_id")
            .values_list("account_id", flat=True)
            .first()
        )
        if reader is not None:

            def fresh_run(room=room, reader=reader):
                run, _ = run_create(
                    workspace_id=workspace.id,
                    agent_id=agent.id,
                    conversation_id=room.id,
                    requester_id=reader,
                    current_message_id=None,
                    recent_message_ids=[],
                    tool_scope="membership",
                )
                perspective, _ = run_scope(workspace_id=workspace.id, run_id=run.id, lock=None)
                return perspective

            return workspace, fresh_run
    sys.exit("The busy agent has no private room with a current reader.")


def timed_ms(run, sql: str, params: dict) -> float:
    started = time.perf_counter()
    run(sql, params)
    return (time.perf_counter() - started) * 1000


def client_bound(url: str):
    """Statements bound on the client, as Django's cursors bind them: planned on every call."""
    cursor = psycopg.ClientCursor(psycopg.connect(url, autocommit=True))

    def run(sql: str, params: dict) -> None:
        cursor.execute(sql, params)
        cursor.fetchall()

    return run


def prepared(url: str):
    """Statements prepared on their connection, as ``formation/prepared.py`` runs them."""
    raw = psycopg.connect(url, autocommit=True)

    def run(sql: str, params: dict) -> None:
        raw.execute(sql, params, prepare=True).fetchall()

    return run


def median_ratio(times: dict[str, list[float]], name: str) -> float:
    """The median of ``name``'s times over ``before``'s, round by round."""
    pairs = zip(times[name], times["before"], strict=True)
    return statistics.median(a / b for a, b in pairs)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--before", required=True, help="The commit to compare with.")
    parser.add_argument("--requests", type=int, default=30, help="Timed pairs per band.")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    before = module_at(args.before)
    workspace, fresh_run = scene(args.seed)
    words = corpus_vocabulary(args.seed)
    url = os.environ["DATABASE_URL"]
    runners = {
        "before": (before, client_bound(url)),
        "after": (statement, client_bound(url)),
        "prepared": (statement, prepared(url)),
    }
    print(
        f"before {args.before} (client-bound), after: the working tree, client-bound and "
        f"prepared; {args.requests} rounds per band, a fresh run per call"
    )
    print(
        f"{'band':<8} {'before p50':>11} {'after p50':>10} {'prepared p50':>13} "
        f"{'before p95':>11} {'prepared p95':>13} {'after/before':>13} {'prepared/before':>16}"
    )
    # Past the five custom plans after which a prepared statement may go generic.
    warmup = max(args.warmup, 6)
    for band, ranks in BANDS.items():
        text = " ".join(words[rank - 1] for rank in ranks)
        query = parse_query(text, workspace_id=workspace.id)

        # One statement per call, each for a run of its own (with its own audit id).
        calls = {
            name: [
                module.hits_statement(
                    fresh_run(), query, HistoryFilters(), limit=LIMIT, now=timezone.now()
                )
                for _ in range(warmup + args.requests)
            ]
            for name, (module, _) in runners.items()
        }
        for i in range(warmup):
            for name, (_, run) in runners.items():
                timed_ms(run, *calls[name][i])
        times: dict[str, list[float]] = {name: [] for name in runners}
        names = list(runners)
        for i in range(args.requests):
            for name in names[i % 3 :] + names[: i % 3]:
                times[name].append(timed_ms(runners[name][1], *calls[name][warmup + i]))

        print(
            f"{band:<8} {statistics.median(times['before']):>11.1f} "
            f"{statistics.median(times['after']):>10.1f} "
            f"{statistics.median(times['prepared']):>13.1f} "
            f"{percentile(times['before'], 0.95):>11.1f} "
            f"{percentile(times['prepared'], 0.95):>13.1f} "
            f"{median_ratio(times, 'after'):>13.2f} {median_ratio(times, 'prepared'):>16.2f}"
        )


if __name__ == "__main__":
    main()
