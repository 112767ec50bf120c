"""Streamed answers (exports) behind the production worker (formation/serving.py, ``Answer``).

In process, with the worker's thread pool (``WaitingWSGI``) and a WSGI application of counted
pieces: once an answer is
streamed, the application's thread produces only as fast as the client takes it, and a client
that stops taking it, or takes too long in all, gets its connection aborted while the thread
stops at its next piece. Against real gunicorn with the production configuration: a 100,000
message export whose worker's peak RSS grows by a fraction of the answer, an export left unread
that is cut at its deadline while the probe and the API keep answering, and more export clients
than the worker streams at once, which get a 503 before their first byte.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from gunicorn.asgi.protocol import FlowControl
from gunicorn.config import Config

from audit_app.models import LifecycleAction, LifecycleEvent, LifecycleOutcome
from formation.serving import (
    ABORT_EXTENSION,
    CLOSED_EXTENSION,
    Answer,
    BoundedProtocol,
    BoundedRequests,
    ServingLimits,
)
from formation.wsgi_threads import WaitingWSGI
from messages_app import services
from messages_app.models import TokenKind
from tests import factories
from tests import test_slow_clients as slow_clients
from tests.test_slow_clients import LATE, UnreadTransport, body_of, running_gunicorn, timed_get

PIECE = 100  # bytes a piece of the in-process application
LIMITS = dataclasses.replace(
    slow_clients.LIMITS, send_timeout=0.3, stream_threshold_bytes=10 * PIECE, stream_timeout=1.0
)


class Pieces:
    """A WSGI application answering ``count`` pieces of ``PIECE`` bytes: it counts the pieces
    it produced, and whether its iterable was closed (its thread stopped early or finished)."""

    def __init__(self, count: int, *, declared_length: bool = False) -> None:
        self.count = count
        self.declared_length = declared_length
        self.produced = 0
        self.closed = False

    def __call__(self, environ: dict, start_response) -> Iterator[bytes]:
        headers = [("Content-Type", "application/x-ndjson")]
        if self.declared_length:
            headers.append(("Content-Length", str(self.count * PIECE)))
        start_response("200 OK", headers)
        return self.pieces()

    def pieces(self) -> Iterator[bytes]:
        try:
            for _ in range(self.count):
                self.produced += 1
                yield b"x" * PIECE
        finally:
            self.closed = True


@dataclass
class Client:
    """A client's side of ``send``: it takes ``takes`` body bytes, then nothing more (as
    gunicorn's ``send`` waits on a client that stops reading), each after ``delay`` seconds."""

    takes: int = 10**9
    delay: float = 0.0
    gone_after: int | None = None  # body bytes after which the client disconnects
    status: int | None = None
    body: bytearray = dataclasses.field(default_factory=bytearray)
    aborted: bool = False

    async def send(self, message: dict) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            return
        if len(self.body) >= self.takes:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay)
        self.body.extend(message.get("body", b""))

    def scope(self) -> dict:
        def abort() -> None:
            self.aborted = True

        def closed() -> bool:
            return self.gone_after is not None and len(self.body) >= self.gone_after

        return {
            "type": "http",
            "method": "GET",
            "path": "/export",
            "root_path": "",
            "query_string": b"",
            "http_version": "1.1",
            "headers": [],
            "extensions": {ABORT_EXTENSION: abort, CLOSED_EXTENSION: closed},
        }


async def serve(app: Pieces, client: Client, limits: ServingLimits = LIMITS) -> float:
    """One request through ``BoundedRequests`` and ``WaitingWSGI``; the seconds it took."""
    started = time.monotonic()
    middleware = BoundedRequests(WaitingWSGI(app, workers=2), limits)
    await middleware(client.scope(), body_of(), client.send)
    return time.monotonic() - started


def test_a_streamed_answer_is_produced_only_as_fast_as_the_client_takes_it():
    """The client stops after 20 pieces: the thread waits on the 21st, and when its deadline
    passes the connection is aborted and the application stops there (collected whole, all
    10,000 pieces would have been produced)."""
    app, client = Pieces(10_000), Client(takes=20 * PIECE)
    seconds = asyncio.run(serve(app, client))

    assert client.status == 200
    assert len(client.body) == 20 * PIECE
    assert client.aborted
    assert app.closed
    assert app.produced <= 21
    assert LIMITS.send_timeout <= seconds < LIMITS.send_timeout + 1
    assert Answer.streams == 0


