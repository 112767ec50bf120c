"""The lifecycle endpoints (service token): retention periods, legal holds, account erasure and
JSON Lines exports. Thin: validate, call one of the lifecycle's services, serialize.

Each endpoint carries its own schema annotation; the shared pieces (the error envelope, the
path parameter) come from ``formation.openapi``.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_app.lifecycle import Actor
from audit_app.models import LifecycleSubject
from formation import negotiation
from formation.auth import IsServiceToken
from formation.errors import NotAcceptable
from formation.fields import check_query_keys
from formation.openapi import SERVICE, answers, error_response, filter_parameters, id_in_path
from formation.tenancy import get_or_not_found
from formation.viewsets import ListPageQuery, ServiceViewSet, refuse_body, validated
from messages_app.filters import LegalHoldFilter
from messages_app.lifecycle.erasure import account_erase
from messages_app.lifecycle.exports import export_start
from messages_app.lifecycle.holds import hold_place, hold_release
from messages_app.lifecycle.retention import (
    conversation_retention,
    conversation_retention_inherit,
    conversation_retention_set,
    workspace_retention,
    workspace_retention_set,
)
from messages_app.lifecycle.shapes import (
    JSON_LINES,
    ConversationRetentionShape,
    ErasureShape,
    LegalHoldCreateInput,
    LegalHoldPage,
    LegalHoldShape,
    RetentionSetInput,
    WorkspaceRetentionShape,
    json_lines,
)
from messages_app.models import Account, Conversation, LegalHold
from messages_app.schema import LEGAL_HOLD
from messages_app.serializers import MessageSummaryShape

TAG = "Data lifecycle (service token)"


def actor(request: Request) -> Actor:
    """The lifecycle record's "who": the token's kind and id (never the token)."""
    return Actor(label=f"{request.user.kind} token", token_id=request.user.token_id)


class JsonLinesRenderer(JSONRenderer):
    """Lets a client ask for ``application/x-ndjson``; an error is then one JSON line."""

    media_type = JSON_LINES
    format = "jsonl"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):
        return super().render(data, accepted_media_type, renderer_context) + b"\n"


class ExportNegotiation(BaseContentNegotiation):
    """RFC 9110 for an export, whose answer is always JSON Lines: acceptable when the ``Accept``
    header admits ``application/x-ndjson`` (q > 0), or names ``application/json`` itself, which
    exports have always been served to; otherwise 406 ``not_acceptable`` (in JSON). Errors are
    one JSON line when JSON Lines is the more acceptable of the two."""

    def select_renderer(
        self, request: Request, renderers: list, format_suffix: str | None = None
    ) -> tuple:
        json_renderer, lines_renderer = renderers
        ranges = negotiation.media_ranges(request.META.get("HTTP_ACCEPT", ""))
        if not ranges:  # no header (or nothing readable in it): anything is acceptable
            return json_renderer, json_renderer.media_type
        lines = negotiation.quality(ranges, JSON_LINES)
        named_json = negotiation.quality(ranges, json_renderer.media_type, explicit=True)
        if lines <= 0 and named_json <= 0:
            raise NotAcceptable()
        json = negotiation.quality(ranges, json_renderer.media_type)
        chosen = lines_renderer if lines > json else json_renderer
        return chosen, chosen.media_type


class LifecycleView(APIView):
    """Service token only; no query string anywhere."""

    permission_classes = [IsServiceToken]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        check_query_keys(request, allowed=set())


RETENTION_BODY = (
    "`{days}`: 1 to 36,500, or null to keep messages; `apply_retention` erases what is older "
    "(docs/lifecycle.md)."
)


@extend_schema_view(
    get=extend_schema(
        operation_id="retention_retrieve",
        summary="The workspace's retention period",
        description=SERVICE,
        tags=[TAG],
        responses=answers({200: WorkspaceRetentionShape}, 400, 401, 403),
    ),
    put=extend_schema(
        operation_id="retention_update",
        summary="Set the workspace's retention period",
        description=f"{SERVICE} {RETENTION_BODY} Conversations without their own period follow it.",
        tags=[TAG],
        request=RetentionSetInput,
        responses=answers({200: WorkspaceRetentionShape}, 400, 401, 403),
    ),
)
class WorkspaceRetentionView(LifecycleView):
    """``/retention``: the workspace's default period."""

    def get(self, request: Request) -> Response:
        days = workspace_retention(workspace_id=request.user.workspace_id)
        return Response(WorkspaceRetentionShape.render(days=days))

    def put(self, request: Request) -> Response:
        data = validated(RetentionSetInput, request)
        days = workspace_retention_set(workspace_id=request.user.workspace_id, days=data["days"])
        return Response(WorkspaceRetentionShape.render(days=days))


