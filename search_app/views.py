"""A run's endpoints, search_history and memories over HTTP: validate, one call, serialize."""

from __future__ import annotations

import uuid

from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_app.serializers import search_audit_item
from formation.auth import IsRunToken, IsServiceOrRunToken
from formation.errors import NotFound
from formation.fields import check_query_keys, query_params
from formation.tools import ToolView
from messages_app.models import Run
from messages_app.serializers import (
    ListPageQuery,
    RunCreateSerializer,
    RunSerializer,
    message_summary,
)
from messages_app.views import ServiceViewSet, validated
from search_app import runs, services, tools
from search_app.serializers import (
    MemorySearchQuery,
    RunContentSerializer,
    memory_body,
)


class RunViewSet(ServiceViewSet):
    """``POST /runs`` opens a run (its token in the answer, once); ``GET /runs/{id}`` reads it."""

    model = Run
    output_serializer = RunSerializer
    filterset_class = None

    def create(self, request: Request) -> Response:
        data = validated(RunCreateSerializer, request)
        run, token = runs.run_create(
            workspace_id=request.user.workspace_id,
            agent_id=data["agentId"],
            conversation_id=data["conversationId"],
            requester_id=data["requesterId"],
            current_message_id=data.get("currentMessageId"),
            recent_message_ids=data.get("recentMessageIds", []),
        )
        return Response({**RunSerializer(run).data, "token": token}, status=status.HTTP_201_CREATED)


class SearchHistoryView(ToolView):
    """``POST /api/v1/history/search``: perspective-safe, ranked full-text search."""

    tool = tools.SEARCH_HISTORY

    def post(self, request: Request) -> Response:
        check_query_keys(request, allowed=set())
        return self.answer(request, validated(self.tool.arguments, request))


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
        reply = runs.run_reply(
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


class RunTraceView(APIView):
    """``GET /api/v1/runs/{id}/trace``: what the run's searches did, for the runtime or the run."""

    permission_classes = [IsServiceOrRunToken]

    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        page = query_params(request, ListPageQuery)
        limit, offset = page["limit"], page["offset"]
        events = runs.run_trace(caller=request.user, run_id=run_id)
        items = list(events[offset : offset + limit])
        total = len(items) if offset == 0 and len(items) < limit else events.count()
        with_exclusions = request.user.is_service
        return Response(
            {
                "items": [search_audit_item(e, with_exclusions=with_exclusions) for e in items],
                "total": total,
                "limit": limit,
                "offset": offset,
            }
        )
