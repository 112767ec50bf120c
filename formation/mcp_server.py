"""The agent tools over MCP: stdio (``manage.py mcp_server``) and streamable HTTP at ``/mcp``.

Built on the official SDK's low-level ``Server`` because the tools' schemas already exist
(``formation.tools``, generated from the REST serializers); the SDK's decorator API would derive
a second schema from Python signatures. A call runs ``formation.tools.call_tool`` (the same
selectors and services as the REST views) in a worker thread, because the ORM is synchronous,
and answers the REST body once, as JSON text. A failure is a tool error (``isError``) whose
text is the REST envelope ``{"error": {"code", "message", "details"}}``, so a model meets the
same codes and sentences over both.

``tools/list`` offers only the tools the caller's token may call (``formation.tools.tools_for``):
an agent token is not shown search_history, which needs a run.

HTTP is stateless and answers JSON, no sessions and no SSE: only POST is served (anything else is
the REST 405 envelope at once), every POST carries its own bearer token, checked like a REST
request before the MCP layer sees it, so a missing or bad token gets the REST 401 envelope and a
service token the 403 one. The request is then checked by ``formation.mcp_envelope`` (strict
JSON, one JSON-RPC message, fixed sentences) before the SDK sees it, and any error the SDK answers
is scrubbed of what was sent. gunicorn and runserver serve WSGI, so ``route_mcp_wsgi`` runs the
ASGI app through ``formation.wsgi_bridge``; ``route_mcp_asgi`` mounts it natively.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from types import SimpleNamespace
from typing import Any, TypeVar

import anyio
from django.conf import settings
from django.db import connections
from django.http.request import split_domain_port, validate_host
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from rest_framework.exceptions import APIException, Throttled
from rest_framework.settings import api_settings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from formation.asgi_body import replay
from formation.auth import Caller, IsAgentOrRunToken
from formation.db_timeouts import api_statement_timeout
from formation.errors import (
    ApiError,
    InvalidArguments,
    MethodNotAllowed,
    Unauthenticated,
    api_exception_handler,
)
from formation.json_logging import request_id_var
from formation.limits import MAX_BODY_BYTES
from formation.mcp_envelope import (
    UNKNOWN_TOOL,
    ErrorScrubber,
    RpcRefusal,
    ServedTools,
    check_media_types,
    check_message,
    parse_message,
    read_body,
    sdk_scope,
)
from formation.request_logging import KNOWN_METHODS, SANE_REQUEST_ID
from formation.tools import (
    AGENT_TOOLS,
    TOOLS_BY_NAME,
    call_tool,
    caller_for_token,
    caller_from_authorization,
    input_schema,
    tools_for,
    with_mcp_defaults,
)
from formation.wsgi_bridge import BufferedAsgiBridge

SERVER_NAME = "formation-history"
MCP_PATHS = frozenset({"/mcp", "/mcp/"})
# Where the HTTP app leaves the authenticated caller for the tool handler (ASGI scope state).
CALLER_KEY = "formation.caller"
INSTRUCTIONS = (
    "Read and search the conversation history this agent may see. list_messages and "
    "get_message read conversations the agent is a member of; search_messages finds exact "
    "text; search_history ranks past discussions for the current run and needs a run token. "
    'Errors are {"error": {"code", "message", "details"}}, as in the REST API.'
)

logger = logging.getLogger("formation.mcp")
access_logger = logging.getLogger("formation.request")
T = TypeVar("T")
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _server_version() -> str:
    try:
        return version("formation-history")
    except PackageNotFoundError:
        return ""


def _result(body: dict[str, Any], *, is_error: bool = False) -> types.CallToolResult:
    """The body once, as JSON text: the block every client reads and hands its model. (The
    tools declare no output schema, so MCP asks for no structured copy of it beside.)"""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def _as_api_request(work: Callable[[], T]) -> T:
    """Database work bounded like an ``/api/`` request (formation/db_timeouts.py).

    Runs in a worker thread, whose connection is closed afterwards: no request cycle runs
    here to recycle it, and an idle pooled thread may exit with it still open.
    """
    try:
        if not settings.API_STATEMENT_TIMEOUT_MS:
            return work()
        # A pooled connection goes back without this request's limit.
        with api_statement_timeout(settings.API_STATEMENT_TIMEOUT_MS):
            return work()
    finally:
        connections.close_all()


def _throttle(caller: Caller) -> None:
    """The REST API's per-token rates: one tool call counts as one request."""
    for throttle_class in api_settings.DEFAULT_THROTTLE_CLASSES:
        throttle = throttle_class()
        if not throttle.allow_request(SimpleNamespace(user=caller), None):
            raise Throttled(wait=throttle.wait())


