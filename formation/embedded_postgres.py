"""A private PostgreSQL cluster for development and tests, used when DATABASE_URL is unset.

The cluster lives in a git-ignored folder of the project (``.pg/``), listens only on a Unix
socket in that folder (no TCP port to collide with), and trusts local connections. Run as root,
initdb refuses to work, so the server runs as the unprivileged ``postgres`` user; when that user
cannot reach the project folder (a clone under a private home directory), the cluster moves to a
per-project folder under the system temp directory and says so.

Usage: ``python -m formation.embedded_postgres start|stop|status|url``, or
``python -m formation.embedded_postgres run -- COMMAND...`` to run a command with the cluster up
and stop it afterwards if it was not running before (``make test`` does).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
DATABASE_NAME = "formation"
SUPERUSER = "postgres"
PORT = int(os.environ.get("FORMATION_PG_PORT", "55432"))
SERVER_OS_USER = os.environ.get("FORMATION_PG_OS_USER", "postgres")
# Unix socket paths are limited to 107 bytes on Linux.
MAX_SOCKET_PATH = 100

# Settings for a small development/test cluster on a 2-core machine. synchronous_commit=off
# trades the last few hundred milliseconds of commits on a crash for faster tests; it never
# risks corruption. JIT only slows the short queries this service runs.
SERVER_SETTINGS = {
    "listen_addresses": "",
    "shared_buffers": "512MB",
    "work_mem": "16MB",
    "maintenance_work_mem": "256MB",
    "effective_cache_size": "4GB",
    "random_page_cost": "1.1",
    "synchronous_commit": "off",
    "jit": "off",
    "max_connections": "100",
    # Only the owner (and root) may connect: the cluster trusts whoever reaches the socket.
    "unix_socket_permissions": "0700",
    # Failing statements are not echoed into the server log: they carry message text.
    "log_min_error_statement": "panic",
    "log_error_verbosity": "terse",
    # Per-statement counts (bench/benchmark.py reads round trips per request from them),
    # BEGIN, COMMIT, SAVEPOINT and SET included.
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_utility": "on",
}

INSTALL_HINT = (
    "PostgreSQL's server programs (initdb, pg_ctl) were not found: install the PostgreSQL "
    "server package (Debian/Ubuntu: `apt-get install postgresql postgresql-contrib`; macOS: "
    "`brew install postgresql@15`), or set DATABASE_URL to an existing PostgreSQL database."
)


class EmbeddedPostgresError(RuntimeError):
    """A problem starting the embedded cluster, worded for the person at the terminal."""


@dataclass(frozen=True)
class Cluster:
    base_dir: Path
    bindir: Path
    moved_to_temp: bool

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "run"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "log" / "postgresql.log"

    def connection_settings(self) -> dict[str, object]:
        """The Django DATABASES entry for this cluster."""
        return {
            "ENGINE": "formation.postgresql",
            "NAME": DATABASE_NAME,
            "USER": SUPERUSER,
            "PASSWORD": "",
            "HOST": str(self.socket_dir),
            "PORT": str(PORT),
        }

    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@/{DATABASE_NAME}?host={self.socket_dir}&port={PORT}"


def _running_as_root() -> bool:
    return os.geteuid() == 0


def find_bindir() -> Path:
    """Locate initdb/pg_ctl: FORMATION_PG_BINDIR, pg_config, then the usual package folders."""
    candidates: list[Path] = []
    if explicit := os.environ.get("FORMATION_PG_BINDIR"):
        candidates.append(Path(explicit))
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            candidates.append(Path(out))
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(debian)
    candidates.extend([Path("/usr/local/pgsql/bin"), Path("/opt/homebrew/bin"), Path("/usr/bin")])
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    raise EmbeddedPostgresError(INSTALL_HINT)


def _server_user_can_reach(path: Path) -> bool:
    """True when the server's OS user can traverse into ``path`` (only matters as root)."""
    if not _running_as_root():
        return True
    result = subprocess.run(
        ["runuser", "-u", SERVER_OS_USER, "--", "test", "-x", str(path), "-a", "-r", str(path)],
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def locate(bindir: Path | None = None) -> Cluster:
    """Where the cluster lives: the project's .pg folder, or a per-project temp folder."""
    bindir = bindir or find_bindir()
    preferred = PROJECT_DIR / ".pg"
    socket_path = preferred / "run" / f".s.PGSQL.{PORT}"
    if len(str(socket_path)) <= MAX_SOCKET_PATH and _server_user_can_reach(PROJECT_DIR):
        return Cluster(base_dir=preferred, bindir=bindir, moved_to_temp=False)
    digest = hashlib.sha256(str(PROJECT_DIR).encode()).hexdigest()[:12]
    fallback = Path(tempfile.gettempdir()) / f"formation-pg-{digest}"
    return Cluster(base_dir=fallback, bindir=bindir, moved_to_temp=True)


def _as_server_user(command: list[str]) -> list[str]:
    if _running_as_root():
        return ["runuser", "-u", SERVER_OS_USER, "--", *command]
    return command


def _run(command: list[str], what: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        _as_server_user(command), capture_output=True, text=True, check=False, timeout=120
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise EmbeddedPostgresError(f"{what} failed: " + " / ".join(detail))
    return result


def _server_uid() -> int:
    import pwd

    return pwd.getpwnam(SERVER_OS_USER).pw_uid if _running_as_root() else os.geteuid()


def _private_dir(path: Path, *, mode: int, owner_uid: int) -> None:
    """Create ``path`` or accept it only as a real folder owned by us or the server user.

    The temp-folder fallback has a predictable name, so another local user could plant a
    symlink or a folder there first; following it as root would chown whatever it points at.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in {os.geteuid(), owner_uid}:
        raise EmbeddedPostgresError(
            f"{path} exists but is not a folder owned by this user or {SERVER_OS_USER!r}; "
            "remove it or set DATABASE_URL."
        )
    if info.st_uid != owner_uid:
        os.chown(path, owner_uid, -1, follow_symlinks=False)
    os.chmod(path, mode, follow_symlinks=False)


@contextlib.contextmanager
def _locked(cluster: Cluster) -> Iterator[None]:
    """Serialise set-up between processes (pytest, runserver and manage.py starting at once)."""
    cluster.base_dir.parent.mkdir(parents=True, exist_ok=True)
    # As root the base stays root's but lets the server user traverse into its own folders.
    _private_dir(
        cluster.base_dir, mode=0o711 if _running_as_root() else 0o700, owner_uid=os.geteuid()
    )
    with open(cluster.base_dir / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _prepare_dirs(cluster: Cluster) -> None:
    owner = _server_uid()
    for folder in (cluster.data_dir, cluster.socket_dir, cluster.log_file.parent):
        _private_dir(folder, mode=0o700, owner_uid=owner)


def _say(message: str) -> None:
    print(f"[embedded postgres] {message}", file=sys.stderr)


def is_running(cluster: Cluster) -> bool:
    if not (cluster.data_dir / "postmaster.pid").exists():
        return False
    result = subprocess.run(
        _as_server_user([str(cluster.bindir / "pg_ctl"), "status", "-D", str(cluster.data_dir)]),
        capture_output=True,
        check=False,
    )
    return result.returncode == 0


def _socket_present(cluster: Cluster) -> bool:
    return (cluster.socket_dir / f".s.PGSQL.{PORT}").exists()


def ensure_running() -> Cluster:
    """Initialise (once) and start (if needed) the cluster; safe to call any number of times."""
    if _running_as_root() and shutil.which("runuser") is None:
        raise EmbeddedPostgresError(
            "Running as root needs `runuser` (util-linux) to drop to postgres."
        )
    cluster = locate()
    if _socket_present(cluster) and is_running(cluster):
        return cluster
    if _running_as_root():
        try:
            import pwd

            pwd.getpwnam(SERVER_OS_USER)
        except KeyError as missing:
            raise EmbeddedPostgresError(
                f"Running as root, the embedded cluster needs an OS user {SERVER_OS_USER!r} "
                "(the PostgreSQL server package creates it), or set DATABASE_URL."
            ) from missing
    with _locked(cluster):
        if is_running(cluster):
            return cluster
        _prepare_dirs(cluster)
        if cluster.moved_to_temp:
            _say(
                f"the project folder is not reachable by user {SERVER_OS_USER!r} or its path is "
                f"too long for a socket; the cluster lives in {cluster.base_dir}"
            )
        if not (cluster.data_dir / "PG_VERSION").exists():
            _say(f"initialising a private cluster in {cluster.data_dir}")
            initdb(cluster.bindir, cluster.data_dir)
        options = server_options(cluster.socket_dir, PORT)
        _say(f"starting PostgreSQL on socket {cluster.socket_dir} (log: {cluster.log_file})")
        _run(
            [
                str(cluster.bindir / "pg_ctl"),
                "start",
                "-D",
                str(cluster.data_dir),
                "-l",
                str(cluster.log_file),
                "-w",
                "-t",
                "60",
                "-o",
                options,
            ],
            "pg_ctl start",
        )
        _ensure_database(cluster)
    return cluster


def initdb(bindir: Path, data_dir: Path) -> None:
    """A new cluster in ``data_dir``: trust on the local socket, UTF-8, the C.UTF-8 locale."""
    _run(
        [
            str(bindir / "initdb"),
            *("-D", str(data_dir), "-A", "trust", "-U", SUPERUSER),
            *("-E", "UTF8", "--locale=C.UTF-8"),
        ],
        "initdb",
    )


def server_options(socket_dir: Path, port: int) -> str:
    """``pg_ctl -o``: the socket folder, the port and ``SERVER_SETTINGS``."""
    return f"-p {port} -k {socket_dir} " + " ".join(
        f"-c {name}={value!r}" if value == "" else f"-c {name}={value}"
        for name, value in SERVER_SETTINGS.items()
    )


def _ensure_database(cluster: Cluster) -> None:
    import psycopg

    with psycopg.connect(
        host=str(cluster.socket_dir), port=PORT, user=SUPERUSER, dbname="postgres", autocommit=True
    ) as connection:
        exists = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE_NAME]
        ).fetchone()
        if not exists:
            connection.execute(f'CREATE DATABASE "{DATABASE_NAME}"')


def stop() -> bool:
    """Stop the cluster if it runs; returns whether it was running."""
    cluster = locate()
    if not is_running(cluster):
        return False
    _run(
        [str(cluster.bindir / "pg_ctl"), "stop", "-D", str(cluster.data_dir), "-m", "fast"], "stop"
    )
    return True


def run_with_cluster(command: list[str]) -> int:
    """Run ``command`` with the cluster up; stop it afterwards only if this call started it.

    So a test run leaves the machine as it found it: a cluster that ``make db-start`` or
    ``make run`` started stays up, one the tests needed is stopped again. With DATABASE_URL set
    there is no cluster to manage and the command just runs.
    """
    if os.environ.get("DATABASE_URL"):
        return subprocess.run(command, check=False).returncode
    was_running = is_running(locate())
    ensure_running()
    try:
        return subprocess.run(command, check=False).returncode
    finally:
        if not was_running:
            stop()
            _say("stopped the cluster again (it was not running before)")


USAGE = (
    "usage: python -m formation.embedded_postgres start|stop|status|url\n"
    "       python -m formation.embedded_postgres run -- COMMAND..."
)


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "status"
    try:
        if command == "run":
            rest = argv[3:] if argv[2:3] == ["--"] else argv[2:]
            if not rest:
                print(USAGE)
                return 2
            return run_with_cluster(rest)
        if command == "start":
            cluster = ensure_running()
            print(f"running: {cluster.url()}")
        elif command == "stop":
            print("stopped" if stop() else "not running")
        elif command == "status":
            cluster = locate()
            print(f"{'running' if is_running(cluster) else 'stopped'}: {cluster.base_dir}")
        elif command == "url":
            print(locate().url())
        else:
            print(USAGE)
            return 2
    except EmbeddedPostgresError as problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