def _conversation(request: Request, conversation_id: uuid.UUID) -> Conversation:
    queryset = Conversation.objects.filter(workspace_id=request.user.workspace_id)
    return get_or_not_found(queryset, conversation_id)


@extend_schema_view(
    get=extend_schema(
        operation_id="conversation_retention_retrieve",
        summary="A conversation's retention period",
        description=f"{SERVICE} Its own period, or the workspace's (`inherited`).",
        tags=[TAG],
        parameters=[id_in_path()],
        responses=answers({200: ConversationRetentionShape}, 400, 401, 403, 404),
    ),
    put=extend_schema(
        operation_id="conversation_retention_update",
        summary="Give a conversation its own retention period",
        description=f"{SERVICE} {RETENTION_BODY} Overrides the workspace's period.",
        tags=[TAG],
        parameters=[id_in_path()],
        request=RetentionSetInput,
        responses=answers({200: ConversationRetentionShape}, 400, 401, 403, 404),
    ),
    delete=extend_schema(
        operation_id="conversation_retention_destroy",
        summary="Drop a conversation's own retention period",
        description=f"{SERVICE} The workspace's period applies again.",
        tags=[TAG],
        parameters=[id_in_path()],
        responses=answers({200: ConversationRetentionShape}, 400, 401, 403, 404),
    ),
)
class ConversationRetentionView(LifecycleView):
    """``/conversations/{id}/retention``."""

    def get(self, request: Request, pk: uuid.UUID) -> Response:
        conversation = _conversation(request, pk)
        retention = conversation_retention(conversation=conversation)
        return Response(ConversationRetentionShape.render(retention, conversationId=str(pk)))

    def put(self, request: Request, pk: uuid.UUID) -> Response:
        conversation = _conversation(request, pk)
        data = validated(RetentionSetInput, request)
        retention = conversation_retention_set(conversation=conversation, days=data["days"])
        return Response(ConversationRetentionShape.render(retention, conversationId=str(pk)))

    def delete(self, request: Request, pk: uuid.UUID) -> Response:
        conversation = _conversation(request, pk)
        retention = conversation_retention_inherit(conversation=conversation)
        return Response(ConversationRetentionShape.render(retention, conversationId=str(pk)))


NOT_ACCEPTABLE = error_response(
    "NotAcceptableError",
    [NotAcceptable],
    "the Accept header admits neither application/x-ndjson nor application/json.",
)
EXPORT_ANSWER = OpenApiResponse(
    response=MessageSummaryShape,
    description="JSON Lines (`application/x-ndjson`): one message summary per line, streamed.",
)


class ExportView(LifecycleView):
    """A JSON Lines stream of message summaries, recorded in the lifecycle record."""

    renderer_classes = [JSONRenderer, JsonLinesRenderer]
    content_negotiation_class = ExportNegotiation
    subject_kind: str
    model: type

    def _subject(self, request: Request, pk: uuid.UUID) -> None:
        get_or_not_found(self.model.objects.filter(workspace_id=request.user.workspace_id), pk)

    def get(self, request: Request, pk: uuid.UUID) -> StreamingHttpResponse:
        export = export_start(
            workspace_id=request.user.workspace_id,
            subject_kind=self.subject_kind,
            subject_id=pk,
            actor=actor(request),
        )
        response = StreamingHttpResponse(export.chunks(json_lines), content_type=JSON_LINES)
        response["Content-Disposition"] = f'attachment; filename="{self.subject_kind}-{pk}.jsonl"'
        return response

    def head(self, request: Request, pk: uuid.UUID) -> HttpResponse:
        """What GET would answer, without starting (or recording) an export."""
        self._subject(request, pk)
        return HttpResponse(content_type=JSON_LINES)


