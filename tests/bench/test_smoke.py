"""Every script in bench/ run once at a tiny size, so that a change that breaks one says so in
``make test`` instead of on the day someone needs its figures.

A smoke run proves that a script still runs to its end and prints its table, never what the
figures are: the sizes are far too small to measure anything. Each script runs as a user runs it,
in a process of its own with the production settings and the bench secrets, against a database
of its own on the test database's server: a clone (``CREATE DATABASE … TEMPLATE``) of one that
is migrated and holds a small ``generate_corpus`` corpus (seed 1) and ``bench/search_corpus.sql``'s,
dropped after the run. ``bench/faults.py`` makes its own cluster, as always; ``bench/relevance.py``
reads ``relevance_set.json`` beside this file (LoCoMo's format, written for the tests);
``bench/citus_ops.py`` needs a Citus cluster, so only its import and its command line are
checked here. The scripts that compare with an earlier commit are given ``HEAD``.

The runs are independent, so they go in parallel, ``WORKERS`` at a time, from the first test of
this module on: those that need no clone while the corpus is made, then the longest first. Each
test waits for its own script's run and checks that it exited 0 within its time and printed what
its table always holds.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from formation import embedded_postgres
from tests.helpers import PROJECT_DIR, child_environment

BENCH = PROJECT_DIR / "bench"
RELEVANCE_SET = Path(__file__).with_name("relevance_set.json")
# Scripts at once: most of a smoke run is starting processes and waiting on them.
WORKERS = 4
# What the scripts' production settings need; the test settings' own values are dropped.
SCRIPT_ENV = {
    "DJANGO_SETTINGS_MODULE": "formation.settings",
    "SECRET_KEY": "bench-only-secret-key-not-for-production",
    "SEARCH_AUDIT_KEYS": "k1:bench-only-audit-key-0123456789",
    "DEBUG": "0",
    # gunicorn's graceful stop waits this long for a worker that is still booting (one that
    # replaces a killed worker in bench/faults.py, say) before it kills it: 30 s by default.
    "GUNICORN_GRACEFUL_TIMEOUT": "3",
}
DROPPED = {"DJANGO_SETTINGS_MODULE", "SECRET_KEY", "SEARCH_AUDIT_KEYS", "DEBUG", "DATABASE_URL"}
DROPPED_PREFIXES = ("DATABASE_", "API_STATEMENT", "RATE_LIMIT", "CONN_", "METRICS")


@dataclass(frozen=True)
class Script:
    """One smoke run: the script's arguments, the database it gets and what it must print."""

    # The script's file in bench/, then its arguments, where {port} becomes a free loopback
    # port, {clone} the clone's name and {out} a temporary folder.
    args: tuple[str, ...]
    prints: str
    # "clone": DATABASE_URL names a clone of the corpus database; "none": no DATABASE_URL.
    database: str = "clone"
    timeout: float = 150


