"""WSGI to ASGI for an app that reads one bounded body and answers one short body: ``/mcp``.

a2wsgi's ``ASGIMiddleware`` hands every message between the server's thread and the app's event
loop, and the app's ``send`` waits until the server has taken the message. A server that gives
up on an answer never takes its last piece: wsgiref (``runserver``) closes the answer when the
client has gone, as the MCP Inspector's abandoned GET stream did. The app's coroutine then
waited until the process exited and was destroyed pending ("Task was destroyed but it is
pending!"). Here the body is read first, the app runs to completion on the loop with nothing
to wait for but itself, and only then is its answer given to the server: whatever the server
does with it, no request is left pending.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from a2wsgi.asgi import build_scope
from starlette.types import ASGIApp, Message

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


def read_wsgi_body(environ: dict[str, Any], limit: int) -> bytes:
    """A POST's body, up to ``limit`` + 1 bytes (so the app can tell it is too large); nothing
    for a declared length past ``limit`` (the app refuses it by its header, before reading)
    or for any other method (nothing is read before the app answers it 405)."""
    if environ.get("REQUEST_METHOD") != "POST":
        return b""
    declared = environ.get("CONTENT_LENGTH") or ""
    if declared.isdigit():
        wanted = int(declared)
        if wanted > limit:
            return b""
    elif environ.get("wsgi.input_terminated"):
        wanted = limit + 1  # chunked: the server ends the stream
    else:
        return b""
    stream = environ["wsgi.input"]
    chunks: list[bytes] = []
    while wanted > 0:
        chunk = stream.read(min(wanted, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        wanted -= len(chunk)
    return b"".join(chunks)


async def run_to_answer(app: ASGIApp, scope: dict[str, Any], body: bytes) -> Answer:
    """Run ``app`` on one request whose body is ``body``, to its end; its status, headers and
    whole body. A ``receive`` after the body waits until the answer is complete, then says
    the client has gone, as a server does once the exchange is over."""
    status, headers, chunks = 500, [], []
    answered = asyncio.Event()
    body_given = False

    async def receive() -> Message:
        nonlocal body_given
        if not body_given:
            body_given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    try:
        await app(scope, receive, send)
    finally:
        answered.set()
    return status, headers, b"".join(chunks)


class BufferedAsgiBridge:
    """A WSGI app serving ``app`` on an event loop thread of its own, each answer in full."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="asgi-bridge", daemon=True).start()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        body = read_wsgi_body(environ, self.max_body_bytes)
        answer = run_to_answer(self.app, build_scope(environ), body)
        # The calling thread waits for the whole exchange: a WSGI server gives it a thread.
        status, headers, content = asyncio.run_coroutine_threadsafe(answer, self.loop).result()
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Unknown"
        start_response(
            f"{status} {reason}",
            [(name.decode("latin-1"), value.decode("latin-1")) for name, value in headers],
        )
        return [content]
