"""Each model API's dialect of the tool schemas, held to the rules its provider publishes.

- ``mcp`` and ``anthropic``: JSON Schema that the MCP Inspector's ``--strict`` portability
  check (``@modelcontextprotocol/inspector`` 2.12, ``tools/list``) passes without an error or a
  warning, accepting exactly what the ``type``-array spelling it replaced accepted.
- ``openai``: OpenAI's Structured Outputs guide, "Supported schemas", for strict function
  calling.
- ``gemini``: the Gemini API reference's ``FunctionDeclaration`` and ``Schema`` (a subset of
  OpenAPI 3.0's schema object).

The rules are written here from those pages, not read from ``formation/tools.py``, so a
dialect that drifts from its provider fails here rather than at the provider.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from rest_framework.exceptions import ValidationError

from formation.tools import (
    AGENT_TOOLS,
    TOOLS_BY_NAME,
    call_tool,
    caller_for_token,
    input_schema,
    tool_arguments,
    tool_definitions,
)
from search_app.runs.services import run_create
from tests import factories

TOOL_NAMES = [tool.name for tool in AGENT_TOOLS]
JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}


def subschemas(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, Any, str | None]]:
    """Every schema position under ``schema`` (itself included), with its path and the keyword
    that holds it."""

    def visit(node: Any, where: str, keyword: str | None) -> Iterator[tuple[str, Any, str | None]]:
        yield where, node, keyword
        if not isinstance(node, dict):
            return
        for name, child in node.get("properties", {}).items():
            yield from visit(child, f"{where}.properties.{name}", "properties")
        for key in ("anyOf", "oneOf", "allOf"):
            for index, child in enumerate(node.get(key, [])):
                yield from visit(child, f"{where}.{key}[{index}]", key)
        for key in ("items", "not", "additionalProperties"):
            if key in node:
                yield from visit(node[key], f"{where}.{key}", key)

    yield from visit(schema, path or "$", None)


# --- MCP and Anthropic: what the MCP Inspector's --strict check reports -----------------------

# The Inspector's schema lint (core/json/schemaLint.ts): a node with none of these keywords
# accepts anything ("untyped-schema"); a bare boolean is allowed only under these keywords.
CONSTRAINING = {
    *("type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum"),
    *("exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "maxItems", "minItems"),
    *("uniqueItems", "maxProperties", "minProperties", "required", "allOf", "anyOf", "oneOf"),
    *("not", "items", "properties", "additionalProperties", "$ref"),
}
BOOLEAN_VALUED = {"additionalProperties", "unevaluatedProperties", "additionalItems"}


def inspector_findings(schema: dict[str, Any]) -> list[str]:
    """What ``inspector --cli … --method tools/list --strict`` reports for one input schema."""
    findings = []
    for path, node, keyword in subschemas(schema):
        if isinstance(node, bool):
            if keyword not in BOOLEAN_VALUED:
                findings.append(f"boolean-schema at {path}")
            continue
        if isinstance(node.get("type"), list):
            findings.append(f"type-union at {path}")
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            findings.append(f"remote-ref at {path}")
        if keyword != "not" and not CONSTRAINING & set(node):
            findings.append(f"untyped-schema at {path}")
    return findings


def json_schemas() -> Iterator[tuple[str, dict[str, Any]]]:
    for definition in tool_definitions("mcp"):
        yield definition["name"], definition["inputSchema"]
    for definition in tool_definitions("anthropic"):
        yield definition["name"], definition["input_schema"]


@pytest.mark.parametrize(("tool", "schema"), list(json_schemas()))
def test_the_mcp_and_anthropic_schemas_pass_the_inspectors_portability_check(tool, schema):
    Draft202012Validator.check_schema(schema)
    assert inspector_findings(schema) == [], tool


def test_the_portability_check_here_finds_what_the_inspector_found_before():
    """The four warnings of issue 38, on the spelling the schemas had then."""
    before = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "speaker": {"type": ["string", "null"], "enum": ["anyone", None]},
            "limit": {"type": ["integer", "null"], "minimum": 1},
        },
    }

    assert inspector_findings(before) == [
        "type-union at $.properties.speaker",
        "type-union at $.properties.limit",
    ]
    assert inspector_findings({"properties": {"x": {"description": "anything"}}}) == [
        "untyped-schema at $.properties.x"
    ]


def type_array_spelling(tool: str) -> dict[str, Any]:
    """The input schema as it was spelled before issue 38: a nullable argument's ``type`` an
    array with ``"null"``, and null among its ``enum``."""
    properties = {}
    for argument in tool_arguments(TOOLS_BY_NAME[tool]):
        schema = dict(argument.schema)
        if argument.nullable:
            schema["type"] = [schema["type"], "null"]
            if "enum" in schema:
                schema["enum"] = [*schema["enum"], None]
        properties[argument.name] = {**schema, "description": argument.description}
    return {"type": "object", "properties": properties, "additionalProperties": False}


def samples(schema: dict[str, Any]) -> list[Any]:
    """Values around one argument's constraints: every JSON type, its enum, its bounds."""
    values: list[Any] = [None, "", "x", "anyone", 0, 1, 20, 21, 5.5, True, [], {}]
    values += ["2026-01-02T03:04:05Z", "7d1f0c5e-3d0e-4d5b-9f3a-2a1b3c4d5e6f", "a" * 501]
    for branch in schema.get("anyOf", [schema]):
        values += branch.get("enum", [])
        for key in ("minimum", "maximum"):
            if key in branch:
                values += [branch[key] - 1, branch[key], branch[key] + 1]
    return values


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_the_mcp_schema_accepts_exactly_what_the_type_array_spelling_did(tool):
    now = Draft202012Validator(input_schema(TOOLS_BY_NAME[tool]))
    before = Draft202012Validator(type_array_spelling(tool))
    required = {
        "list_messages": {"conversationId": "7d1f0c5e-3d0e-4d5b-9f3a-2a1b3c4d5e6f"},
        "get_message": {"messageId": "7d1f0c5e-3d0e-4d5b-9f3a-2a1b3c4d5e6f"},
        "search_messages": {"query": "migration"},
        "search_history": {"query": "migration"},
    }[tool]

    for name, schema in input_schema(TOOLS_BY_NAME[tool])["properties"].items():
        for value in samples(schema):
            arguments = {**required, name: value}
            assert now.is_valid(arguments) == before.is_valid(arguments), (name, value)
    assert now.is_valid(required)
    assert not now.is_valid({**required, "unknown": 1})


