"""Sustained mixed load against gunicorn on loopback, with per-endpoint latency and errors.

    DATABASE_URL=postgresql://... .venv/bin/python bench/load.py --seed 1 \
        [--duration 300] [--concurrency 16] [--only ENDPOINT] [--output FILE] \
        [--window SECONDS] [--root CHECKOUT]

Acts as the busy agent of ``manage.py generate_corpus --seed S`` (load the corpus first) through
gunicorn started with the production configuration (``formation/gunicorn_conf.py``: 2 workers of
formation/serving.py x 4 threads unless ``WEB_CONCURRENCY`` / ``GUNICORN_THREADS`` say otherwise).
A fixed number of asyncio clients (``--concurrency``) send requests back to back, each drawn
from the mix the reliability issue names:

- 30% list_messages (a page of a random room of the agent's, at offset 0 or a random offset),
- 30% get_message (a random message the agent can read),
- 15% search_messages (one corpus word: 45% rare, 45% mid-frequency, 10% common),
- 15% search_history (three such words, with run tokens made beforehand, three searches each),
- 10% ingest (one message into the destination room, from its reader).

Every answer other than the expected 200/201 counts as an error, 429 included: the per-token
rate limits are raised for the run, because the run measures capacity, not throttling. Prints
a table of requests, errors, p50/p95/p99 and requests per second per endpoint, the machine's CPU
use over the run, and writes it as Markdown to ``--output``. ``--window S`` adds the mix's requests,
errors, p50 and p95 per S seconds, by wall-clock time (UTC), to compare the windows of an
operation run beside the load (docs/operations.md, "Moving to bounded search"); ``--root`` serves
another checkout's code (the code of before a migration). Writes to the database it loads
(runs, evidence, audit rows, messages): use a database made for it. All text is synthetic.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchmark as bench
import httpx

from messages_app.models import Conversation, Membership, Message
from search_app.runs.services import run_create

# One line per request would drown the report (and would carry the search words).
logging.getLogger("httpx").setLevel(logging.WARNING)

MIX = {
    "list_messages": 30,
    "get_message": 30,
    "search_messages": 15,
    "search_history": 15,
    "ingest": 10,
}
BAND_WEIGHTS = {"rare": 45, "mid": 45, "common": 10}
SEARCHES_PER_RUN = 3
EXPECTED_STATUS = {"ingest": 201}
# Raised for the run: one agent token at hundreds of requests per second is not abuse here.
LOAD_RATE_LIMITS = {"RATE_LIMIT_AGENT": "10000000/min", "RATE_LIMIT_SERVICE": "10000000/min"}


def percentile(values: list[float], share: float) -> float:
    return bench.percentile(sorted(values), share) if values else float("nan")


class ProductionGunicorn(bench.Gunicorn):
    """gunicorn with ``formation/gunicorn_conf.py`` on loopback (the benchmark's own gunicorn
    takes its worker counts on the command line); stopped and inspected the same way."""

    def __init__(
        self,
        *,
        port: int,
        log: IO[bytes],
        env: dict[str, str] | None = None,
        root: Path = bench.ROOT,
    ) -> None:
        """``root``: the source tree it serves (another checkout's, to compare its code on the
        same database)."""
        self.port = port
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("gunicorn")),
                "--config",
                "python:formation.gunicorn_conf",
            ],
            cwd=root,
            env={
                **os.environ,
                "PYTHONPATH": str(root),
                "DEBUG": "0",
                "LOG_LEVEL": "WARNING",
                "GUNICORN_BIND": f"127.0.0.1:{port}",
                **LOAD_RATE_LIMITS,
                **(env or {}),
            },
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.wait_ready(timeout=60)

    def wait_ready(self, timeout: float) -> float:
        """Seconds until ``/readyz`` answers 200."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError("gunicorn exited while starting")
            time.sleep(0.2)
        raise RuntimeError(f"gunicorn was not ready within {timeout} s")


