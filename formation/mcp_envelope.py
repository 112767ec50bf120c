"""What ``/mcp`` lets through to the MCP SDK, and what its errors may say (SPEC §9).

The SDK answers a malformed request with its validators' messages, and pydantic's quote the
request (``input_value=...``). So the HTTP app checks every request here first, by the REST
API's rules and with fixed sentences: the body is read under a size limit and parsed by
``formation.parsers`` (strict JSON, as for every REST body), then must be exactly one JSON-RPC
request or notification with a valid id, for a method this server serves, with params its SDK
model accepts. Only then does the SDK see it, re-encoded from what was checked.

A notification is acknowledged here and never dispatched: a stateless server has nothing for
one to act on (there is no session to initialize, nor a request in flight to cancel).

Whatever JSON-RPC error the SDK still produces (its own checks of a 2026-07-28 envelope and its
headers, say) leaves through ``ErrorScrubber``, which keeps the code and puts our sentence for
it in place of the SDK's message and data, so no path lets a request value back into an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp import types
from mcp.server import Server
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.inbound import ERROR_CODE_HTTP_STATUS
from mcp_types.methods import SPEC_CLIENT_METHODS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError
from rest_framework.exceptions import NotAcceptable, ParseError, UnsupportedMediaType
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from formation.limits import MAX_BODY_BYTES, MAX_ID_CHARS, MAX_ID_INTEGER
from formation.parsers import body_too_large, parse_strict_json

JSONRPC_MEMBERS = frozenset({"jsonrpc", "id", "method", "params"})
KNOWN_VERSIONS = frozenset(HANDSHAKE_PROTOCOL_VERSIONS) | frozenset(MODERN_PROTOCOL_VERSIONS)

# Our sentence for each JSON-RPC error code the SDK can answer with.
SDK_ERROR_SENTENCES = {
    types.PARSE_ERROR: "The request body is not valid JSON.",
    types.INVALID_REQUEST: "The body is not a JSON-RPC request this server accepts.",
    types.METHOD_NOT_FOUND: "Method not found.",
    types.INVALID_PARAMS: "The params are not valid for this method.",
    types.INTERNAL_ERROR: "The request could not be completed.",
    types.HEADER_MISMATCH: "An MCP request header does not match the request body.",
    types.MISSING_REQUIRED_CLIENT_CAPABILITY: "The client lacks a capability this method needs.",
    types.UNSUPPORTED_PROTOCOL_VERSION: (
        "This protocol version is not served; data.supported lists the versions that are."
    ),
}
FALLBACK_SENTENCE = "The request could not be completed."
UNKNOWN_TOOL = "Unknown tool: tools/list names the tools this token may call."


class RpcRefusal(Exception):
    """A JSON-RPC error answered before the SDK sees the request: a fixed sentence, and the
    request's id when it had a valid one."""

    def __init__(self, code: int, message: str, request_id: types.RequestId | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id

    def response(self) -> Response:
        """With the HTTP status the SDK gives the code (400; 404 for an unknown method)."""
        return JSONResponse(
            {
                "jsonrpc": "2.0",
                "id": self.request_id,
                "error": {"code": self.code, "message": self.message},
            },
            status_code=ERROR_CODE_HTTP_STATUS.get(self.code, 400),
        )


@dataclass(frozen=True)
class CheckedMessage:
    """One JSON-RPC message that passed ``check_message``, and the bytes the SDK will read."""

    message: dict[str, Any]
    encoded: bytes

    @property
    def is_request(self) -> bool:
        return "id" in self.message


def _valid_id(value: Any) -> bool:
    """A string or an integer, as MCP requires (never null), and short enough to echo."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) <= MAX_ID_INTEGER
    return isinstance(value, str) and len(value) <= MAX_ID_CHARS and _encodable(value)


def _encodable(text: str) -> bool:
    """No lone surrogate: the answer echoing it must encode as UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_media_types(scope: Scope) -> None:
    """A JSON body, and an Accept header (if any) admitting a JSON answer. Raises the REST
    API's exceptions, so the answer is its envelope and sentences."""
    request = Request(scope)
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise UnsupportedMediaType(media_type="")
    if "accept" in request.headers and not check_accept_headers(request)[0]:
        raise NotAcceptable()


async def read_body(receive: Receive, declared_length: str | None) -> bytes | None:
    """The whole body, refused past ``MAX_BODY_BYTES`` (by its Content-Length before a byte is
    read, else while reading); None if the client went away."""
    declared = declared_length or ""
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise body_too_large(MAX_BODY_BYTES)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise body_too_large(MAX_BODY_BYTES)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def parse_message(raw: bytes) -> Any:
    """The body as JSON, by the REST API's strict rules; a refusal is JSON-RPC's parse error
    with the REST parser's sentence."""
    try:
        return parse_strict_json(raw)
    except ParseError as error:
        raise RpcRefusal(types.PARSE_ERROR, str(error.detail)) from None


@dataclass(frozen=True)
class ServedTools:
    """What a server answers: each request method with the SDK model its params must fit, and
    the names of its tools."""

    params_models: Mapping[str, type[BaseModel]]
    tool_names: frozenset[str]

    @classmethod
    def by(cls, server: Server[Any], tool_names: Iterable[str]) -> ServedTools:
        models: dict[str, type[BaseModel]] = {"initialize": types.InitializeRequestParams}
        for method in SPEC_CLIENT_METHODS:
            entry = server.get_request_handler(method)
            if entry is not None:
                models[method] = entry.params_type
        return cls(params_models=models, tool_names=frozenset(tool_names))


def check_message(data: Any, served: ServedTools) -> CheckedMessage:
    """One JSON-RPC 2.0 request or notification; a request must be for a method ``served``
    answers, with params its model accepts. Raises ``RpcRefusal``."""
    if isinstance(data, list):
        raise RpcRefusal(
            types.INVALID_REQUEST, "Batches are not accepted: send each message in its own request."
        )
    if not isinstance(data, dict):
        raise RpcRefusal(types.INVALID_REQUEST, "The body must be one JSON-RPC request object.")
    if "id" in data and not _valid_id(data["id"]):
        raise RpcRefusal(
            types.INVALID_REQUEST,
            f"id must be an integer or a string of at most {MAX_ID_CHARS} characters.",
        )
    request_id = data.get("id")
    if data.get("jsonrpc") != "2.0":
        raise RpcRefusal(types.INVALID_REQUEST, 'jsonrpc must be "2.0".', request_id)
    if not set(data) <= JSONRPC_MEMBERS:
        raise RpcRefusal(
            types.INVALID_REQUEST,
            "Only requests and notifications are accepted: jsonrpc, id, method and params.",
            request_id,
        )
    if not isinstance(data.get("method"), str):
        raise RpcRefusal(types.INVALID_REQUEST, "method must be a string.", request_id)
    if data.get("params") is None:
        data = {key: value for key, value in data.items() if key != "params"}
    elif not isinstance(data["params"], dict):
        raise RpcRefusal(types.INVALID_PARAMS, "params must be an object.", request_id)
    if "id" in data:
        _check_params(data["method"], data.get("params", {}), served, request_id)
    try:
        encoded = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        # Valid JSON, but no text: the SDK's parser refuses it, so refuse it here in our words.
        raise RpcRefusal(
            types.INVALID_REQUEST,
            "The body holds an escaped lone surrogate (\\ud800 to \\udfff), which is not text.",
            request_id,
        ) from None
    return CheckedMessage(data, encoded)


def _check_params(
    method: str, params: dict[str, Any], served: ServedTools, request_id: types.RequestId | None
) -> None:
    if method not in served.params_models:
        raise RpcRefusal(types.METHOD_NOT_FOUND, "Method not found.", request_id)
    if method == "tools/call":
        if not isinstance(params.get("name"), str):
            raise RpcRefusal(types.INVALID_PARAMS, "params.name must name a tool.", request_id)
        if params["name"] not in served.tool_names:
            raise RpcRefusal(types.INVALID_PARAMS, UNKNOWN_TOOL, request_id)
        if not isinstance(params.get("arguments", {}), dict | None):
            raise RpcRefusal(
                types.INVALID_PARAMS, "params.arguments must be an object.", request_id
            )
    try:
        served.params_models[method].model_validate(params, by_name=False)
    except ValidationError:
        # The SDK's own model, so it will not refuse them again; never its message.
        sentence = SDK_ERROR_SENTENCES[types.INVALID_PARAMS]
        raise RpcRefusal(types.INVALID_PARAMS, sentence, request_id) from None


def sdk_scope(scope: Scope, body_length: int) -> Scope:
    """The request as the SDK sees it: the headers this module checked, in the one spelling
    the SDK's own checks accept (it compares media types case-sensitively and requires an
    Accept header, which REST does not)."""
    replaced = {b"content-type", b"accept", b"content-length"}
    headers = [(name, value) for name, value in scope["headers"] if name not in replaced]
    headers += [
        (b"content-type", b"application/json"),
        (b"accept", b"application/json"),
        (b"content-length", str(body_length).encode()),
    ]
    return {**scope, "headers": headers}


def scrubbed_error(error: Any) -> dict[str, Any]:
    """A JSON-RPC error object with our sentence for its code; of its data only the supported
    protocol versions survive (a client negotiating a version needs them, and they are ours)."""
    code = error.get("code") if isinstance(error, dict) else None
    if isinstance(code, bool) or not isinstance(code, int):
        code = types.INTERNAL_ERROR
    sentence = SDK_ERROR_SENTENCES.get(code, FALLBACK_SENTENCE)
    scrubbed: dict[str, Any] = {"code": code, "message": sentence}
    data = error.get("data") if isinstance(error, dict) else None
    if code == types.UNSUPPORTED_PROTOCOL_VERSION and isinstance(data, dict):
        supported = data.get("supported")
        if isinstance(supported, list):
            scrubbed["data"] = {
                "supported": [version for version in supported if version in KNOWN_VERSIONS]
            }
    return scrubbed


def scrubbed_body(status: int, body: bytes) -> bytes:
    """The SDK's answer with any JSON-RPC error scrubbed; a success passes unchanged."""
    if not body and status < 400:
        return body  # 202 Accepted
    try:
        message = json.loads(body)
    except ValueError:
        message = None
    if isinstance(message, dict) and "result" in message and "error" not in message:
        return body
    request_id = message.get("id") if isinstance(message, dict) else None
    error = message.get("error") if isinstance(message, dict) else None
    answer = {
        "jsonrpc": "2.0",
        "id": request_id if _valid_id(request_id) else None,
        "error": scrubbed_error(error),
    }
    return json.dumps(answer, separators=(",", ":")).encode()


class ErrorScrubber:
    """The ``send`` the SDK answers through: its answer is held until complete (JSON mode: one
    short body), then sent with any JSON-RPC error scrubbed."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            return
        if message["type"] != "http.response.body" or self.start is None:
            await self.send(message)
            return
        self.chunks.append(message.get("body", b""))
        if message.get("more_body", False):
            return
        status = self.start["status"]
        sent = b"".join(self.chunks)
        body = scrubbed_body(status, sent)
        headers = self.start["headers"]
        if body is not sent:
            replaced = {b"content-length", b"content-type"}
            headers = [(name, value) for name, value in headers if name not in replaced]
            headers += [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ]
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})
