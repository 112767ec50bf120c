"""The serving layer alone: candidate servers side by side with the HTTP floor, interleaved.

    DATABASE_URL=postgresql://... SECRET_KEY=... SEARCH_AUDIT_KEYS=... \
        .venv/bin/python bench/serving.py [--rounds 3000] [--before COMMIT] [--output FILE]

Every candidate serves two applications on loopback, one process each: ``bench/http_floor.py``
(a fixed 12-byte answer, so what is measured is the server alone) and the project's WSGI
application, asked for ``/healthz`` (Django's handler and every middleware, no SQL). The HTTP
floor is the floor application under gunicorn's threaded worker, one process and one thread,
as ``bench/benchmark.py`` measures it. A round sends one request to every side over its own
kept-alive connection, in an order rotated from round to round, so every side sees the same
drift of the shared machine; each side's margin over the HTTP floor is the median of its
pairwise differences within a round.

Candidates: the project's worker (``formation.serving.BoundedWorker`` with
``formation/gunicorn_conf.py``) on the standard asyncio loop and, when ``uvloop`` is installed,
on uvloop; the same worker at ``--before`` (a git worktree of that commit, on the asyncio
loop, as it shipped); gunicorn's threaded worker (1 process x 4 threads); and, when they are
installed, granian's and uvicorn's WSGI interfaces (``pip install granian uvicorn``: they are
measured here, not used by the product). Each candidate runs one process with 4 threads where
it has threads. Nothing is written to the database; ``/healthz`` reads none.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmark import (
    HTTP_FLOOR_APP,
    free_port,
    gthread_command,
    percentile,
    wait_until_answering,
)

ROOT = Path(__file__).resolve().parent.parent
PROJECT_APP = "formation.wsgi:application"


@dataclass
class Candidate:
    """A way to serve a WSGI application: its command line, given the app and the port."""

    name: str
    command: list[str]
    cwd: Path = ROOT
    extra_env: dict[str, str] = field(default_factory=dict)

    def argv(self, app: str, port: int) -> list[str]:
        return [part.format(app=app, port=port) for part in self.command]


def gunicorn_binary() -> str:
    return str(Path(sys.executable).with_name("gunicorn"))


def project_worker(name: str, loop: str, cwd: Path = ROOT) -> Candidate:
    """``formation/gunicorn_conf.py`` as production runs it, one process of 4 threads."""
    return Candidate(
        name,
        [
            gunicorn_binary(),
            "--config",
            "python:formation.gunicorn_conf",
            "--asgi-loop",
            loop,
            "{app}",
        ],
        cwd=cwd,
        extra_env={
            "GUNICORN_BIND": "127.0.0.1:{port}",
            "WEB_CONCURRENCY": "1",
            "GUNICORN_THREADS": "4",
            "GUNICORN_KEEPALIVE": "300",
        },
    )


def wsgi_server(name: str, label: str, *options: str) -> Candidate | None:
    """``name``'s WSGI interface on loopback, if it is installed (measured, never used)."""
    if importlib.util.find_spec(name) is None:
        return None
    return Candidate(
        label,
        [
            str(Path(sys.executable).with_name(name)),
            "--interface",
            "wsgi",
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
            "--log-level",
            "warning",
            *options,
            "{app}",
        ],
    )


def candidates(before: Path | None) -> list[Candidate]:
    found = [project_worker("BoundedWorker, asyncio loop", "asyncio")]
    if importlib.util.find_spec("uvloop"):
        found.append(project_worker("BoundedWorker, uvloop", "uvloop"))
    if before is not None:
        found.append(project_worker("BoundedWorker at --before", "asyncio", cwd=before))
    found.append(
        Candidate(
            "gunicorn gthread 1x4",
            gthread_command("{app}", "127.0.0.1:{port}", threads=4),
        )
    )
    extra = (
        wsgi_server("granian", "granian wsgi 1x4", "--workers", "1", "--blocking-threads", "4"),
        wsgi_server("uvicorn", "uvicorn wsgi", "--timeout-keep-alive", "300"),
    )
    found += [candidate for candidate in extra if candidate is not None]
    return found