def test_null_and_absent_stay_accepted_where_the_spec_says():
    schema = Draft202012Validator(input_schema(TOOLS_BY_NAME["search_history"]))
    nulls = {"speaker": None, "after": None, "before": None, "limit": None}

    assert schema.is_valid({"query": "migration"})
    assert schema.is_valid({"query": "migration", **nulls})
    assert not schema.is_valid({"query": None})
    assert not schema.is_valid({"query": "migration", "speaker": "everyone"})


# --- OpenAI: strict function calling ----------------------------------------------------------

OPENAI_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
OPENAI_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6"}
OPENAI_FORMATS |= {"uuid"}
# "Supported properties": beside the type, by the type they constrain.
OPENAI_KEYWORDS = {
    "string": {"pattern", "format"},
    "number": {"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"},
    "integer": {"multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"},
    "array": {"items", "minItems", "maxItems"},
    "object": {"properties", "required", "additionalProperties"},
    "boolean": set(),
    "null": set(),
}
OPENAI_ANY_TYPE = {"type", "description", "enum", "const", "anyOf", "$ref", "$defs", "title"}


def openai_findings(definition: dict[str, Any]) -> list[str]:
    """Where one OpenAI tool breaks strict mode's published rules."""
    findings = []
    if set(definition) != {"type", "function"} or definition["type"] != "function":
        findings.append("not a function tool")
    function = definition["function"]
    if not OPENAI_NAME.fullmatch(function["name"]):
        findings.append("name")
    if function.get("strict") is not True:
        findings.append("strict is not true")
    parameters = function["parameters"]
    if parameters.get("type") != "object" or "anyOf" in parameters:
        findings.append("the root is not an object")
    properties = 0
    for path, node, keyword in subschemas(parameters):
        if keyword == "additionalProperties" and isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            findings.append(f"{path}: not a schema object")
            continue
        types = node.get("type", [])
        types = types if isinstance(types, list) else [types]
        if not types and "anyOf" not in node and "$ref" not in node:
            findings.append(f"{path}: no type")
        if not set(types) <= JSON_TYPES:
            findings.append(f"{path}: type {types}")
        allowed = OPENAI_ANY_TYPE.union(*(OPENAI_KEYWORDS.get(t, set()) for t in types))
        if set(node) - allowed:
            findings.append(f"{path}: unsupported {sorted(set(node) - allowed)}")
        if "format" in node and node["format"] not in OPENAI_FORMATS:
            findings.append(f"{path}: format {node['format']}")
        if "null" in types and "enum" in node and None not in node["enum"]:
            findings.append(f"{path}: nullable, but null is not among its enum")
        if "object" in types:
            properties += len(node.get("properties", {}))
            if node.get("additionalProperties") is not False:
                findings.append(f"{path}: additionalProperties is not false")
            if node.get("required") != list(node.get("properties", {})):
                findings.append(f"{path}: not every property is required")
        if path.count(".properties.") > 10:
            findings.append(f"{path}: nested deeper than 10 levels")
        if len(node.get("enum", [])) > 1000:
            findings.append(f"{path}: more than 1000 enum values")
    if properties > 5000:
        findings.append("more than 5000 properties")
    return findings


