"""A run's endpoints, search_history and memories over HTTP: validate, one call, serialize; each
with its OpenAPI annotation (``formation.openapi`` holds the shared envelope and parameters)."""

from __future__ import annotations

import uuid

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from formation.auth import IsRunToken, IsServiceOrRunToken
from formation.db_retries import retrying_conflicts
from formation.errors import AuditUnavailable, NotFound, RateLimited, Unavailable
from formation.fields import check_query_keys, query_params
from formation.openapi import (
    RUNS_TAG,
    RUNTIME_TAG,
    SERVICE,
    TOOLS_TAG,
    answers,
    declare_links,
    error_response,
    id_in_path,
)
from formation.tools import ToolView
from formation.viewsets import ListPageQuery, ServiceViewSet, validated
from messages_app.models import Run, ToolScope
from messages_app.serializers import MessageSummaryShape
from search_app import services, tools
from search_app.errors import DeliveryBlocked, SearchBudgetExhausted
from search_app.history.results import SPEAKERS
from search_app.limits import EVIDENCE_BUDGET
from search_app.runs import selectors as run_selectors
from search_app.runs import services as run_services
from search_app.serializers import (
    HistorySearchResult,
    MemoryCreated,
    MemorySearchQuery,
    MemorySearchResult,
    RunContentInput,
    RunCreated,
    RunCreateInput,
    RunShape,
    RunStatusShape,
)
from search_app.trace import RunTrace, search_audit_item

RUN_ONLY = "Needs the run's own token (another run is not_found)."
DELIVERY_BLOCKED = error_response(
    "DeliveryBlockedError",
    [DeliveryBlocked],
    "the final delivery check refused the reply; nothing was stored.",
)
SEARCH_LIMITS = error_response(
    "SearchLimitError",
    [SearchBudgetExhausted, RateLimited],
    f"the run has brought in its {EVIDENCE_BUDGET} evidence messages; or too many requests "
    "for this token.",
)
SEARCH_UNAVAILABLE = error_response(
    "SearchUnavailableError",
    [AuditUnavailable, Unavailable],
    "the search could not be audited, so it was not performed; or the database is unavailable.",
)


@extend_schema_view(
    create=extend_schema(
        summary="Create a run",
        description=f"{SERVICE} The answer carries the run token, once.",
        tags=[RUNTIME_TAG],
        request=RunCreateInput,
        responses=answers({201: RunCreated}, 400, 401, 403),
    ),
    retrieve=extend_schema(
        summary="Get a run",
        description=f"{SERVICE} Whether it has replied, its tool scope, how many messages "
        "its tools returned and how much of search_history's budget is left.",
        tags=[RUNTIME_TAG],
        parameters=[id_in_path()],
        responses=answers({200: RunStatusShape}, 401, 403, 404),
    ),
)
class RunViewSet(ServiceViewSet):
    """``POST /runs`` opens a run (its token in the answer, once); ``GET /runs/{id}`` reads it."""

    model = Run
    output_serializer = RunShape
    filterset_class = None

    def create(self, request: Request) -> Response:
        data = validated(RunCreateInput, request)
        run, token = run_services.run_create(
            workspace_id=request.user.workspace_id,
            agent_id=data["agentId"],
            conversation_id=data["conversationId"],
            requester_id=data["requesterId"],
            current_message_id=data.get("currentMessageId"),
            recent_message_ids=data.get("recentMessageIds", []),
            tool_scope=data.get("toolScope", ToolScope.MEMBERSHIP),
        )
        return Response(RunCreated.render(run, token=token), status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, pk: str) -> Response:
        check_query_keys(request, allowed=set())
        run = run_selectors.run_status(workspace_id=request.user.workspace_id, run_id=pk)
        return Response(RunStatusShape.of(run))


@extend_schema_view(
    post=extend_schema(
        operation_id="search_history",
        summary="search_history",
        description=(
            "Needs a run token (an agent or service token, or a finished run, is "
            "forbidden). Ranked full-text search over what the run's audience may receive; "
            f"`speaker` is one of {', '.join(SPEAKERS)}; `null` means not given. Each run "
            f"may bring in {EVIDENCE_BUDGET} distinct messages (hits and neighbours). "
            f"{tools.QUERY_SYNTAX}"
        ),
        tags=[TOOLS_TAG],
        request=tools.SEARCH_HISTORY.arguments,
        responses=answers(
            {200: HistorySearchResult},
            400,
            401,
            403,
            limited=SEARCH_LIMITS,
            unavailable=SEARCH_UNAVAILABLE,
        ),
    )
)
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
        serializer = RunContentInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data["content"]


