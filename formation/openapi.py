"""The OpenAPI 3 description of ``/api/v1/``, served at ``/api/schema/`` with Swagger UI at
``/api/docs/``: the conventions every endpoint's annotation uses, and the serving.

Each view carries its own ``extend_schema`` (Sentry's way: next to the view, in its app), and
its request and response shapes are the serializers its code really validates with and renders
through (``formation.shapes``), so nothing is described twice. What this module adds is what
every app shares: the bearer scheme, strict bodies and timestamps; the error envelope
``{"error": {"code", "message", "details"}}``, one component per status with its code pinned to
an enum (``answers``); path, tool and filter parameters; and the links from a created resource
to the calls that use it (``add_links``).

A new endpoint documents its errors: ``tests/api/test_openapi.py`` fails for any ``/api/v1/``
route whose operations do not, and ``make test`` runs ``manage.py spectacular --validate
--fail-on-warn``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import django_filters
from django.urls import path
from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerExtension,
    OpenApiSerializerFieldExtension,
)
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from formation.errors import (
    ApiError,
    Forbidden,
    InvalidArguments,
    NotFound,
    RateLimited,
    Unauthenticated,
    Unavailable,
    error_body,
)
from formation.shapes import Shape
from formation.tools import AgentTool, field_schema, input_schema

# The sentences and tags the endpoints' descriptions share.
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


# --- the error envelope ----------------------------------------------------------------------


def _envelope(
    name: str, codes: list[str], details: type[Shape] | None
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


def error_response(name: str, errors: list[type[ApiError]], description: str) -> OpenApiResponse:
    """One error status: the envelope named ``name``, its codes, and the first one's example.

    ``details`` is the first error's ``details_shape``, which must also describe the others'
    (a search's 429: the budget, or ``retryAfter``)."""
    codes = [error.code for error in errors]
    example = errors[0]
    return OpenApiResponse(
        response=_envelope(name, codes, _details_shape(errors)),
        description=f"`{'` or `'.join(codes)}`: {description}",
        examples=[
            OpenApiExample(
                example.code,
                value=error_body(example.code, example.default_message),
            )
        ],
    )


def _details_shape(errors: list[type[ApiError]]) -> type[Shape] | None:
    shape = errors[0].details_shape
    described = set(shape().fields) if shape else set()
    for error in errors[1:]:
        if error.details_shape and not set(error.details_shape().fields) <= described:
            raise TypeError(f"{error.__name__}'s details are not those of {errors[0].__name__}.")
    return shape


ERRORS: dict[int, OpenApiResponse] = {
    400: error_response(
        "InvalidArgumentsError",
        [InvalidArguments],
        "unknown or repeated fields or parameters, wrong JSON types, values out of range, or a "
        "request the data does not allow.",
    ),
    401: error_response(
        "UnauthenticatedError", [Unauthenticated], "no bearer token, or an unknown one."
    ),
    403: error_response("ForbiddenError", [Forbidden], "this kind of token may not do this."),
    404: error_response(
        "NotFoundError",
        [NotFound],
        "nothing with this id in the token's workspace, or nothing this agent may see (the "
        "same answer, byte for byte).",
    ),
    429: error_response(
        "RateLimitedError",
        [RateLimited],
        "too many requests for this token (per-token rates); retry after `details.retryAfter` "
        "seconds.",
    ),
    503: error_response(
        "UnavailableError", [Unavailable], "the database is unavailable; retry shortly."
    ),
}


def answers(
    success: dict[int, Any],
    *statuses: int,
    own: Mapping[int, OpenApiResponse] | None = None,
    limited: OpenApiResponse = ERRORS[429],
    unavailable: OpenApiResponse = ERRORS[503],
) -> dict[int, Any]:
    """The success responses and the given error statuses (``ERRORS``, or the endpoint's
    ``own``), plus what every endpoint may answer: 429 (per-token rates,
    formation/throttling.py) and 503 (the database)."""
    errors = {status: ERRORS[status] for status in statuses} | dict(own or {})
    return {**success, **dict(sorted(errors.items())), 429: limited, 503: unavailable}


# --- parameters --------------------------------------------------------------------------------


def id_in_path(name: str = "id") -> OpenApiParameter:
    return OpenApiParameter(
        name,
        OpenApiTypes.UUID,
        OpenApiParameter.PATH,
        description="A UUID; a malformed one is not_found, like an unknown one.",
    )


def tool_parameters(tool: AgentTool) -> list[OpenApiParameter]:
    """An agent tool's query string, with the argument descriptions the model sees (the schema
    is generated from the serializer the endpoint validates with, like every other one here)."""
    schema = input_schema(tool)
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


def _filter_field(item: django_filters.Filter, owner: str) -> serializers.Field:
    """The serializer field a filter's query parameter is typed like (an unknown filter is an
    error), so ``formation.tools.field_schema`` is the one mapping to JSON Schema."""
    if isinstance(item, django_filters.ChoiceFilter | django_filters.TypedChoiceFilter):
        return serializers.ChoiceField(choices=[value for value, _ in item.extra["choices"]])
    if isinstance(item, django_filters.UUIDFilter):
        return serializers.UUIDField()
    if isinstance(item, django_filters.CharFilter):
        return serializers.CharField(max_length=item.extra["max_length"], allow_blank=True)
    raise TypeError(f"No schema for {type(item).__name__} ({owner}).")


def filter_parameters(filterset_class: type[django_filters.FilterSet]) -> list[OpenApiParameter]:
    """The FilterSet's query parameters, described by their method's docstring if they have
    one, else by their lookup."""
    parameters = []
    for name, item in filterset_class.base_filters.items():
        schema = field_schema(_filter_field(item, filterset_class.__name__))
        method_doc = getattr(getattr(filterset_class, str(item.method), None), "__doc__", None)
        if method_doc:
            description = method_doc.strip().splitlines()[0]
        elif item.lookup_expr == "icontains":
            description = "Case-insensitive substring."
        else:
            description = "Exact match."
        parameters.append(
            OpenApiParameter(name, schema, OpenApiParameter.QUERY, description=description)
        )
    return parameters


# --- links -------------------------------------------------------------------------------------

# What a client can do next with the resource a call created (OpenAPI 3.0 links): the id in the
# answer fills the next call's path. Clients and the stateful fuzzer follow them. Each app
# declares the links of its own operations next to their views (``declare_links``).
LINKS: dict[str, dict[str, tuple[str, str]]] = {}


def declare_links(links: Mapping[str, Mapping[str, tuple[str, str]]]) -> None:
    """``{creating operation: {link name: (target operation, its path parameter)}}``."""
    for operation, targets in links.items():
        LINKS.setdefault(operation, {}).update(targets)


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
