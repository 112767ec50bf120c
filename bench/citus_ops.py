"""What only a distributed engine can do, done under load: a worker added and the shards
rebalanced onto it, and a worker stopped and started again.

    make citus-up
    .venv/bin/python bench/citus_ops.py [--messages 100000] [--workspaces 8] [--output FILE]

Runs on the local Citus cluster (``formation/citus_cluster.py``) in a database of its own,
``formation_ops``, made afresh on every node and dropped at the end, filled by
``generate_corpus`` and served by gunicorn in the production configuration. In order:

1. **Worker down**: every workspace in turn (get_message and list_messages with the workspace's
   agent token) while the worker holding the most workspaces is stopped for ``--down`` seconds.
   Workspaces whose shards live elsewhere must keep answering 200; the stopped worker's must
   answer ``503 unavailable`` within ``--fast`` seconds, never a 500 and never a hang; after the
   worker is started again every workspace must answer 200.
2. **Rebalance**: bench/load.py's mix runs while one more worker is started and registered and
   ``citus_rebalance_start()`` moves shards onto it (online, by logical replication). Every
   answer must be a success, the new worker must hold shards when the move is done, and every
   message whose ingest answered 201 must be stored.
3. **Drift**: ``rebuild_search_documents --check`` must find nothing to fix, and every run's
   search_history evidence must equal the budget its last audit event recorded.

Prints what happened in each phase and exits non-zero if any expectation failed. The added
worker is removed at the end (its folder too), so the cluster is as ``make citus-up`` left it.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from formation import citus_cluster as cluster  # noqa: E402
from formation import embedded_postgres as pg  # noqa: E402

DATABASE = "formation_ops"


@dataclass(frozen=True)
class Probe:
    """One workspace's agent, with a message and a room it may read, and where its shard is."""

    workspace: str
    token: str
    message_id: uuid.UUID
    room_id: uuid.UUID
    port: int


@dataclass
class Answer:
    workspace: str
    started: float
    seconds: float
    status: int | None
    code: str | None


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (tests/bench/test_smoke.py parses one: this script needs Citus)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--workspaces", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--down", type=float, default=15, help="seconds the worker stays down")
    parser.add_argument("--fast", type=float, default=2, help="slowest acceptable 503, seconds")
    parser.add_argument(
        "--transfer-mode",
        choices=["auto", "force_logical", "block_writes"],
        default="auto",
        help="citus_rebalance_start's shard_transfer_mode (default auto: online, logical)",
    )
    parser.add_argument("--port", type=int, default=8767)
    parser.add_argument("--output", type=Path)
    return parser.parse_args(argv)


def main() -> int:
    args = arguments()
    nodes = [cluster.coordinator(), *cluster.registered_workers()]
    for node in nodes:
        with cluster._connect(node) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
    cluster._prepare_database(nodes, DATABASE)
    os.environ["DATABASE_URL"] = cluster.url(DATABASE)
    os.environ["DATABASE_POOL"] = "0"
    try:
        failures, lines = run(args, nodes)
    finally:
        _clean_up(nodes)
    if args.output:
        args.output.write_text("\n".join(lines) + "\n")
    return 1 if failures else 0


def run(args: argparse.Namespace, nodes: list[cluster.Node]):
    import load  # sets Django up against DATABASE_URL (above)
    from django.core.management import call_command
    from django.db import connection

    failures: list[str] = []
    lines: list[str] = []

    def expect(condition: bool, text: str) -> None:
        lines.append(("ok   " if condition else "FAIL ") + text)
        print(lines[-1], flush=True)
        if not condition:
            failures.append(text)

    print(f"{DATABASE} on {len(nodes) - 1} workers; loading {args.messages:,} messages", flush=True)
    started = time.monotonic()
    call_command("migrate", verbosity=0)
    call_command(
        "generate_corpus",
        messages=args.messages,
        workspaces=args.workspaces,
        seed=1,
        stdout=io.StringIO(),
    )
    lines.append(
        f"corpus: {args.messages:,} messages in {args.workspaces} workspaces, "
        f"loaded in {time.monotonic() - started:.0f} s"
    )
    rng = random.Random(1)
    # Every search of the rebalance needs budget left (a spent run answers 429): room for 90 s
    # at up to 250 requests per second, as bench/faults.py makes.
    searches = 90 * 250 * load.MIX["search_history"] / 100
    plan = load.make_plan(1, rng, runs=int(searches / load.SEARCHES_PER_RUN) + 100)
    probes = make_probes(connection)
    log_path = Path(tempfile.gettempdir()) / f"formation-citus-ops-gunicorn-{os.getpid()}.log"
    with log_path.open("wb") as log:
        server = load.ProductionGunicorn(port=args.port, log=log, env={"DATABASE_POOL": "1"})
        try:
            worker_down(args, probes, expect, lines)
            rebalance_under_load(args, plan, nodes, connection, expect, lines)
            moved = Counter(probe.port for probe in make_probes(connection, probes))
            lines.append(
                f"rebalance: workspaces by worker port afterwards {dict(sorted(moved.items()))}"
            )
            print(lines[-1], flush=True)
        finally:
            server.stop()
    drift_checks(expect)
    return failures, lines


