"""The request path of the membership tools in process, before and after, with its profile.

    DATABASE_URL=postgresql://... SECRET_KEY=... SEARCH_AUDIT_KEYS=... \
        .venv/bin/python bench/request_path.py --seed 1 --before COMMIT [--rounds 15] \
        [--requests 200] [--output FILE]

On the corpus of ``manage.py generate_corpus --seed S``, as its busy agent, each of
``/healthz``, get_message, list_messages (its largest room's first page) and search_messages (a
rare word) is handed to the WSGI application (``formation.wsgi:application``: Django's handler,
every middleware, the request signals and the connection pool, as a gunicorn thread runs it) in
two processes: one on a git worktree of ``--before``, one on this checkout. Rate limits stay on
(at a rate no run reaches) and metrics are kept in a multiprocess folder, as under gunicorn.

The two processes take turns, ``--requests`` requests each per round, so the shared machine's
drift falls on both. Each request is timed twice: until its answer's bytes are ready (what a
client waits for: the server writes them then) and until the response is closed (Django's
``request_finished``: the connection back to its pool). Then each process profiles
``--requests`` more with ``cProfile`` and reports its function calls per request and the
functions with the most own time. The database is read, never written (the search audit aside).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILE_LINES = 12


def child(paths: dict[str, str], token: str) -> None:
    """Serve the parent's commands on stdin, one JSON answer per line on stdout."""
    sys.path.insert(0, os.getcwd())
    from formation.wsgi import application

    def environ(path: str) -> dict:
        route, _, query = path.partition("?")
        return {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": route,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "HTTP_HOST": "127.0.0.1:8000",
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(b""),
            "wsgi.errors": sys.stderr,
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
        }

    def call(path: str) -> tuple[float, float]:
        started = time.perf_counter()
        statuses: list[str] = []
        answer = application(
            environ(path), lambda status, headers, exc=None: statuses.append(status)
        )
        b"".join(answer)
        ready = time.perf_counter()
        answer.close()
        closed = time.perf_counter()
        if not statuses[0].startswith("200"):
            raise RuntimeError(f"{path.split('?')[0]} answered {statuses[0]}")
        return (ready - started) * 1000, (closed - started) * 1000

    for line in sys.stdin:
        command, name, count = line.split()
        path, count = paths[name], int(count)
        if command == "time":
            print(json.dumps([call(path) for _ in range(count)]), flush=True)
        else:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(count):
                call(path)
            profile.disable()
            stats = pstats.Stats(profile)
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(PROFILE_LINES)
            top = [
                row
                for row in text.getvalue().splitlines()
                if row.strip() and row.strip()[0].isdigit()
            ]
            print(
                json.dumps({"calls": stats.total_calls / count, "top": top[-PROFILE_LINES:]}),
                flush=True,
            )


class Side:
    def __init__(self, name: str, tree: Path, paths: dict[str, str], token: str) -> None:
        self.name = name
        env = {
            **os.environ,
            "DEBUG": "0",
            "LOG_LEVEL": "WARNING",
            "RATE_LIMIT_AGENT": "1000000/min",
            "PROMETHEUS_MULTIPROC_DIR": tempfile.mkdtemp(prefix="request-path-metrics-"),
            "DJANGO_SETTINGS_MODULE": "formation.settings",
            "PYTHONPATH": str(tree),
        }
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(paths), token],
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, command: str, name: str, count: int):
        self.process.stdin.write(f"{command} {name} {count}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} process stopped; see its stderr above")
        return json.loads(line)

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def scene_paths(seed: int) -> tuple[dict[str, str], str]:
    """The busy agent's token and one path per tool (made with this checkout's code)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from benchmark import SUBSTRINGS, corpus_vocabulary, prepare_scene

    scene = prepare_scene(seed, random.Random(seed), 1)
    rare = corpus_vocabulary(seed)[SUBSTRINGS["rare"] - 1].upper()
    paths = {
        "healthz": "/healthz",
        "get_message": f"/api/v1/messages/{scene.message_ids[0]}",
        "list_messages": f"/api/v1/messages?conversationId={scene.big_room.id}",
        "search_messages": f"/api/v1/messages/search?query={rare}&limit=20",
    }
    return paths, scene.agent_token


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]), sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--before", required=True, help="The commit to compare with.")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")
    import django

    django.setup()
    paths, token = scene_paths(args.seed)
    from serving import worktree

    lines = [
        f"In process, {args.rounds} rounds of {args.requests} requests per tool and side, the "
        f"sides taking turns; before = {args.before}, after = this checkout. Times in ms "
        "(medians): until the answer is ready / until the response is closed.",
        "",
        "| tool | before: ready | before: closed | after: ready | after: closed "
        "| after / before (ready) | calls per request, before → after |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    profiles: list[str] = []
    with worktree(args.before) as before_tree:
        sides = [Side("before", before_tree, paths, token), Side("after", ROOT, paths, token)]
        try:
            for name in paths:
                times = {side.name: [] for side in sides}
                for side in sides:
                    side.ask("time", name, 50)  # warm-up
                for round_ in range(args.rounds):
                    order = sides if round_ % 2 == 0 else sides[::-1]
                    for side in order:
                        times[side.name] += side.ask("time", name, args.requests)
                profiled = {side.name: side.ask("profile", name, args.requests) for side in sides}
                ready = {
                    key: statistics.median(t[0] for t in value) for key, value in times.items()
                }
                closed = {
                    key: statistics.median(t[1] for t in value) for key, value in times.items()
                }
                lines.append(
                    f"| {name} | {ready['before']:.3f} | {closed['before']:.3f} "
                    f"| {ready['after']:.3f} | {closed['after']:.3f} "
                    f"| {ready['after'] / ready['before']:.2f} "
                    f"| {profiled['before']['calls']:.0f} → {profiled['after']['calls']:.0f} |"
                )
                for side in sides:
                    profiles += [
                        f"{name}, {side.name}: the functions with the most own time "
                        f"(cProfile over {args.requests} requests)",
                        "",
                        "```text",
                        *profiled[side.name]["top"],
                        "```",
                        "",
                    ]
        finally:
            for side in sides:
                side.stop()
    text = "\n".join(lines) + "\n\n" + "\n".join(profiles)
    print(text)
    if args.output:
        args.output.write_text(text)


if __name__ == "__main__":
    main()
