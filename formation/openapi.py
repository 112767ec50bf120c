"""The OpenAPI 3 description of ``/api/v1/``, served at ``/api/schema/`` with Swagger UI at
``/api/docs/``.

Every schema annotation lives here rather than on the views: each view is described by an
``OpenApiViewExtension`` that hands drf-spectacular an annotated *subclass*, so the classes that
serve requests stay untouched. Request bodies, query parameters and response shapes come from the
serializers and FilterSets the views really use; what no serializer states (the paged wrappers,
the search hit, the error envelope) is declared below. Every operation lists the error statuses
it can answer, each with the one envelope ``{"error": {"code", "message", "details"}}`` and its
code pinned to an enum.

A new endpoint needs an entry here: ``tests/api/test_openapi.py`` fails for any ``/api/v1/``
route whose operations do not document the envelope, and ``make test`` runs
``manage.py spectacular --validate --fail-on-warn``.

Including this module's ``urlpatterns`` (see ``formation/urls.py``) is what registers the
extensions, so the schema views and their annotations always come together.
"""

from __future__ import annotations

from typing import Any, ClassVar

import django_filters
from django.urls import path
from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
    OpenApiViewExtension,
)
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
)
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from audit_app.models import SearchOutcome, SearchTool
from formation.errors import (
    ApiError,
    AuditUnavailable,
    DeliveryBlocked,
    Forbidden,
    InvalidArguments,
    NotFound,
    RateLimited,
    SearchBudgetExhausted,
    Unauthenticated,
    Unavailable,
    error_body,
)
from formation.tool_urls import ToolListQuery
from formation.tools import QUERY_SYNTAX, STYLES, TOOLS_BY_NAME, input_schema
from messages_app import filters
from messages_app.models import ConversationKind
from messages_app.serializers import (
    AccountCreateSerializer,
    AccountSerializer,
    AgentCreateSerializer,
    AgentSerializer,
    ConversationCreateSerializer,
    ConversationSerializer,
    IdentityLinkCreateSerializer,
    IdentityLinkSerializer,
    ListPageQuery,
    MemberJoinSerializer,
    MemberLeaveSerializer,
    MembershipSerializer,
    MessageBulkSerializer,
    MessageCreateSerializer,
    MessageEditSerializer,
    MessageSummarySerializer,
    RunCreateSerializer,
    RunSerializer,
    RunStatusSerializer,
)
from search_app.queries import SPEAKERS
from search_app.serializers import (
    MemorySearchQuery,
    RunContentSerializer,
    SearchHistorySerializer,
)
from search_app.services import EVIDENCE_BUDGET

SERVICE = "Needs a service token (the runtime)."
AGENT = "Needs an agent token, or a run token acting as its run's agent."
RUNTIME_TAG = "Runtime (service token)"
TOOLS_TAG = "Agent tools"
RUNS_TAG = "Runs (run token)"

# --- authentication and custom fields ---------------------------------------------------------


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "formation.auth.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "`Authorization: Bearer <token>`. A service token (the runtime) writes its "
                "workspace; an agent token acts as one agent; a run token (returned by "
                "`POST /api/v1/runs`) acts as its run's agent inside that run. Tokens come from "
                "`manage.py create_token` and `make run` prints demo ones."
            ),
        }


class TimestampField(OpenApiSerializerFieldExtension):
    target_class = "formation.fields.Timestamp"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {"type": "string", "format": "date-time"}


class StrictBody(OpenApiSerializerExtension):
    """A StrictSerializer refuses unknown fields (``invalid_arguments``); say so in the schema."""

    target_class = "formation.fields.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, "additionalProperties": False}


# --- response shapes no serializer states -------------------------------------------------------


def _page(name: str, item: type[serializers.Serializer]) -> type[serializers.Serializer]:
    """``{items, total, limit, offset}``, the ingestion API's paged lists: one object, not the
    array drf-spectacular would make of a viewset's ``list`` response."""
    page = type(
        name,
        (serializers.Serializer,),
        {
            "items": item(many=True),
            "total": serializers.IntegerField(help_text="Matching rows, regardless of paging."),
            "limit": serializers.IntegerField(),
            "offset": serializers.IntegerField(),
        },
    )
    return extend_schema_serializer(many=False)(page)


