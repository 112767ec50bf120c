"""The WSGI application in a pool of threads, as an ASGI application (``WaitingWSGI``).

The production worker (formation/serving.py) receives each request's whole body on its event
loop, then hands the request to one of these threads; the thread runs Django and hands the
answer back. An ordinary answer costs one hop into the thread and one back, and the thread
closes the application's answer (``request_finished``: the connection back to its pool) while
the loop writes it, so the client never waits for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import io
import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from a2wsgi.wsgi import build_environ

from formation.asgi_body import Message, Receive, Scope, Send

logger = logging.getLogger("formation.serving")


class ClientGone(Exception):
    """The client disconnected before its body was complete."""


class Abandoned(Exception):
    """An answer given up on (its deadline passed, its client left, or no stream was free).

    Raised by the application's ``send``, so in its thread (``WaitingWSGI``): the application
    stops producing at its next piece, and its iterable is closed.
    """


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# How often a thread waiting for the loop to take a piece checks that the loop still runs.
LOOP_CHECK_SECONDS = 1.0


class WaitingWSGI:
    """The WSGI application in ``workers`` threads, as the ASGI application ``BoundedRequests``
    runs: one hop into a thread and one back for an ordinary answer.

    The thread collects the status, the headers and the first piece; when the application has
    no second piece (Django builds an answer whole) all of it goes back to the loop at once,
    and the thread then closes the application's iterable (Django's ``request_finished``:
    the connection back to its pool) while the loop writes the answer, so the client never
    waits for that. An answer of several pieces goes to ``send`` (``Answer.send``) piece by
    piece, the thread waiting until each returns: not at all while the answer is collected,
    until the kernel has the piece once it is streamed; an ``Abandoned`` from it is raised in
    the thread, which stops there. The thread never runs ahead of ``send`` by more than the
    first piece, so a streamed answer is produced only as fast as the client takes it.
    """

    def __init__(self, app: WSGIApp, workers: int) -> None:
        self.app = app
        self.executor = ThreadPoolExecutor(thread_name_prefix="WSGI", max_workers=workers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1000})
            return
        body = await _whole_body(receive)
        exchange = _Exchange(asyncio.get_running_loop(), send)
        environ = build_environ(scope, io.BytesIO(body))  # type: ignore[arg-type]
        context = contextvars.copy_context()
        job = self.executor.submit(context.run, exchange.run, self.app, environ)
        try:
            messages = await exchange.last
        except asyncio.CancelledError:
            # Given up on (the client left, the worker stops): a request still waiting for a
            # thread never runs. One already running finishes and closes its answer.
            job.cancel()
            raise
        for message in messages:
            await send(message)


async def _whole_body(receive: Receive) -> bytes:
    """The request's body: ``BoundedRequests`` has it all, so this costs no wait."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    """Nothing to start or stop: Django is set up when the worker loads the application."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class _Exchange:
    """One request between the loop and the thread that runs the application.

    ``last`` is the loop's future of the answer's last messages: the thread resolves it
    once, with them (or with the error that stopped the application), and never waits for it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Send) -> None:
        self.loop = loop
        self.send = send
        self.last: asyncio.Future[list[Message]] = loop.create_future()
        self.start: Message | None = None
        self.started = False

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        if exc_info is not None and self.started:
            raise exc_info[1].with_traceback(exc_info[2])
        self.start = {
            "type": "http.response.start",
            "status": int(status.split(" ", 1)[0]),
            "headers": [
                (name.strip().encode("latin1").lower(), value.strip().encode("latin1"))
                for name, value in headers
            ],
        }
        return self._write

    def run(self, app: WSGIApp, environ: dict[str, Any]) -> None:
        """In the thread: the application, its pieces handed over, its iterable closed.

        A whole answer is handed over before the iterable is closed; a streamed one, or an
        error, only after: the request is not over until the application has stopped."""
        iterable: Iterable[bytes] = ()
        outcome: list[Message] | BaseException | None = None
        try:
            iterable = app(environ, self.start_response)
            pieces = iter(iterable)
            first = next(pieces, None)
            following = next(pieces, None) if first is not None else None
            if following is None:
                self._resolve(self._with_start([_piece(first or b"", more=False)]))
                return
            self._deliver([_piece(first, more=True)])  # type: ignore[arg-type]
            while following is not None:
                self._deliver([_piece(following, more=True)])
                following = next(pieces, None)
            outcome = [_piece(b"", more=False)]
        except BaseException as error:
            outcome = error
        finally:
            try:
                close = getattr(iterable, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:
                        logger.exception("closing the application's answer failed")
            finally:
                if outcome is not None:
                    self._resolve(outcome)

    def _write(self, chunk: bytes) -> None:
        """WSGI's ``write()``: a piece handed over at once."""
        self._deliver([_piece(chunk, more=True)])

    def _with_start(self, messages: list[Message]) -> list[Message]:
        """``messages`` after the answer's start, the first time anything is handed over."""
        if self.started:
            return messages
        if self.start is None:
            raise RuntimeError("The application answered before calling start_response.")
        self.started = True
        return [self.start, *messages]

    def _deliver(self, messages: list[Message]) -> None:
        """Hand pieces to ``send`` and wait until it returns (raising what it raised); a loop
        that stopped meanwhile (the worker exits) will never run it: ``Abandoned``."""
        sending = asyncio.run_coroutine_threadsafe(
            self._send_all(self._with_start(messages)), self.loop
        )
        while True:
            try:
                sending.result(timeout=LOOP_CHECK_SECONDS)
                return
            except TimeoutError:
                if not self.loop.is_running():
                    sending.cancel()
                    raise Abandoned from None

    async def _send_all(self, messages: list[Message]) -> None:
        for message in messages:
            await self.send(message)

    def _resolve(self, outcome: list[Message] | BaseException) -> None:
        # A closed loop raises RuntimeError: the worker is gone, and nobody waits for this.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(_settle, self.last, outcome)


def _piece(body: bytes, *, more: bool) -> Message:
    return {"type": "http.response.body", "body": body, "more_body": more}


def _settle(future: asyncio.Future, outcome: list[Message] | BaseException) -> None:
    """On the loop: the request's last messages, unless it was given up on meanwhile."""
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
