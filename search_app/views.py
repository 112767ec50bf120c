"""search_history over HTTP: a run token, a JSON body, one service call."""

from __future__ import annotations

import uuid

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from formation.auth import IsRunToken
from formation.errors import NotFound
from formation.fields import check_query_keys, query_params
from messages_app.serializers import message_summary
from search_app import services, tools
from search_app.serializers import (
    MemorySearchQuery,
    RunContentSerializer,
    SearchHistorySerializer,
    memory_body,
)


class SearchHistoryView(APIView):
    """``POST /api/v1/history/search``: perspective-safe, ranked full-text search."""

    permission_classes = [IsRunToken]

    def post(self, request: Request) -> Response:
        check_query_keys(request, allowed=set())
        serializer = SearchHistorySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response(tools.search_history(request.user, serializer))


class OwnRunView(APIView):
    """``/runs/{id}/...`` with a run token: only the token's own run exists for it."""

    permission_classes = [IsRunToken]

    def content(self, request: Request, run_id: uuid.UUID) -> str:
        check_query_keys(request, allowed=set())
        if run_id != request.user.run_id:
            raise NotFound()
        serializer = RunContentSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data["content"]


class RunReplyView(OwnRunView):
    """``POST /api/v1/runs/{id}/reply``: deliver the reply after the final delivery check."""

    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        content = self.content(request, run_id)
        reply = services.run_reply(
            workspace_id=request.user.workspace_id, run_id=run_id, content=content
        )
        return Response(message_summary(reply), status=status.HTTP_201_CREATED)


class RunMemoriesView(OwnRunView):
    """``POST /api/v1/runs/{id}/memories``: remember something, with the run's lineage."""

    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        content = self.content(request, run_id)
        memory = services.memory_create(
            workspace_id=request.user.workspace_id, run_id=run_id, content=content
        )
        return Response(memory_body(memory), status=status.HTTP_201_CREATED)


class MemoriesView(APIView):
    """``GET /api/v1/memories?query=``: the agent's memories this run's destination may see."""

    permission_classes = [IsRunToken]

    def get(self, request: Request) -> Response:
        params = query_params(request, MemorySearchQuery)
        memories = services.memory_search(
            workspace_id=request.user.workspace_id,
            run_id=request.user.run_id,
            query_text=params["query"],
            limit=params["limit"],
        )
        return Response(
            {
                "items": [memory_body(memory) for memory in memories],
                "total": len(memories),
                "limit": params["limit"],
            }
        )