def make_probes(connection, earlier: list[Probe] | None = None) -> list[Probe]:
    """A probe per workspace: its first agent with a current room holding live messages."""
    from formation.auth import TokenKind
    from messages_app.models import Conversation, Membership, Message, Workspace
    from messages_app.services import token_create

    probes = []
    known = {probe.workspace: probe for probe in earlier or []}
    for workspace in Workspace.objects.order_by("slug"):
        port = shard_port(connection, workspace.id)
        if workspace.slug in known:
            probes.append(Probe(**{**known[workspace.slug].__dict__, "port": port}))
            continue
        membership = (
            Membership.objects.filter(
                workspace=workspace,
                agent__isnull=False,
                left_at__isnull=True,
                # Every table filtered by the workspace: one shard, no repartitioned join.
                conversation_id__in=Conversation.objects.filter(
                    workspace=workspace, live_message_count__gt=0
                ).values("id"),
            )
            .order_by("agent_id", "conversation_id")
            .first()
        )
        if membership is None:
            continue
        message = (
            Message.objects.filter(
                workspace=workspace,
                conversation_id=membership.conversation_id,
                deleted_at__isnull=True,
            )
            .order_by("-seq")
            .first()
        )
        _, token = token_create(
            workspace_id=workspace.id, kind=TokenKind.AGENT, agent=membership.agent
        )
        probes.append(Probe(workspace.slug, token, message.id, membership.conversation_id, port))
    return probes