# By the pytest id, the longest first.
SCRIPTS: dict[str, Script] = {
    "faults": Script(
        (
            "faults.py",
            *("--messages", "2000", "--concurrency", "2", "--steady", "1"),
            *("--bulk-size", "1000", "--bulks", "1", "--port", "{port}", "--smoke"),
        ),
        prints="ok   evidence:",
        database="none",
        timeout=300,
    ),
    "serving": Script(("serving.py", "--rounds", "2", "--warmup", "1"), prints="| HTTP floor"),
    "benchmark": Script(
        (
            "benchmark.py",
            *("--seed", "1", "--requests", "1", "--warmup", "0", "--statement-samples", "1"),
            *("--cjk-messages", "10", "--bulk-size", "5", "--gunicorn-workers", "1"),
            *("--threads", "1"),
        ),
        prints="| bulk ingest | 5 messages per request |",
    ),
    "load": Script(
        (
            "load.py",
            *("--seed", "1", "--duration", "2", "--warmup", "0", "--concurrency", "2"),
            *("--port", "{port}"),
        ),
        prints="| search_history |",
    ),
    "bulk_import_limit_under_load": Script(
        (
            "bulk_import_limit.py",
            *("--under-load", "20x200", "--repeat", "1", "--concurrency", "2"),
            *("--warmup", "1", "--port", "{port}"),
        ),
        prints="| ingest |",
    ),
    "flood": Script(
        ("flood.py", "--seed", "1", "--messages", "50", "--rounds", "1"), "eligible noise:"
    ),
    "request_path": Script(
        ("request_path.py", "--seed", "1", "--before", "HEAD", "--rounds", "1", "--requests", "2"),
        prints="search_messages, after",
    ),
    "answer_size": Script(("answer_size.py", "--long", "3000"), prints="ratio, 3,000-character"),
    "ranking_latency": Script(
        ("ranking_latency.py", "--seed", "1", "--before", "HEAD", "--requests", "1"),
        prints="common",
    ),
    "history_ab": Script(
        ("history_ab.py", "--seed", "1", "--before", "HEAD", "--calls", "2", "--band", "rare"),
        prints="rare",
    ),
    "relevance": Script(
        (
            "relevance.py",
            *("--data", str(RELEVANCE_SET), "--conversations", "2", "--limit", "3"),
            *("--database", "{clone}", "--keep", "--output", "{out}/relevance.json"),
        ),
        prints="| single-hop | search_history |",
    ),
    "relevance_pooled": Script(
        (
            "relevance.py",
            *("--data", str(RELEVANCE_SET), "--pooled", "--kind", "public", "--limit", "2"),
            *("--database", "{clone}", "--keep"),
        ),
        prints="| single-hop | search_history |",
    ),
    "metrics_overhead": Script(
        ("metrics_overhead.py", "--pairs", "3", "--warmup", "1", "--multiprocess"),
        prints="median pair difference",
    ),
    "broad_matches": Script(
        ("broad_matches.py", "--matches", "30", "--requests", "1", "--inlined"),
        prints="fresh word, no statistics",
    ),
    "bulk_import_limit": Script(("bulk_import_limit.py", "20x200", "--repeat", "1"), ": 201,"),
    "explain_search_history": Script(
        ("explain_search_history.py", "--repeat", "1", "--explain"), prints="common  hits="
    ),
    "history_statements": Script(
        ("history_statements.py", "--seed", "1", "--calls", "1", "--explain", "1"),
        prints="statements",
    ),
    "storing_cost": Script(
        ("storing_cost.py", "--rounds", "1", "--sizes", "2000", "--previous-up-to", "2000"),
        prints="camelCase",
    ),
    "identifier_indexing": Script(
        ("identifier_indexing.py", "--rows", "20"), prints="five identifiers"
    ),
}
# Modules of bench/ that are no script of their own, and the runs above that import them.
LIBRARIES = {
    "django_setup.py": ("answer_size", "broad_matches", "ranking_latency", "storing_cost"),
    "http_floor.py": ("benchmark", "serving"),
    "relevance_core.py": ("relevance", "relevance_pooled"),
    "relevance_distractors.py": ("relevance",),
    "search_corpus.sql": ("explain_search_history",),
}
# Needs a Citus cluster: checked by test_citus_ops_imports_and_parses_its_arguments.
CITUS_ONLY = {"citus_ops.py"}


@dataclass
class Outcome:
    returncode: int | None
    output: str
    seconds: float


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_url(name: str) -> str:
    """A URL of database ``name`` on the test database's server (its socket's trust login)."""
    db = connection.settings_dict
    host = db["HOST"] or db["OPTIONS"].get("host", "")
    port = db["PORT"] or db["OPTIONS"].get("port")
    user = db["USER"]
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    if host.startswith("/"):
        url = f"postgresql://{user}{password}@/{name}?host={host}"
        return url + (f"&port={port}" if port else "")
    return f"postgresql://{user}{password}@{host}{f':{port}' if port else ''}/{name}"


def script_env(database_url: str | None) -> dict[str, str]:
    env = child_environment(without=DROPPED, prefixes=DROPPED_PREFIXES, **SCRIPT_ENV)
    if database_url is not None:
        env["DATABASE_URL"] = database_url
    return env


def admin() -> psycopg.Connection:
    return psycopg.connect(server_url("postgres"), autocommit=True)


def run_bounded(command: list[str], env: dict[str, str], timeout: float) -> Outcome:
    """``command`` in its own session, killed with everything it started at ``timeout``."""
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=PROJECT_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # SIGTERM first, so the scripts' own clean-up (gunicorn, clusters) runs.
        os.killpg(process.pid, signal.SIGTERM)
        try:
            output, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        return Outcome(None, output, time.monotonic() - started)
    return Outcome(process.returncode, output, time.monotonic() - started)


