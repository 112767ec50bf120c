"""More slow and hanging clients than gunicorn has threads, against the production configuration
(formation/gunicorn_conf.py, 2 workers of 4 threads) on a real socket: the probe and the API still
answer within a second, and the server cuts each slow client off at its deadline.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from gunicorn.asgi.protocol import BodyReceiver
from gunicorn.config import Config

from formation.serving import (
    ABORT_EXTENSION,
    BodyBuffer,
    BoundedProtocol,
    BoundedRequests,
    ServingLimits,
)
from messages_app import services
from messages_app.models import TokenKind
from tests import factories
from tests.test_serving import PROJECT_DIR, database_url, production_env

WORKERS, THREADS = 2, 4
# Each deadline is configured to this; the probes run while every slow client is still held.
DEADLINE = 3.0
# How late after its deadline a slow client may be cut off on a loaded 2-core machine.
LATE = 5.0
EACH_KIND = 3  # five kinds: 15 clients against 8 threads
# An answer far larger than what the kernel buffers for a client that reads nothing (~3 MB).
BIG_ANSWER_MESSAGES, BIG_MESSAGE_CHARS = 50, 100_000
# Bodies trickled this fast: some of these clients have a byte read in the very loop turn in
# which their deadline passes, nearly every run.
TRICKLERS, TRICKLE_EVERY = 40, 0.005


@dataclass
class Outcome:
    closed_at: float | None  # time.monotonic() when the server closed the connection
    received: bytes = b""


@dataclass
class Scene:
    port: int
    base_url: str
    room_id: str
    big_room_id: str
    agent_token: str
    service_token: str
    tmp_path: Path

    def log(self) -> str:
        return gunicorn_log(self.tmp_path)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def scene(transactional_db, tmp_path: Path) -> Iterator[Scene]:
    """Committed data, and gunicorn started as ``make serve`` starts it."""
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    room = factories.make_conversation(workspace)
    big_room = factories.make_conversation(workspace)
    for conversation in (room, big_room):
        factories.join(conversation, agent)
        factories.join(conversation, alice)
    factories.post(room, alice, "sample status")
    services.messages_create(
        conversation=big_room,
        drafts=[
            services.MessageDraft(
                content="sample " * (BIG_MESSAGE_CHARS // 7), sender_account_id=alice.id
            )
            for _ in range(BIG_ANSWER_MESSAGES)
        ],
    )
    _, agent_token = services.token_create(
        workspace_id=workspace.id, kind=TokenKind.AGENT, agent=agent
    )
    _, service_token = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)

    deadline = str(int(DEADLINE))
    with running_gunicorn(
        tmp_path,
        WEB_CONCURRENCY=str(WORKERS),
        GUNICORN_THREADS=str(THREADS),
        REQUEST_HEADER_TIMEOUT=deadline,
        REQUEST_BODY_TIMEOUT=deadline,
        RESPONSE_SEND_TIMEOUT=deadline,
    ) as (_, port):
        base_url = f"http://127.0.0.1:{port}"
        yield Scene(
            port, base_url, str(room.id), str(big_room.id), agent_token, service_token, tmp_path
        )


@contextmanager
def running_gunicorn(tmp_path: Path, **env: str) -> Iterator[tuple[subprocess.Popen, int]]:
    """gunicorn started as ``make serve`` starts it, on a free port, with ``env`` on top of the
    production environment; yields the process and the port once ``/healthz`` answers.

    It logs at INFO to ``tmp_path / "gunicorn.log"`` (workers booting and listening, each
    refusal and each request), which ``gunicorn_log`` puts in a failed assertion's message.
    """
    port = free_port()
    environment = production_env(
        DATABASE_URL=database_url(),
        GUNICORN_BIND=f"127.0.0.1:{port}",
        LOG_LEVEL="INFO",
        **env,
    )
    gunicorn = Path(sys.executable).with_name("gunicorn")
    with (tmp_path / "gunicorn.log").open("wb") as log:
        server = subprocess.Popen(
            [str(gunicorn), "--config", "python:formation.gunicorn_conf"],
            cwd=PROJECT_DIR,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", server)
        yield server, port
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def gunicorn_log(tmp_path: Path, lines: int = 50) -> str:
    """The end of the log of ``running_gunicorn``, so that a failure explains itself."""
    text = (tmp_path / "gunicorn.log").read_text(errors="replace")
    return "\ngunicorn.log, last lines:\n" + "\n".join(text.splitlines()[-lines:])


def wait_until_healthy(base_url: str, server: subprocess.Popen) -> None:
    started = time.monotonic()
    while time.monotonic() - started < 60:
        assert server.poll() is None, "gunicorn exited while starting"
        try:
            if httpx.get(f"{base_url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError("gunicorn did not answer /healthz within 60 s")


def trickle(sock: socket.socket, data: bytes, every: float = 0.3) -> Outcome:
    """Send ``data`` a byte every ``every`` seconds (then nothing), reading what comes back,
    until the server closes the connection."""
    give_up = time.monotonic() + DEADLINE + LATE + 2
    received = b""
    unsent = iter(data)
    sock.settimeout(every)
    while time.monotonic() < give_up:
        byte = next(unsent, None)
        try:
            if byte is not None:
                sock.send(bytes([byte]))
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            return Outcome(time.monotonic(), received)
        received += chunk
    return Outcome(None, received)


def never_read(sock: socket.socket) -> Outcome:
    """Read nothing of the answer; the server's reset shows up as the socket's pending error."""
    give_up = time.monotonic() + DEADLINE + LATE + 2
    while time.monotonic() < give_up:
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            return Outcome(time.monotonic())
        time.sleep(0.05)
    return Outcome(None)


HOST = "Host: 127.0.0.1\r\n"


def post_head(room_id: str, service_token: str) -> str:
    """A message post's request line and headers, but for the body's framing and the blank line."""
    return (
        f"POST /api/v1/conversations/{room_id}/messages HTTP/1.1\r\n{HOST}"
        f"Authorization: Bearer {service_token}\r\nContent-Type: application/json\r\n"
    )


def slow_clients(scene: Scene) -> dict[str, Callable[[socket.socket], Outcome]]:
    """Each kind: what it sends at once, then how it hangs."""
    post = post_head(scene.room_id, scene.service_token)
    return {
        "silent": lambda sock: trickle(sock, b""),
        "slow headers": lambda sock: trickle(
            sock, f"GET /healthz HTTP/1.1\r\n{HOST}X-Padding: {'p' * 100}".encode()
        ),
        "slow body": lambda sock: (
            sock.sendall(f'{post}Content-Length: 5000\r\n\r\n{{"content": "'.encode()),
            trickle(sock, b"a" * 100),
        )[1],
        "unfinished chunked body": lambda sock: (
            sock.sendall(f'{post}Transfer-Encoding: chunked\r\n\r\n5\r\n{{"con\r\n'.encode()),
            trickle(sock, b""),
        )[1],
        "unread answer": lambda sock: (
            sock.sendall(
                f"GET /api/v1/messages?conversationId={scene.big_room_id}&limit=200 HTTP/1.1\r\n"
                f"{HOST}Authorization: Bearer {scene.agent_token}\r\n\r\n".encode()
            ),
            never_read(sock),
        )[1],
    }


def timed_get(url: str, **headers: str) -> tuple[int, float]:
    started = time.monotonic()
    response = httpx.get(url, headers=headers, timeout=10)
    return response.status_code, time.monotonic() - started


@pytest.mark.django_db(transaction=True)
def test_more_slow_clients_than_threads_neither_stop_the_probe_and_api_nor_stay(scene):
    outcomes: dict[str, Outcome] = {}
    connected_at: dict[str, float] = {}
    threads = []
    for kind, hang in slow_clients(scene).items():
        for index in range(EACH_KIND):
            sock = socket.socket()
            # A small window, so the kernel takes little of the unread answer off the server.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", scene.port))
            name = f"{kind} {index}"
            connected_at[name] = time.monotonic()

            def run(sock: socket.socket = sock, hang=hang, name: str = name) -> None:
                with sock:
                    outcomes[name] = hang(sock)

            threads.append(threading.Thread(target=run, daemon=True))
    assert len(threads) > WORKERS * THREADS
    for thread in threads:
        thread.start()

    # Every slow client has sent what it sends at once and hangs until its DEADLINE.
    time.sleep(0.3)
    probes = []
    api = f"{scene.base_url}/api/v1/messages?conversationId={scene.room_id}"
    while len(probes) < 6 or time.monotonic() - min(connected_at.values()) < DEADLINE - 1:
        probes.append(timed_get(f"{scene.base_url}/healthz"))
        probes.append(timed_get(api, Authorization=f"Bearer {scene.agent_token}"))
        time.sleep(0.2)
    assert [status for status, _ in probes] == [200] * len(probes), (probes, scene.log())
    assert max(seconds for _, seconds in probes) < 1.0, (probes, scene.log())

    for thread in threads:
        thread.join(timeout=DEADLINE + LATE + 5)
    assert len(outcomes) == len(threads), (sorted(outcomes), scene.log())
    assert_cut_off_at_deadline(outcomes, connected_at, scene.log)
    assert httpx.get(f"{scene.base_url}/healthz", timeout=5).status_code == 200, scene.log()


def assert_cut_off_at_deadline(
    outcomes: dict[str, Outcome], connected_at: dict[str, float], log: Callable[[], str]
) -> None:
    """Every client was cut off at its deadline, not before it (by chance) nor long after it,
    and one that sent a body got the 408; the message names each client that was not."""
    failures = []
    for name, outcome in sorted(outcomes.items()):
        if outcome.closed_at is None:
            failures.append(f"{name} was never cut off (received {outcome.received[:40]!r})")
            continue
        held = outcome.closed_at - connected_at[name]
        if not DEADLINE - 0.1 <= held <= DEADLINE + LATE:
            failures.append(f"{name} was cut off after {held:.2f} s ({outcome.received[:40]!r})")
        if name.startswith(("slow body", "unfinished chunked body")):
            if not outcome.received.startswith(b"HTTP/1.1 408 "):
                failures.append(f"{name} got no 408: {outcome.received[:40]!r}")
        elif not name.startswith("unread answer") and outcome.received != b"":
            failures.append(f"{name} got an answer: {outcome.received[:40]!r}")
    assert not failures, "\n".join(failures) + log()


@pytest.mark.django_db(transaction=True)
def test_bodies_trickled_a_byte_every_few_milliseconds_all_get_their_408_at_the_deadline(
    tmp_path: Path,
):
    """A byte read in the loop turn in which a body's deadline passed used to cancel that
    deadline's effect (see the in-process test below): the client was never answered."""
    workspace = factories.make_workspace()
    room = factories.make_conversation(workspace)
    _, service_token = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    head = f"{post_head(str(room.id), service_token)}Content-Length: 100000\r\n\r\n".encode()
    outcomes: dict[str, Outcome] = {}
    connected_at: dict[str, float] = {}
    with running_gunicorn(
        tmp_path,
        WEB_CONCURRENCY=str(WORKERS),
        GUNICORN_THREADS=str(THREADS),
        REQUEST_BODY_TIMEOUT=str(int(DEADLINE)),
    ) as (_, port):

        def run(name: str) -> None:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                connected_at[name] = time.monotonic()
                sock.sendall(head)
                outcomes[name] = trickle(sock, b"a" * 5000, every=TRICKLE_EVERY)

        threads = [
            threading.Thread(target=run, args=(f"slow body {index}",), daemon=True)
            for index in range(TRICKLERS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=DEADLINE + LATE + 5)
        log = functools.partial(gunicorn_log, tmp_path)
        assert len(outcomes) == TRICKLERS, (sorted(outcomes), log())
        assert_cut_off_at_deadline(outcomes, connected_at, log)


# --- BoundedRequests in process ------------------------------------------------------------------

LIMITS = ServingLimits(
    header_timeout=1,
    body_timeout=0.2,
    send_timeout=0.2,
    max_body_bytes=100,
    body_buffer_bytes=150,
    stream_threshold_bytes=10,
    stream_timeout=0.5,
    streams_per_worker=1,
)


def http_scope(*headers: tuple[bytes, bytes], aborted: list[bool] | None = None) -> dict:
    extensions = {ABORT_EXTENSION: lambda: aborted.append(True)} if aborted is not None else {}
    return {"type": "http", "method": "POST", "headers": list(headers), "extensions": extensions}


def body_of(*chunks: bytes, then_wait: bool = False):
    """A client's ``receive``: these chunks, then (``then_wait``) nothing more, ever."""
    pending = list(chunks)

    async def receive() -> dict:
        if pending:
            return {"type": "http.request", "body": pending.pop(0), "more_body": True}
        if then_wait:
            await asyncio.Event().wait()
        return {"type": "http.request", "body": b"", "more_body": False}

    return receive


class RecordingApp:
    """The application: records what it was given and answers 200."""

    def __init__(self, release: asyncio.Event | None = None) -> None:
        self.calls: list[tuple[dict, bytes]] = []
        self.release = release

    async def __call__(self, scope, receive, send) -> None:
        message = await receive()
        self.calls.append((scope, message["body"]))
        if self.release is not None:
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def collector(sent: list[dict]):
    async def send(message: dict) -> None:
        sent.append(message)

    return send


def refusal_of(sent: list[dict]) -> tuple[int, dict]:
    return sent[0]["status"], json.loads(sent[1]["body"])["error"]


def test_the_application_gets_the_whole_body_at_once_and_a_chunked_one_with_its_length():
    app, sent = RecordingApp(), []
    scope = http_scope((b"transfer-encoding", b"chunked"), (b"x-other", b"kept"))
    asyncio.run(BoundedRequests(app, LIMITS)(scope, body_of(b"ab", b"cd"), collector(sent)))
    ((seen_scope, body),) = app.calls
    assert body == b"abcd"
    assert seen_scope["headers"] == [(b"x-other", b"kept"), (b"content-length", b"4")]
    assert [message.get("status") for message in sent] == [200, None]
    assert BodyBuffer.held == 0


def test_a_body_over_the_limit_reaches_the_application_cut_one_byte_past_it():
    """The application refuses it, as it did before; the rest is never read or held."""
    app = RecordingApp()
    asyncio.run(
        BoundedRequests(app, LIMITS)(http_scope(), body_of(b"a" * 90, b"b" * 90), collector([]))
    )
    assert app.calls[0][1] == b"a" * 90 + b"b" * 11


def test_a_body_not_in_by_its_deadline_is_408_without_the_application():
    app, sent = RecordingApp(), []
    asyncio.run(
        BoundedRequests(app, LIMITS)(http_scope(), body_of(b"a", then_wait=True), collector(sent))
    )
    assert app.calls == []
    assert refusal_of(sent) == (
        408,
        {
            "code": "request_timeout",
            "message": "The request body did not arrive in time.",
            "details": {},
        },
    )
    assert BodyBuffer.held == 0


def test_a_body_byte_read_as_the_deadline_passes_does_not_cancel_the_408():
    """The loop is busy past the deadline, and the next byte is read in the same turn. gunicorn's
    receive waits in ``asyncio.wait_for``, which on Python 3.11 then swallows the cancellation
    by which ``asyncio.timeout`` kept the deadline: the body went on being received, unbounded,
    and the client never got its answer."""

    async def scenario() -> tuple[list[dict], float]:
        loop = asyncio.get_running_loop()
        protocol = SimpleNamespace(
            _closed=False, cfg=SimpleNamespace(timeout=30), _maybe_resume_reading=lambda: None
        )
        receiver = BodyReceiver(SimpleNamespace(content_length=50, chunked=False), protocol)

        def busy_past_the_deadline_then_a_byte() -> None:
            time.sleep(LIMITS.body_timeout)
            receiver.feed(b"a")

        loop.call_later(LIMITS.body_timeout / 2, busy_past_the_deadline_then_a_byte)
        app, sent, started = RecordingApp(), [], loop.time()
        request = asyncio.ensure_future(
            BoundedRequests(app, LIMITS)(http_scope(), receiver.receive, collector(sent))
        )
        await asyncio.wait([request], timeout=10 * LIMITS.body_timeout)
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
        assert app.calls == []
        return sent, loop.time() - started

    sent, seconds = asyncio.run(scenario())
    assert [message.get("status") for message in sent] == [408, None]
    # At once: the byte was read past the deadline.
    assert seconds < 2 * LIMITS.body_timeout
    assert BodyBuffer.held == 0


def test_bodies_past_the_worker_buffer_are_503_until_the_held_ones_are_answered():
    async def scenario() -> tuple[list[dict], list[dict]]:
        release = asyncio.Event()
        middleware = BoundedRequests(RecordingApp(release), LIMITS)
        first, second = [], []
        holding = asyncio.create_task(
            middleware(http_scope(), body_of(b"a" * 100), collector(first))
        )
        while BodyBuffer.held < 100:
            await asyncio.sleep(0)
        await middleware(http_scope(), body_of(b"b" * 60), collector(second))
        release.set()
        await holding
        return first, second

    first, second = asyncio.run(scenario())
    assert refusal_of(second)[:1] == (503,)
    assert refusal_of(second)[1]["code"] == "unavailable"
    assert first[0]["status"] == 200
    assert BodyBuffer.held == 0


def test_an_answer_not_taken_by_its_deadline_aborts_the_connection():
    async def stalled_send(message: dict) -> None:
        if message["type"] == "http.response.body":
            await asyncio.Event().wait()

    aborted: list[bool] = []
    asyncio.run(
        BoundedRequests(RecordingApp(), LIMITS)(
            http_scope(aborted=aborted), body_of(), stalled_send
        )
    )
    assert aborted == [True]


class UnreadTransport:
    """A transport whose client reads nothing: asyncio still holds bytes when it is closed."""

    def __init__(self) -> None:
        self.closed = self.aborted = False

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 10_000

    def get_extra_info(self, name: str) -> None:
        return None

    def abort(self) -> None:
        self.aborted = True


def test_a_connection_closed_with_unsent_bytes_is_reset_after_the_send_deadline():
    """asyncio would keep it open until the client reads, that is forever."""

    async def scenario() -> UnreadTransport:
        worker = SimpleNamespace(
            cfg=Config(), log=logging.getLogger("test"), asgi=None, loop=asyncio.get_running_loop()
        )
        worker.limits = LIMITS
        protocol = BoundedProtocol(worker)
        transport = protocol.transport = UnreadTransport()
        protocol._close_transport()
        assert transport.closed
        assert not transport.aborted
        await asyncio.sleep(LIMITS.send_timeout + 0.1)
        return transport

    assert asyncio.run(scenario()).aborted