def test_a_stream_not_finished_by_its_overall_deadline_is_aborted():
    """Each piece is taken in time, but the whole would take 50 s."""
    app, client = Pieces(5_000), Client(delay=0.01)
    seconds = asyncio.run(serve(app, client))

    assert client.aborted
    assert app.closed
    assert app.produced < 5_000
    assert LIMITS.stream_timeout <= seconds < LIMITS.stream_timeout + 1


def test_a_client_gone_mid_stream_stops_the_application_at_its_next_piece():
    app, client = Pieces(10_000), Client(gone_after=30 * PIECE)
    seconds = asyncio.run(serve(app, client))

    assert len(client.body) == 30 * PIECE
    assert not client.aborted  # nothing to abort: gunicorn already closed it
    assert app.closed
    assert app.produced <= 31
    assert seconds < LIMITS.send_timeout


def test_a_request_given_up_on_while_it_waits_for_a_thread_never_runs():
    """gunicorn cancels a request's task when its client leaves or the worker stops: one still
    waiting for a thread is dropped, while the one already running finishes and is closed."""
    started: list[str] = []
    release = threading.Event()

    class Recorded(Pieces):
        def __call__(self, environ: dict, start_response) -> Iterator[bytes]:
            started.append(environ["PATH_INFO"])
            release.wait(5)
            return super().__call__(environ, start_response)

    app = Recorded(1)

    async def scenario() -> None:
        middleware = BoundedRequests(WaitingWSGI(app, workers=1), LIMITS)

        def request(path: str) -> asyncio.Task:
            client = Client()
            scope = {**client.scope(), "path": path}
            return asyncio.create_task(middleware(scope, body_of(), client.send))

        running = request("/running")
        await asyncio.sleep(0.1)
        waiting = request("/waiting")
        await asyncio.sleep(0.1)
        running.cancel()
        waiting.cancel()
        await asyncio.gather(running, waiting, return_exceptions=True)
        release.set()
        await asyncio.sleep(0.3)

    asyncio.run(scenario())
    assert started == ["/running"]
    assert app.closed


