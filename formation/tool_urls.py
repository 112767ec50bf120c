"""``GET /api/v1/tools``: the agent tools' definitions, ready to hand to a model API.

Any valid token may read them (service, agent or run): they are the same for everybody and hold
nothing of the workspace, and the runtime that assembles a model's prompt usually holds a service
token. search_history is listed for every caller; calling it still needs a run token.
"""

from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from formation.fields import Choice, StrictSerializer, query_params
from formation.tools import STYLES, tool_definitions


class ToolListQuery(StrictSerializer):
    # Not ``format``: DRF reads that query key to pick a renderer.
    style = Choice(choices=STYLES, default="mcp")


class ToolListView(APIView):
    def get(self, request: Request) -> Response:
        items = tool_definitions(query_params(request, ToolListQuery)["style"])
        return Response({"items": items, "total": len(items)})


urlpatterns = [
    path("tools", ToolListView.as_view(), name="tool-list"),
]
