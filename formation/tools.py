"""The agent tool registry: each app declares its tools, and everything that shows or runs
a tool (``GET /api/v1/tools``, ``manage.py export_tools``, the REST views, the MCP server) reads
them here.

An app declares its tools in its own ``tools.py`` (``messages_app``: list_messages, get_message
and search_messages; ``search_app``: search_history), which its ``AppConfig.ready`` imports, so
they are listed in ``INSTALLED_APPS`` order. A tool is declared once: its name, a description
written for a model, the serializer that validates its arguments, and its body. The JSON Schema
that clients receive is generated from that serializer, which is the one the REST endpoint
validates with, so the published schema and the accepted arguments cannot drift: a new
serializer field without a description, or of a type the generator does not know, fails loudly
instead of being published half-described.

Every body has one signature, ``body(call, arguments) -> dict``: the ``ToolCall`` (the caller,
and for a run token the run's destination, requester and lens) and the validated arguments; it
answers the REST body, or raises the same ``ApiError``. ``run_tool`` is the one way in, for the
REST views (``ToolView``) and ``call_tool`` (the MCP server's) alike, so it is also where every
call is measured: its latency and outcome in the metrics, its span when tracing is on, both
named by the tool and never by its arguments.

Runs. A run token's call holds its run while the body runs: the run is share-locked, and what
the body reports with ``call.returned`` becomes the run's evidence in the same transaction.
How a run is held belongs to the app that owns runs (``search_app/runs/``), which installs it
with ``hold_runs_with``, so this module imports no app; a run token's call with nothing
installed is refused rather than left without evidence. search_history locks its run itself
(``locks_run_itself``), exclusively, to spend its budget.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from formation import metrics, tracing
from formation.auth import BearerTokenAuthentication, Caller
from formation.db_retries import retrying_conflicts
from formation.errors import ApiError, Unauthenticated, error_code
from formation.fields import Timestamp

Style = Literal["mcp", "openai", "anthropic", "gemini"]
STYLES: tuple[Style, ...] = ("mcp", "openai", "anthropic", "gemini")


@dataclass
class ToolCall:
    """One call of an agent tool as its body sees it: the caller and, with a run token, the
    run's destination and requester, the lens the run's perspective puts on the body's
    statement, and what the body answers (the run's evidence)."""

    caller: Caller
    destination_id: uuid.UUID | None = None
    requester_id: uuid.UUID | None = None
    # Set by the run's holder (``messages_app.lens.RunLens``, built by search_app), which
    # this module does not know; None with an agent token.
    lens: Any = None
    returned_ids: list[uuid.UUID] = dataclasses.field(default_factory=list)
    # Numbers the body reports for the call's span (``hits``, ``neighbours``): counts only,
    # never ids or text.
    counts: dict[str, int] = dataclasses.field(default_factory=dict)

    def returned(self, messages: Iterable[Any]) -> None:
        """The body is about to answer these messages."""
        self.returned_ids.extend(message.id for message in messages)


ToolBody = Callable[[ToolCall, dict[str, Any]], dict[str, Any]]
# Holds a run token's run for one call of the named tool (see the module docstring).
RunHolder = Callable[[ToolCall, str], AbstractContextManager[None]]


@dataclass(frozen=True)
class AgentTool:
    name: str
    description: str
    arguments: type[serializers.Serializer]
    # One sentence per argument, keyed like the serializer's fields (checked when generating).
    argument_descriptions: Mapping[str, str]
    permission: type[BasePermission]
    body: ToolBody
    read_only: bool = True
    # The body locks a run token's run itself, instead of the registry holding it shared.
    locks_run_itself: bool = False
    # Arguments MCP calls get when they leave them out (or null), e.g. a bound on each text
    # that keeps an answer inside a model's context; REST keeps the serializer's defaults.
    mcp_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)


AGENT_TOOLS: list[AgentTool] = []
TOOLS_BY_NAME: dict[str, AgentTool] = {}
_run_holders: list[RunHolder] = []


