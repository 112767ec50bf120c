"""The agent tool definitions (formation/tools.py) against the endpoints they describe.

Both directions: every property a tool's schema declares is accepted by its REST endpoint (a
valid call using it succeeds) and validated there (a bad value is ``invalid_arguments`` naming
it); and nothing beyond the schema is accepted (the schema lists exactly the fields of the
serializer the endpoint validates with, and an unknown parameter is ``invalid_arguments``).
``call_tool``, which the MCP server runs, must answer what the endpoint answers, evidence
included. Content is synthetic.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from rest_framework import serializers
from rest_framework.test import APIClient

from formation import tools as formation_tools
from formation.errors import api_exception_handler
from formation.tools import (
    AGENT_TOOLS,
    STYLES,
    TOOLS_BY_NAME,
    call_tool,
    caller_for_token,
    field_schema,
    gemini_parameters,
    input_schema,
    openai_parameters,
    tool_definitions,
)
from messages_app import services
from messages_app.models import Message, RunEvidence, TokenKind
from search_app.runs.services import run_create
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

TOOL_NAMES = ["list_messages", "get_message", "search_messages", "search_history"]


class Tokens:
    """The world's agent behind an agent token and a run token (destination: public room)."""

    def __init__(self, world) -> None:
        _, self.agent = services.token_create(
            workspace_id=world.workspace.id, kind=TokenKind.AGENT, agent=world.agent
        )
        self.run_record, self.run = run_create(
            workspace_id=world.workspace.id,
            agent_id=world.agent.id,
            conversation_id=world.public.id,
            requester_id=world.alice.id,
        )
        _, self.service = services.token_create(
            workspace_id=world.workspace.id, kind=TokenKind.SERVICE
        )


@pytest.fixture
def tokens(world) -> Tokens:
    return Tokens(world)


@pytest.fixture
def messages(world) -> list[Message]:
    """Three messages in the private room a minute apart, and two "now" in the public room
    (observed by the agent, which joined at fixture time, so search_history finds them)."""
    dated = [
        factories.post(world.private, world.alice, f"sample status {i}", created_at=at(i))
        for i in range(3)
    ]
    recent = [
        factories.post(world.public, world.bob, "the migration plan is sample status"),
        factories.post(world.public, world.alice, "migration done"),
    ]
    return [*dated, *recent]