def _run_tool(
    caller: Caller | None, token: str | None, name: str, arguments: dict[str, Any]
) -> types.CallToolResult:
    """One tool call in a worker thread; any failure becomes the REST error envelope."""
    started = time.perf_counter()
    # Over HTTP the request's id, copied into this thread with the context; stdio has none.
    request_id = request_id_var.set(request_id_var.get() or uuid.uuid4().hex)
    status = 200

    def work() -> dict[str, Any]:
        nonlocal caller
        if caller is None:
            # stdio: authenticated again on every call, so a revoked token stops at once (the
            # tool's own permission then refuses a service token).
            caller = caller_for_token(token or "")
        _throttle(caller)
        return call_tool(caller=caller, name=name, arguments=with_mcp_defaults(name, arguments))

    try:
        return _result(_as_api_request(work))
    except Exception as error:
        rest = api_exception_handler(error, {})
        status = rest.status_code
        return _result(rest.data, is_error=True)
    finally:
        # Like formation.request's access line: the tool, never its arguments (SPEC §9).
        logger.info(
            "tool call",
            extra={
                "endpoint": f"mcp:{name}",
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                "token_kind": str(caller.kind) if caller else "none",
            },
        )
        request_id_var.reset(request_id)


def _stdio_caller(token: str) -> Caller | None:
    """The stdio token's caller now (it may have been revoked since the server started)."""
    try:
        return _as_api_request(partial(caller_for_token, token))
    except ApiError:
        return None


def _http_caller(ctx: ServerRequestContext[Any, Any]) -> Caller | None:
    request = ctx.request
    if request is None:
        return None
    return request.scope.get("state", {}).get(CALLER_KEY)