AccountPage = _page("AccountPage", AccountSerializer)
AgentPage = _page("AgentPage", AgentSerializer)
ConversationPage = _page("ConversationPage", ConversationSerializer)
MembershipPage = _page("MembershipPage", MembershipSerializer)
IdentityLinkPage = _page("IdentityLinkPage", IdentityLinkSerializer)


class ToolMessageSummary(MessageSummarySerializer):
    deliverable = serializers.BooleanField(
        required=False,
        help_text="Run tokens only: whether a reply citing this message would pass the final "
        "delivery check now (false: reading it would block the run's reply).",
    )


class MessagePage(serializers.Serializer):
    items = ToolMessageSummary(many=True, help_text="Newest first.")
    total = serializers.IntegerField(
        help_text="Live messages in the conversation (before beforeDate, if given)."
    )
    limit = serializers.IntegerField()
    offset = serializers.IntegerField(
        required=False, help_text="Offset mode only: absent for before/after/around."
    )
    hasOlder = serializers.BooleanField()
    hasNewer = serializers.BooleanField()


class MessageSearchResult(serializers.Serializer):
    items = ToolMessageSummary(many=True, help_text="Newest first.")
    total = serializers.IntegerField(help_text="The number of items returned by this call.")
    limit = serializers.IntegerField()


class MessageBatch(serializers.Serializer):
    items = MessageSummarySerializer(many=True, help_text="In the order they were sent.")


class RunCreated(RunSerializer):
    token = serializers.CharField(help_text="The run token, shown once; only its hash is kept.")


class HistoryConversation(serializers.Serializer):
    id = serializers.UUIDField()
    title = serializers.CharField()
    kind = serializers.ChoiceField(choices=ConversationKind.values)


class HistorySpeaker(serializers.Serializer):
    type = serializers.ChoiceField(choices=["user", "agent"])
    id = serializers.UUIDField()
    displayName = serializers.CharField()


class RankingReason(serializers.Serializer):
    name = serializers.ChoiceField(
        choices=["text", "actor", "conversation", "participation", "recency"]
    )
    value = serializers.FloatField()
    contribution = serializers.FloatField()


class HistoryHit(MessageSummarySerializer):
    conversation = HistoryConversation()
    time = serializers.DateTimeField()
    speaker = HistorySpeaker()
    text = serializers.CharField()
    highlights = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="[start, length] of each matched word, in Unicode code points of text.",
    )
    score = serializers.FloatField(help_text="The sum of the reasons' contributions.")
    reasons = RankingReason(many=True, help_text="All five ranking components, always.")
    before = MessageSummarySerializer(
        many=True, help_text="Up to two eligible neighbours before the hit, in order."
    )
    after = MessageSummarySerializer(
        many=True, help_text="Up to two eligible neighbours after the hit, in order."
    )


class Budget(serializers.Serializer):
    used = serializers.IntegerField()
    limit = serializers.IntegerField(help_text=f"Always {EVIDENCE_BUDGET}.")
    remaining = serializers.IntegerField()


class HistorySearchResult(serializers.Serializer):
    items = HistoryHit(many=True, help_text="Best first.")
    total = serializers.IntegerField(help_text="The number of items returned by this call.")
    budget = Budget()


class QueryDigest(serializers.Serializer):
    keyId = serializers.CharField()
    digest = serializers.CharField(help_text="HMAC-SHA256 of the query; the text is never kept.")


class AuditFilters(serializers.Serializer):
    """The call's filters: all four for search_history, ``conversationId`` and ``limit`` for
    search_messages, ``limit`` for memories."""

    speaker = serializers.ChoiceField(choices=SPEAKERS, required=False)
    after = serializers.DateTimeField(allow_null=True, required=False)
    before = serializers.DateTimeField(allow_null=True, required=False)
    conversationId = serializers.UUIDField(allow_null=True, required=False)
    limit = serializers.IntegerField()


class AuditRanking(serializers.Serializer):
    messageId = serializers.UUIDField()
    score = serializers.FloatField()
    components = serializers.DictField(child=serializers.FloatField())