def rest_call(tool: str, token: str, arguments: dict[str, Any]):
    """The REST request that the tool call ``arguments`` stands for."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    if tool == "list_messages":
        return client.get("/api/v1/messages", arguments)
    if tool == "search_messages":
        return client.get("/api/v1/messages/search", arguments)
    if tool == "get_message":
        rest = dict(arguments)
        message_id = rest.pop("messageId")
        return client.get(f"/api/v1/messages/{message_id}", rest)
    return client.post("/api/v1/history/search", arguments, format="json")


def token_for(tool: str, tokens: Tokens) -> str:
    return tokens.run if tool == "search_history" else tokens.agent


def required_arguments(tool: str, world, messages) -> dict[str, Any]:
    return {
        "list_messages": {"conversationId": str(world.private.id)},
        "get_message": {"messageId": str(messages[1].id)},
        "search_messages": {"query": "sample"},
        "search_history": {"query": "migration"},
    }[tool]


# One valid value per (tool, optional property): a property added to a schema without a sample
# here fails test_samples_cover_every_property.
VALID: dict[str, dict[str, Callable[[Any, list[Message]], Any]]] = {
    "list_messages": {
        "limit": lambda w, m: 2,
        "offset": lambda w, m: 1,
        "beforeDate": lambda w, m: "2026-01-02T03:06:05Z",
        "before": lambda w, m: str(m[1].id),
        "after": lambda w, m: str(m[1].id),
        "around": lambda w, m: str(m[1].id),
        "maxTextLength": lambda w, m: 100,
    },
    "get_message": {},
    "search_messages": {
        "conversationId": lambda w, m: str(w.private.id),
        "limit": lambda w, m: 1,
        "maxTextLength": lambda w, m: 100,
    },
    "search_history": {
        "speaker": lambda w, m: "requester",
        "after": lambda w, m: "2000-01-01T00:00:00Z",
        "before": lambda w, m: "2999-01-01T00:00:00Z",
        "limit": lambda w, m: 1,
        "maxTextLength": lambda w, m: 100,
    },
}

# One invalid value per (tool, property), which the endpoint must refuse naming that property.
INVALID: dict[str, dict[str, Any]] = {
    "list_messages": {
        "conversationId": "not-a-uuid",
        "limit": 201,
        "offset": -1,
        "beforeDate": "yesterday",
        "before": "yesterday",
        "after": "not-a-uuid",
        "around": "not-a-uuid",
        "maxTextLength": 99,
    },
    "get_message": {"messageId": "not-a-uuid"},
    "search_messages": {
        "query": "",
        "conversationId": "not-a-uuid",
        "limit": 0,
        "maxTextLength": 100_001,
    },
    "search_history": {
        "query": "",
        "speaker": "everyone",
        "after": "yesterday",
        "before": "yesterday",
        "limit": 21,
        "maxTextLength": 0,
    },
}


def properties(tool: str) -> dict[str, Any]:
    return input_schema(TOOLS_BY_NAME[tool])["properties"]


def test_the_four_tools_in_order():
    assert [tool.name for tool in AGENT_TOOLS] == TOOL_NAMES


def test_samples_cover_every_property():
    for tool in TOOL_NAMES:
        schema = input_schema(TOOLS_BY_NAME[tool])
        optional = set(schema["properties"]) - set(schema["required"])
        assert set(VALID[tool]) == optional, tool
        assert set(INVALID[tool]) == set(schema["properties"]), tool


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_schema_lists_exactly_the_endpoint_serializers_fields(tool):
    definition = TOOLS_BY_NAME[tool]
    fields = definition.arguments().fields
    schema = input_schema(definition)

    assert set(schema["properties"]) == set(fields)
    assert set(schema["required"]) == {name for name, f in fields.items() if f.required}
    assert schema["additionalProperties"] is False
    assert all(prop["description"] for prop in schema["properties"].values())


@pytest.mark.parametrize(
    ("tool", "prop"),
    [(tool, prop) for tool in TOOL_NAMES for prop in VALID[tool]],
)
def test_every_optional_property_is_accepted_by_the_endpoint(tool, prop, world, messages, tokens):
    arguments = {
        **required_arguments(tool, world, messages),
        prop: VALID[tool][prop](world, messages),
    }

    response = rest_call(tool, token_for(tool, tokens), arguments)

    assert response.status_code == 200, response.content


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_required_properties_alone_are_accepted(tool, world, messages, tokens):
    response = rest_call(tool, token_for(tool, tokens), required_arguments(tool, world, messages))

    assert response.status_code == 200, response.content


@pytest.mark.parametrize(
    ("tool", "prop"),
    [(tool, prop) for tool in TOOL_NAMES for prop in INVALID[tool] if tool != "get_message"],
)
def test_every_property_is_validated_by_the_endpoint(tool, prop, world, messages, tokens):
    arguments = {**required_arguments(tool, world, messages), prop: INVALID[tool][prop]}

    response = rest_call(tool, token_for(tool, tokens), arguments)

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_arguments"
    assert prop in error["details"]["fields"]


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_an_unknown_parameter_is_refused_by_the_endpoint_and_the_tool(
    tool, world, messages, tokens
):
    arguments = {**required_arguments(tool, world, messages), "conversation_id": "x"}
    caller = caller_for_token(token_for(tool, tokens))

    response = rest_call(tool, token_for(tool, tokens), arguments)
    with pytest.raises(serializers.ValidationError) as refused:
        call_tool(caller=caller, name=tool, arguments=arguments)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_arguments"
    assert "conversation_id" in response.json()["error"]["details"]["fields"]
    assert "conversation_id" in refused.value.detail


def test_a_malformed_message_id_is_not_found_over_rest_and_invalid_as_a_tool_argument(
    world, messages, tokens
):
    # A path that names nothing is not_found (docs/api.md, "Paths"); a bad argument is invalid.
    response = rest_call("get_message", tokens.agent, {"messageId": "not-a-uuid"})
    with pytest.raises(serializers.ValidationError):
        call_tool(
            caller=caller_for_token(tokens.agent),
            name="get_message",
            arguments={"messageId": "not-a-uuid"},
        )

    assert response.status_code == 404


# --- call_tool answers what the endpoint answers ------------------------------------------------


def approx_floats(value: Any) -> Any:
    """search_history's recency moves with the clock between two calls: compare floats loosely."""
    if isinstance(value, float):
        return pytest.approx(value, abs=1e-5)
    if isinstance(value, dict):
        return {key: approx_floats(item) for key, item in value.items()}
    if isinstance(value, list):
        return [approx_floats(item) for item in value]
    return value


