"""Faults under load: PostgreSQL restarted, a gunicorn worker killed, a bulk import cut short.

    .venv/bin/python bench/faults.py [--messages 100000] [--concurrency 16] [--output FILE] \
        [--smoke]

Needs no DATABASE_URL: it makes its own PostgreSQL cluster in a temporary folder (so restarting
it disturbs nothing else), loads ``generate_corpus`` into it, and serves it with gunicorn in the
production configuration. The load is ``bench/load.py``'s mix. Then, in order:

1. **Steady**: the mix for ``--steady`` seconds; every answer must be a success.
2. **PostgreSQL restart**: bulk imports of ``--bulk-size`` messages are sent just before
   ``pg_ctl restart -m fast``, with the mix running. Every answer during the outage must be a
   success or ``503 unavailable`` (never a 500, never slower than the statement timeout); the
   service must answer again by itself, and each bulk import must be wholly stored or wholly
   absent (counted by a marker in its messages).
3. **Worker killed**: SIGKILL to one gunicorn worker with requests in flight. The master must
   start a new one, later requests must succeed, and every cut ingest must be either stored whole
   or absent.
4. **Drift**: ``rebuild_search_documents --check`` must find nothing to fix, and every run's
   search_history evidence must equal the budget its last audit event recorded.

Prints what happened in each phase and exits non-zero if any expectation failed. ``--smoke``
shortens the phases around the faults to a few seconds each (40, 15 and 10 s otherwise) and
draws the mix from 50 messages (2,000 otherwise), for the smoke run of
tests/bench/test_smoke.py: it shows that the script works, not that the service does.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from formation import embedded_postgres as pg  # noqa: E402

PORT = 55441


@dataclass(frozen=True)
class Phases:
    """Seconds of the mix around each fault, and how far into its phase the fault comes."""

    lead: float = 5
    restart: float = 40
    kill: float = 15
    after: float = 10
    # Message ids and anchors the mix draws from (bench/load.py's make_plan).
    samples: int = 2000


SMOKE = Phases(lead=1, restart=10, kill=3, after=2, samples=50)


class PrivateCluster:
    """A throwaway PostgreSQL cluster on a Unix socket, run as the server user when root."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.bindir = pg.find_bindir()
        owner = pg._server_uid()
        pg._private_dir(base, mode=0o711, owner_uid=os.geteuid())
        for folder in (self.data, self.socket_dir, self.log_dir):
            pg._private_dir(folder, mode=0o700, owner_uid=owner)
        pg.initdb(self.bindir, self.data)
        self.pg_ctl("start")
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as connection:
            connection.execute('CREATE DATABASE "formation_faults"')

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "run"

    @property
    def log_dir(self) -> Path:
        return self.base / "log"

    def url(self, name: str = "formation_faults") -> str:
        return f"postgresql://postgres@/{name}?host={self.socket_dir}&port={PORT}"

    def pg_ctl(self, action: str) -> float:
        """Run ``pg_ctl action`` (waiting for it); returns the seconds it took."""
        options = pg.server_options(self.socket_dir, PORT)
        command = [str(self.bindir / "pg_ctl"), action, "-D", str(self.data), "-w", "-t", "60"]
        if action in ("start", "restart"):
            command += ["-l", str(self.log_dir / "postgresql.log"), "-o", options]
        if action in ("stop", "restart"):
            command += ["-m", "fast"]
        started = time.monotonic()
        pg._run(command, f"pg_ctl {action}")
        return time.monotonic() - started

    def remove(self) -> None:
        try:
            self.pg_ctl("stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--steady", type=float, default=20)
    parser.add_argument("--bulk-size", type=int, default=5_000)
    parser.add_argument("--bulks", type=int, default=4)
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--output", type=Path)
    parser.add_argument("--smoke", action="store_true", help="phases of a few seconds")
    args = parser.parse_args()
    args.phases = SMOKE if args.smoke else Phases()

    cluster = PrivateCluster(Path(tempfile.mkdtemp(prefix="formation-faults-")))
    try:
        os.environ["DATABASE_URL"] = cluster.url()
        # This script's own queries use one plain connection, reopened after the restart;
        # gunicorn gets the production pool (see ProductionGunicorn below).
        os.environ["DATABASE_POOL"] = "0"
        return run_faults(cluster, args)
    finally:
        cluster.remove()


