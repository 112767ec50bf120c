"""The four agent tools as a model sees them, and their execution outside HTTP.

Each tool is declared once: its name, a description written for a model, and the serializer that
validates its arguments. The JSON Schema that clients receive (``GET /api/v1/tools``,
``manage.py export_tools``, the MCP server) is generated from that serializer, which is the one
the REST endpoint validates with, so the published schema and the accepted arguments cannot drift:
a new serializer field without a description here, or of a type the generator does not know,
fails loudly instead of being published half-described.

``call_tool`` runs a tool for an authenticated caller through the same selectors and services as
the REST views and answers the same JSON body, or raises the same ``ApiError``; the MCP server is
a thin transport over it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal

from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.permissions import BasePermission

from formation.auth import BearerTokenAuthentication, Caller, IsAgentOrRunToken, IsRunToken
from formation.errors import ApiError, Unauthenticated
from formation.fields import Id, StrictSerializer, Timestamp
from messages_app import tools as message_tools
from messages_app.serializers import ListMessagesQuery, SearchMessagesQuery
from search_app import tools as history_tools
from search_app.serializers import (
    DEFAULT_HITS,
    MAX_HITS,
    SearchHistorySerializer,
)
from search_app.services import EVIDENCE_BUDGET

Style = Literal["mcp", "openai", "anthropic"]
STYLES: tuple[Style, ...] = ("mcp", "openai", "anthropic")


class GetMessageArguments(StrictSerializer):
    """get_message's one argument. Over REST the id is the path (``/messages/{id}``)."""

    messageId = Id()


@dataclass(frozen=True)
class AgentTool:
    name: str
    description: str
    arguments: type[serializers.Serializer]
    # One sentence per argument, keyed like the serializer's fields (checked when generating).
    argument_descriptions: Mapping[str, str]
    permission: type[BasePermission]
    # Answers the REST body, from the caller and the validated arguments serializer.
    run: Callable[[Caller, Any], dict[str, Any]]
    read_only: bool = True


# --- execution: the same functions the REST views call ---------------------------------------


def _list_messages(caller: Caller, arguments: ListMessagesQuery) -> dict[str, Any]:
    return message_tools.list_messages(caller, arguments.validated_data)


def _get_message(caller: Caller, arguments: GetMessageArguments) -> dict[str, Any]:
    return message_tools.get_message(caller, arguments.validated_data["messageId"])


def _search_messages(caller: Caller, arguments: SearchMessagesQuery) -> dict[str, Any]:
    return message_tools.search_messages(caller, arguments.validated_data)


# --- the definitions -------------------------------------------------------------------------

# search_history's query syntax (SPEC §6), for its description here and in the OpenAPI schema.
QUERY_SYNTAX = (
    "Query syntax: words are alternatives (any of them may match); a group in double quotes is "
    'one alternative that matches only where its words stand adjacent and in order ("release '
    'train"); a word of at least two letters or digits ending in * matches by prefix (deploy* '
    "finds deployment); every other character is plain text, and a quote without a partner is "
    "an ordinary character. Chinese, Japanese and Korean text is found by any word of two or "
    "more characters, also inside a sentence written without spaces."
)
# What the three membership tools add for a run token (runs that cannot be poisoned).
DELIVERABLE_NOTE = (
    " With a run token every message also carries deliverable: false means a reply citing it "
    "would be refused (delivery_blocked), because the conversation you answer may not see it; "
    "avoid reading such messages. A run created with toolScope deliverable is shown only the "
    "messages its conversation may receive, as search_history."
)

