"""The gunicorn worker: the WSGI application behind an event loop, so no client holds a thread.

gunicorn's gthread worker reads a request and writes its answer with blocking calls in the
thread that runs the application: a client sending its headers or body slowly, never finishing
a chunked upload or not reading a large answer keeps that thread, and a few more such clients
than ``WEB_CONCURRENCY`` times ``GUNICORN_THREADS`` stop the probes and the API. gunicorn 27's
asyncio worker does every socket read and write on its event loop instead, and this worker
wraps the WSGI application for it:

- ``BoundedRequests`` receives the whole body on the loop before a thread is used (a GET or
  HEAD that declares no body has none to wait for), then runs the application in one of
  ``GUNICORN_THREADS`` threads (``WaitingWSGI``, formation/wsgi_threads.py) and writes its
  answer back from the loop: a thread only ever runs application code, and an ordinary answer
  costs one hop into the thread and one back.
- An answer is collected on the loop, so the thread is free as soon as the application is
  done, unless it is *streamed*: produced piece by piece with no declared length (an export)
  and past ``RESPONSE_STREAM_THRESHOLD_BYTES``. Then what was collected is written and each
  further piece is written before the thread may produce the next (backpressure), so a worker
  holds a piece or two of it, never the whole; ``RESPONSE_STREAMS_PER_WORKER`` such answers at
  once (503 past that, before the first byte), so streams never take every thread.
- Every part a client controls has a deadline: a new connection's headers
  (``REQUEST_HEADER_TIMEOUT``; on a kept-alive connection gunicorn's keep-alive timer bounds
  the next headers), the whole body (``REQUEST_BODY_TIMEOUT``, 408), handing the whole answer,
  or each piece of a streamed one, to the kernel (``RESPONSE_SEND_TIMEOUT``) and a whole
  streamed answer (``RESPONSE_STREAM_TIMEOUT``); past an answer's deadline the connection is
  aborted and a streaming thread stops at its next piece.
- Sizes are bounded: a body is held up to ``MAX_REQUEST_BODY_BYTES`` + 1 bytes (the
  application refuses a larger one, as before), and one worker holds at most
  ``REQUEST_BODY_BUFFER_BYTES`` of bodies at once (503 past that).

``/mcp`` stays inside the WSGI application (formation/wsgi.py), so it is served and bounded
exactly like the REST API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct
from dataclasses import dataclass
from typing import Any

from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.errors import AppImportError
from gunicorn.workers import gasgi

from formation.asgi_body import ASGIApp, Message, Receive, Scope, Send, replay
from formation.errors import error_body
from formation.wsgi_threads import Abandoned, ClientGone, WaitingWSGI

logger = logging.getLogger("formation.serving")


# The scope extensions through which BoundedRequests aborts a connection it gave up on, and
# learns that the client has gone (gunicorn then drops what is sent, silently).
ABORT_EXTENSION = "formation.abort"
CLOSED_EXTENSION = "formation.closed"


@dataclass(frozen=True)
class ServingLimits:
    """Deadlines (seconds) and sizes (bytes) from the settings of the same names."""

    header_timeout: float
    body_timeout: float
    send_timeout: float
    max_body_bytes: int
    body_buffer_bytes: int
    stream_threshold_bytes: int
    stream_timeout: float
    streams_per_worker: int

    @classmethod
    def from_settings(cls, *, threads: int) -> ServingLimits:
        """The settings' limits for a worker of ``threads`` threads: streams always leave one
        thread to everything else."""
        from django.conf import settings

        return cls(
            header_timeout=settings.REQUEST_HEADER_TIMEOUT,
            body_timeout=settings.REQUEST_BODY_TIMEOUT,
            send_timeout=settings.RESPONSE_SEND_TIMEOUT,
            max_body_bytes=settings.MAX_REQUEST_BODY_BYTES,
            body_buffer_bytes=settings.REQUEST_BODY_BUFFER_BYTES,
            stream_threshold_bytes=settings.RESPONSE_STREAM_THRESHOLD_BYTES,
            stream_timeout=settings.RESPONSE_STREAM_TIMEOUT,
            streams_per_worker=min(settings.RESPONSE_STREAMS_PER_WORKER, threads - 1),
        )


class Refused(Exception):
    """A request answered on the event loop, without the application, in the API's envelope."""

    status: int
    code: str
    message: str

    def messages(self) -> list[Message]:
        body = json.dumps(error_body(self.code, self.message)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        return [
            {"type": "http.response.start", "status": self.status, "headers": headers},
            {"type": "http.response.body", "body": body},
        ]


class BodyTimeout(Refused):
    status, code = 408, "request_timeout"
    message = "The request body did not arrive in time."


class BufferFull(Refused):
    status, code = 503, "unavailable"
    message = "The server is receiving too many large requests; retry shortly."


class TooManyStreams(Refused):
    status, code = 503, "unavailable"
    message = "The server is streaming too many answers; retry shortly."


class BodyBuffer:
    """One request's body, counted against the worker's budget until the request ends.

    Only the worker's event loop touches ``held``, so it needs no lock.
    """

    held = 0

    def __init__(self, limits: ServingLimits) -> None:
        self.limits = limits
        self.size = 0

    async def receive_all(self, receive: Receive, deadline: float) -> bytes:
        """The body, or its first ``max_body_bytes + 1`` bytes, which the application refuses;
        ``BodyTimeout`` once the loop's clock reaches ``deadline``."""
        room = self.limits.max_body_bytes + 1
        chunks = []
        while True:
            message = await _before(deadline, receive)
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")[: room - self.size]
            if chunk:
                if BodyBuffer.held + len(chunk) > self.limits.body_buffer_bytes:
                    raise BufferFull
                BodyBuffer.held += len(chunk)
                self.size += len(chunk)
                chunks.append(chunk)
            if not message.get("more_body", False) or self.size == room:
                return b"".join(chunks)

    def release(self) -> None:
        BodyBuffer.held -= self.size
        self.size = 0


async def _before(deadline: float, receive: Receive) -> Message:
    """The client's next message, or ``BodyTimeout`` at the loop time ``deadline``.

    The deadline is kept by waiting, not by cancelling ``receive`` (``asyncio.timeout``):
    gunicorn's ``receive`` waits in ``asyncio.wait_for``, which on Python 3.11 swallows a
    cancellation that comes in the loop turn where a body chunk arrived (CPython gh-86296).
    The deadline would then be spent without effect, and a client trickling its body would
    never get its 408.
    """
    loop = asyncio.get_running_loop()
    remaining = deadline - loop.time()
    if remaining <= 0:
        raise BodyTimeout
    receiving = asyncio.ensure_future(receive())
    try:
        done, _ = await asyncio.wait([receiving], timeout=remaining)
    except BaseException:
        _drop(receiving)
        raise
    if not done:
        _drop(receiving)
        raise BodyTimeout
    return receiving.result()


def _drop(receiving: asyncio.Future) -> None:
    """Stop waiting for a message given up on; if it comes anyway it is not wanted."""
    receiving.cancel()
    receiving.add_done_callback(lambda done: done.cancelled() or done.exception())


def _known_length(scope: Scope, size: int) -> Scope:
    """A chunked request as the application can read it: WSGI (and Django) read a body by its
    Content-Length, which a chunked request lacks."""
    headers = scope["headers"]
    if not any(name == b"transfer-encoding" for name, _ in headers):
        return scope
    kept = [(name, value) for name, value in headers if name != b"transfer-encoding"]
    return {**scope, "headers": [*kept, (b"content-length", str(size).encode())]}


class Answer:
    """The application's answer on its way to the client; its ``send`` is the application's.

    Collected, as it comes, unless it is streamed: more than one piece with no Content-Length
    (an answer of declared length was built whole, or is a file of known size) that grows past
    ``stream_threshold_bytes``. A streamed answer takes one of the worker's
    ``streams_per_worker`` slots (none free: 503 before its first byte); what was collected is
    written, and from then on ``send`` returns only once its piece is with the kernel, each
    within ``send_timeout`` and all before ``stream_timeout`` from the start of the stream.

    Only the worker's event loop touches ``streams``, so it needs no lock.
    """

    streams = 0

    def __init__(self, limits: ServingLimits, scope: Scope, send: Send) -> None:
        self.limits = limits
        self.extensions = scope.get("extensions", {})
        self.client_send = send
        self.collected: list[Message] = []
        self.size = self.pieces = 0
        self.declared_length = False
        self.streamed = self.abandoned = False
        self.refusal: Refused | None = None
        self.deadline = 0.0

    async def send(self, message: Message) -> None:
        if self.abandoned:
            raise Abandoned
        if self.streamed:
            await self._write(message)
            return
        self.collected.append(message)
        if message["type"] == "http.response.start":
            self.declared_length = any(
                name.lower() == b"content-length" for name, _ in message.get("headers", [])
            )
        if body := message.get("body", b""):
            self.size += len(body)
            self.pieces += 1
        if (
            message.get("more_body", False)
            and not self.declared_length
            and self.pieces > 1
            and self.size > self.limits.stream_threshold_bytes
        ):
            await self._start_streaming()

    def refuse(self, refusal: Refused) -> None:
        """Answer ``refusal`` instead of whatever was collected."""
        self.collected, self.refusal = [], refusal

    async def _start_streaming(self) -> None:
        if Answer.streams >= self.limits.streams_per_worker:
            logger.warning("streamed answer refused", extra={"status": TooManyStreams.status})
            self.refuse(TooManyStreams())
            self.abandoned = True
            raise Abandoned
        Answer.streams += 1
        self.streamed = True
        self.deadline = asyncio.get_running_loop().time() + self.limits.stream_timeout
        collected, self.collected = self.collected, []
        for message in collected:
            await self._write(message)

    async def _write(self, message: Message) -> None:
        """One message of a streamed answer, with the kernel before its deadline."""
        closed = self.extensions.get(CLOSED_EXTENSION)
        if closed is not None and closed():
            self.abandoned = True
            raise Abandoned
        now = asyncio.get_running_loop().time()
        try:
            if now >= self.deadline:
                raise TimeoutError
            async with asyncio.timeout_at(min(now + self.limits.send_timeout, self.deadline)):
                await self.client_send(message)
        except TimeoutError:
            logger.warning("streamed answer not read in time; connection aborted")
            self._abort()
            raise Abandoned from None

    async def finish(self) -> None:
        """Write the collected answer (or the refusal), once the application is done; a
        streamed answer is written already."""
        answer = self.refusal.messages() if self.refusal is not None else self.collected
        self.collected = []
        try:
            async with asyncio.timeout(self.limits.send_timeout):
                for message in answer:
                    await self.client_send(message)
        except TimeoutError:
            logger.warning("answer not read in time; connection aborted")
            self._abort()

    def end(self) -> None:
        """Give the stream's slot back; an application still producing (its request was
        cancelled) stops at its next piece."""
        self.abandoned = True
        if self.streamed:
            self.streamed = False
            Answer.streams -= 1

    def _abort(self) -> None:
        self.abandoned = True
        abort = self.extensions.get(ABORT_EXTENSION)
        if abort is not None:
            abort()


class BoundedRequests:
    """ASGI middleware: the body is received on the loop under a deadline before the
    application runs, and the application's answer is collected, then written under one, or
    streamed under one per piece and one for the whole (``Answer``)."""

    def __init__(self, app: ASGIApp, limits: ServingLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = BodyBuffer(self.limits)
        answer = Answer(self.limits, scope, send)
        try:
            await self._answer(scope, receive, body, answer)
        except ClientGone:
            # Gone (gunicorn then drops the answer), or silent past gunicorn's own wait for
            # each piece of a body (GUNICORN_TIMEOUT): that client gets the 408.
            answer.refuse(BodyTimeout())
        except Refused as refusal:
            logger.warning("request refused", extra={"status": refusal.status})
            answer.refuse(refusal)
        except Abandoned:
            pass  # Aborted or gone; or no stream was free, and answer holds that refusal.
        finally:
            body.release()
            answer.end()
        await answer.finish()

    async def _answer(
        self, scope: Scope, receive: Receive, body: BodyBuffer, answer: Answer
    ) -> None:
        """Run the application once the whole body is in. The body goes with this call's
        frame: it is no longer held, nor counted, once the application is done."""
        data = b""
        if _may_have_body(scope):
            deadline = asyncio.get_running_loop().time() + self.limits.body_timeout
            data = await body.receive_all(receive, deadline)
        await self.app(_known_length(scope, len(data)), replay(data, receive), answer.send)


BODILESS_METHODS = ("GET", "HEAD")
HTTP_1 = ("1.0", "1.1")


def _may_have_body(scope: Scope) -> bool:
    """False for an HTTP/1 GET or HEAD that declares no body (no Content-Length, no
    Transfer-Encoding): HTTP/1 frames such a request with none, so there is nothing to wait
    for. Any other protocol version is waited for as before."""
    if scope.get("method") not in BODILESS_METHODS or scope.get("http_version") not in HTTP_1:
        return True
    return any(name in (b"content-length", b"transfer-encoding") for name, _ in scope["headers"])


class BoundedProtocol(ASGIProtocol):
    """gunicorn's HTTP/1 protocol with these additions: a deadline on a new connection's
    headers, the abort and closed extensions, a ``send`` woken when its connection is lost,
    and no connection kept open behind unsent bytes."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        # gunicorn arms its keep-alive timer only between requests and cancels it once a
        # request's headers are in; armed now, it also bounds the first request's headers.
        if self._request_ready is not None and self._keepalive_handle is None:
            self._keepalive_handle = self.worker.loop.call_later(
                self.worker.limits.header_timeout, self._keepalive_timeout
            )

    def _build_http_scope(self, request: Any, sockname: Any, peername: Any) -> Scope:
        scope = super()._build_http_scope(request, sockname, peername)
        extensions = scope.setdefault("extensions", {})
        extensions[ABORT_EXTENSION] = self._abort
        extensions[CLOSED_EXTENSION] = lambda: self._closed
        return scope

    def connection_lost(self, exc: Exception | None) -> None:
        """gunicorn leaves a ``send`` waiting for the buffer to drain waiting for ever once the
        connection is gone; woken, a streamed answer sees it closed and stops."""
        super().connection_lost(exc)
        if self._flow_control is not None:
            self._flow_control.resume_writing()

    def _abort(self) -> None:
        """Drop the connection with a reset: a plain close would queue its FIN behind the
        unsent answer, and the kernel would keep trying to deliver it to a client that reads
        nothing."""
        # Closed from now on: gunicorn then drops what the application still sends.
        self._closed = True
        _reset(self.transport)

    def _close_transport(self) -> None:
        """asyncio closes a transport only once its buffer is written, which a client that reads
        nothing never lets happen: such a connection is reset after ``send_timeout``."""
        transport = self.transport
        super()._close_transport()
        if transport is not None and transport.get_write_buffer_size():
            self.worker.loop.call_later(self.worker.limits.send_timeout, _reset, transport)


def _reset(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.fileno() >= 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class BoundedWorker(gasgi.ASGIWorker):
    """gunicorn's asyncio worker serving ``wsgi_app`` through ``BoundedRequests``, with
    ``threads`` threads running the application."""

    limits: ServingLimits

    @classmethod
    def check_config(cls, cfg: Any, log: Any) -> None:
        """The ASGI worker warns that it ignores ``threads``; this one sizes its pool by it."""

    def load_wsgi(self) -> None:
        try:
            application = self.app.wsgi()
        except SystemExit as refusal:
            # A setting refused in the worker, past the master's check (gunicorn_conf's
            # on_starting): gunicorn answers a worker's exit status 1 with another worker,
            # forever, but stops on an application that fails to load.
            raise AppImportError(str(refusal)) from None
        # Read once the application has configured Django.
        self.limits = ServingLimits.from_settings(threads=self.cfg.threads)
        self.asgi = BoundedRequests(WaitingWSGI(application, workers=self.cfg.threads), self.limits)

    async def _serve(self) -> None:
        # gunicorn 27 creates its protocol by this module-level name and has no setting for it.
        gasgi.ASGIProtocol = BoundedProtocol
        await super()._serve()