def build_server(*, token: str | None = None) -> Server[Any]:
    """The MCP server. ``token`` authenticates a stdio server; over HTTP each request's does."""
    tools = {
        tool.name: types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=input_schema(tool),
            annotations=types.ToolAnnotations(
                read_only_hint=tool.read_only,
                destructive_hint=False,
                idempotent_hint=tool.read_only,
                open_world_hint=False,
            ),
        )
        for tool in AGENT_TOOLS
    }
    schemas = {name: tool.input_schema for name, tool in tools.items()}

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """Only what this token may call: an agent token is not offered search_history."""
        if token is None:
            caller = _http_caller(ctx)
        else:
            caller = await anyio.to_thread.run_sync(_stdio_caller, token)
        if caller is None:
            raise MCPError(types.INVALID_REQUEST, Unauthenticated.default_message)
        return types.ListToolsResult(tools=[tools[tool.name] for tool in tools_for(caller)])

    async def call(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in TOOLS_BY_NAME:
            # Not the name sent: an error never quotes the request (SPEC §9).
            raise MCPError(types.INVALID_PARAMS, UNKNOWN_TOOL)
        caller = None if token is not None else _http_caller(ctx)
        if caller is None and token is None:
            # Served over HTTP without McpHttpApp in front: nobody checked a token.
            return _result(api_exception_handler(Unauthenticated(), {}).data, is_error=True)
        run = partial(_run_tool, caller, token, params.name, params.arguments or {})
        return await anyio.to_thread.run_sync(run)

    return Server(
        SERVER_NAME,
        version=_server_version(),
        instructions=INSTRUCTIONS,
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call,
    )


async def serve_stdio(token: str) -> None:
    """Serve MCP on stdin/stdout until the client closes it."""
    server = build_server(token=token)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# --- streamable HTTP -------------------------------------------------------------------------


def _authenticate(authorization: str) -> Caller:
    """The REST authentication and the agent tools' permission, for one HTTP request."""

    def work() -> Caller:
        caller = caller_from_authorization(authorization)
        IsAgentOrRunToken().has_permission(SimpleNamespace(user=caller), None)
        return caller

    return _as_api_request(work)


def _host_allowed(host: str) -> bool:
    """Django's ALLOWED_HOSTS check: /mcp bypasses Django's request handling, not its rules."""
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


def _error_response(error: Exception, **headers: str) -> JSONResponse:
    """The REST envelope and status for ``error``, as ``formation.errors`` renders it."""
    rest = api_exception_handler(error, {})
    for key, value in rest.headers.items():
        if key.lower() != "content-type":
            headers.setdefault(key, value)
    return JSONResponse(rest.data, status_code=rest.status_code, headers=headers)


class McpHttpApp:
    """ASGI app for ``/mcp``: POST only, the REST bearer check, the request checked by
    ``formation.mcp_envelope``, then one stateless JSON-RPC exchange with the SDK."""

    def __init__(self) -> None:
        self.server = build_server()
        self.served = ServedTools.by(self.server, TOOLS_BY_NAME)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise RuntimeError("The MCP app serves HTTP only; route other scopes elsewhere.")
        # A task of its own, so a context of its own: the request id is set there and ends
        # with it. Reset instead, it would be reset by whichever context ends the coroutine,
        # and a coroutine closed by the garbage collector ends in the collector's.
        await asyncio.create_task(self._handle(scope, receive, send))

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        incoming_id = headers.get("x-request-id", "")
        request_id_var.set(
            incoming_id if SANE_REQUEST_ID.fullmatch(incoming_id) else uuid.uuid4().hex
        )
        started = time.perf_counter()
        status, caller = 500, None

        async def send_watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            caller = await self._serve(scope, receive, send_watched, headers)
        finally:
            # Django's access line (formation/request_logging.py) never sees /mcp: write it here.
            access_logger.log(
                logging.WARNING if status >= 500 else logging.INFO,
                "request",
                extra={
                    "endpoint": "mcp",
                    "method": scope["method"] if scope["method"] in KNOWN_METHODS else "OTHER",
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                    "token_kind": str(caller.kind) if caller else "none",
                },
            )

    async def _serve(
        self, scope: Scope, receive: Receive, send: Send, headers: Headers
    ) -> Caller | None:
        if not _host_allowed(headers.get("host", "")):
            bad_host = InvalidArguments("The Host header is not allowed.")
            await _error_response(bad_host)(scope, receive, send)
            return None
        if scope["method"] != "POST":
            # Stateless JSON: no stream for a GET to open, no session for a DELETE to end. Answered
            # before anything is read, so no request can hold a server thread (an SDK GET stream
            # never ends: under gunicorn, eight of them stopped every worker).
            await _error_response(MethodNotAllowed(), Allow="POST")(scope, receive, send)
            return None
        try:
            caller = await anyio.to_thread.run_sync(_authenticate, headers.get("authorization", ""))
        except Exception as error:
            await _error_response(error)(scope, receive, send)
            return None
        await self._exchange(scope, receive, send, caller, headers)
        return caller

    async def _exchange(
        self, scope: Scope, receive: Receive, send: Send, caller: Caller, headers: Headers
    ) -> None:
        """One JSON-RPC message, read and checked here (``formation.mcp_envelope``), then
        answered by the SDK through the error scrubber."""
        try:
            check_media_types(scope)
            body = await read_body(receive, headers.get("content-length"))
            if body is None:
                return  # the client went away
            checked = check_message(parse_message(body), self.served)
        except RpcRefusal as refusal:
            await refusal.response()(scope, receive, send)
            return
        except APIException as error:
            await _error_response(error)(scope, receive, send)
            return
        if not checked.is_request:
            await Response(status_code=202)(scope, receive, send)
            return
        scope = sdk_scope(scope, len(checked.encoded))
        scope["state"] = {**scope.get("state", {}), CALLER_KEY: caller}
        # Stateless: a manager per request holds nothing between requests (its task group
        # lives as long as this one exchange), so no lifespan has to start it. Its body limit
        # is the checked body's size: the limit that counts was applied to what was sent.
        manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            max_request_body_size=len(checked.encoded),
        )
        async with manager.run():
            await manager.handle_request(
                scope, replay(checked.encoded, receive), ErrorScrubber(send)
            )


def _app_path(scope: Scope) -> str:
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def route_mcp_asgi(django_app: ASGIApp) -> ASGIApp:
    """``/mcp`` to the MCP app, everything else (lifespan included) to Django."""
    mcp_app = McpHttpApp()

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _app_path(scope) in MCP_PATHS:
            await mcp_app(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return application


def route_mcp_wsgi(django_app: WSGIApp) -> WSGIApp:
    """``/mcp`` to the MCP app, its answer taken whole (``formation.wsgi_bridge``), every other
    path to Django."""
    bridge: BufferedAsgiBridge | None = None
    lock = threading.Lock()

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        nonlocal bridge
        if environ.get("PATH_INFO", "") not in MCP_PATHS:
            return django_app(environ, start_response)
        with lock:
            if bridge is None:
                # Built on first use in the serving process: the bridge's event-loop thread
                # would not survive gunicorn forking workers from a preloaded application.
                bridge = BufferedAsgiBridge(McpHttpApp(), max_body_bytes=MAX_BODY_BYTES)
        return bridge(environ, start_response)

    return application
