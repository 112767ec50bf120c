"""Thin DRF views: validate, call one service or selector, serialize.

Ingestion endpoints need a service token; the agent tools need an agent or run token. The
workspace always comes from the token (``request.user`` is a ``formation.auth.Caller``), and
every lookup of an object by id is scoped to it, so another workspace's ids are simply not found.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.viewsets import GenericViewSet

from formation.auth import IsAgentOrRunToken, IsServiceToken
from formation.errors import InvalidArguments
from formation.fields import check_query_keys, query_params
from messages_app import selectors, services, tools
from messages_app.filters import (
    AccountFilter,
    AgentFilter,
    ConversationFilter,
    IdentityLinkFilter,
    MembershipFilter,
)
from messages_app.models import Account, Agent, Conversation, IdentityLink, Run, ToolScope
from messages_app.selectors import get_or_not_found
from messages_app.serializers import (
    AccountCreateSerializer,
    AccountSerializer,
    AgentCreateSerializer,
    AgentSerializer,
    ConversationCreateSerializer,
    ConversationSerializer,
    IdentityLinkCreateSerializer,
    IdentityLinkSerializer,
    ListMessagesQuery,
    ListPageQuery,
    MemberJoinSerializer,
    MemberLeaveSerializer,
    MembershipSerializer,
    MessageBulkSerializer,
    MessageCreateSerializer,
    MessageEditSerializer,
    RunCreateSerializer,
    RunSerializer,
    RunStatusSerializer,
    SearchMessagesQuery,
    message_summary,
)

UUID_PATTERN = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
PAGE_KEYS = {"limit", "offset"}


def validated(serializer_class, request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def paged(request: Request, queryset: QuerySet, filterset_class, output_serializer) -> Response:
    """A filtered, offset-paged list: ``{items, total, limit, offset}``.

    Unknown or repeated query keys and invalid filter values are ``invalid_arguments``.
    """
    check_query_keys(request, set(filterset_class.base_filters) | PAGE_KEYS)
    filterset = filterset_class(data=request.query_params, queryset=queryset, request=request)
    if not filterset.is_valid():
        raise InvalidArguments(details={"fields": filterset.errors})
    page = ListPageQuery(
        data={key: request.query_params[key] for key in PAGE_KEYS & set(request.query_params)}
    )
    page.is_valid(raise_exception=True)
    limit, offset = page.validated_data["limit"], page.validated_data["offset"]
    items = list(filterset.qs[offset : offset + limit])
    # When the first page holds everything, its length is the total: no count query.
    total = len(items) if offset == 0 and len(items) < limit else filterset.qs.count()
    return Response(
        {
            "items": output_serializer(items, many=True).data,
            "total": total,
            "limit": limit,
            "offset": offset,
        }
    )


class ServiceViewSet(GenericViewSet):
    """List (paged, filtered), retrieve and create, for the runtime's service token."""

    permission_classes = [IsServiceToken]
    lookup_value_regex = UUID_PATTERN
    model: type
    output_serializer: type
    order_by: tuple[str, ...] = ("created_at", "id")

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        """Writes take no query string: a stray ``?seq=1`` is refused, not ignored."""
        super().initial(request, *args, **kwargs)
        if request.method not in SAFE_METHODS:
            check_query_keys(request, allowed=set())

    def get_queryset(self) -> QuerySet:
        return self.model.objects.filter(workspace_id=self.request.user.workspace_id)

    def list(self, request: Request) -> Response:
        queryset = self.get_queryset().order_by(*self.order_by)
        return paged(request, queryset, self.filterset_class, self.output_serializer)

    def retrieve(self, request: Request, pk: str) -> Response:
        check_query_keys(request, allowed=set())
        return Response(self.output_serializer(get_or_not_found(self.get_queryset(), pk)).data)


class AccountViewSet(ServiceViewSet):
    model = Account
    output_serializer = AccountSerializer
    filterset_class = AccountFilter

    def create(self, request: Request) -> Response:
        data = validated(AccountCreateSerializer, request)
        account = services.account_create(
            workspace_id=request.user.workspace_id,
            display_name=data["displayName"],
            external_id=data.get("externalId"),
        )
        return Response(AccountSerializer(account).data, status=status.HTTP_201_CREATED)


class AgentViewSet(ServiceViewSet):
    model = Agent
    output_serializer = AgentSerializer
    filterset_class = AgentFilter

    def create(self, request: Request) -> Response:
        data = validated(AgentCreateSerializer, request)
        agent = services.agent_create(workspace_id=request.user.workspace_id, name=data["name"])
        return Response(AgentSerializer(agent).data, status=status.HTTP_201_CREATED)