AGENT_TOOLS: tuple[AgentTool, ...] = (
    AgentTool(
        name="list_messages",
        description=(
            "Read one conversation's messages in order, newest first. Use it to page back "
            "through a conversation (limit and offset, optionally only messages before "
            "beforeDate) or to read the exchange around a message whose id you already have "
            "(exactly one of before, after or around). Only conversations this agent is a "
            "current member of can be read, and deleted messages never appear. It does not "
            "search: to find messages by their words use search_messages (exact text) or "
            "search_history (ranked search over everything this run may use)." + DELIVERABLE_NOTE
        ),
        arguments=ListMessagesQuery,
        argument_descriptions={
            "conversationId": "The conversation to read (a UUID).",
            "limit": (
                "How many messages to return, 1 to 200 (default 50). With around: up to "
                "limit/2 on each side of the anchor, plus the anchor."
            ),
            "offset": (
                "Skip this many of the newest messages (default 0, at most 100000). Not "
                "combinable with before, after or around."
            ),
            "beforeDate": (
                "Only messages created before this RFC 3339 time, e.g. 2026-01-02T03:04:05Z. "
                "Not combinable with before, after or around."
            ),
            "before": (
                "A message id: the limit messages just older than it. (A legacy RFC 3339 "
                "time here is read as beforeDate.)"
            ),
            "after": "A message id: the limit messages just newer than it.",
            "around": "A message id: that message with up to limit/2 messages on each side.",
        },
        permission=IsAgentOrRunToken,
        run=_list_messages,
    ),
    AgentTool(
        name="get_message",
        description=(
            "Fetch one message by its id (a UUID taken from another tool's result). Answers "
            "not_found both when the message does not exist and when this agent may not read "
            "its conversation. To see the messages around it, use list_messages with around "
            "set to this id." + DELIVERABLE_NOTE
        ),
        arguments=GetMessageArguments,
        argument_descriptions={"messageId": "The message's id (a UUID)."},
        permission=IsAgentOrRunToken,
        run=_get_message,
    ),
    AgentTool(
        name="search_messages",
        description=(
            "Find messages that contain an exact piece of text: a case-insensitive literal "
            "substring match, newest first, across the conversations this agent is a member of "
            "or inside one conversation. Use it for a phrase, name, number, code or error "
            "string you expect to appear verbatim. It is not semantic search and does not "
            "rank: no word forms, synonyms or paraphrases match, and % and _ are ordinary "
            "characters. To find what was said about a topic, or a decision, use "
            "search_history instead. total counts the items returned, not every match."
            + DELIVERABLE_NOTE
        ),
        arguments=SearchMessagesQuery,
        argument_descriptions={
            "query": (
                "The exact text to look for, 1 to 500 characters (not only spaces), matched "
                "case-insensitively as a substring."
            ),
            "conversationId": (
                "Only search this conversation (a UUID). Omit it to search every conversation "
                "this agent is a member of."
            ),
            "limit": "How many messages to return, 1 to 100 (default 20).",
        },
        permission=IsAgentOrRunToken,
        run=_search_messages,
    ),
    AgentTool(
        name="search_history",
        description=(
            "Search the past conversations this run may draw on, ranked by relevance, to "
            "answer questions such as 'what did we decide about the migration last month?'. "
            "Words match in any grammatical form (migrate, migrating, migration) and any of "
            "the query's words may match; hits with more, rarer and closer words rank higher, "
            "helped by who spoke, where and how recently. Each hit carries its conversation, "
            "speaker, time, text, the reasons for its rank and up to two messages on each side "
            "for context. Only messages that the current conversation's audience may receive "
            "are returned, and the run's current message and recent history are left out "
            "because you already have them. It is lexical full-text search, not semantic: "
            "synonyms and paraphrases do not match, so use the words people would have "
            "written; for an exact code or error string use search_messages. Needs a run "
            f"token. A run may bring in at most {EVIDENCE_BUDGET} distinct messages through "
            f"this tool; after that it answers search_budget_exhausted. {QUERY_SYNTAX}"
        ),
        arguments=SearchHistorySerializer,
        argument_descriptions={
            "query": (
                "Words to look for, at most 500 characters and 24 distinct words, phrases or "
                'prefixes: "quoted words" must be adjacent and in order, word* matches by '
                "prefix. Common words such as 'the' are ignored, so a query of only those is "
                "invalid."
            ),
            "speaker": (
                "Whose messages count as hits: anyone (the default), requester (the person "
                "being answered, including their linked accounts) or you (this agent)."
            ),
            "after": "Only hits created after this RFC 3339 time, e.g. 2026-01-02T03:04:05Z.",
            "before": "Only hits created before this RFC 3339 time.",
            "limit": (
                f"How many hits to return, 1 to {MAX_HITS} (default {DEFAULT_HITS}). Each hit "
                "also brings up to four neighbouring messages."
            ),
        },
        permission=IsRunToken,
        run=history_tools.search_history,
        read_only=False,
    ),
)

TOOLS_BY_NAME: dict[str, AgentTool] = {tool.name: tool for tool in AGENT_TOOLS}


# --- JSON Schema from the serializers ----------------------------------------------------------


def _with_null(schema: dict[str, Any]) -> dict[str, Any]:
    schema["type"] = [schema["type"], "null"]
    if "enum" in schema:
        schema["enum"] = [*schema["enum"], None]
    return schema


def field_schema(field: serializers.Field) -> dict[str, Any]:
    """JSON Schema for one argument field; an unknown field type is an error, never a guess."""
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
    if field.allow_null:
        schema = _with_null(schema)
    return schema


def input_schema(tool: AgentTool) -> dict[str, Any]:
    """The tool's arguments as a JSON Schema object: exactly the serializer's writable fields."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    fields = {name: f for name, f in tool.arguments().fields.items() if not f.read_only}
    missing = set(fields) ^ set(tool.argument_descriptions)
    if missing:
        raise LookupError(f"{tool.name}: argument descriptions out of step for {sorted(missing)}.")
    for name, field in fields.items():
        properties[name] = {**field_schema(field), "description": tool.argument_descriptions[name]}
        if field.required:
            required.append(name)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def tool_definition(tool: AgentTool, style: Style = "mcp") -> dict[str, Any]:
    """One tool in the shape an MCP client, OpenAI or Anthropic expects."""
    schema = input_schema(tool)
    if style == "openai":
        return {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": schema},
        }
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


def call_tool(*, caller: Caller, name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Run one tool as ``caller``: the REST endpoint's permission, validation and body.

    ``arguments`` are JSON, so they are held to a JSON body's types (``"5"`` is no integer,
    ``formation.fields.ArgumentInteger``) whichever part of the request REST reads them from.
    Raises ``KeyError`` for an unknown tool and ``ApiError`` / DRF's ``ValidationError`` for
    everything the REST endpoint would answer with an error envelope.
    """
    tool = TOOLS_BY_NAME[name]
    _check_permission(tool, caller)
    serializer = tool.arguments(data=dict(arguments))
    serializer.is_valid(raise_exception=True)
    return tool.run(caller, serializer)