def export_schema(operation_id: str, summary: str, what: str) -> Any:
    return extend_schema_view(
        get=extend_schema(
            operation_id=operation_id,
            summary=summary,
            description=f"{SERVICE} {what}, streamed in constant memory as JSON Lines; each "
            "export is recorded in the lifecycle record. Takes no query parameters. A server "
            "streams a few exports at once: past that, 503 unavailable before the first byte.",
            tags=[TAG],
            parameters=[id_in_path()],
            responses={
                (200, JSON_LINES): EXPORT_ANSWER,
                **answers({}, 400, 401, 403, 404, own={406: NOT_ACCEPTABLE}),
            },
        )
    )


@export_schema(
    "conversation_export",
    "Export a conversation",
    "Its live messages in conversation order (`seq`)",
)
class ConversationExportView(ExportView):
    subject_kind = LifecycleSubject.CONVERSATION
    model = Conversation


@export_schema(
    "account_export",
    "Export what an account wrote",
    "Every live message it wrote, oldest first, across the workspace",
)
class AccountExportView(ExportView):
    subject_kind = LifecycleSubject.ACCOUNT
    model = Account


@extend_schema_view(
    post=extend_schema(
        operation_id="account_erase",
        summary="Erase an account (right to erasure)",
        description=f"{SERVICE} Takes no body. Erases every message the account wrote as a "
        "delete does, removes its identity links and replaces its name and external id; the "
        "account, its memberships and every lineage row stay, so what agents derived keeps its "
        "restrictions. Calling it again finishes an interrupted erasure; a legal hold refuses "
        "it (`legal_hold_active`, nothing changed).",
        tags=[TAG],
        parameters=[id_in_path()],
        request=None,
        responses={
            **answers({200: ErasureShape}, 400, 401, 403, 404),
            409: LEGAL_HOLD,
        },
    )
)
class AccountEraseView(LifecycleView):
    def post(self, request: Request, pk: uuid.UUID) -> Response:
        refuse_body(request)
        report = account_erase(
            workspace_id=request.user.workspace_id, account_id=pk, actor=actor(request)
        )
        return Response(ErasureShape.render(report))


@extend_schema_view(
    list=extend_schema(
        operation_id="legal_holds_list",
        summary="List legal holds",
        description=f"{SERVICE} Oldest first; `limit` (default 50, at most 200) and `offset`.",
        tags=[TAG],
        parameters=[*filter_parameters(LegalHoldFilter), ListPageQuery],
        responses=answers({200: LegalHoldPage}, 400, 401, 403),
    ),
    create=extend_schema(
        operation_id="legal_holds_create",
        summary="Place a legal hold",
        description=f"{SERVICE} On `conversationId`, or on the whole workspace when it is "
        "absent or null; `reference` names the matter (never shown in errors). While a hold is "
        "active, retention skips what it covers and delete, edit and erasure are refused.",
        tags=[TAG],
        request=LegalHoldCreateInput,
        responses=answers({201: LegalHoldShape}, 400, 401, 403),
    ),
    retrieve=extend_schema(
        operation_id="legal_holds_retrieve",
        summary="Get a legal hold",
        description=SERVICE,
        tags=[TAG],
        parameters=[id_in_path()],
        responses=answers({200: LegalHoldShape}, 401, 403, 404),
    ),
    release=extend_schema(
        operation_id="legal_holds_release",
        summary="Release a legal hold",
        description=f"{SERVICE} Takes no body; releasing twice is invalid_arguments.",
        tags=[TAG],
        parameters=[id_in_path()],
        request=None,
        responses=answers({200: LegalHoldShape}, 400, 401, 403, 404),
    ),
)
class LegalHoldViewSet(ServiceViewSet):
    model = LegalHold
    queryset = LegalHold.objects.none()
    output_serializer = LegalHoldShape
    page_serializer = LegalHoldPage
    filterset_class = LegalHoldFilter
    order_by = ("placed_at", "id")

    def create(self, request: Request) -> Response:
        data = validated(LegalHoldCreateInput, request)
        hold = hold_place(
            workspace_id=request.user.workspace_id,
            conversation_id=data.get("conversationId"),
            reference=data.get("reference", ""),
            actor=actor(request),
        )
        return Response(LegalHoldShape.render(hold), status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        refuse_body(request)
        hold = get_or_not_found(self.get_queryset(), pk)
        return Response(LegalHoldShape.render(hold_release(hold=hold, actor=actor(request))))