class ConversationViewSet(ServiceViewSet):
    model = Conversation
    output_serializer = ConversationSerializer
    filterset_class = ConversationFilter

    def create(self, request: Request) -> Response:
        data = validated(ConversationCreateSerializer, request)
        conversation = services.conversation_create(
            workspace_id=request.user.workspace_id,
            kind=data["kind"],
            title=data["title"],
            external_id=data.get("externalId"),
        )
        return Response(ConversationSerializer(conversation).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["get", "post"], url_path="members")
    def members(self, request: Request, pk: str) -> Response:
        conversation = get_or_not_found(self.get_queryset(), pk)
        if request.method in SAFE_METHODS:
            memberships = conversation.memberships.order_by("joined_at", "id")
            return paged(request, memberships, MembershipFilter, MembershipSerializer)
        data = validated(MemberJoinSerializer, request)
        membership = services.membership_join(
            conversation=conversation,
            account_id=data.get("accountId"),
            agent_id=data.get("agentId"),
            joined_at=data.get("joinedAt"),
        )
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"], url_path="members/leave")
    def leave(self, request: Request, pk: str) -> Response:
        conversation = get_or_not_found(self.get_queryset(), pk)
        data = validated(MemberLeaveSerializer, request)
        membership = services.membership_leave(
            conversation=conversation,
            account_id=data.get("accountId"),
            agent_id=data.get("agentId"),
            left_at=data.get("leftAt"),
        )
        return Response(MembershipSerializer(membership).data)

    @action(detail=True, methods=["post"], url_path="messages")
    def messages(self, request: Request, pk: str) -> Response:
        conversation = get_or_not_found(self.get_queryset(), pk)
        serializer = MessageCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        message = services.message_create(conversation=conversation, draft=serializer.to_draft())
        return Response(message_summary(message), status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"], url_path="messages/bulk")
    def bulk(self, request: Request, pk: str) -> Response:
        conversation = get_or_not_found(self.get_queryset(), pk)
        drafts = MessageBulkSerializer(data=request.data).validated_drafts()
        messages = services.messages_create(conversation=conversation, drafts=drafts)
        return Response(
            {"items": [message_summary(m) for m in messages]}, status=status.HTTP_201_CREATED
        )


class IdentityLinkViewSet(ServiceViewSet):
    model = IdentityLink
    output_serializer = IdentityLinkSerializer
    filterset_class = IdentityLinkFilter

    def create(self, request: Request) -> Response:
        data = validated(IdentityLinkCreateSerializer, request)
        link = services.identity_link_create(
            workspace_id=request.user.workspace_id,
            account_id=data["accountId"],
            linked_account_id=data["linkedAccountId"],
        )
        return Response(IdentityLinkSerializer(link).data, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def verify(self, request: Request, pk: str) -> Response:
        self._no_body(request)
        link = services.identity_link_verify(link=get_or_not_found(self.get_queryset(), pk))
        return Response(IdentityLinkSerializer(link).data)

    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        self._no_body(request)
        link = services.identity_link_revoke(link=get_or_not_found(self.get_queryset(), pk))
        return Response(IdentityLinkSerializer(link).data)

    @staticmethod
    def _no_body(request: Request) -> None:
        if request.data:
            raise InvalidArguments("This action takes no body.")


class RunViewSet(ServiceViewSet):
    model = Run
    output_serializer = RunSerializer
    filterset_class = None

    def create(self, request: Request) -> Response:
        data = validated(RunCreateSerializer, request)
        run, token = services.run_create(
            workspace_id=request.user.workspace_id,
            agent_id=data["agentId"],
            conversation_id=data["conversationId"],
            requester_id=data["requesterId"],
            current_message_id=data.get("currentMessageId"),
            recent_message_ids=data.get("recentMessageIds", []),
            tool_scope=data.get("toolScope", ToolScope.MEMBERSHIP),
        )
        return Response({**RunSerializer(run).data, "token": token}, status=status.HTTP_201_CREATED)

    def retrieve(self, request: Request, pk: str) -> Response:
        check_query_keys(request, allowed=set())
        run = selectors.run_status(workspace_id=request.user.workspace_id, run_id=pk)
        return Response(RunStatusSerializer(run).data)


# --- agent tools ---------------------------------------------------------------------------


class ListMessagesView(APIView):
    """list_messages: newest first; offset mode, or positional before/after/around an anchor."""

    permission_classes = [IsAgentOrRunToken]

    def get(self, request: Request) -> Response:
        return Response(tools.list_messages(request.user, query_params(request, ListMessagesQuery)))


class SearchMessagesView(APIView):
    """search_messages: literal, case-insensitive substring; newest first; bounded."""

    permission_classes = [IsAgentOrRunToken]

    def get(self, request: Request) -> Response:
        params = query_params(request, SearchMessagesQuery)
        return Response(tools.search_messages(request.user, params))


class MessageView(APIView):
    """``/messages/{id}``: get_message for agents; edit and soft delete for the runtime."""

    def get_permissions(self):
        # HEAD is GET without a body: the same tool and the same callers.
        if self.request.method in SAFE_METHODS:
            return [IsAgentOrRunToken()]
        return [IsServiceToken()]

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)
        check_query_keys(request, allowed=set())

    def get(self, request: Request, message_id: uuid.UUID) -> Response:
        return Response(tools.get_message(request.user, message_id))

    def patch(self, request: Request, message_id: uuid.UUID) -> Response:
        data = validated(MessageEditSerializer, request)
        message = selectors.runtime_message(
            workspace_id=request.user.workspace_id, message_id=message_id
        )
        return Response(
            message_summary(services.message_edit(message=message, content=data["content"]))
        )

    def delete(self, request: Request, message_id: uuid.UUID) -> Response:
        message = selectors.runtime_message(
            workspace_id=request.user.workspace_id, message_id=message_id
        )
        services.message_delete(message=message)
        return Response(status=status.HTTP_204_NO_CONTENT)
