"""A local Citus cluster for development and the Citus tests: a coordinator and two workers.

Each node is its own PostgreSQL cluster under the git-ignored ``.citus/`` folder, started with
``shared_preload_libraries=citus``, listening only on a Unix socket in ``.citus/run`` on a port
of its own (``FORMATION_CITUS_PORT``, default 55440, is the coordinator; the workers follow).
Nodes reach each other through that socket folder, which Citus accepts as a node name. The
service needs nothing Citus-specific: ``DATABASE_URL`` points at a database on the coordinator.

Usage: ``python -m formation.citus_cluster up|down|status|url [DATABASE]|reset-test-database|
add-worker|stop-worker N|start-worker N``. ``up`` is idempotent: it initialises and starts what
is missing, creates the application database (``formation``) and the test database
(``formation_test``) on every node with the extension, registers the workers, and prints the
application database's URL as its last line. ``make citus-up`` builds Citus first when it is
missing (``.ci/build-citus``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from formation import embedded_postgres as pg

BASE_DIR = pg.PROJECT_DIR / ".citus"
SOCKET_DIR = BASE_DIR / "run"
COORDINATOR_PORT = int(os.environ.get("FORMATION_CITUS_PORT", "55440"))
DATABASES = ("formation", "formation_test")
WORKERS = 2
MAX_WORKERS = 4

# The embedded cluster's settings, with Citus loaded first (it must be) and room for the
# connections Citus opens between nodes: a coordinator runs a router query over one cached
# connection per worker, and the tests run eight threads at once.
SERVER_SETTINGS = {
    **pg.SERVER_SETTINGS,
    "shared_buffers": "256MB",
    "max_connections": "200",
    "shared_preload_libraries": "citus,pg_stat_statements",
    "max_prepared_transactions": "100",
    "citus.max_cached_conns_per_worker": "2",
    # Shards move online (citus_rebalance_start) by logical replication, from background
    # tasks that reach their own node by citus.local_hostname: the socket folder, not TCP.
    "wal_level": "logical",
    "citus.local_hostname": str(SOCKET_DIR),
    # A worker that does not answer fails the request in seconds (503), not after 30.
    "citus.node_connection_timeout": "5000",
    # The projection and lineage triggers run on the shard of the row that fired them and
    # write only rows of the same workspace, so the same shard group (docs/citus.md).
    "citus.enable_unsafe_triggers": "on",
}


class CitusClusterError(RuntimeError):
    """A problem with the local Citus cluster, worded for the person at the terminal."""


@dataclass(frozen=True)
class Node:
    name: str
    port: int

    @property
    def data_dir(self) -> Path:
        return BASE_DIR / self.name

    @property
    def log_file(self) -> Path:
        return BASE_DIR / "log" / f"{self.name}.log"


def coordinator() -> Node:
    return Node("coordinator", COORDINATOR_PORT)


def worker(number: int) -> Node:
    return Node(f"worker{number}", COORDINATOR_PORT + number)


def url(database: str = DATABASES[0]) -> str:
    return f"postgresql://{pg.SUPERUSER}@/{database}?host={SOCKET_DIR}&port={COORDINATOR_PORT}"


def _say(message: str) -> None:
    print(f"[citus] {message}", file=sys.stderr)


def _connect(node: Node, database: str = "postgres"):
    import psycopg

    return psycopg.connect(
        host=str(SOCKET_DIR), port=node.port, user=pg.SUPERUSER, dbname=database, autocommit=True
    )


def _is_running(bindir: Path, node: Node) -> bool:
    if not (node.data_dir / "postmaster.pid").exists():
        return False
    result = subprocess.run(
        pg._as_server_user([str(bindir / "pg_ctl"), "status", "-D", str(node.data_dir)]),
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def _citus_installed(bindir: Path) -> bool:
    sharedir = subprocess.run(
        [str(bindir / "pg_config"), "--sharedir"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return bool(sharedir) and (Path(sharedir) / "extension" / "citus.control").exists()


def _server_options(node: Node) -> str:
    return f"-p {node.port} -k {SOCKET_DIR} " + " ".join(
        f"-c {name}={value!r}" if value == "" else f"-c {name}={value}"
        for name, value in SERVER_SETTINGS.items()
    )


def start_node(bindir: Path, node: Node) -> None:
    """Initialise (once) and start one node; nothing happens if it already runs."""
    if _is_running(bindir, node):
        return
    owner = pg._server_uid()
    for folder in (BASE_DIR / "log", SOCKET_DIR):
        pg._private_dir(folder, mode=0o700, owner_uid=owner)
    pg._private_dir(node.data_dir, mode=0o700, owner_uid=owner)
    if not (node.data_dir / "PG_VERSION").exists():
        _say(f"initialising {node.name} in {node.data_dir}")
        pg.initdb(bindir, node.data_dir)
    _say(f"starting {node.name} on port {node.port}")
    pg._run(
        [
            str(bindir / "pg_ctl"),
            *("start", "-D", str(node.data_dir), "-l", str(node.log_file)),
            *("-w", "-t", "60", "-o", _server_options(node)),
        ],
        f"pg_ctl start ({node.name})",
    )


def stop_node(bindir: Path, node: Node) -> bool:
    if not _is_running(bindir, node):
        return False
    pg._run(
        [str(bindir / "pg_ctl"), "stop", "-D", str(node.data_dir), "-m", "fast"],
        f"pg_ctl stop ({node.name})",
    )
    return True


def _has_extension(connection, name: str) -> bool:
    return bool(
        connection.execute("SELECT 1 FROM pg_extension WHERE extname = %s", [name]).fetchone()
    )


def _prepare_database(nodes: list[Node], database: str) -> None:
    """The database with the extension on every node, and the workers registered in it."""
    for node in nodes:
        with _connect(node) as connection:
            exists = connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [database]
            ).fetchone()
            if not exists:
                connection.execute(f'CREATE DATABASE "{database}"')
        with _connect(node, database) as connection:
            if not _has_extension(connection, "citus"):
                connection.execute("CREATE EXTENSION citus")
    head, *workers = nodes
    with _connect(head, database) as connection:
        # Created on the coordinator, an extension reaches the workers with the metadata.
        if not _has_extension(connection, "pg_stat_statements"):
            connection.execute("CREATE EXTENSION pg_stat_statements")
        connection.execute(
            "SELECT citus_set_coordinator_host(%s, %s)", [str(SOCKET_DIR), head.port]
        )
        registered = {
            port
            for (port,) in connection.execute(
                "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0"
            ).fetchall()
        }
        for node in workers:
            if node.port not in registered:
                connection.execute("SELECT citus_add_node(%s, %s)", [str(SOCKET_DIR), node.port])


def reset_test_database() -> None:
    """A fresh ``formation_test`` on every node (the Citus suite migrates it)."""
    nodes = [coordinator(), *registered_workers()]
    for node in nodes:
        with _connect(node) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{DATABASES[1]}" WITH (FORCE)')
    _prepare_database(nodes, DATABASES[1])


def registered_workers() -> list[Node]:
    """The workers the application database knows, beyond the default two included."""
    with _connect(coordinator(), DATABASES[0]) as connection:
        ports = [
            port
            for (port,) in connection.execute(
                "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 ORDER BY nodeport"
            ).fetchall()
        ]
    return [worker(port - COORDINATOR_PORT) for port in ports]


def up(workers: int = WORKERS) -> str:
    bindir = pg.find_bindir()
    if not _citus_installed(bindir):
        raise CitusClusterError(
            "Citus is not installed for this PostgreSQL: run `make citus-up` (it builds it with "
            ".ci/build-citus) or install Citus from its packages (docs/citus.md)."
        )
    pg._private_dir(
        BASE_DIR, mode=0o711 if pg._running_as_root() else 0o700, owner_uid=os.geteuid()
    )
    known = [coordinator(), *(worker(n) for n in range(1, workers + 1))]
    if (coordinator().data_dir / "PG_VERSION").exists():
        # Workers added later (add-worker) start with the others.
        extra = sorted(
            int(path.name.removeprefix("worker"))
            for path in BASE_DIR.glob("worker*")
            if path.name.removeprefix("worker").isdigit()
        )
        known += [worker(n) for n in extra if n > workers]
    for node in known:
        start_node(bindir, node)
    for database in DATABASES:
        _prepare_database(known, database)
    return url()


def add_worker() -> Node:
    """Start one more worker and register it (its shards come with a rebalance)."""
    bindir = pg.find_bindir()
    present = registered_workers()
    number = max((int(n.name.removeprefix("worker")) for n in present), default=0) + 1
    if number > MAX_WORKERS:
        raise CitusClusterError(f"At most {MAX_WORKERS} workers on one machine.")
    node = worker(number)
    start_node(bindir, node)
    for database in DATABASES:
        _prepare_database([coordinator(), *present, node], database)
    return node


def down() -> list[str]:
    bindir = pg.find_bindir()
    stopped = []
    nodes = [coordinator(), *(worker(n) for n in range(1, MAX_WORKERS + 1))]
    for node in reversed(nodes):
        if stop_node(bindir, node):
            stopped.append(node.name)
    return stopped


def status() -> list[str]:
    bindir = pg.find_bindir()
    nodes = [coordinator(), *(worker(n) for n in range(1, MAX_WORKERS + 1))]
    return [
        f"{node.name} (port {node.port}): {'running' if _is_running(bindir, node) else 'stopped'}"
        for node in nodes
        if node.data_dir.exists()
    ]


USAGE = (
    "usage: python -m formation.citus_cluster "
    "up|down|status|url [DATABASE]|reset-test-database|add-worker|stop-worker N|start-worker N"
)


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "status"
    try:
        if command == "up":
            print(up())
        elif command == "down":
            stopped = down()
            print(f"stopped {', '.join(stopped)}" if stopped else "not running")
        elif command == "status":
            print("\n".join(status()) or "no cluster")
        elif command == "url":
            print(url(argv[2] if len(argv) > 2 else DATABASES[0]))
        elif command == "reset-test-database":
            reset_test_database()
            print(url(DATABASES[1]))
        elif command == "add-worker":
            node = add_worker()
            print(f"{node.name} on port {node.port} registered")
        elif command in ("stop-worker", "start-worker") and len(argv) > 2 and argv[2].isdigit():
            node, bindir = worker(int(argv[2])), pg.find_bindir()
            if command == "stop-worker":
                print("stopped" if stop_node(bindir, node) else "not running")
            else:
                start_node(bindir, node)
                print("running")
        else:
            print(USAGE)
            return 2
    except (CitusClusterError, pg.EmbeddedPostgresError) as problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