@dataclass
class Plan:
    """What the clients draw from: ids, rooms, words and run tokens, all made before timing."""

    scene: bench.Scene
    rooms: list[tuple[uuid.UUID, int]]
    message_ids: list[uuid.UUID]
    words_by_band: dict[str, list[str]]
    run_tokens: list[str]
    marker: str = field(default_factory=lambda: f"loadmark{uuid.uuid4().hex[:12]}")
    searches: int = 0

    def next_run_token(self) -> str:
        token = self.run_tokens[(self.searches // SEARCHES_PER_RUN) % len(self.run_tokens)]
        self.searches += 1
        return token


def make_plan(seed: int, rng: random.Random, runs: int, samples: int = 2000) -> Plan:
    scene = bench.prepare_scene(seed, rng, samples=samples)
    current = Membership.objects.filter(agent=scene.agent, left_at__isnull=True).values(
        "conversation_id"
    )
    rooms = list(
        Conversation.objects.filter(id__in=current, live_message_count__gt=0).values_list(
            "id", "live_message_count"
        )
    )
    words = bench.corpus_vocabulary(seed)
    # Bands by rank in the Zipf vocabulary (rank r drawn with weight 1/r).
    words_by_band = {"rare": words[8000:16000], "mid": words[150:400], "common": words[1:8]}
    run_tokens = [
        run_create(
            workspace_id=scene.workspace.id,
            agent_id=scene.agent.id,
            conversation_id=scene.destination.id,
            requester_id=scene.requester_id,
        )[1]
        for _ in range(runs)
    ]
    return Plan(
        scene=scene,
        rooms=rooms,
        message_ids=scene.message_ids,
        words_by_band=words_by_band,
        run_tokens=run_tokens,
    )


@dataclass
class Outcome:
    endpoint: str
    started: float
    seconds: float
    status: int | None
    code: str | None = None
    transport_error: str | None = None
    marker: str | None = None


@dataclass
class Recorder:
    outcomes: list[Outcome] = field(default_factory=list)

    def errors(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != EXPECTED_STATUS.get(o.endpoint, 200)]


def _word(plan: Plan, rng: random.Random) -> str:
    band = rng.choices(list(BAND_WEIGHTS), weights=list(BAND_WEIGHTS.values()))[0]
    return rng.choice(plan.words_by_band[band])


def build_request(plan: Plan, endpoint: str, rng: random.Random) -> dict:
    """One request of the mix, as keyword arguments for ``httpx.AsyncClient.request``."""
    scene = plan.scene
    agent = {"Authorization": f"Bearer {scene.agent_token}"}
    if endpoint == "list_messages":
        room, count = rng.choice(plan.rooms)
        offset = 0 if rng.random() < 0.5 else rng.randrange(0, max(1, min(count - 50, 5000)))
        return {
            "method": "GET",
            "url": f"/api/v1/messages?conversationId={room}&limit=50&offset={offset}",
            "headers": agent,
        }
    if endpoint == "get_message":
        return {
            "method": "GET",
            "url": f"/api/v1/messages/{rng.choice(plan.message_ids)}",
            "headers": agent,
        }
    if endpoint == "search_messages":
        return {
            "method": "GET",
            "url": f"/api/v1/messages/search?query={_word(plan, rng)}&limit=20",
            "headers": agent,
        }
    if endpoint == "search_history":
        query = " ".join(_word(plan, rng) for _ in range(3))
        return {
            "method": "POST",
            "url": "/api/v1/history/search",
            "headers": {"Authorization": f"Bearer {plan.next_run_token()}"},
            "json": {"query": query, "limit": 20},
        }
    if endpoint == "ingest":
        words = " ".join(_word(plan, rng) for _ in range(12))
        return {
            "method": "POST",
            "url": f"/api/v1/conversations/{scene.destination.id}/messages",
            "headers": {"Authorization": f"Bearer {scene.service_token}"},
            "json": {
                "senderUserId": str(scene.requester_id),
                "content": f"{words} {plan.marker}-{uuid.uuid4().hex}",
            },
        }
    raise ValueError(endpoint)


def error_code(response: httpx.Response) -> str | None:
    """The error envelope's code of an answer of 400 or more (else None)."""
    if response.status_code < 400:
        return None
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "not-an-envelope"


async def client_loop(
    client: httpx.AsyncClient,
    plan: Plan,
    recorder: Recorder,
    rng: random.Random,
    stop_at: float,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> None:
    endpoints, weights = list(MIX), list(MIX.values())
    while time.monotonic() < stop_at:
        endpoint = rng.choices(endpoints, weights=weights)[0]
        request = build_request(plan, endpoint, rng)
        marker = request.get("json", {}).get("content", "").rsplit(" ", 1)[-1] or None
        started = time.monotonic()
        try:
            response = await client.request(**request)
            outcome = Outcome(
                endpoint,
                started,
                time.monotonic() - started,
                response.status_code,
                error_code(response),
            )
        except httpx.HTTPError as exc:
            outcome = Outcome(
                endpoint, started, time.monotonic() - started, None, None, type(exc).__name__
            )
        if endpoint == "ingest":
            outcome.marker = marker
        recorder.outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)


async def run_load(
    port: int,
    plan: Plan,
    *,
    duration: float,
    concurrency: int,
    seed: int,
    timeout: float = 30.0,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> Recorder:
    recorder = Recorder()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=timeout
    ) as client:
        stop_at = time.monotonic() + duration
        await asyncio.gather(
            *(
                client_loop(
                    client, plan, recorder, random.Random(seed * 1000 + i), stop_at, on_outcome
                )
                for i in range(concurrency)
            )
        )
    return recorder


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def report(recorder: Recorder, seconds: float, cpu_busy: float, args: argparse.Namespace) -> str:
    by_endpoint: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in recorder.outcomes:
        by_endpoint[outcome.endpoint].append(outcome)
    lines = [
        f"{len(recorder.outcomes):,} requests in {seconds:.0f} s: "
        f"**{len(recorder.outcomes) / seconds:.1f} req/s**, "
        f"{len(recorder.errors())} errors; {args.concurrency} concurrent clients; "
        f"CPU {cpu_busy:.0%} busy over the run ({os.cpu_count()} cores, PostgreSQL included).",
        "",
        "| endpoint | share | requests | errors | p50 ms | p95 ms | p99 ms | req/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for endpoint in (name for name, weight in MIX.items() if weight):
        outcomes = by_endpoint.get(endpoint, [])
        times = [o.seconds * 1000 for o in outcomes]
        errors = [o for o in outcomes if o.status != EXPECTED_STATUS.get(endpoint, 200)]
        lines.append(
            f"| {endpoint} | {len(outcomes) / max(1, len(recorder.outcomes)):.0%} "
            f"| {len(outcomes):,} | {len(errors)} | {percentile(times, 0.5):.1f} "
            f"| {percentile(times, 0.95):.1f} | {percentile(times, 0.99):.1f} "
            f"| {len(outcomes) / seconds:.1f} |"
        )
    kinds = Counter((o.endpoint, o.status, o.code or o.transport_error) for o in recorder.errors())
    if kinds:
        lines += [
            "",
            "Errors: " + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items(), key=str)),
        ]
    return "\n".join(lines)


def windows(recorder: Recorder, seconds: float, wall_offset: float) -> str:
    """The mix per ``seconds`` of wall-clock time: requests, errors, p50 and p95 (ms)."""
    by_window: dict[int, list[Outcome]] = defaultdict(list)
    for outcome in recorder.outcomes:
        by_window[int((outcome.started + wall_offset) // seconds)].append(outcome)
    lines = [
        "| window (UTC) | requests | errors | p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for index in sorted(by_window):
        outcomes = by_window[index]
        times = [o.seconds * 1000 for o in outcomes]
        errors = [o for o in outcomes if o.status != EXPECTED_STATUS.get(o.endpoint, 200)]
        start = time.strftime("%H:%M:%S", time.gmtime(index * seconds))
        lines.append(
            f"| {start} | {len(outcomes):,} | {len(errors)} | {percentile(times, 0.5):.1f} "
            f"| {percentile(times, 0.95):.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=300)
    parser.add_argument("--warmup", type=float, default=15)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--only",
        choices=list(MIX),
        help="send only this endpoint's requests (with --concurrency 1: its service time)",
    )
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--output", type=Path)
    parser.add_argument(
        "--window", type=float, help="also report the mix per this many seconds (wall clock)"
    )
    parser.add_argument("--root", type=Path, default=bench.ROOT, help="the checkout to serve")
    args = parser.parse_args()

    if args.only:
        for endpoint in MIX:
            MIX[endpoint] = 100 if endpoint == args.only else 0
    rng = random.Random(args.seed)
    # Room for 250 requests per second (113 were measured on 2 cores): a run whose budget is
    # spent answers 429, which would count as an error. Runs are cheap to make.
    expected_searches = args.duration * 250 * MIX["search_history"] / 100
    plan = make_plan(args.seed, rng, runs=int(expected_searches / SEARCHES_PER_RUN) + 100)
    print(
        f"{Message.objects.count():,} messages; acting as {plan.scene.agent.name!r} in "
        f"{len(plan.rooms)} rooms; {len(plan.run_tokens)} runs made for search_history",
        flush=True,
    )
    log_path = Path(tempfile.gettempdir()) / f"formation-load-gunicorn-{os.getpid()}.log"
    with log_path.open("wb") as log:
        server = ProductionGunicorn(port=args.port, log=log, root=args.root.resolve())
        try:
            asyncio.run(
                run_load(
                    args.port, plan, duration=args.warmup, concurrency=args.concurrency, seed=0
                )
            )
            busy0, total0 = cpu_times()
            started = time.monotonic()
            recorder = asyncio.run(
                run_load(
                    args.port,
                    plan,
                    duration=args.duration,
                    concurrency=args.concurrency,
                    seed=args.seed,
                )
            )
            seconds = time.monotonic() - started
            busy1, total1 = cpu_times()
        finally:
            server.stop()
    table = report(recorder, seconds, (busy1 - busy0) / max(1, total1 - total0), args)
    if args.window:
        table += "\n\n" + windows(recorder, args.window, time.time() - time.monotonic())
    print(table)
    if args.output:
        args.output.write_text(table + "\n")
    if recorder.errors():
        sys.exit(1)


if __name__ == "__main__":
    main()