class SearchAuditEvent(serializers.Serializer):
    type = serializers.ChoiceField(choices=["search_audit"])
    tool = serializers.ChoiceField(choices=SearchTool.values)
    id = serializers.UUIDField()
    createdAt = serializers.DateTimeField()
    runId = serializers.UUIDField()
    agentId = serializers.UUIDField()
    conversationId = serializers.UUIDField(help_text="The run's destination.")
    requesterId = serializers.UUIDField()
    queryDigest = QueryDigest()
    filters = AuditFilters()
    outcome = serializers.ChoiceField(choices=SearchOutcome.values)
    hitIds = serializers.ListField(
        child=serializers.UUIDField(),
        help_text="What was returned, in order: message ids (memory ids for memories).",
    )
    neighbourIds = serializers.ListField(child=serializers.UUIDField())
    rankings = AuditRanking(many=True)
    exclusions = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="Withheld matches by reason; null for the run's own token and for tools "
        "other than search_history.",
    )
    exclusionsCapped = serializers.BooleanField(
        allow_null=True, help_text="null where exclusions is null."
    )
    resultCount = serializers.IntegerField()
    budgetUsed = serializers.IntegerField()


RunTrace = _page("RunTrace", SearchAuditEvent)


class Memory(serializers.Serializer):
    id = serializers.UUIDField()
    agentId = serializers.UUIDField()
    runId = serializers.UUIDField(help_text="The run that wrote it.")
    content = serializers.CharField()
    createdAt = serializers.DateTimeField()


class MemoryCreated(Memory):
    lineageCount = serializers.IntegerField(help_text="Source messages it inherits limits from.")


class MemorySearchResult(serializers.Serializer):
    items = Memory(many=True)
    total = serializers.IntegerField(help_text="The number of items returned by this call.")
    limit = serializers.IntegerField()


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
                                "required": ["name", "description", "parameters"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "description": {"type": "string"},
                                    "parameters": {"type": "object", "description": "JSON Schema."},
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
                ]
            },
        },
        "total": {"type": "integer"},
    },
    "required": ["items", "total"],
}

# --- the error envelope ----------------------------------------------------------------------


class InvalidArgumentsDetails(serializers.Serializer):
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Problems by field or parameter name.",
    )
    index = serializers.IntegerField(
        required=False, help_text="Bulk import: the first invalid message's position."
    )


class RetryAfterDetails(serializers.Serializer):
    retryAfter = serializers.IntegerField(help_text="Seconds; also sent as Retry-After.")


class SearchLimitDetails(serializers.Serializer):
    budget = Budget(required=False, help_text="search_budget_exhausted: the run's budget.")
    retryAfter = serializers.IntegerField(
        required=False, help_text="rate_limited: seconds; also sent as Retry-After."
    )


class DeliveryBlockedDetails(serializers.Serializer):
    blocked = serializers.IntegerField(help_text="How many evidence messages block the reply.")
    reasons = serializers.DictField(
        child=serializers.IntegerField(), help_text="How many, by reason; never which."
    )


def _envelope(
    name: str, codes: list[str], details: type[serializers.Serializer] | None
) -> type[serializers.Serializer]:
    body = type(
        f"{name}Body",
        (serializers.Serializer,),
        {
            "code": serializers.ChoiceField(choices=codes),
            "message": serializers.CharField(
                help_text="A fixed sentence; never echoes message text, query text or ids."
            ),
            "details": details() if details else serializers.DictField(help_text="Empty: {}."),
        },
    )
    return type(name, (serializers.Serializer,), {"error": body()})


def _error(
    name: str,
    errors: list[type[ApiError]],
    description: str,
    details: type[serializers.Serializer] | None = None,
) -> OpenApiResponse:
    codes = [error.code for error in errors]
    example = errors[0]
    return OpenApiResponse(
        response=_envelope(name, codes, details),
        description=f"`{'` or `'.join(codes)}`: {description}",
        examples=[
            OpenApiExample(
                example.code,
                value=error_body(example.code, example.default_message),
            )
        ],
    )