def run_faults(cluster: PrivateCluster, args: argparse.Namespace) -> int:
    import load  # sets Django up against the private cluster (DATABASE_URL above)
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from messages_app.models import Message

    print(f"private cluster in {cluster.base}; loading {args.messages:,} messages", flush=True)
    call_command("migrate", verbosity=0)
    call_command("generate_corpus", messages=args.messages, seed=1, stdout=io.StringIO())
    rng = random.Random(1)
    # Every search_history of the phases below needs budget left (a spent run answers 429,
    # an error here): every phase's seconds at up to 250 requests per second.
    phases = args.phases
    seconds = args.steady + phases.restart + phases.kill + phases.after
    searches = seconds * 250 * load.MIX["search_history"] / 100
    plan = load.make_plan(
        1, rng, runs=int(searches / load.SEARCHES_PER_RUN) + 100, samples=phases.samples
    )
    timeout_s = settings.API_STATEMENT_TIMEOUT_MS / 1000
    failures: list[str] = []
    lines: list[str] = []

    def expect(condition: bool, text: str) -> None:
        lines.append(("ok   " if condition else "FAIL ") + text)
        print(lines[-1], flush=True)
        if not condition:
            failures.append(text)

    log_path = Path(tempfile.gettempdir()) / f"formation-faults-gunicorn-{os.getpid()}.log"
    with log_path.open("wb") as log:
        server = load.ProductionGunicorn(port=args.port, log=log, env={"DATABASE_POOL": "1"})
        try:
            # 1. Steady.
            steady = asyncio.run(
                load.run_load(
                    args.port, plan, duration=args.steady, concurrency=args.concurrency, seed=1
                )
            )
            expect(
                not steady.errors(),
                f"steady: {len(steady.outcomes):,} requests, {len(steady.errors())} errors",
            )

            # 2. PostgreSQL restart with bulk imports in flight.
            restart = restart_under_load(cluster, server, plan, args)
            connection.close()  # the script's own connection died with the restart
            outage = restart["recorder"]
            bad = [
                o
                for o in outage.errors()
                if not (o.status == 503 and o.code == "unavailable")
                and not (o.endpoint == "ingest" and o.transport_error)
            ]
            slowest_503 = max((o.seconds for o in outage.outcomes if o.status == 503), default=0.0)
            kinds = Counter((o.status, o.code or o.transport_error) for o in outage.errors())
            expect(
                not bad,
                f"restart: {len(outage.outcomes):,} requests, answers other than success: "
                f"{dict(kinds)}; none outside 503 unavailable: {len(bad)} others",
            )
            expect(
                slowest_503 < timeout_s,
                f"restart: slowest 503 took {slowest_503:.2f} s "
                f"(statement timeout {timeout_s:.0f} s)",
            )
            expect(
                restart["recovered_after"] is not None and restart["recovered_after"] < 15,
                f"restart: PostgreSQL took {restart['restart_seconds']:.1f} s to restart; "
                f"the API answered again {restart['recovered_after']:.1f} s after it was back, "
                f"with no errors in the {restart['quiet_window']:.0f} s after that",
            )
            for status, marker, size in restart["bulks"]:
                stored = Message.objects.filter(content__contains=marker).count()
                expect(
                    stored in (0, size) and (status != 201 or stored == size),
                    f"bulk import answered {status}: {stored:,} of {size:,} messages stored",
                )

            # 3. A worker killed mid-request.
            killed = kill_worker_under_load(server, plan, args)
            expect(
                killed["replaced"],
                f"worker {killed['pid']} killed; master started {killed['new_pids']} "
                f"within {killed['replace_seconds']:.1f} s",
            )
            cut = [o for o in killed["recorder"].outcomes if o.transport_error]
            others = [o for o in killed["recorder"].errors() if not o.transport_error]
            later = killed["after"].errors()
            seen = Counter(
                (o.endpoint, o.status, o.code, round(o.seconds, 1)) for o in others + later
            )
            expect(
                not others and not later,
                f"kill: {len(cut)} requests cut with the worker "
                f"({dict(Counter(o.endpoint for o in cut))}), {len(others)} other errors; "
                f"{len(killed['after'].outcomes):,} requests after it, {len(later)} errors "
                f"{dict(seen)}",
            )
            for outcome in (o for o in cut if o.endpoint == "ingest"):
                stored = Message.objects.filter(content__contains=outcome.marker).count()
                expect(stored in (0, 1), f"cut ingest: {stored} of 1 message stored")
        finally:
            server.stop()

    # 4. Drift.
    report = io.StringIO()
    call_command("rebuild_search_documents", check=True, stdout=report)
    checked = report.getvalue().strip().splitlines()[-1]
    expect(" 0 rows drifted" in checked, f"rebuild_search_documents --check: {checked}")
    drifted = len(evidence_drift())
    expect(drifted == 0, f"evidence: {drifted} runs whose evidence differs from their audit")

    summary = "\n".join(lines)
    if args.output:
        args.output.write_text(summary + "\n")
    return 1 if failures else 0


