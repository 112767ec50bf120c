"""The runtime's resource endpoints, for every app: a filtered, offset-paged list, create and
retrieve under the service token (``ServiceViewSet``), with their OpenAPI annotations.

Every lookup is scoped to the caller's workspace in the query itself, and a row of another
workspace is the same ``NotFound`` as a missing one (``get_or_not_found``).
"""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from formation.auth import IsServiceToken
from formation.errors import InvalidArguments, InvalidArgumentsDetails
from formation.fields import StrictSerializer, check_query_keys
from formation.openapi import RUNTIME_TAG, SERVICE, answers, filter_parameters, id_in_path
from formation.paths import UUID_PATTERN
from formation.shapes import Shape
from formation.tenancy import get_or_not_found

PAGE_KEYS = {"limit", "offset"}


class ListPageQuery(StrictSerializer):
    limit = serializers.IntegerField(min_value=1, max_value=200, default=50)
    offset = serializers.IntegerField(min_value=0, max_value=1_000_000, default=0)


def validated(serializer_class, request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def refuse_body(request: Request) -> None:
    """An action that takes no body refuses one, rather than ignore what the caller meant."""
    if request.data:
        raise InvalidArguments("This action takes no body.")


def paged(
    request: Request, queryset: QuerySet, filterset_class, page_shape: type[Shape]
) -> Response:
    """A filtered, offset-paged list: ``{items, total, limit, offset}``.

    Unknown or repeated query keys and invalid filter values are ``invalid_arguments``.
    """
    check_query_keys(request, set(filterset_class.base_filters) | PAGE_KEYS)
    filterset = filterset_class(data=request.query_params, queryset=queryset, request=request)
    if not filterset.is_valid():
        raise InvalidArguments(details=InvalidArgumentsDetails.render(fields=filterset.errors))
    page = ListPageQuery(
        data={key: request.query_params[key] for key in PAGE_KEYS & set(request.query_params)}
    )
    page.is_valid(raise_exception=True)
    limit, offset = page.validated_data["limit"], page.validated_data["offset"]
    items = list(filterset.qs[offset : offset + limit])
    # When the first page holds everything, its length is the total: no count query.
    total = len(items) if offset == 0 and len(items) < limit else filterset.qs.count()
    return Response(
        page_shape.render({"items": items, "total": total, "limit": limit, "offset": offset})
    )


def paged_list(filterset_class: type[django_filters.FilterSet], page: type, summary: str) -> Any:
    return extend_schema(
        summary=summary,
        description=f"{SERVICE} Oldest first; `limit` (default 50, at most 200) and `offset`.",
        tags=[RUNTIME_TAG],
        parameters=[*filter_parameters(filterset_class), ListPageQuery],
        responses=answers({200: page}, 400, 401, 403),
    )


def resource_schema(
    name: str,
    plural: str,
    serializer: type,
    create: type,
    page: type,
    filterset: type[django_filters.FilterSet],
) -> dict[str, Any]:
    """A ``ServiceViewSet``'s list, create and retrieve, for ``extend_schema_view``."""
    return {
        "list": paged_list(filterset, page, f"List {plural}"),
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


class ServiceViewSet(GenericViewSet):
    """List (paged, filtered), retrieve and create, for the runtime's service token."""

    permission_classes = [IsServiceToken]
    lookup_value_regex = UUID_PATTERN
    # ``paged`` applies the FilterSet itself; no backend may add to it (or to the schema).
    filter_backends: list = []
    model: type
    output_serializer: type[Shape]
    page_serializer: type[Shape]
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
        return paged(request, queryset, self.filterset_class, self.page_serializer)

    def retrieve(self, request: Request, pk: str) -> Response:
        check_query_keys(request, allowed=set())
        return Response(self.output_serializer.render(get_or_not_found(self.get_queryset(), pk)))