def tool_answer(tool: str, token: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """What the MCP server sends back: the body, or the REST error envelope."""
    try:
        return call_tool(caller=caller_for_token(token), name=tool, arguments=arguments)
    except Exception as error:
        return api_exception_handler(error, {}).data


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("list_messages", {}),
        ("list_messages", {"around": "message"}),
        ("list_messages", {"beforeDate": "2026-01-02T03:05:35Z", "limit": 1}),
        ("get_message", {}),
        ("search_messages", {"limit": 2}),
        ("search_messages", {"conversationId": "public"}),
    ],
)
@pytest.mark.parametrize("kind", ["agent", "run"])
def test_call_tool_answers_like_the_endpoint(tool, extra, kind, world, messages, tokens):
    lookups = {"message": str(messages[1].id), "public": str(world.public.id)}
    arguments = {
        **required_arguments(tool, world, messages),
        **{key: lookups.get(value, value) for key, value in extra.items()},
    }
    token = tokens.agent if kind == "agent" else tokens.run

    rest = rest_call(tool, token, arguments)

    assert rest.status_code == 200
    assert tool_answer(tool, token, arguments) == rest.json()


def test_call_tool_search_history_answers_like_the_endpoint(world, messages, tokens):
    _, second_run = run_create(
        workspace_id=world.workspace.id,
        agent_id=world.agent.id,
        conversation_id=world.public.id,
        requester_id=world.alice.id,
    )
    arguments = {"query": "migration plan", "limit": 5}

    rest = rest_call("search_history", tokens.run, arguments).json()
    answer = tool_answer("search_history", second_run, arguments)

    assert rest["total"] == 2
    assert answer == approx_floats(rest)


@pytest.mark.parametrize(
    ("tool", "token", "arguments"),
    [
        ("get_message", "agent", {"messageId": str(uuid.uuid4())}),
        ("list_messages", "agent", {"conversationId": str(uuid.uuid4())}),
        ("search_history", "agent", {"query": "migration"}),
        ("search_history", "run", {"query": "the and"}),
        ("search_messages", "service", {"query": "sample"}),
        ("list_messages", "agent", {"conversationId": "x", "limit": "many"}),
    ],
)
def test_call_tool_errors_are_the_endpoint_envelope(tool, token, arguments, world, tokens):
    raw = {"agent": tokens.agent, "run": tokens.run, "service": tokens.service}[token]

    rest = rest_call(tool, raw, arguments)

    assert rest.status_code >= 400
    assert tool_answer(tool, raw, arguments) == rest.json()


def test_call_tool_records_the_same_evidence_as_the_endpoint(world, messages, tokens):
    second_run, second_token = run_create(
        workspace_id=world.workspace.id,
        agent_id=world.agent.id,
        conversation_id=world.public.id,
        requester_id=world.alice.id,
    )
    # Each call brings in messages no earlier call returned (evidence keeps the first tool).
    calls = [
        ("list_messages", {"conversationId": str(world.private.id), "limit": 1}),
        ("get_message", {"messageId": str(messages[0].id)}),
        ("search_messages", {"query": "sample status 1"}),
        ("search_history", {"query": "plan"}),
    ]
    for tool, arguments in calls:
        rest_call(tool, tokens.run, arguments)
        tool_answer(tool, second_token, arguments)

    def evidence(run_id) -> set[tuple[uuid.UUID, str]]:
        return set(RunEvidence.objects.filter(run_id=run_id).values_list("message_id", "tool"))

    assert evidence(tokens.run_record.id) == evidence(second_run.id)
    assert {tool for _, tool in evidence(second_run.id)} == set(TOOL_NAMES)


