"""The gunicorn worker: the WSGI application behind an event loop, so no client holds a thread.

gunicorn's gthread worker reads a request and writes its answer with blocking calls in the
thread that runs the application: a client sending its headers or body slowly, never finishing
a chunked upload or not reading a large answer keeps that thread, and a few more such clients
than ``WEB_CONCURRENCY`` times ``GUNICORN_THREADS`` stop the probes and the API. gunicorn 27's
asyncio worker does every socket read and write on its event loop instead, and this worker
wraps the WSGI application for it:

- ``BoundedRequests`` receives the whole body on the loop before a thread is used, then runs
  the application in one of ``GUNICORN_THREADS`` threads (a2wsgi's pool) and writes its
  answer back from the loop: a thread only ever runs application code.
- Every part a client controls has a deadline: a new connection's headers
  (``REQUEST_HEADER_TIMEOUT``; on a kept-alive connection gunicorn's keep-alive timer bounds
  the next headers), the whole body (``REQUEST_BODY_TIMEOUT``, 408), handing the whole answer
  to the kernel (``RESPONSE_SEND_TIMEOUT``, then the connection is aborted).
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from a2wsgi import WSGIMiddleware
from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.workers import gasgi

logger = logging.getLogger("formation.serving")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The scope extension through which BoundedRequests aborts a connection it gave up on.
ABORT_EXTENSION = "formation.abort"


@dataclass(frozen=True)
class ServingLimits:
    """Deadlines (seconds) and sizes (bytes) from the settings of the same names."""

    header_timeout: float
    body_timeout: float
    send_timeout: float
    max_body_bytes: int
    body_buffer_bytes: int

    @classmethod
    def from_settings(cls) -> ServingLimits:
        from django.conf import settings

        return cls(
            header_timeout=settings.REQUEST_HEADER_TIMEOUT,
            body_timeout=settings.REQUEST_BODY_TIMEOUT,
            send_timeout=settings.RESPONSE_SEND_TIMEOUT,
            max_body_bytes=settings.MAX_REQUEST_BODY_BYTES,
            body_buffer_bytes=settings.REQUEST_BODY_BUFFER_BYTES,
        )


class Refused(Exception):
    """A request answered on the event loop, without the application, in the API's envelope."""

    status: int
    code: str
    message: str

    def messages(self) -> list[Message]:
        body = json.dumps(
            {"error": {"code": self.code, "message": self.message, "details": {}}}
        ).encode()
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


class ClientGone(Exception):
    """The client disconnected before its body was complete."""


class BodyBuffer:
    """One request's body, counted against the worker's budget until the request ends.

    Only the worker's event loop touches ``held``, so it needs no lock.
    """

    held = 0

    def __init__(self, limits: ServingLimits) -> None:
        self.limits = limits
        self.size = 0

    async def receive_all(self, receive: Receive) -> bytes:
        """The body, or its first ``max_body_bytes + 1`` bytes, which the application refuses."""
        room = self.limits.max_body_bytes + 1
        chunks = []
        while True:
            message = await receive()
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


def _known_length(scope: Scope, size: int) -> Scope:
    """A chunked request as the application can read it: WSGI (and Django) read a body by its
    Content-Length, which a chunked request lacks."""
    headers = scope["headers"]
    if not any(name == b"transfer-encoding" for name, _ in headers):
        return scope
    kept = [(name, value) for name, value in headers if name != b"transfer-encoding"]
    return {**scope, "headers": [*kept, (b"content-length", str(size).encode())]}


class BoundedRequests:
    """ASGI middleware: the body is received on the loop under a deadline before the
    application runs, and the application's answer is collected, then written under one."""

    def __init__(self, app: ASGIApp, limits: ServingLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body = BodyBuffer(self.limits)
        try:
            answer = await self._answer(scope, receive, body)
        except ClientGone:
            # Gone (gunicorn then drops the answer), or silent past gunicorn's own wait for
            # each piece of a body (GUNICORN_TIMEOUT): that client gets the 408.
            answer = BodyTimeout().messages()
        except Refused as refusal:
            logger.warning("request refused", extra={"status": refusal.status})
            answer = refusal.messages()
        finally:
            body.release()
        await self._send_in_time(scope, send, answer)

    async def _answer(self, scope: Scope, receive: Receive, body: BodyBuffer) -> list[Message]:
        """The application's answer, once the whole body is in. The body goes with this call's
        frame: it is no longer held, nor counted, while the answer is written."""
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                data = await body.receive_all(receive)
        except TimeoutError:
            raise BodyTimeout from None
        answer: list[Message] = []
        await self.app(_known_length(scope, len(data)), _replay(data, receive), _collect(answer))
        return answer

    async def _send_in_time(self, scope: Scope, send: Send, answer: list[Message]) -> None:
        """gunicorn's ``send`` waits while the client reads too little of a large answer."""
        try:
            async with asyncio.timeout(self.limits.send_timeout):
                for message in answer:
                    await send(message)
        except TimeoutError:
            logger.warning("answer not read in time; connection aborted")
            abort = scope.get("extensions", {}).get(ABORT_EXTENSION)
            if abort is not None:
                abort()


def _replay(data: bytes, receive: Receive) -> Receive:
    """The buffered body as one message; after it, the client's own (disconnect) messages."""
    pending = [{"type": "http.request", "body": data, "more_body": False}]

    async def receive_buffered() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return receive_buffered


def _collect(answer: list[Message]) -> Send:
    """A ``send`` that never waits, so the application's thread is free as soon as it is done."""

    async def send_later(message: Message) -> None:
        answer.append(message)

    return send_later


class BoundedProtocol(ASGIProtocol):
    """gunicorn's HTTP/1 protocol with three additions: a deadline on a new connection's
    headers, the abort extension, and no connection kept open behind unsent bytes."""

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
        scope.setdefault("extensions", {})[ABORT_EXTENSION] = self._abort
        return scope

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
        application = self.app.wsgi()
        # Read once the application has configured Django.
        self.limits = ServingLimits.from_settings()
        self.asgi = BoundedRequests(
            WSGIMiddleware(application, workers=self.cfg.threads), self.limits
        )

    async def _serve(self) -> None:
        # gunicorn 27 creates its protocol by this module-level name and has no setting for it.
        gasgi.ASGIProtocol = BoundedProtocol
        await super()._serve()