@extend_schema_view(
    post=extend_schema(
        operation_id="run_reply",
        summary="Reply through the run",
        description=(
            f"{RUN_ONLY} Re-checks every message the run's tools returned against the "
            "destination's audience as it stands now; if any fails, delivery_blocked and "
            "nothing is stored. Stores the reply with that evidence as its lineage and "
            "finishes the run (a second reply is invalid_arguments)."
        ),
        tags=[RUNS_TAG],
        parameters=[id_in_path("run_id")],
        request=RunContentInput,
        responses=answers(
            {201: MessageSummaryShape}, 400, 401, 403, 404, own={409: DELIVERY_BLOCKED}
        ),
    )
)
class RunReplyView(OwnRunView):
    """``POST /api/v1/runs/{id}/reply``: deliver the reply after the final delivery check."""

    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        content = self.content(request, run_id)
        reply = retrying_conflicts(
            lambda: run_services.run_reply(
                workspace_id=request.user.workspace_id, run_id=run_id, content=content
            )
        )
        return Response(MessageSummaryShape.render(reply), status=status.HTTP_201_CREATED)


@extend_schema_view(
    post=extend_schema(
        operation_id="memory_create",
        summary="Remember something",
        description=(
            f"{RUN_ONLY} The memory inherits the restrictions of everything the run has "
            "seen. Allowed after the reply too."
        ),
        tags=[RUNS_TAG],
        parameters=[id_in_path("run_id")],
        request=RunContentInput,
        responses=answers({201: MemoryCreated}, 400, 401, 403, 404),
    )
)
class RunMemoriesView(OwnRunView):
    """``POST /api/v1/runs/{id}/memories``: remember something, with the run's lineage."""

    def post(self, request: Request, run_id: uuid.UUID) -> Response:
        content = self.content(request, run_id)
        memory = retrying_conflicts(
            lambda: services.memory_create(
                workspace_id=request.user.workspace_id, run_id=run_id, content=content
            )
        )
        return Response(MemoryCreated.render(memory), status=status.HTTP_201_CREATED)


@extend_schema_view(
    get=extend_schema(
        operation_id="memory_search",
        summary="Search the agent's memories",
        description=(
            "Needs a run token. The agent's memories that match the query's words and that "
            "the run's destination may receive, best first."
        ),
        tags=[RUNS_TAG],
        parameters=[MemorySearchQuery],
        responses=answers({200: MemorySearchResult}, 400, 401, 403),
    )
)
class MemoriesView(APIView):
    """``GET /api/v1/memories?query=``: the agent's memories this run's destination may see."""

    permission_classes = [IsRunToken]

    def get(self, request: Request) -> Response:
        params = query_params(request, MemorySearchQuery)
        memories = retrying_conflicts(
            lambda: services.memory_search(
                workspace_id=request.user.workspace_id,
                run_id=request.user.run_id,
                query_text=params["query"],
                limit=params["limit"],
            )
        )
        return Response(
            MemorySearchResult.render(
                {"items": memories, "total": len(memories), "limit": params["limit"]}
            )
        )


@extend_schema_view(
    get=extend_schema(
        operation_id="run_trace",
        summary="A run's trace",
        description="A service token, or the run's own token (another run is not_found). "
        "Each search_history call is a `search_audit` event, oldest first; `limit` "
        "(default 50, at most 200) and `offset`.",
        tags=[RUNS_TAG],
        parameters=[id_in_path("run_id"), ListPageQuery],
        responses=answers({200: RunTrace}, 400, 401, 403, 404),
    )
)
class RunTraceView(APIView):
    """``GET /api/v1/runs/{id}/trace``: what the run's searches did, for the runtime or the run."""

    permission_classes = [IsServiceOrRunToken]

    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        page = query_params(request, ListPageQuery)
        limit, offset = page["limit"], page["offset"]
        events = run_selectors.run_trace(caller=request.user, run_id=run_id)
        items = list(events[offset : offset + limit])
        total = len(items) if offset == 0 and len(items) < limit else events.count()
        with_exclusions = request.user.is_service
        return Response(
            RunTrace.render(
                items=[search_audit_item(e, with_exclusions=with_exclusions) for e in items],
                total=total,
                limit=limit,
                offset=offset,
            )
        )


declare_links(
    {
        "runs_create": {
            "GetRun": ("runs_retrieve", "id"),
            "Reply": ("run_reply", "run_id"),
            "RememberMemory": ("memory_create", "run_id"),
            "GetTrace": ("run_trace", "run_id"),
        }
    }
)