def test_a_run_token_call_is_refused_when_no_app_holds_runs(world, messages, tokens, monkeypatch):
    """Without the run's owner installed (search_app/tools.py), a run token's call must not run
    unheld: it would return messages no delivery check could see."""
    monkeypatch.setattr(formation_tools, "_run_holders", [])
    arguments = {"conversationId": str(world.private.id)}

    with pytest.raises(ImproperlyConfigured):
        call_tool(caller=caller_for_token(tokens.run), name="list_messages", arguments=arguments)

    assert not RunEvidence.objects.filter(run=tokens.run_record).exists()
    # An agent token has no run to hold, and search_history holds its own.
    assert call_tool(
        caller=caller_for_token(tokens.agent), name="list_messages", arguments=arguments
    )
    assert call_tool(
        caller=caller_for_token(tokens.run), name="search_history", arguments={"query": "plan"}
    )


def test_a_tool_is_registered_once():
    with pytest.raises(ImproperlyConfigured):
        formation_tools.register(TOOLS_BY_NAME["get_message"])
    assert [tool.name for tool in AGENT_TOOLS] == TOOL_NAMES


# --- definitions ------------------------------------------------------------------------------


def test_styles_wrap_each_tool_in_its_api_shape():
    mcp, openai, anthropic, gemini = (tool_definitions(style) for style in STYLES)

    for plain, function, claude, declaration in zip(mcp, openai, anthropic, gemini, strict=True):
        assert set(plain) == {"name", "description", "inputSchema"}
        assert function == {
            "type": "function",
            "function": {
                "name": plain["name"],
                "description": plain["description"],
                "parameters": openai_parameters(TOOLS_BY_NAME[plain["name"]]),
                "strict": True,
            },
        }
        assert declaration == {
            "name": plain["name"],
            "description": plain["description"],
            "parameters": gemini_parameters(TOOLS_BY_NAME[plain["name"]]),
        }
        assert claude == {
            "name": plain["name"],
            "description": plain["description"],
            "input_schema": plain["inputSchema"],
        }


def test_descriptions_tell_literal_from_ranked_search():
    definitions = {tool["name"]: tool["description"] for tool in tool_definitions()}

    assert "literal" in definitions["search_messages"]
    assert "not semantic" in definitions["search_messages"]
    assert "search_history" in definitions["search_messages"]
    assert "not semantic" in definitions["search_history"]
    assert "search_messages" in definitions["search_history"]
    assert "run token" in definitions["search_history"]


def test_an_unknown_field_type_is_never_guessed():
    with pytest.raises(TypeError):
        field_schema(serializers.BooleanField())


def test_nullable_arguments_say_so():
    speaker = properties("search_history")["speaker"]

    assert speaker["anyOf"] == [
        {"type": "string", "enum": ["anyone", "requester", "you"]},
        {"type": "null"},
    ]


@pytest.mark.parametrize("kind", ["agent", "run", "service"])
def test_tools_endpoint_answers_any_valid_token(kind, tokens):
    raw = {"agent": tokens.agent, "run": tokens.run, "service": tokens.service}[kind]

    response = factories.bearer_client(raw).get("/api/v1/tools")

    assert response.status_code == 200
    assert response.json() == {"items": tool_definitions(), "total": 4}


@pytest.mark.parametrize("style", STYLES)
def test_tools_endpoint_styles(style, tokens):
    response = factories.bearer_client(tokens.agent).get("/api/v1/tools", {"style": style})

    assert response.json()["items"] == tool_definitions(style)


@pytest.mark.parametrize("query", [{"style": "xml"}, {"kind": "openai"}])
def test_tools_endpoint_refuses_unknown_parameters_and_styles(query, tokens):
    response = factories.bearer_client(tokens.agent).get("/api/v1/tools", query)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_arguments"


def test_tools_endpoint_needs_a_token(db):
    response = APIClient().get("/api/v1/tools")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
