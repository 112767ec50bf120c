"""The message tools' endpoints (list_messages, search_messages, get_message), and the
runtime's edit and delete of one message, which share get_message's path.

Each agent tool is declared once in ``messages_app/tools.py`` (arguments, shape, handler) and
answered through ``formation.tools.ToolView``, the same way REST and MCP call it.
"""

from __future__ import annotations

import uuid

from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response

from formation.auth import IsServiceToken
from formation.fields import check_query_keys, query_params
from formation.openapi import (
    AGENT,
    RUNTIME_TAG,
    SERVICE,
    TOOLS_TAG,
    answers,
    id_in_path,
    tool_parameters,
)
from formation.tools import ToolView
from formation.viewsets import validated
from messages_app import selectors, services, tools
from messages_app.schema import LEGAL_HOLD
from messages_app.serializers import (
    MessageEditInput,
    MessagePage,
    MessageSearchResult,
    MessageSummaryShape,
    ToolMessageSummary,
)


@extend_schema_view(
    get=extend_schema(
        operation_id="list_messages",
        summary="list_messages",
        description=(
            f"{AGENT} A conversation the agent is a current member of, newest first. "
            "Offset mode: `limit`, `offset`, optional `beforeDate`. Positional mode: "
            "exactly one of `before`, `after`, `around` (message ids), not combinable with "
            "`offset` or `beforeDate`; an anchor the agent cannot see is not_found. A "
            "non-UUID `before` must be RFC 3339 and is read as `beforeDate`."
        ),
        tags=[TOOLS_TAG],
        parameters=tool_parameters(tools.LIST_MESSAGES),
        responses=answers({200: MessagePage}, 400, 401, 403, 404),
    )
)
class ListMessagesView(ToolView):
    """list_messages: newest first; offset mode, or positional before/after/around an anchor."""

    tool = tools.LIST_MESSAGES

    def get(self, request: Request) -> Response:
        return self.answer(request, query_params(request, self.tool.arguments))


@extend_schema_view(
    get=extend_schema(
        operation_id="search_messages",
        summary="search_messages",
        description=(
            f"{AGENT} Case-insensitive literal substring (`%`, `_` and `\\` match "
            "themselves), newest first, across the agent's conversations or in "
            "`conversationId` (not_found if the agent is not a member). Not semantic "
            "search: see search_history."
        ),
        tags=[TOOLS_TAG],
        parameters=tool_parameters(tools.SEARCH_MESSAGES),
        responses=answers({200: MessageSearchResult}, 400, 401, 403, 404),
    )
)
class SearchMessagesView(ToolView):
    """search_messages: literal, case-insensitive substring; newest first; bounded."""

    tool = tools.SEARCH_MESSAGES

    def get(self, request: Request) -> Response:
        return self.answer(request, query_params(request, self.tool.arguments))


@extend_schema_view(
    get=extend_schema(
        operation_id="get_message",
        summary="get_message",
        description=(
            f"{AGENT} A missing message and one in a conversation the agent is not a "
            "current member of give the same not_found. Takes no query parameters."
        ),
        tags=[TOOLS_TAG],
        parameters=[id_in_path("message_id")],
        responses=answers({200: ToolMessageSummary}, 400, 401, 403, 404),
    ),
    patch=extend_schema(
        operation_id="message_edit",
        summary="Edit a message",
        description=f"{SERVICE} Search stays in step with the new text; no earlier version "
        "is kept, so a legal hold on the conversation refuses it (legal_hold_active).",
        tags=[RUNTIME_TAG],
        parameters=[id_in_path("message_id")],
        request=MessageEditInput,
        responses={
            **answers({200: MessageSummaryShape}, 400, 401, 403, 404),
            409: LEGAL_HOLD,
        },
    ),
    delete=extend_schema(
        operation_id="message_delete",
        summary="Delete a message",
        description=f"{SERVICE} Erases the body for good; deleting twice is not_found; "
        "a legal hold on the conversation refuses it (legal_hold_active).",
        tags=[RUNTIME_TAG],
        parameters=[id_in_path("message_id")],
        responses={
            **answers({204: OpenApiResponse(description="Deleted.")}, 400, 401, 403, 404),
            409: LEGAL_HOLD,
        },
    ),
)
class MessageView(ToolView):
    """``/messages/{id}``: get_message for agents; edit and soft delete for the runtime."""

    tool = tools.GET_MESSAGE

    def get_permissions(self):
        # HEAD is GET without a body: the same tool and the same callers.
        if self.request.method in SAFE_METHODS:
            return super().get_permissions()
        return [IsServiceToken()]

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        check_query_keys(request, allowed=set())

    def get(self, request: Request, message_id: uuid.UUID) -> Response:
        return self.answer(request, {"messageId": message_id})

    def patch(self, request: Request, message_id: uuid.UUID) -> Response:
        data = validated(MessageEditInput, request)
        message = selectors.runtime_message(
            workspace_id=request.user.workspace_id, message_id=message_id
        )
        edited = services.message_edit(message=message, content=data["content"])
        return Response(MessageSummaryShape.render(edited))

    def delete(self, request: Request, message_id: uuid.UUID) -> Response:
        message = selectors.runtime_message(
            workspace_id=request.user.workspace_id, message_id=message_id
        )
        services.message_delete(message=message)
        return Response(status=status.HTTP_204_NO_CONTENT)