def register(tool: AgentTool) -> AgentTool:
    """Add ``tool`` to the registry (an app's ``tools.py`` does, when its app is ready)."""
    if tool.name in TOOLS_BY_NAME:
        raise ImproperlyConfigured(f"The agent tool {tool.name} is registered twice.")
    AGENT_TOOLS.append(tool)
    TOOLS_BY_NAME[tool.name] = tool
    return tool


def hold_runs_with(holder: RunHolder) -> None:
    """Install how a run token's call holds its run (the app that owns runs does, once)."""
    if _run_holders:
        raise ImproperlyConfigured("Runs are already held by another function.")
    _run_holders.append(holder)


def run_tool(tool: AgentTool, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run ``tool``'s body for an authenticated, permitted caller with validated arguments
    (again, from the start, if a deadlock rolled it back), measured and traced as one call."""
    started = time.perf_counter()
    calls: list[ToolCall] = []
    outcome = "ok"
    with tracing.tool_span(tool.name) as span:
        try:
            answer = retrying_conflicts(lambda: _run_tool_once(tool, caller, arguments, calls))
            items = answer.get("items")
            if isinstance(items, list):
                calls[-1].counts.setdefault("items", len(items))
            return answer
        except Exception as error:
            outcome = error_code(error)
            raise
        finally:
            if settings.METRICS_ENABLED:
                metrics.TOOL_CALLS.labels(tool.name, outcome).inc()
                metrics.TOOL_SECONDS.labels(tool.name).observe(time.perf_counter() - started)
            span.finish(outcome=outcome, counts=calls[-1].counts if calls else {})


def _run_tool_once(
    tool: AgentTool, caller: Caller, arguments: dict[str, Any], calls: list[ToolCall]
) -> dict[str, Any]:
    call = ToolCall(caller=caller)
    calls.append(call)
    if caller.run_id is None or tool.locks_run_itself:
        return tool.body(call, arguments)
    if not _run_holders:
        raise ImproperlyConfigured("No installed app holds runs for tool calls.")
    with _run_holders[0](call, tool.name):
        return tool.body(call, arguments)


class ToolView(APIView):
    """A tool's REST endpoint: the tool's permission, then its body through ``run_tool``."""

    tool: AgentTool

    def get_permissions(self) -> list[BasePermission]:
        return [self.tool.permission()]

    def answer(self, request: Request, arguments: dict[str, Any]) -> Response:
        return Response(run_tool(self.tool, request.user, arguments))


# --- JSON Schema from the serializers ----------------------------------------------------------
#
# One description of each argument (``Argument``), written out in each model API's dialect:
#
# - ``mcp`` and ``anthropic``: JSON Schema in the spelling every client reads. A nullable
#   argument is ``anyOf`` a single-type branch and ``{"type": "null"}``, never a ``type`` array,
#   which clients that map schemas onto a single-``type`` dialect reject (the MCP Inspector's
#   ``--strict`` portability check warns about it). It accepts exactly what a type array would.
# - ``openai``: OpenAI's strict function calling (``strict: true``), which takes only a subset of
#   JSON Schema: every property listed in ``required``, ``additionalProperties: false``, and an
#   optional argument written as nullable with a type array, so the model sends ``null`` for
#   one it leaves out. Null means absent for every tool, so the runtime drops null arguments
#   before calling (docs/mcp.md); keywords strict mode does not support are left out.
# - ``gemini``: Gemini's function declarations, a subset of the OpenAPI 3.0 schema object: one
#   ``type`` string, ``nullable: true``, no ``additionalProperties``, and only the string
#   formats the Gemini API accepts.


@dataclass(frozen=True)
class Argument:
    """One argument of a tool as every dialect starts from it."""

    name: str
    # Its JSON Schema without null: one ``type``, its constraints and its default.
    schema: dict[str, Any]
    description: str
    required: bool
    # Null is accepted (and means what absent means).
    nullable: bool


def field_schema(field: serializers.Field) -> dict[str, Any]:
    """JSON Schema for one argument field, null aside (``Argument.nullable`` says whether it is
    accepted); an unknown field type is an error, never a guess."""
    schema: dict[str, Any]
    if isinstance(field, Timestamp):
        schema = {"type": "string", "format": "date-time"}
    elif isinstance(field, serializers.UUIDField):
        schema = {"type": "string", "format": "uuid"}
    elif isinstance(field, serializers.ChoiceField):
        schema = {"type": "string", "enum": [str(choice) for choice in field.choices]}
    elif isinstance(field, serializers.IntegerField):
        schema = {"type": "integer"}
        if field.min_value is not None:
            schema["minimum"] = field.min_value
        if field.max_value is not None:
            schema["maximum"] = field.max_value
    elif isinstance(field, serializers.CharField):
        schema = {"type": "string"}
        min_length = field.min_length
        if min_length is None and not field.allow_blank:
            min_length = 1
        if min_length:
            schema["minLength"] = min_length
        if field.max_length is not None:
            schema["maxLength"] = field.max_length
    else:
        raise TypeError(f"No JSON Schema mapping for {type(field).__name__}.")
    if field.default is not empty and not callable(field.default):
        schema["default"] = field.default
    return schema


def tool_arguments(tool: AgentTool) -> list[Argument]:
    """The tool's arguments: exactly the serializer's writable fields, each described."""
    fields = {name: f for name, f in tool.arguments().fields.items() if not f.read_only}
    missing = set(fields) ^ set(tool.argument_descriptions)
    if missing:
        raise LookupError(f"{tool.name}: argument descriptions out of step for {sorted(missing)}.")
    return [
        Argument(
            name=name,
            schema=field_schema(field),
            description=tool.argument_descriptions[name],
            required=field.required,
            nullable=field.allow_null,
        )
        for name, field in fields.items()
    ]


def _json_schema_property(argument: Argument) -> dict[str, Any]:
    if not argument.nullable:
        return {**argument.schema, "description": argument.description}
    branch = {key: value for key, value in argument.schema.items() if key != "default"}
    annotations = {key: value for key, value in argument.schema.items() if key == "default"}
    return {
        "anyOf": [branch, {"type": "null"}],
        **annotations,
        "description": argument.description,
    }


def input_schema(tool: AgentTool) -> dict[str, Any]:
    """The tool's arguments as a JSON Schema object (the ``mcp`` and ``anthropic`` dialect)."""
    arguments = tool_arguments(tool)
    return {
        "type": "object",
        "properties": {argument.name: _json_schema_property(argument) for argument in arguments},
        "required": [argument.name for argument in arguments if argument.required],
        "additionalProperties": False,
    }


# The keywords OpenAI's strict mode supports beside ``type``, ``enum`` and ``description``
# (its Structured Outputs guide, "Supported schemas"). The others (``minLength``, ``maxLength``,
# ``default``) are left out, not refused: the descriptions give a model the lengths and
# defaults it needs, and the tool still checks them.
OPENAI_STRICT_KEYWORDS = frozenset(
    {
        "format",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)


def _openai_property(argument: Argument) -> dict[str, Any]:
    schema = {
        key: value
        for key, value in argument.schema.items()
        if key in OPENAI_STRICT_KEYWORDS or key in ("type", "enum")
    }
    if argument.nullable or not argument.required:
        schema["type"] = [schema["type"], "null"]
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
    return {**schema, "description": argument.description}


def openai_parameters(tool: AgentTool) -> dict[str, Any]:
    """The tool's arguments for OpenAI's strict function calling: every one required, the
    optional ones nullable (the model's ``null`` stands for an argument left out)."""
    arguments = tool_arguments(tool)
    return {
        "type": "object",
        "properties": {argument.name: _openai_property(argument) for argument in arguments},
        "required": [argument.name for argument in arguments],
        "additionalProperties": False,
    }


# The string formats the Gemini API accepts in a function declaration (any other, such as
# ``uuid``, fails the request); each tool's description says an id is a UUID.
GEMINI_STRING_FORMATS = frozenset({"enum", "date-time"})


def _gemini_property(argument: Argument) -> dict[str, Any]:
    schema = dict(argument.schema)
    if schema.get("format") not in (None, *GEMINI_STRING_FORMATS):
        del schema["format"]
    if argument.nullable:
        schema["nullable"] = True
    return {**schema, "description": argument.description}


def gemini_parameters(tool: AgentTool) -> dict[str, Any]:
    """The tool's arguments as a Gemini function declaration's ``parameters`` (OpenAPI 3.0's
    schema object, the subset Gemini reads)."""
    arguments = tool_arguments(tool)
    return {
        "type": "object",
        "properties": {argument.name: _gemini_property(argument) for argument in arguments},
        "required": [argument.name for argument in arguments if argument.required],
    }


def tool_definition(tool: AgentTool, style: Style = "mcp") -> dict[str, Any]:
    """One tool in the shape an MCP client, OpenAI, Anthropic or Gemini expects."""
    if style == "openai":
        return {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": openai_parameters(tool),
                "strict": True,
            },
        }
    if style == "gemini":
        return {
            "name": tool.name,
            "description": tool.description,
            "parameters": gemini_parameters(tool),
        }
    schema = input_schema(tool)
    if style == "anthropic":
        return {"name": tool.name, "description": tool.description, "input_schema": schema}
    return {"name": tool.name, "description": tool.description, "inputSchema": schema}


def tool_definitions(style: Style = "mcp") -> list[dict[str, Any]]:
    return [tool_definition(tool, style) for tool in AGENT_TOOLS]


# --- execution outside HTTP ------------------------------------------------------------------


def caller_from_authorization(header: str) -> Caller:
    """The caller of an ``Authorization`` header, by the class that authenticates REST calls."""
    authenticated = BearerTokenAuthentication().authenticate(
        SimpleNamespace(META={"HTTP_AUTHORIZATION": header})
    )
    if authenticated is None:
        raise Unauthenticated()
    return authenticated[0]


def caller_for_token(raw_token: str) -> Caller:
    return caller_from_authorization(f"Bearer {raw_token}")


def _check_permission(tool: AgentTool, caller: Caller) -> None:
    """The REST endpoint's permission; raises its ``Forbidden``."""
    tool.permission().has_permission(SimpleNamespace(user=caller), None)


def tools_for(caller: Caller) -> tuple[AgentTool, ...]:
    """The tools ``caller`` may call (MCP's ``tools/list``): an agent token has no run, so no
    search_history."""
    permitted = []
    for tool in AGENT_TOOLS:
        try:
            _check_permission(tool, caller)
        except ApiError:
            continue
        permitted.append(tool)
    return tuple(permitted)


def with_mcp_defaults(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with the named tool's MCP defaults for those left out or null (an unknown
    tool's as they are: ``call_tool`` refuses it)."""
    tool = TOOLS_BY_NAME.get(name)
    given = dict(arguments)
    for key, value in (tool.mcp_defaults if tool else {}).items():
        if given.get(key) is None:
            given[key] = value
    return given


def call_tool(*, caller: Caller, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Run one tool as ``caller`` outside HTTP: the REST endpoint's permission, validation and
    body.

    ``arguments`` are JSON, so they are held to a JSON body's types (``"5"`` is no integer,
    ``formation.fields.ArgumentInteger``) whichever part of the request REST reads them from.
    Raises ``KeyError`` for an unknown tool and ``ApiError`` / DRF's ``ValidationError`` for
    everything the REST endpoint would answer with an error envelope.
    """
    tool = TOOLS_BY_NAME[name]
    _check_permission(tool, caller)
    serializer = tool.arguments(data=dict(arguments))
    serializer.is_valid(raise_exception=True)
    return run_tool(tool, caller, serializer.validated_data)