ERRORS: dict[int, OpenApiResponse] = {
    400: _error(
        "InvalidArgumentsError",
        [InvalidArguments],
        "unknown or repeated fields or parameters, wrong JSON types, values out of range, or a "
        "request the data does not allow.",
        InvalidArgumentsDetails,
    ),
    401: _error("UnauthenticatedError", [Unauthenticated], "no bearer token, or an unknown one."),
    403: _error("ForbiddenError", [Forbidden], "this kind of token may not do this."),
    404: _error(
        "NotFoundError",
        [NotFound],
        "nothing with this id in the token's workspace, or nothing this agent may see (the "
        "same answer, byte for byte).",
    ),
    409: _error(
        "DeliveryBlockedError",
        [DeliveryBlocked],
        "the final delivery check refused the reply; nothing was stored.",
        DeliveryBlockedDetails,
    ),
    429: _error(
        "RateLimitedError",
        [RateLimited],
        "too many requests for this token (per-token rates); retry after `details.retryAfter` "
        "seconds.",
        RetryAfterDetails,
    ),
    503: _error("UnavailableError", [Unavailable], "the database is unavailable; retry shortly."),
}
SEARCH_LIMITS = _error(
    "SearchLimitError",
    [SearchBudgetExhausted, RateLimited],
    f"the run has brought in its {EVIDENCE_BUDGET} evidence messages; or too many requests "
    "for this token.",
    SearchLimitDetails,
)
SEARCH_UNAVAILABLE = _error(
    "SearchUnavailableError",
    [AuditUnavailable, Unavailable],
    "the search could not be audited, so it was not performed; or the database is unavailable.",
)


def answers(
    success: dict[int, Any],
    *statuses: int,
    limited: OpenApiResponse = ERRORS[429],
    unavailable: OpenApiResponse = ERRORS[503],
) -> dict[int, Any]:
    """The success responses and the given error statuses, plus what every endpoint may
    answer: 429 (per-token rates, formation/throttling.py) and 503 (the database)."""
    errors = {status: ERRORS[status] for status in statuses}
    return {**success, **errors, 429: limited, 503: unavailable}


# --- parameters --------------------------------------------------------------------------------


def id_in_path(name: str = "id") -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.UUID,
        OpenApiParameter.PATH,
        description="A UUID; a malformed one is not_found, like an unknown one.",
    )


def tool_parameters(tool_name: str) -> list[OpenApiParameter]:
    """An agent tool's query string, with the argument descriptions the model sees (the schema
    is generated from the serializer the endpoint validates with, like every other one here)."""
    schema = input_schema(TOOLS_BY_NAME[tool_name])
    return [
        OpenApiParameter(
            name,
            {key: value for key, value in prop.items() if key != "description"},
            OpenApiParameter.QUERY,
            required=name in schema["required"],
            description=prop["description"],
        )
        for name, prop in schema["properties"].items()
    ]


FILTER_DESCRIPTIONS = {
    "current": "true: only current memberships; false: only ended ones.",
}


def filter_parameters(filterset_class: type[django_filters.FilterSet]) -> list[OpenApiParameter]:
    """The FilterSet's query parameters, typed from its filters (an unknown filter is an error)."""
    parameters = []
    for name, item in filterset_class.base_filters.items():
        schema: dict[str, Any]
        if isinstance(item, django_filters.ChoiceFilter | django_filters.TypedChoiceFilter):
            schema = {"type": "string", "enum": [value for value, _ in item.extra["choices"]]}
        elif isinstance(item, django_filters.UUIDFilter):
            schema = {"type": "string", "format": "uuid"}
        elif isinstance(item, django_filters.CharFilter):
            schema = {"type": "string", "maxLength": item.extra["max_length"]}
        else:
            raise TypeError(f"No schema for {type(item).__name__} ({filterset_class.__name__}).")
        method_doc = getattr(getattr(filterset_class, str(item.method), None), "__doc__", None)
        if name in FILTER_DESCRIPTIONS:
            description = FILTER_DESCRIPTIONS[name]
        elif method_doc:
            description = method_doc.strip().splitlines()[0]
        elif item.lookup_expr == "icontains":
            description = "Case-insensitive substring."
        else:
            description = "Exact match."
        parameters.append(
            OpenApiParameter(name, schema, OpenApiParameter.QUERY, description=description)
        )
    return parameters