@dataclass
class Side:
    """One server process and the kept-alive connection the rounds use."""

    label: str
    path: str
    process: subprocess.Popen
    connection: http.client.HTTPConnection
    times: list[float] = field(default_factory=list)

    def call(self) -> float:
        started = time.perf_counter()
        self.connection.request("GET", self.path)
        response = self.connection.getresponse()
        response.read()
        elapsed = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"{self.label} answered {response.status}")
        return elapsed


def start(candidate: Candidate, app: str, path: str, log) -> Side:
    port = free_port()
    env = {
        **os.environ,
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        # The floor application is read from this checkout when the candidate's has none.
        "PYTHONPATH": f"{candidate.cwd}:{ROOT}",
        **{key: value.format(port=port) for key, value in candidate.extra_env.items()},
    }
    process = subprocess.Popen(
        candidate.argv(app, port), cwd=candidate.cwd, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    wait_until_answering(process, port, path, log)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    label = f"{candidate.name} / {'floor app' if app == HTTP_FLOOR_APP else path}"
    return Side(label, path, process, connection)


@contextmanager
def worktree(commit: str | None) -> Iterator[Path | None]:
    """A checkout of ``commit`` in a temporary folder, removed afterwards."""
    if commit is None:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="serving-before-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(folder), commit],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield folder
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT)
        shutil.rmtree(folder, ignore_errors=True)


def run(rounds: int, warmup: int, before: Path | None, log) -> tuple[Side, list[Side]]:
    http_floor = Candidate(
        "HTTP floor: gunicorn gthread 1x1",
        gthread_command("{app}", "127.0.0.1:{port}", threads=1),
    )
    floor = start(http_floor, HTTP_FLOOR_APP, "/", log)
    sides = []
    try:
        for candidate in candidates(before):
            sides.append(start(candidate, HTTP_FLOOR_APP, "/", log))
            sides.append(start(candidate, PROJECT_APP, "/healthz", log))
        everyone = [floor, *sides]
        for index in range(warmup + rounds):
            shift = index % len(everyone)
            for side in everyone[shift:] + everyone[:shift]:
                elapsed = side.call()
                if index >= warmup:
                    side.times.append(elapsed)
    finally:
        for side in [floor, *sides]:
            side.connection.close()
            side.process.terminate()
        for side in [floor, *sides]:
            side.process.wait(timeout=30)
    return floor, sides


def report(floor: Side, sides: list[Side], rounds: int) -> str:
    lines = [
        f"{rounds} rounds, one request per side per round, order rotated; times in ms.",
        "",
        "| server / what it serves | p50 | p95 | margin over the HTTP floor, median of pairs |",
        "|---|--:|--:|--:|",
        f"| {floor.label} | {statistics.median(floor.times):.3f} "
        f"| {percentile(floor.times, 0.95):.3f} | 0 |",
    ]
    for side in sides:
        margins = [mine - base for mine, base in zip(side.times, floor.times, strict=True)]
        lines.append(
            f"| {side.label} | {statistics.median(side.times):.3f} "
            f"| {percentile(side.times, 0.95):.3f} | {statistics.median(margins):+.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--before", help="Also serve the project's worker at this commit.")
    parser.add_argument("--output", type=Path, help="Also write the table here (Markdown).")
    args = parser.parse_args()
    with (
        tempfile.NamedTemporaryFile(prefix="serving-", suffix=".log", delete=False) as log,
        worktree(args.before) as before,
    ):
        floor, sides = run(args.rounds, args.warmup, before, log)
    table = report(floor, sides, args.rounds)
    print(table)
    if args.output:
        args.output.write_text(table)


if __name__ == "__main__":
    main()