def test_a_send_waiting_on_a_client_that_leaves_is_woken():
    """gunicorn leaves it waiting for the buffer to drain, which it never will."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        worker = SimpleNamespace(cfg=Config(), log=logging.getLogger("test"), loop=loop)
        worker.asgi, worker.limits, worker.nr_conns = None, LIMITS, 1
        protocol = BoundedProtocol(worker)
        protocol._flow_control = FlowControl(UnreadTransport())
        protocol._flow_control.pause_writing()
        waiting = asyncio.create_task(protocol._flow_control.drain())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        protocol.connection_lost(None)
        await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


def test_past_the_worker_streams_a_stream_is_503_before_its_first_byte():
    async def scenario() -> tuple[Client, Client, Pieces]:
        holding, refused = Client(takes=15 * PIECE), Client()
        first = asyncio.create_task(serve(Pieces(10_000), holding))
        while Answer.streams == 0:
            await asyncio.sleep(0.01)
        app = Pieces(10_000)
        await serve(app, refused)
        await first
        return holding, refused, app

    holding, refused, app = asyncio.run(scenario())
    assert holding.status == 200
    assert holding.aborted
    assert refused.status == 503
    assert json.loads(refused.body)["error"] == {
        "code": "unavailable",
        "message": "The server is streaming too many answers; retry shortly.",
        "details": {},
    }
    assert not refused.aborted
    assert app.closed
    assert app.produced <= 12
    assert Answer.streams == 0


@pytest.mark.parametrize(
    ("count", "declared_length"),
    [(100, True), (1, False)],  # one piece, however large, was built whole
    ids=["declared length", "one piece"],
)
def test_answers_built_whole_are_collected_and_never_take_a_stream(count, declared_length):
    no_streams = dataclasses.replace(LIMITS, streams_per_worker=0)
    client = Client()
    asyncio.run(serve(Pieces(count, declared_length=declared_length), client, no_streams))
    assert (client.status, len(client.body), client.aborted) == (200, count * PIECE, False)


def test_streams_always_leave_a_thread_to_everything_else(settings):
    settings.RESPONSE_STREAMS_PER_WORKER = 2
    assert ServingLimits.from_settings(threads=4).streams_per_worker == 2
    assert ServingLimits.from_settings(threads=2).streams_per_worker == 1
    assert ServingLimits.from_settings(threads=1).streams_per_worker == 0


# --- production gunicorn --------------------------------------------------------------------------

BIG_EXPORT = 100_000  # messages, 34 MiB of JSON Lines
EXPORT = 30_000  # about 10 MiB: more than the kernel buffers for a client that reads nothing
DEADLINE = 3.0  # RESPONSE_SEND_TIMEOUT: each piece of a stream
# Measured: the worker's peak RSS grew by about 3 MiB over a 34 MiB export (collected, as
# before streaming, it grew by more than the answer). The bound leaves room for another
# allocator, not for holding a third of the answer.
RSS_GROWTH_BOUND = 12 * 1024 * 1024


@dataclass
class Exports:
    base_url: str
    port: int
    room_id: str
    big_room_id: str
    small_room_id: str
    agent_token: str
    service_token: str

    def export_request(self, room_id: str) -> bytes:
        return (
            f"GET /api/v1/conversations/{room_id}/export HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {self.service_token}\r\n\r\n"
        ).encode()

    def probe(self) -> list[tuple[int, float]]:
        api = f"{self.base_url}/api/v1/messages?conversationId={self.small_room_id}"
        return [
            timed_get(f"{self.base_url}/healthz"),
            timed_get(api, Authorization=f"Bearer {self.agent_token}"),
        ]


def export_world(*, big: bool = False) -> dict[str, str]:
    workspace = factories.make_workspace()
    agent = factories.make_agent(workspace)
    alice = factories.make_account(workspace, "Alice Example")
    room, big_room, small_room = (factories.make_conversation(workspace) for _ in range(3))
    factories.join(small_room, agent)
    factories.post(small_room, alice, "sample status")
    factories.fill_messages(room, alice.id, EXPORT)
    if big:
        factories.fill_messages(big_room, alice.id, BIG_EXPORT)
    _, agent_token = services.token_create(
        workspace_id=workspace.id, kind=TokenKind.AGENT, agent=agent
    )
    _, service_token = services.token_create(workspace_id=workspace.id, kind=TokenKind.SERVICE)
    return {
        "room_id": str(room.id),
        "big_room_id": str(big_room.id),
        "small_room_id": str(small_room.id),
        "agent_token": agent_token,
        "service_token": service_token,
    }


@pytest.fixture
def exports(transactional_db, tmp_path: Path, request) -> Iterator[tuple[Exports, int]]:
    """Committed exports (the 100,000 messages when ``request.param`` says ``big``) and
    gunicorn with its ``workers`` (the production configuration otherwise: 4 threads, one
    stream a worker) and 3 s piece deadlines; yields the master's pid too."""
    world = export_world(big=request.param.get("big", False))
    with running_gunicorn(
        tmp_path,
        WEB_CONCURRENCY=str(request.param["workers"]),
        RESPONSE_SEND_TIMEOUT=str(int(DEADLINE)),
    ) as (server, port):
        yield Exports(base_url=f"http://127.0.0.1:{port}", port=port, **world), server.pid