def paged_list(
    filterset_class: type[django_filters.FilterSet], page: type, summary: str, tag: str
) -> Any:
    return extend_schema(
        summary=summary,
        description=f"{SERVICE} Oldest first; `limit` (default 50, at most 200) and `offset`.",
        tags=[tag],
        parameters=[*filter_parameters(filterset_class), ListPageQuery],
        responses=answers({200: page}, 400, 401, 403),
    )


# --- the views ---------------------------------------------------------------------------------


class _Annotated(OpenApiViewExtension):
    """Describes ``target_class`` through an annotated subclass: the served view is untouched.

    Subclasses give ``methods`` (view method or action name → ``extend_schema``) and may set
    ``attributes`` on the subclass (a ``queryset`` so drf-spectacular finds the model).
    """

    methods: dict[str, Any] = {}

    def attributes(self) -> dict[str, Any]:
        return {}

    def view_replacement(self) -> Any:
        view = self.target
        subclass = type(
            view.__name__, (view,), {"__module__": view.__module__, **self.attributes()}
        )
        return extend_schema_view(**self.methods)(subclass)


class _ServiceViewSet(_Annotated):
    def attributes(self) -> dict[str, Any]:
        return {"queryset": self.target.model.objects.none(), "filter_backends": []}


def _resource(
    name: str,
    plural: str,
    serializer: type,
    create: type,
    page: type,
    filterset: type[django_filters.FilterSet],
) -> dict[str, Any]:
    return {
        "list": paged_list(filterset, page, f"List {plural}", RUNTIME_TAG),
        "create": extend_schema(
            summary=f"Create {name}",
            description=SERVICE,
            tags=[RUNTIME_TAG],
            request=create,
            responses=answers({201: serializer}, 400, 401, 403),
        ),
        "retrieve": extend_schema(
            summary=f"Get {name}",
            description=SERVICE,
            tags=[RUNTIME_TAG],
            parameters=[id_in_path()],
            responses=answers({200: serializer}, 401, 403, 404),
        ),
    }


class AccountViewSetSchema(_ServiceViewSet):
    target_class = "messages_app.views.AccountViewSet"
    methods = _resource(
        "an account",
        "accounts",
        AccountSerializer,
        AccountCreateSerializer,
        AccountPage,
        filters.AccountFilter,
    )