@pytest.mark.parametrize("definition", tool_definitions("openai"), ids=TOOL_NAMES)
def test_the_openai_tools_are_valid_under_strict_function_calling(definition):
    Draft202012Validator.check_schema(definition["function"]["parameters"])
    assert openai_findings(definition) == []


def test_the_openai_rules_here_catch_what_strict_mode_refuses():
    loose = {
        "type": "function",
        "function": {
            "name": "search_history",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1},
                    "limit": {"type": "integer", "default": 8},
                },
                "required": ["query"],
            },
        },
    }

    assert openai_findings(loose) == [
        "strict is not true",
        "$: additionalProperties is not false",
        "$: not every property is required",
        "$.properties.query: unsupported ['minLength']",
        "$.properties.limit: unsupported ['default']",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_a_strict_mode_call_is_the_tools_call_once_its_nulls_are_dropped(world, tool):
    """Strict mode makes the model send every argument, null for those it leaves out. Null
    means absent for every tool: dropped, the call is what the tool takes; kept, only
    search_history accepts it (its REST body does too), the others refuse it as their REST
    endpoints do (docs/mcp.md)."""
    message = factories.post(world.public, world.bob, "the migration plan is ready")
    _, token = run_create(
        workspace_id=world.workspace.id,
        agent_id=world.agent.id,
        conversation_id=world.public.id,
        requester_id=world.alice.id,
    )
    caller = caller_for_token(token)
    given = {
        "list_messages": {"conversationId": str(world.public.id)},
        "get_message": {"messageId": str(message.id)},
        "search_messages": {"query": "migration"},
        "search_history": {"query": "migration"},
    }[tool]
    parameters = next(
        d["function"]["parameters"]
        for d in tool_definitions("openai")
        if d["function"]["name"] == tool
    )
    sent = {name: given.get(name) for name in parameters["required"]}
    assert Draft202012Validator(parameters).is_valid(sent)

    dropped = {name: value for name, value in sent.items() if value is not None}
    assert call_tool(caller=caller, name=tool, arguments=dropped)
    nullable = {a.name for a in tool_arguments(TOOLS_BY_NAME[tool]) if a.nullable}
    if set(sent) - set(dropped) <= nullable:
        assert call_tool(caller=caller, name=tool, arguments=sent)
    else:
        with pytest.raises(ValidationError):
            call_tool(caller=caller, name=tool, arguments=sent)


# --- Gemini: function declarations ------------------------------------------------------------

GEMINI_FUNCTION_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_.-]{0,63}")
GEMINI_PARAMETER_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}")
# The fields of the Gemini API's Schema object.
GEMINI_FIELDS = {
    *("type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems"),
    *("properties", "required", "minProperties", "maxProperties", "minLength", "maxLength"),
    *("pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum"),
    "maximum",
}
# Its Type enum, as written in OpenAPI (the API reads either case).
GEMINI_TYPES = {"string", "number", "integer", "boolean", "array", "object"}
# The formats the Gemini API accepts per type; any other fails the request.
GEMINI_FORMATS = {"string": {"enum", "date-time"}, "integer": {"int32", "int64"}}
GEMINI_FORMATS["number"] = {"float", "double"}