def worker_pids(master: int) -> list[int]:
    return [int(pid) for pid in Path(f"/proc/{master}/task/{master}/children").read_text().split()]


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def read_export(scene: Exports, room_id: str) -> tuple[int, list[int]]:
    """The export read to its end: its size and the first and last seq."""
    size, first, last = 0, b"", b""
    url = f"{scene.base_url}/api/v1/conversations/{room_id}/export"
    headers = {"Authorization": f"Bearer {scene.service_token}"}
    with httpx.stream("GET", url, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            size += len(line) + 1
            first = first or line
            last = line
    return size, [json.loads(first)["seq"], json.loads(last)["seq"]]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("exports", [{"workers": 1, "big": True}], indirect=True)
def test_an_export_of_100000_messages_through_gunicorn_in_bounded_memory(exports):
    scene, master = exports
    (worker,) = worker_pids(master)
    # A warm worker: it has answered the API (the export's first page is what it adds).
    assert [status for status, _ in scene.probe()] == [200, 200]
    before = peak_rss(worker)

    size, seqs = read_export(scene, scene.big_room_id)

    growth = peak_rss(worker) - before
    assert seqs == [1, BIG_EXPORT]
    assert size > 2 * RSS_GROWTH_BOUND  # the answer is far larger than the bound
    assert growth < RSS_GROWTH_BOUND, f"peak RSS grew {growth / 2**20:.1f} MiB"
    print(
        f"export of {BIG_EXPORT} messages through gunicorn: {size / 2**20:.1f} MiB, the "
        f"worker's peak RSS grew {growth / 2**20:.1f} MiB (from {before / 2**20:.0f} MiB)"
    )


def stalled_export(scene: Exports, room_id: str) -> tuple[bytes, float | None, float]:
    """An export whose client reads its first bytes, then nothing: what it read, when the
    server reset the connection (None if it did not within the deadline and then some) and
    when it connected."""
    with socket.socket() as sock:
        # A small window, so the kernel takes little of the unread answer off the server.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", scene.port))
        connected = time.monotonic()
        sock.sendall(scene.export_request(room_id))
        sock.settimeout(10)
        head = sock.recv(1024)
        give_up = time.monotonic() + DEADLINE + LATE + 5
        while time.monotonic() < give_up:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                return head, time.monotonic(), connected
            if head.startswith(b"HTTP/1.1 503 "):
                return head, None, connected
            time.sleep(0.05)
    return head, None, connected


def probe_while(scene: Exports, threads: list[threading.Thread]) -> list[tuple[int, float]]:
    """The probe and the API, again and again, while any of ``threads`` runs."""
    time.sleep(0.5)
    probes: list[tuple[int, float]] = []
    while any(thread.is_alive() for thread in threads) or len(probes) < 6:
        probes += scene.probe()
        time.sleep(0.2)
    return probes


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("exports", [{"workers": 1}], indirect=True)
def test_an_export_left_unread_is_cut_at_its_deadline_and_frees_its_thread(exports):
    scene, _ = exports
    outcome: list[tuple[bytes, float | None, float]] = []
    reader = threading.Thread(target=lambda: outcome.append(stalled_export(scene, scene.room_id)))
    reader.start()
    probes = probe_while(scene, [reader])
    reader.join()

    ((head, reset_at, connected),) = outcome
    assert head.startswith(b"HTTP/1.1 200 ")
    assert reset_at is not None, "the unread export was never cut off"
    assert DEADLINE - 0.1 <= reset_at - connected <= DEADLINE + LATE
    assert [status for status, _ in probes] == [200] * len(probes)
    assert max(seconds for _, seconds in probes) < 1.0, probes
    # The worker's one stream is free again, and its thread stopped at its next piece: the
    # export is recorded as interrupted, short of the whole.
    assert read_export(scene, scene.room_id)[1] == [1, EXPORT]
    events = LifecycleEvent.objects.filter(action=LifecycleAction.EXPORT).order_by("created_at")
    assert [event.outcome for event in events] == [
        LifecycleOutcome.INTERRUPTED,
        LifecycleOutcome.COMPLETED,
    ]
    assert events[0].counts["messages"] < EXPORT


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("exports", [{"workers": 2}], indirect=True)
def test_more_export_clients_than_streams_neither_stop_the_probe_and_api_nor_stay(exports):
    """Six unread exports against 2 workers of one stream each: at most two stream (and are
    cut at their deadline), the others get a 503 at once; the probe and the API answer."""
    scene, _ = exports
    outcomes: list[tuple[bytes, float | None, float]] = []
    clients = [
        threading.Thread(target=lambda: outcomes.append(stalled_export(scene, scene.room_id)))
        for _ in range(6)
    ]
    for client in clients:
        client.start()
    probes = probe_while(scene, clients)
    for client in clients:
        client.join()

    streamed = [outcome for outcome in outcomes if outcome[0].startswith(b"HTTP/1.1 200 ")]
    refused = [outcome for outcome in outcomes if outcome[0].startswith(b"HTTP/1.1 503 ")]
    assert len(streamed) + len(refused) == 6
    assert 1 <= len(streamed) <= 2
    for head, _, _ in refused:
        assert json.loads(head.partition(b"\r\n\r\n")[2])["error"]["code"] == "unavailable"
    for _, reset_at, connected in streamed:
        assert reset_at is not None
        assert reset_at - connected <= DEADLINE + LATE
    assert [status for status, _ in probes] == [200] * len(probes)
    assert max(seconds for _, seconds in probes) < 1.0, probes
    assert read_export(scene, scene.room_id)[1] == [1, EXPORT]