def make_corpus(name: str) -> None:
    """Database ``name``: migrated, a 2,000-message corpus of seed 1 (one workspace of 20
    conversations) and 500 messages of ``bench/search_corpus.sql``, statistics gathered."""
    with admin() as server:
        server.execute(f'CREATE DATABASE "{name}"')
    url = server_url(name)
    manage = [sys.executable, "manage.py"]
    corpus = ("--messages", "2000", "--workspaces", "1", "--conversations", "20", "--seed", "1")
    psql = str(embedded_postgres.find_bindir() / "psql")
    for command in (
        [*manage, "migrate", "--verbosity", "0"],
        [*manage, "generate_corpus", *corpus],
        [psql, url, "--quiet", "-v", "messages=500", "-f", str(BENCH / "search_corpus.sql")],
    ):
        outcome = run_bounded(command, script_env(url), timeout=180)
        assert outcome.returncode == 0, outcome.output


def smoke(name: str, template: str) -> Outcome:
    """Script ``name`` run once against a clone of ``template`` (dropped afterwards)."""
    script = SCRIPTS[name]
    clone = f"{template}_{name}"
    url = None
    if script.database == "clone":
        with admin() as server:
            server.execute(f'CREATE DATABASE "{clone}" TEMPLATE "{template}"')
        url = server_url(clone)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-smoke-") as out:
            values = {"port": str(free_port()), "clone": clone, "out": out}
            args = [part.format(**values) for part in script.args]
            command = [sys.executable, str(BENCH / args[0]), *args[1:]]
            return run_bounded(command, script_env(url), script.timeout)
    finally:
        if url is not None:
            with admin() as server:
                server.execute(f'DROP DATABASE IF EXISTS "{clone}" WITH (FORCE)')


@pytest.fixture(scope="module")
def smoke_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[Outcome]]]:
    """The selected scripts' runs, started together on first use, the longest first (the
    order of ``SCRIPTS``); the corpus database they are cloned from is dropped at the end."""
    wanted = {
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    }
    template = f"formation_bench_smoke_{os.getpid()}"
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    runs: dict[str, Future[Outcome]] = {}
    try:
        # The scripts with no clone start while the corpus is made.
        for name in wanted:
            if SCRIPTS[name].database == "none":
                runs[name] = pool.submit(smoke, name, template)
        make_corpus(template)
        for name in SCRIPTS:
            if name in wanted and name not in runs:
                runs[name] = pool.submit(smoke, name, template)
        yield runs
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        with admin() as server:
            server.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_script_runs_at_a_tiny_size(name: str, smoke_runs: dict[str, Future[Outcome]]) -> None:
    script = SCRIPTS[name]
    outcome = smoke_runs[name].result()
    tail = outcome.output[-6000:]
    assert outcome.returncode is not None, f"{name} ran past {script.timeout:.0f} s:\n{tail}"
    assert outcome.returncode == 0, (
        f"{name} exited {outcome.returncode} after {outcome.seconds:.0f} s:\n{tail}"
    )
    assert "Traceback" not in outcome.output, tail
    assert script.prints in outcome.output, f"{name} did not print {script.prints!r}:\n{tail}"


def test_citus_ops_imports_and_parses_its_arguments() -> None:
    """bench/citus_ops.py runs only on a Citus cluster (make citus-up): here, its module
    imports and its command line parses."""
    code = (
        "import sys; sys.path.insert(0, 'bench'); import citus_ops; "
        "a = citus_ops.arguments(['--messages', '1000', '--workspaces', '2', '--down', '1', "
        "'--transfer-mode', 'block_writes', '--port', '1']); "
        "print(a.messages, a.workspaces, a.down, a.transfer_mode, a.port, a.output)"
    )
    outcome = run_bounded([sys.executable, "-c", code], script_env(None), timeout=60)
    assert outcome.returncode == 0, outcome.output
    assert outcome.output.split() == ["1000", "2", "1.0", "block_writes", "1", "None"]


def test_every_file_of_bench_has_a_smoke_run() -> None:
    """A new script gets a smoke run here; a library of bench/ is run by the scripts named."""
    files = {path.name for path in BENCH.iterdir() if path.suffix in {".py", ".sql"}}
    scripts = {script.args[0] for script in SCRIPTS.values()}
    imported = {
        library
        for library, users in LIBRARIES.items()
        for user in users
        if re.search(
            rf"\b{re.escape(Path(library).stem)}\b", (BENCH / SCRIPTS[user].args[0]).read_text()
        )
    }
    assert files - {"__init__.py"} == scripts | set(LIBRARIES) | CITUS_ONLY
    assert imported == set(LIBRARIES)