def gemini_findings(declaration: dict[str, Any]) -> list[str]:
    """Where one function declaration leaves what the Gemini API documents."""
    findings = []
    if set(declaration) - {"name", "description", "parameters"}:
        findings.append(f"fields {sorted(set(declaration))}")
    if not GEMINI_FUNCTION_NAME.fullmatch(declaration["name"]):
        findings.append("name")
    parameters = declaration["parameters"]
    if parameters.get("type", "").lower() != "object":
        findings.append("parameters is not an object")
    for name in parameters.get("properties", {}):
        if not GEMINI_PARAMETER_NAME.fullmatch(name):
            findings.append(f"parameter name {name}")
    for path, node, keyword in subschemas(parameters):
        if keyword == "additionalProperties" and isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            findings.append(f"{path}: not a schema object")
            continue
        if set(node) - GEMINI_FIELDS:
            findings.append(f"{path}: undocumented {sorted(set(node) - GEMINI_FIELDS)}")
        kind = node.get("type")
        if not isinstance(kind, str) or kind.lower() not in GEMINI_TYPES:
            findings.append(f"{path}: type {kind!r}")
            continue
        if "format" in node and node["format"] not in GEMINI_FORMATS.get(kind.lower(), set()):
            findings.append(f"{path}: format {node['format']}")
        if not all(isinstance(value, str) for value in node.get("enum", [])):
            findings.append(f"{path}: an enum value that is not a string")
        if "nullable" in node and not isinstance(node["nullable"], bool):
            findings.append(f"{path}: nullable is not a boolean")
        if not set(node.get("required", [])) <= set(node.get("properties", {})):
            findings.append(f"{path}: required names no property")
    return findings


@pytest.mark.parametrize("declaration", tool_definitions("gemini"), ids=TOOL_NAMES)
def test_the_gemini_declarations_keep_to_the_documented_schema(declaration):
    assert gemini_findings(declaration) == []


def test_the_gemini_rules_here_catch_what_the_api_refuses():
    json_schema = {
        "name": "search_history",
        "parameters": {
            "type": "object",
            "properties": {
                "speaker": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "after": {"type": ["string", "null"]},
                "id": {"type": "string", "format": "uuid"},
            },
            "additionalProperties": False,
        },
    }

    assert gemini_findings(json_schema) == [
        "$: undocumented ['additionalProperties']",
        "$.properties.speaker: type None",
        "$.properties.speaker.anyOf[1]: type 'null'",
        "$.properties.after: type ['string', 'null']",
        "$.properties.id: format uuid",
    ]


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_each_dialect_has_the_same_arguments_required_and_nullable(tool):
    arguments = tool_arguments(TOOLS_BY_NAME[tool])
    mcp = input_schema(TOOLS_BY_NAME[tool])
    (gemini,) = (d["parameters"] for d in tool_definitions("gemini") if d["name"] == tool)
    (openai,) = (
        d["function"]["parameters"]
        for d in tool_definitions("openai")
        if d["function"]["name"] == tool
    )
    names = [argument.name for argument in arguments]
    required = [argument.name for argument in arguments if argument.required]
    nullable = {argument.name for argument in arguments if argument.nullable}

    assert list(mcp["properties"]) == list(gemini["properties"]) == list(openai["properties"])
    assert list(mcp["properties"]) == names
    assert mcp["required"] == gemini["required"] == required
    assert openai["required"] == names
    assert {n for n, p in gemini["properties"].items() if p.get("nullable")} == nullable
    assert {n for n, p in mcp["properties"].items() if "anyOf" in p} == nullable
    assert {n for n, p in openai["properties"].items() if "null" in p["type"]} == (
        nullable | (set(names) - set(required))
    )
