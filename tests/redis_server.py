"""A private redis-server for the tests, like the embedded PostgreSQL: Debian's ``redis-server``
on a Unix socket in a fresh folder (no TCP port, nothing saved to disk), stopped by its process
id. ``make test`` checks it is on ``PATH`` before it starts (``tests/prerequisites.py``) and
.ci/run installs the package; a test run without it fails with one sentence saying so."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.prerequisites import REDIS_SERVER, program

MISSING = (
    "redis-server is not installed: apt-get install redis-server (Debian's package; .ci/run "
    "installs it)."
)


def redis_server_program() -> str:
    found = program(REDIS_SERVER)
    if found is None:
        raise AssertionError(MISSING)
    return found


class RedisServer:
    """One running server: ``url`` for REDIS_URL, ``stop()`` to take it away mid-test."""

    def __init__(self, folder: Path) -> None:
        self.socket_path = folder / "redis.sock"
        self.url = f"unix://{self.socket_path}"
        self.process = subprocess.Popen(
            [
                redis_server_program(),
                "--port",
                "0",
                "--unixsocket",
                str(self.socket_path),
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_until_ready()

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "redis-server exited while starting"
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(str(self.socket_path))
                    probe.sendall(b"PING\r\n")
                    if probe.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not answer within 20 s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def running_redis() -> Iterator[RedisServer]:
    """A fresh server for the block (a short folder under /tmp: socket paths are limited)."""
    folder = Path(tempfile.mkdtemp(prefix="fredis-"))
    server = RedisServer(folder)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