class AgentViewSetSchema(_ServiceViewSet):
    target_class = "messages_app.views.AgentViewSet"
    methods = _resource(
        "an agent", "agents", AgentSerializer, AgentCreateSerializer, AgentPage, filters.AgentFilter
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


class ConversationViewSetSchema(_ServiceViewSet):
    target_class = "messages_app.views.ConversationViewSet"
    methods = {
        **_resource(
            "a conversation",
            "conversations",
            ConversationSerializer,
            ConversationCreateSerializer,
            ConversationPage,
            filters.ConversationFilter,
        ),
        "members": [
            extend_schema(
                methods=["GET"],
                summary="List a conversation's memberships",
                description=f"{SERVICE} Oldest first; `limit` (default 50, at most 200) and "
                "`offset`.",
                tags=[RUNTIME_TAG],
                parameters=[
                    id_in_path(),
                    *filter_parameters(filters.MembershipFilter),
                    ListPageQuery,
                ],
                responses=answers({200: MembershipPage}, 400, 401, 403, 404),
            ),
            _conversation_action(
                "Join a conversation",
                MemberJoinSerializer,
                {201: MembershipSerializer},
                "Exactly one of `accountId` and `agentId`; `joinedAt` defaults to now.",
            ),
        ],
        "leave": _conversation_action(
            "Leave a conversation",
            MemberLeaveSerializer,
            {200: MembershipSerializer},
            "Exactly one of `accountId` and `agentId`; `leftAt` defaults to now.",
        ),
        "messages": _conversation_action(
            "Post a message",
            MessageCreateSerializer,
            {201: MessageSummarySerializer},
            "Exactly one of `senderUserId` and `senderAgentId`. The server assigns `seq`.",
        ),
        "bulk": _conversation_action(
            "Import messages",
            MessageBulkSerializer,
            {201: MessageBatch},
            "1 to 5,000 messages with at most 5,000,000 characters of content in all, all or "
            "nothing; an invalid one is named by `details.index`.",
        ),
    }


def _link_transition(verb: str) -> Any:
    return extend_schema(
        summary=f"{verb.capitalize()} an identity link",
        description=f"{SERVICE} Takes no body.",
        tags=[RUNTIME_TAG],
        parameters=[id_in_path()],
        request=None,
        responses=answers({200: IdentityLinkSerializer}, 400, 401, 403, 404),
    )


class IdentityLinkViewSetSchema(_ServiceViewSet):
    target_class = "messages_app.views.IdentityLinkViewSet"
    methods = {
        **_resource(
            "an identity link",
            "identity links",
            IdentityLinkSerializer,
            IdentityLinkCreateSerializer,
            IdentityLinkPage,
            filters.IdentityLinkFilter,
        ),
        "verify": _link_transition("verify"),
        "revoke": _link_transition("revoke"),
    }


class RunViewSetSchema(_ServiceViewSet):
    target_class = "messages_app.views.RunViewSet"
    methods = {
        "create": extend_schema(
            summary="Create a run",
            description=f"{SERVICE} The answer carries the run token, once.",
            tags=[RUNTIME_TAG],
            request=RunCreateSerializer,
            responses=answers({201: RunCreated}, 400, 401, 403),
        ),
        "retrieve": extend_schema(
            summary="Get a run",
            description=f"{SERVICE} Whether it has replied, its tool scope, how many messages "
            "its tools returned and how much of search_history's budget is left.",
            tags=[RUNTIME_TAG],
            parameters=[id_in_path()],
            responses=answers({200: RunStatusSerializer}, 401, 403, 404),
        ),
    }


class RunTraceViewSchema(_Annotated):
    target_class = "audit_app.views.RunTraceView"
    methods = {
        "get": extend_schema(
            operation_id="run_trace",
            summary="A run's trace",
            description="A service token, or the run's own token (another run is not_found). "
            "Each search_history call is a `search_audit` event, oldest first; `limit` "
            "(default 50, at most 200) and `offset`.",
            tags=[RUNS_TAG],
            parameters=[id_in_path("run_id"), ListPageQuery],
            responses=answers({200: RunTrace}, 400, 401, 403, 404),
        )
    }


class ListMessagesViewSchema(_Annotated):
    target_class = "messages_app.views.ListMessagesView"
    methods = {
        "get": extend_schema(
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
            parameters=tool_parameters("list_messages"),
            responses=answers({200: MessagePage}, 400, 401, 403, 404),
        )
    }


class SearchMessagesViewSchema(_Annotated):
    target_class = "messages_app.views.SearchMessagesView"
    methods = {
        "get": extend_schema(
            operation_id="search_messages",
            summary="search_messages",
            description=(
                f"{AGENT} Case-insensitive literal substring (`%`, `_` and `\\` match "
                "themselves), newest first, across the agent's conversations or in "
                "`conversationId` (not_found if the agent is not a member). Not semantic "
                "search: see search_history."
            ),
            tags=[TOOLS_TAG],
            parameters=tool_parameters("search_messages"),
            responses=answers({200: MessageSearchResult}, 400, 401, 403, 404),
        )
    }


class MessageViewSchema(_Annotated):
    target_class = "messages_app.views.MessageView"
    methods = {
        "get": extend_schema(
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
        "patch": extend_schema(
            operation_id="message_edit",
            summary="Edit a message",
            description=f"{SERVICE} Search stays in step with the new text.",
            tags=[RUNTIME_TAG],
            parameters=[id_in_path("message_id")],
            request=MessageEditSerializer,
            responses=answers({200: MessageSummarySerializer}, 400, 401, 403, 404),
        ),
        "delete": extend_schema(
            operation_id="message_delete",
            summary="Delete a message",
            description=f"{SERVICE} Erases the body for good; deleting twice is not_found.",
            tags=[RUNTIME_TAG],
            parameters=[id_in_path("message_id")],
            responses=answers({204: OpenApiResponse(description="Deleted.")}, 400, 401, 403, 404),
        ),
    }


class SearchHistoryViewSchema(_Annotated):
    target_class = "search_app.views.SearchHistoryView"
    methods = {
        "post": extend_schema(
            operation_id="search_history",
            summary="search_history",
            description=(
                "Needs a run token (an agent or service token, or a finished run, is "
                "forbidden). Ranked full-text search over what the run's audience may receive; "
                f"`speaker` is one of {', '.join(SPEAKERS)}; `null` means not given. Each run "
                f"may bring in {EVIDENCE_BUDGET} distinct messages (hits and neighbours). "
                f"{QUERY_SYNTAX}"
            ),
            tags=[TOOLS_TAG],
            request=SearchHistorySerializer,
            responses=answers(
                {200: HistorySearchResult},
                400,
                401,
                403,
                limited=SEARCH_LIMITS,
                unavailable=SEARCH_UNAVAILABLE,
            ),
        )
    }


RUN_ONLY = "Needs the run's own token (another run is not_found)."


class RunReplyViewSchema(_Annotated):
    target_class = "search_app.views.RunReplyView"
    methods = {
        "post": extend_schema(
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
            request=RunContentSerializer,
            responses=answers({201: MessageSummarySerializer}, 400, 401, 403, 404, 409),
        )
    }


class RunMemoriesViewSchema(_Annotated):
    target_class = "search_app.views.RunMemoriesView"
    methods = {
        "post": extend_schema(
            operation_id="memory_create",
            summary="Remember something",
            description=(
                f"{RUN_ONLY} The memory inherits the restrictions of everything the run has "
                "seen. Allowed after the reply too."
            ),
            tags=[RUNS_TAG],
            parameters=[id_in_path("run_id")],
            request=RunContentSerializer,
            responses=answers({201: MemoryCreated}, 400, 401, 403, 404),
        )
    }


class MemoriesViewSchema(_Annotated):
    target_class = "search_app.views.MemoriesView"
    methods = {
        "get": extend_schema(
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
    }


class ToolListViewSchema(_Annotated):
    target_class = "formation.tool_urls.ToolListView"
    methods = {
        "get": extend_schema(
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
    }


# --- links -------------------------------------------------------------------------------------

# What a client can do next with the resource a call created (OpenAPI 3.0 links): the id in the
# answer fills the next call's path. Clients and the stateful fuzzer follow them.
LINKS: dict[str, dict[str, tuple[str, str]]] = {
    "accounts_create": {"GetAccount": ("accounts_retrieve", "id")},
    "agents_create": {"GetAgent": ("agents_retrieve", "id")},
    "conversations_create": {
        "GetConversation": ("conversations_retrieve", "id"),
        "ListMembers": ("conversations_members_retrieve", "id"),
        "AddMember": ("conversations_members_create", "id"),
        "PostMessage": ("conversations_messages_create", "id"),
        "PostMessages": ("conversations_messages_bulk_create", "id"),
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
    "runs_create": {
        "GetRun": ("runs_retrieve", "id"),
        "Reply": ("run_reply", "run_id"),
        "RememberMemory": ("memory_create", "run_id"),
        "GetTrace": ("run_trace", "run_id"),
    },
}


def add_links(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict:
    """drf-spectacular postprocessing hook: ``LINKS`` onto each creating call's 201 answer."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            links = (
                LINKS.get(operation.get("operationId", "")) if isinstance(operation, dict) else None
            )
            if not links:
                continue
            operation["responses"]["201"]["links"] = {
                name: {"operationId": target, "parameters": {parameter: "$response.body#/id"}}
                for name, (target, parameter) in links.items()
            }
    return result


# --- serving ----------------------------------------------------------------------------------


class SchemaView(SpectacularAPIView):
    """``/api/schema/``, generated on the first request and then kept: it depends only on the
    code, and generating it (about 100 ms) on every call of an endpoint that needs no token
    would be a cheap way to keep both cores busy."""

    generated: ClassVar[dict[str, Any] | None] = None

    def _get_schema_response(self, request: Request) -> Response:
        if SchemaView.generated is None:
            generator = self.generator_class(urlconf=self.urlconf, patterns=self.patterns)
            SchemaView.generated = generator.get_schema(request=request, public=self.serve_public)
        filename = self._get_filename(request, None)
        return Response(
            data=SchemaView.generated,
            headers={"Content-Disposition": f'inline; filename="{filename}"'},
        )


urlpatterns = [
    path("schema/", SchemaView.as_view(), name="openapi-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="openapi-schema"), name="openapi-docs"),
]
