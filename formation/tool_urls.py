"""``GET /api/v1/tools``: the agent tools' definitions, ready to hand to a model API.

Any valid token may read them (service, agent or run): they are the same for everybody and hold
nothing of the workspace, and the runtime that assembles a model's prompt usually holds a service
token. search_history is listed for every caller; calling it still needs a run token.
"""

from django.urls import path
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from formation.fields import Choice, StrictSerializer, query_params
from formation.openapi import answers
from formation.tools import STYLES, tool_definitions

# The answer's shape: the definitions are generated (formation/tools.py), so it is written here
# as JSON Schema, one alternative per style.
TOOL_LIST = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "description": "One definition per tool, in the shape `style` names.",
            "items": {
                "oneOf": [
                    {
                        "title": "mcp",
                        "type": "object",
                        "required": ["name", "description", "inputSchema"],
                        "properties": {
                            "name": {"type": "string"},
                            "description": {"type": "string"},
                            "inputSchema": {"type": "object", "description": "JSON Schema."},
                        },
                    },
                    {
                        "title": "openai",
                        "type": "object",
                        "required": ["type", "function"],
                        "properties": {
                            "type": {"type": "string", "enum": ["function"]},
                            "function": {
                                "type": "object",
                                "required": ["name", "description", "parameters", "strict"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "description": {"type": "string"},
                                    "parameters": {
                                        "type": "object",
                                        "description": "JSON Schema for strict function calling.",
                                    },
                                    "strict": {"type": "boolean", "enum": [True]},
                                },
                            },
                        },
                    },
                    {
                        "title": "anthropic",
                        "type": "object",
                        "required": ["name", "description", "input_schema"],
                        "properties": {
                            "name": {"type": "string"},
                            "description": {"type": "string"},
                            "input_schema": {"type": "object", "description": "JSON Schema."},
                        },
                    },
                    {
                        "title": "gemini",
                        "type": "object",
                        "required": ["name", "description", "parameters"],
                        "properties": {
                            "name": {"type": "string"},
                            "description": {"type": "string"},
                            "parameters": {
                                "type": "object",
                                "description": "Gemini's subset of an OpenAPI 3.0 schema object.",
                            },
                        },
                    },
                ]
            },
        },
        "total": {"type": "integer"},
    },
    "required": ["items", "total"],
}


class ToolListQuery(StrictSerializer):
    # Not ``format``: DRF reads that query key to pick a renderer.
    style = Choice(choices=STYLES, default="mcp")


@extend_schema_view(
    get=extend_schema(
        operation_id="tools_list",
        summary="Agent tool definitions",
        description=(
            "Any valid token (service, agent or run). The four agent tools with JSON Schemas "
            "generated from the serializers their endpoints validate with; "
            f"`style` picks the shape: {', '.join(STYLES)}."
        ),
        tags=["Tool definitions"],
        parameters=[ToolListQuery],
        responses=answers({200: TOOL_LIST}, 400, 401),
    )
)
class ToolListView(APIView):
    def get(self, request: Request) -> Response:
        items = tool_definitions(query_params(request, ToolListQuery)["style"])
        return Response({"items": items, "total": len(items)})


urlpatterns = [
    path("tools", ToolListView.as_view(), name="tool-list"),
]