def shard_port(connection, workspace_id: uuid.UUID) -> int:
    """The port of the worker holding the workspace's shard group (messages' placement)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = "
            "get_shard_id_for_distribution_column('messages_app_message', %s)",
            [workspace_id],
        )
        return cursor.fetchone()[0]


def placements_by_port(connection) -> Counter:
    with connection.cursor() as cursor:
        cursor.execute("SELECT nodeport, count(*) FROM pg_dist_shard_placement GROUP BY 1")
        return Counter(dict(cursor.fetchall()))


def rebalance_under_load(args, plan, nodes, connection, expect, lines) -> None:
    """The mix runs; a worker joins; citus_rebalance_start moves shards onto it."""
    import load

    result: dict = {}

    def operate() -> None:
        try:
            add_and_rebalance()
        except Exception as problem:  # reported as a failed expectation below
            result["problem"] = f"{type(problem).__name__}: {problem}".splitlines()[0]

    def add_and_rebalance() -> None:
        time.sleep(5)
        begun = time.monotonic()
        node = cluster.worker(max(int(n.name.removeprefix("worker")) for n in nodes[1:]) + 1)
        cluster.start_node(pg.find_bindir(), node)
        cluster._prepare_database([*nodes, node], DATABASE)
        result["node"] = node
        result["added_seconds"] = time.monotonic() - begun
        with cluster._connect(cluster.coordinator(), DATABASE) as admin:
            moved_at = time.monotonic()
            job = admin.execute(
                "SELECT citus_rebalance_start("
                "shard_transfer_mode => %s::citus.shard_transfer_mode)",
                [args.transfer_mode],
            ).fetchone()[0]
            admin.execute("SELECT citus_rebalance_wait()")
            result["rebalance_seconds"] = time.monotonic() - moved_at
            result["job"] = job
            result["state"] = admin.execute(
                "SELECT state, details->>'task_state_counts' FROM citus_rebalance_status() "
                "WHERE job_id = %s",
                [job],
            ).fetchone()

    operator = threading.Thread(target=operate)
    operator.start()
    before = placements_by_port(connection)
    recorder = asyncio.run(load.run_load(args.port, plan, duration=90, concurrency=16, seed=5))
    operator.join()
    after = placements_by_port(connection)
    node = result.get("node")
    errors = recorder.errors()
    kinds = Counter((o.endpoint, o.status, o.code or o.transport_error) for o in errors)
    seconds = 90.0
    lines.append(
        f"rebalance: worker added in {result.get('added_seconds', float('nan')):.1f} s; "
        f"citus_rebalance_start job {result.get('job')} {result.get('state')} in "
        f"{result.get('rebalance_seconds', float('nan')):.1f} s; placements by port "
        f"{dict(sorted(before.items()))} -> {dict(sorted(after.items()))}"
    )
    print(lines[-1], flush=True)
    expect("problem" not in result, f"rebalance: {result.get('problem', 'no error')}")
    expect(
        not errors,
        f"rebalance: {len(recorder.outcomes):,} requests in {seconds:.0f} s "
        f"({len(recorder.outcomes) / seconds:.1f} req/s), {len(errors)} errors {dict(kinds)}",
    )
    expect(
        node is not None
        and after.get(node.port, 0) > 0
        and result.get("state", [""])[0] == "finished",
        f"rebalance: the new worker holds {after.get(node.port, 0) if node else 0} shards",
    )
    from messages_app.models import Message

    stored = Message.objects.filter(
        workspace_id=plan.scene.workspace.id, content__contains=plan.marker
    ).count()
    answered = sum(1 for o in recorder.outcomes if o.endpoint == "ingest" and o.status == 201)
    expect(
        stored == answered,
        f"rebalance: {answered:,} ingests answered 201, {stored:,} of their messages stored",
    )
    times = sorted(o.seconds * 1000 for o in recorder.outcomes)
    lines.append(
        f"rebalance: latency p50 {load.percentile(times, 0.5):.1f} ms, "
        f"p99 {load.percentile(times, 0.99):.1f} ms, slowest {times[-1]:.0f} ms"
    )
    print(lines[-1], flush=True)


async def probe_loop(client, probes, answers, stop_at, offset) -> None:
    import load

    index = offset
    while time.monotonic() < stop_at:
        probe = probes[index % len(probes)]
        index += 1
        url = (
            f"/api/v1/messages/{probe.message_id}"
            if index % 2
            else f"/api/v1/messages?conversationId={probe.room_id}&limit=20"
        )
        started = time.monotonic()
        try:
            response = await client.get(url, headers={"Authorization": f"Bearer {probe.token}"})
            answers.append(
                Answer(
                    probe.workspace,
                    started,
                    time.monotonic() - started,
                    response.status_code,
                    load.error_code(response),
                )
            )
        except httpx.HTTPError as exc:
            answers.append(
                Answer(
                    probe.workspace, started, time.monotonic() - started, None, type(exc).__name__
                )
            )


def worker_down(args, probes: list[Probe], expect, lines) -> None:
    """Stop the worker holding the most workspaces; the others must not notice."""
    by_port = Counter(probe.port for probe in probes)
    port = by_port.most_common(1)[0][0]
    victim = cluster.worker(port - cluster.COORDINATOR_PORT)
    down = {probe.workspace for probe in probes if probe.port == port}
    up = {probe.workspace for probe in probes} - down
    marks: dict[str, float] = {}

    def operate() -> None:
        bindir = pg.find_bindir()
        time.sleep(5)
        marks["stopping"] = time.monotonic()
        cluster.stop_node(bindir, victim)
        marks["stopped"] = time.monotonic()
        time.sleep(args.down)
        marks["starting"] = time.monotonic()
        cluster.start_node(bindir, victim)
        marks["started"] = time.monotonic()

    async def drive() -> list[Answer]:
        answers: list[Answer] = []
        limits = httpx.Limits(max_connections=args.concurrency)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{args.port}", limits=limits, timeout=30
        ) as client:
            stop_at = time.monotonic() + 5 + args.down + 20
            await asyncio.gather(
                *(probe_loop(client, probes, answers, stop_at, i) for i in range(args.concurrency))
            )
        return answers

    operator = threading.Thread(target=operate)
    operator.start()
    answers = asyncio.run(drive())
    operator.join()

    while_down = [a for a in answers if marks["stopped"] <= a.started < marks["starting"]]
    others = [a for a in while_down if a.workspace in up]
    stopped = [a for a in while_down if a.workspace in down]
    bad_others = [a for a in others if a.status != 200]
    bad_stopped = [a for a in stopped if not (a.status == 503 and a.code == "unavailable")]
    slowest = max((a.seconds for a in stopped), default=0.0)
    never_500 = [a for a in answers if a.status is None or (a.status >= 500 and a.status != 503)]
    lines.append(
        f"worker down: {victim.name} (port {port}) holds {len(down)} of {len(probes)} "
        f"workspaces; stopped in {marks['stopped'] - marks['stopping']:.1f} s for {args.down:.0f} s"
    )
    print(lines[-1], flush=True)
    expect(
        bool(others) and not bad_others,
        f"worker down: the other {len(up)} workspaces answered {len(others):,} requests, "
        f"{len(bad_others)} not 200 {dict(Counter((a.status, a.code) for a in bad_others))}",
    )
    expect(
        bool(stopped) and not bad_stopped and slowest < args.fast,
        f"worker down: its {len(down)} workspaces got {len(stopped):,} answers, "
        f"{len(stopped) - len(bad_stopped):,} of them 503 unavailable, slowest "
        f"{slowest * 1000:.0f} ms; others {dict(Counter((a.status, a.code) for a in bad_stopped))}",
    )
    expect(not never_500, f"worker down: {len(never_500)} answers were a 500 or no answer")
    recovered: dict[str, float] = {}
    for answer in answers:
        if answer.started >= marks["started"] and answer.status == 200:
            recovered.setdefault(answer.workspace, answer.started - marks["started"])
    tail = [a for a in answers if a.started >= marks["started"] + 5]
    expect(
        set(recovered) == up | down and bool(tail) and all(a.status == 200 for a in tail),
        f"worker down: after the restart every workspace answered again within "
        f"{max(recovered.values(), default=float('nan')):.1f} s; the last "
        f"{len(tail):,} answers all 200: {all(a.status == 200 for a in tail)}",
    )
    per_side = defaultdict(list)
    for answer in others:
        per_side["others"].append(answer.seconds * 1000)
    for answer in stopped:
        per_side["stopped"].append(answer.seconds * 1000)
    for side, times in per_side.items():
        times.sort()
        lines.append(
            f"worker down: {side} p50 {times[len(times) // 2]:.1f} ms, max {times[-1]:.1f} ms"
        )
        print(lines[-1], flush=True)


def drift_checks(expect) -> None:
    import faults
    from django.core.management import call_command

    report = io.StringIO()
    call_command("rebuild_search_documents", check=True, stdout=report)
    checked = report.getvalue().strip().splitlines()[-1]
    expect(" 0 rows drifted" in checked, f"rebuild_search_documents --check: {checked}")
    drifted = faults.evidence_drift()
    expect(
        not drifted,
        f"evidence: {len(drifted)} runs whose evidence differs from their audit "
        f"(run, audited budget, evidence rows): {drifted[:5]}",
    )


def _clean_up(nodes: list[cluster.Node]) -> None:
    """Drop the database everywhere; stop and remove the worker this script added."""
    bindir = pg.find_bindir()
    last = max(int(node.name.removeprefix("worker")) for node in nodes[1:])
    added = [
        cluster.worker(n)
        for n in range(last + 1, cluster.MAX_WORKERS + 1)
        if cluster.worker(n).data_dir.exists()
    ]
    for node in nodes:
        try:
            with cluster._connect(node) as connection:
                connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        except Exception as problem:  # a node that is down keeps its copy: say so
            print(f"could not drop {DATABASE} on {node.name}: {type(problem).__name__}")
    for node in added:
        cluster.stop_node(bindir, node)
        shutil.rmtree(node.data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
