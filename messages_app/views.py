"""Thin DRF views: validate, call one service or selector, serialize; each with its OpenAPI
annotation (``formation.openapi`` holds the shared envelope and parameters).

Ingestion endpoints need a service token; the message tools need an agent or run token. The
workspace always comes from the token (``request.user`` is a ``formation.auth.Caller``), and
every lookup of an object by id is scoped to it, so another workspace's ids are simply not found.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response

from formation.openapi import (
    RUNTIME_TAG,
    SERVICE,
    answers,
    declare_links,
    filter_parameters,
    id_in_path,
)
from formation.tenancy import get_or_not_found
from formation.viewsets import (
    ListPageQuery,
    ServiceViewSet,
    paged,
    refuse_body,
    resource_schema,
    validated,
)
from messages_app import selectors, services
from messages_app.filters import (
    AccountFilter,
    AgentFilter,
    ConversationFilter,
    IdentityLinkFilter,
    MembershipFilter,
)
from messages_app.models import Account, Agent, Conversation, IdentityLink
from messages_app.serializers import (
    AccountCreateInput,
    AccountPage,
    AccountShape,
    AgentCreateInput,
    AgentPage,
    AgentShape,
    ConversationCreateInput,
    ConversationPage,
    ConversationShape,
    IdentityLinkCreateInput,
    IdentityLinkPage,
    IdentityLinkShape,
    MemberJoinInput,
    MemberLeaveInput,
    MembershipPage,
    MembershipShape,
    MessageBatch,
    MessageBulkInput,
    MessageCreateInput,
    MessageSummaryShape,
)


def _conversation_action(summary: str, request: type, success: dict[int, Any], text: str) -> Any:
    # Every action here is a POST; ``members`` also answers GET, described separately.
    return extend_schema(
        methods=["POST"],
        summary=summary,
        description=f"{SERVICE} {text}",
        tags=[RUNTIME_TAG],
        parameters=[id_in_path()],
        request=request,
        responses=answers(success, 400, 401, 403, 404),
    )


def _link_transition(verb: str) -> Any:
    return extend_schema(
        summary=f"{verb.capitalize()} an identity link",
        description=f"{SERVICE} Takes no body.",
        tags=[RUNTIME_TAG],
        parameters=[id_in_path()],
        request=None,
        responses=answers({200: IdentityLinkShape}, 400, 401, 403, 404),
    )


@extend_schema_view(
    **resource_schema(
        "an account",
        "accounts",
        AccountShape,
        AccountCreateInput,
        AccountPage,
        AccountFilter,
    )
)
class AccountViewSet(ServiceViewSet):
    model = Account
    output_serializer = AccountShape
    page_serializer = AccountPage
    filterset_class = AccountFilter

    def create(self, request: Request) -> Response:
        data = validated(AccountCreateInput, request)
        account = services.account_create(
            workspace_id=request.user.workspace_id,
            display_name=data["displayName"],
            external_id=data.get("externalId"),
        )
        return Response(AccountShape.render(account), status=status.HTTP_201_CREATED)


@extend_schema_view(
    **resource_schema("an agent", "agents", AgentShape, AgentCreateInput, AgentPage, AgentFilter)
)
class AgentViewSet(ServiceViewSet):
    model = Agent
    output_serializer = AgentShape
    page_serializer = AgentPage
    filterset_class = AgentFilter

    def create(self, request: Request) -> Response:
        data = validated(AgentCreateInput, request)
        agent = services.agent_create(workspace_id=request.user.workspace_id, name=data["name"])
        return Response(AgentShape.render(agent), status=status.HTTP_201_CREATED)


@extend_schema_view(
    **resource_schema(
        "a conversation",
        "conversations",
        ConversationShape,
        ConversationCreateInput,
        ConversationPage,
        ConversationFilter,
    ),
    members=[
        extend_schema(
            methods=["GET"],
            summary="List a conversation's memberships",
            description=f"{SERVICE} Oldest first; `limit` (default 50, at most 200) and `offset`.",
            tags=[RUNTIME_TAG],
            parameters=[id_in_path(), *filter_parameters(MembershipFilter), ListPageQuery],
            responses=answers({200: MembershipPage}, 400, 401, 403, 404),
        ),
        _conversation_action(
            "Join a conversation",
            MemberJoinInput,
            {201: MembershipShape},
            "Exactly one of `accountId` and `agentId`; `joinedAt` defaults to now.",
        ),
    ],
    leave=_conversation_action(
        "Leave a conversation",
        MemberLeaveInput,
        {200: MembershipShape},
        "Exactly one of `accountId` and `agentId`; `leftAt` defaults to now.",
    ),
    messages=_conversation_action(
        "Post a message",
        MessageCreateInput,
        {201: MessageSummaryShape},
        "Exactly one of `senderUserId` and `senderAgentId`. The server assigns `seq`.",
    ),
    bulk=_conversation_action(
        "Import messages",
        MessageBulkInput,
        {201: MessageBatch},
        "1 to 5,000 messages with at most 5,000,000 characters of content in all, all or "
        "nothing; an invalid one is named by `details.index`.",
    ),
)
class ConversationViewSet(ServiceViewSet):
    model = Conversation
    output_serializer = ConversationShape
    page_serializer = ConversationPage
    filterset_class = ConversationFilter

    def create(self, request: Request) -> Response:
        data = validated(ConversationCreateInput, request)
        conversation = services.conversation_create(
            workspace_id=request.user.workspace_id,
            kind=data["kind"],
            title=data["title"],
            external_id=data.get("externalId"),
        )
        return Response(ConversationShape.render(conversation), status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["get", "post"], url_path="members")
    def members(self, request: Request, pk: str) -> Response:
        conversation = get_or_not_found(self.get_queryset(), pk)
        if request.method in SAFE_METHODS:
            memberships = selectors.conversation_memberships(conversation)
            return paged(request, memberships, MembershipFilter, MembershipPage)
        data = validated(MemberJoinInput, request)
        membership = services.membership_join(
            conversation=conversation,
            account_id=data.get("accountId"),
            agent_id=data.get("agentId"),
            joined_at=data.get("joinedAt"),
        )
        return Response(MembershipShape.render(membership), status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"], url_path="members/leave")
    def leave(self, request: Request, pk: str) -> Response:
        conversation = get_or_not_found(self.get_queryset(), pk)
        data = validated(MemberLeaveInput, request)
        membership = services.membership_leave(
            conversation=conversation,
            account_id=data.get("accountId"),
            agent_id=data.get("agentId"),
            left_at=data.get("leftAt"),
        )
        return Response(MembershipShape.render(membership))

    @action(detail=True, methods=["post"], url_path="messages")
    def messages(self, request: Request, pk: str) -> Response:
        conversation = get_or_not_found(self.get_queryset(), pk)
        serializer = MessageCreateInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        message = services.message_create(conversation=conversation, draft=serializer.to_draft())
        return Response(MessageSummaryShape.render(message), status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"], url_path="messages/bulk")
    def bulk(self, request: Request, pk: str) -> Response:
        conversation = get_or_not_found(self.get_queryset(), pk)
        drafts = MessageBulkInput(data=request.data).validated_drafts()
        messages = services.messages_create(conversation=conversation, drafts=drafts)
        return Response(MessageBatch.render({"items": messages}), status=status.HTTP_201_CREATED)


@extend_schema_view(
    **resource_schema(
        "an identity link",
        "identity links",
        IdentityLinkShape,
        IdentityLinkCreateInput,
        IdentityLinkPage,
        IdentityLinkFilter,
    ),
    verify=_link_transition("verify"),
    revoke=_link_transition("revoke"),
)
class IdentityLinkViewSet(ServiceViewSet):
    model = IdentityLink
    output_serializer = IdentityLinkShape
    page_serializer = IdentityLinkPage
    filterset_class = IdentityLinkFilter

    def create(self, request: Request) -> Response:
        data = validated(IdentityLinkCreateInput, request)
        link = services.identity_link_create(
            workspace_id=request.user.workspace_id,
            account_id=data["accountId"],
            linked_account_id=data["linkedAccountId"],
        )
        return Response(IdentityLinkShape.render(link), status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def verify(self, request: Request, pk: str) -> Response:
        refuse_body(request)
        link = services.identity_link_verify(link=get_or_not_found(self.get_queryset(), pk))
        return Response(IdentityLinkShape.render(link))

    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        refuse_body(request)
        link = services.identity_link_revoke(link=get_or_not_found(self.get_queryset(), pk))
        return Response(IdentityLinkShape.render(link))


declare_links(
    {
        "accounts_create": {
            "GetAccount": ("accounts_retrieve", "id"),
            "ExportAccount": ("account_export", "id"),
            "EraseAccount": ("account_erase", "id"),
        },
        "agents_create": {"GetAgent": ("agents_retrieve", "id")},
        "conversations_create": {
            "GetConversation": ("conversations_retrieve", "id"),
            "ListMembers": ("conversations_members_retrieve", "id"),
            "AddMember": ("conversations_members_create", "id"),
            "PostMessage": ("conversations_messages_create", "id"),
            "PostMessages": ("conversations_messages_bulk_create", "id"),
            "SetRetention": ("conversation_retention_update", "id"),
            "ExportConversation": ("conversation_export", "id"),
        },
        "conversations_messages_create": {
            "GetMessage": ("get_message", "message_id"),
            "EditMessage": ("message_edit", "message_id"),
            "DeleteMessage": ("message_delete", "message_id"),
        },
        "identity_links_create": {
            "GetIdentityLink": ("identity_links_retrieve", "id"),
            "VerifyIdentityLink": ("identity_links_verify_create", "id"),
            "RevokeIdentityLink": ("identity_links_revoke_create", "id"),
        },
        "legal_holds_create": {
            "GetLegalHold": ("legal_holds_retrieve", "id"),
            "ReleaseLegalHold": ("legal_holds_release", "id"),
        },
    }
)