def evidence_drift() -> list[tuple]:
    """Runs whose search_history evidence differs from the budget their last audit event
    recorded, as (run id, that budget, evidence rows). Correlated on the workspace too, so on
    Citus each run's check stays on its shard."""
    from django.db.models import Count, F, OuterRef, Subquery
    from django.db.models.functions import Coalesce

    from audit_app.models import ConversationSearchEvent
    from messages_app.models import Run, RunEvidence

    same_run = {"workspace_id": OuterRef("workspace_id"), "run": OuterRef("pk")}
    last_budget = (
        ConversationSearchEvent.objects.filter(**same_run, tool="search_history")
        .order_by("-budget_used")
        .values("budget_used")[:1]
    )
    evidence = (
        RunEvidence.objects.filter(**same_run, tool="search_history")
        .values("run")
        .annotate(rows=Count("*"))
        .values("rows")
    )
    return (
        Run.objects.annotate(
            last_budget=Subquery(last_budget), evidence_rows=Coalesce(Subquery(evidence), 0)
        )
        .filter(last_budget__isnull=False)
        .exclude(last_budget=F("evidence_rows"))
        .values_list("pk", "last_budget", "evidence_rows")
    )


def restart_under_load(cluster, server, plan, args) -> dict:
    """Mix running, bulk imports sent, PostgreSQL restarted; then wait for clean answers."""
    import load  # imported once Django points at the private cluster (see ``main``)

    bulks: list[tuple[int | None, str, int]] = []
    restarted_at: dict[str, float] = {}
    first_success_after: list[float] = []
    last_error_at: list[float] = []

    def on_outcome(outcome) -> None:
        if "back" not in restarted_at:
            return
        finished = outcome.started + outcome.seconds
        if outcome.status == load.EXPECTED_STATUS.get(outcome.endpoint, 200):
            if outcome.started >= restarted_at["back"] and not first_success_after:
                first_success_after.append(finished - restarted_at["back"])
        else:
            last_error_at.append(finished)

    def send_bulk(index: int) -> None:
        marker = f"bulkmark{uuid.uuid4().hex[:16]}"
        body = {
            "messages": [
                {"senderUserId": str(plan.scene.requester_id), "content": f"bulk {i} {marker}"}
                for i in range(args.bulk_size)
            ]
        }
        try:
            response = httpx.post(
                f"http://127.0.0.1:{args.port}/api/v1/conversations/"
                f"{plan.scene.destination.id}/messages/bulk",
                json=body,
                headers={"Authorization": f"Bearer {plan.scene.service_token}"},
                timeout=60,
            )
            bulks.append((response.status_code, marker, args.bulk_size))
        except httpx.HTTPError:
            bulks.append((None, marker, args.bulk_size))

    def fault() -> None:
        """Restart the moment a bulk import's INSERT is running (seen in pg_stat_activity; the
        load's single messages take the same statement for a millisecond or two)."""
        time.sleep(args.phases.lead)
        senders = [threading.Thread(target=send_bulk, args=(i,)) for i in range(args.bulks)]
        for sender in senders:
            sender.start()
        with psycopg.connect(cluster.url(), autocommit=True) as watcher:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                inserting = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                    "AND query ILIKE 'INSERT INTO messages_app_message%%unnest%%' "
                    "AND now() - query_start > interval '30 milliseconds'"
                ).fetchone()[0]
                if inserting:
                    break
                time.sleep(0.005)
        restarted_at["begin"] = time.monotonic()
        restarted_at["seconds"] = cluster.pg_ctl("restart")
        restarted_at["back"] = time.monotonic()
        for sender in senders:
            sender.join()

    faulter = threading.Thread(target=fault)
    faulter.start()
    recorder = asyncio.run(
        load.run_load(
            args.port,
            plan,
            duration=args.phases.restart,
            concurrency=args.concurrency,
            seed=2,
            on_outcome=on_outcome,
        )
    )
    faulter.join()
    back = restarted_at["back"]
    quiet_from = max(last_error_at, default=back)
    return {
        "recorder": recorder,
        "bulks": bulks,
        "restart_seconds": restarted_at["seconds"],
        "recovered_after": first_success_after[0] if first_success_after else None,
        "quiet_window": time.monotonic() - quiet_from,
    }


def kill_worker_under_load(server, plan, args) -> dict:
    """SIGKILL one worker while the mix runs; the master must replace it."""
    import load

    before = server.worker_pids()
    victim = before[0]
    result: dict = {"pid": victim}

    def fault() -> None:
        time.sleep(args.phases.lead)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        while time.monotonic() - killed_at < 30:
            now = server.worker_pids()
            if victim not in now and len(now) == len(before):
                result["new_pids"] = sorted(set(now) - set(before))
                result["replace_seconds"] = time.monotonic() - killed_at
                return
            time.sleep(0.05)

    faulter = threading.Thread(target=fault)
    faulter.start()
    result["recorder"] = asyncio.run(
        load.run_load(
            args.port, plan, duration=args.phases.kill, concurrency=args.concurrency, seed=3
        )
    )
    faulter.join()
    result["replaced"] = "new_pids" in result
    result.setdefault("new_pids", [])
    result.setdefault("replace_seconds", float("nan"))
    result["after"] = asyncio.run(
        load.run_load(
            args.port, plan, duration=args.phases.after, concurrency=args.concurrency, seed=4
        )
    )
    return result


if __name__ == "__main__":
    sys.exit(main())
