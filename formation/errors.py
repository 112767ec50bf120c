"""The one error shape of the API: ``{"error": {"code", "message", "details"}}`` (SPEC §5).

Every failure, whether raised by our services (``ApiError``), by DRF (validation, parsing,
authentication), by django-filter, by Django (404, 500) or by the database, is rendered here.
Messages are fixed sentences written by us: they never echo message text, query text, member
lists or the ids of things the caller may not see.

Each error class declares the shape of its ``details`` (``details_shape``, a ``Shape`` the
OpenAPI document describes through ``formation.openapi.error_response``); an error that belongs
to one app lives in that app (``messages_app/errors.py``, ``search_app/errors.py``), since this
module imports none of them. ``error_body`` builds the envelope of every error answer:
Django's, DRF's, and what ``formation/serving.py`` refuses on its event loop before Django runs.
"""

from __future__ import annotations

import logging
import math
import sys
from typing import Any, ClassVar

import psycopg
from django.conf import settings
from django.core.exceptions import BadRequest, SuspiciousOperation
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DatabaseError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import csrf, defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.response import Response

from formation import metrics
from formation.shapes import Shape

logger = logging.getLogger("formation.errors")


class InvalidArgumentsDetails(Shape):
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Problems by field or parameter name.",
    )
    index = serializers.IntegerField(
        required=False, help_text="Bulk import: the first invalid message's position."
    )


class RetryAfterDetails(Shape):
    retryAfter = serializers.IntegerField(help_text="Seconds; also sent as Retry-After.")


class ApiError(Exception):
    code = "internal_error"
    status = 500
    default_message = "The request could not be completed."
    # What ``details`` holds, as the schema documents it; None: always ``{}``.
    details_shape: ClassVar[type[Shape] | None] = None

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None):
        self.message = message or self.default_message
        self.details = details or {}
        super().__init__(self.message)


class InvalidArguments(ApiError):
    code = "invalid_arguments"
    status = 400
    default_message = "The request has invalid arguments."
    details_shape = InvalidArgumentsDetails

    @classmethod
    def for_field(cls, name: str, message: str, **extra: Any) -> InvalidArguments:
        """The same ``details.fields`` shape that serializer validation errors have."""
        return cls(
            message, details=InvalidArgumentsDetails.render(fields={name: [message]}, **extra)
        )


class Unauthenticated(ApiError):
    code = "unauthenticated"
    status = 401
    default_message = "A valid bearer token is required."


class Forbidden(ApiError):
    code = "forbidden"
    status = 403
    default_message = "This token may not perform this action."


class NotFound(ApiError):
    code = "not_found"
    status = 404
    default_message = "Not found."


class MethodNotAllowed(ApiError):
    code = "method_not_allowed"
    status = 405
    default_message = "This method is not allowed on this endpoint."


class NotAcceptable(ApiError):
    """No type the endpoint answers is acceptable to the request's ``Accept`` header (RFC 9110
    §15.5.7); raised where an endpoint negotiates by quality (the exports)."""

    code = "not_acceptable"
    status = 406
    default_message = "The Accept header admits none of the types this endpoint answers."


class AuditUnavailable(ApiError):
    code = "audit_unavailable"
    status = 503
    default_message = "The search could not be audited, so it was not performed."


class Unavailable(ApiError):
    code = "unavailable"
    status = 503
    default_message = "The service is temporarily unavailable; retry shortly."


class RateLimited(ApiError):
    """Per-token request rate (formation/throttling.py); ``details.retryAfter`` in seconds."""

    code = "rate_limited"
    status = 429
    default_message = "Too many requests for this token; retry after the given delay."
    details_shape = RetryAfterDetails


JSON_BODY_ONLY = "The request body must be JSON, sent with Content-Type: application/json."


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """The envelope (SPEC §5), for every answer and example that carries an error."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _field_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested ErrorDetail structure flattened to ``{"field.path": [sentence, ...]}``, the
    one shape the schema documents (our own sentences, no input echo). A nested serializer's
    ``non_field_errors`` belong to its field; list items are named by index."""
    if isinstance(detail, dict):
        flat: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = prefix if key == "non_field_errors" and prefix else _joined(prefix, str(key))
            for path, sentences in _field_errors(value, name).items():
                flat.setdefault(path, []).extend(sentences)
        return flat
    if isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        flat = {}
        for index, item in enumerate(detail):
            for path, sentences in _field_errors(item, _joined(prefix, str(index))).items():
                flat.setdefault(path, []).extend(sentences)
        return flat
    sentences = detail if isinstance(detail, list) else [detail]
    return {prefix or "non_field_errors": [str(sentence) for sentence in sentences]}


def _joined(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _translate(exc: Exception) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, drf_exceptions.ValidationError):
        return InvalidArguments(
            details=InvalidArgumentsDetails.render(fields=_field_errors(exc.detail))
        )
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        # Not DRF's sentence: it quotes the Content-Type that was sent.
        return InvalidArguments(JSON_BODY_ONLY)
    if isinstance(exc, drf_exceptions.ParseError):
        return InvalidArguments(str(exc.detail))
    if isinstance(exc, SuspiciousOperation | BadRequest):
        # Too many query fields, an oversized body, a malformed multipart: Django's own limits.
        return InvalidArguments()
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        return Unauthenticated()
    if isinstance(exc, drf_exceptions.PermissionDenied | DjangoPermissionDenied):
        return Forbidden()
    if isinstance(exc, drf_exceptions.NotFound | Http404):
        return NotFound()
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return MethodNotAllowed()
    if isinstance(exc, drf_exceptions.NotAcceptable):
        return InvalidArguments("Only application/json responses are available.")
    if isinstance(exc, drf_exceptions.Throttled):
        # Whole seconds, at least one: what a Retry-After header can carry.
        return RateLimited(
            details=RetryAfterDetails.render(retryAfter=max(1, math.ceil(exc.wait or 1)))
        )
    if isinstance(exc, OperationalError):
        return _unavailable(exc)
    if isinstance(exc, DatabaseError):
        # Only the class name: driver messages can quote the offending row's values.
        logger.error("database error: %s", type(exc).__name__)
        return ApiError()
    logger.error("unhandled error: %s", type(exc).__name__, exc_info=False)
    return ApiError()


def error_code(exc: Exception) -> str:
    """The code ``exc`` will be answered with, for metrics and spans (nothing is logged)."""
    if isinstance(exc, ApiError):
        return exc.code
    if isinstance(exc, drf_exceptions.ValidationError):
        return InvalidArguments.code
    if isinstance(exc, OperationalError):
        return Unavailable.code
    if isinstance(exc, drf_exceptions.APIException):
        return _translate(exc).code
    return ApiError.code


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's EXCEPTION_HANDLER: every exception becomes the envelope, never a stack trace."""
    error = _translate(exc)
    _count(error)
    headers = {}
    if error.status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="api"'
    if isinstance(error, RateLimited):
        headers["Retry-After"] = str(error.details["retryAfter"])
    return Response(_body(error), status=error.status, headers=headers)


def _body(error: ApiError) -> dict[str, Any]:
    return error_body(error.code, error.message, error.details)


def _count(error: ApiError) -> None:
    if settings.METRICS_ENABLED:
        metrics.API_ERRORS.labels(error.code).inc()


def _unavailable(exc: OperationalError) -> Unavailable:
    """A lost connection, or a statement cancelled by the API's statement_timeout: 503."""
    if isinstance(exc.__cause__, psycopg.errors.QueryCanceled):
        logger.warning("statement cancelled: %s", type(exc.__cause__).__name__)
        if settings.METRICS_ENABLED:
            metrics.STATEMENT_TIMEOUTS.inc()
        return Unavailable("The request took too long and was cancelled; retry or narrow it.")
    logger.warning("database unavailable: %s", type(exc).__name__)
    if settings.METRICS_ENABLED:
        metrics.DATABASE_UNAVAILABLE.inc()
    return Unavailable()


def api_error_response(error: ApiError) -> JsonResponse:
    """The envelope for an error raised outside DRF (a middleware), counted like DRF's."""
    _count(error)
    return _json(error)


def _json(error: ApiError) -> JsonResponse:
    """The envelope outside DRF, byte-compatible with DRF's JSONRenderer. Django's own handlers
    below answer with it uncounted."""
    return JsonResponse(
        _body(error), status=error.status, json_dumps_params={"separators": (",", ":")}
    )


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


@csrf_exempt
def not_found_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's handler404: the envelope under /api/, Django's page elsewhere (the admin).

    Exempt from CSRF: it changes nothing, and a POST to an unknown /api/ path is a 404, not
    Django's HTML CSRF page."""
    if not _is_api(request):
        return defaults.page_not_found(request, exception)
    return _json(NotFound())


def server_error_view(request: HttpRequest) -> HttpResponse:
    """Django's handler500: the envelope under /api/, never a traceback."""
    if not _is_api(request):
        return defaults.server_error(request)
    # Django calls this while handling the exception; a database outage is still a 503.
    exc = sys.exc_info()[1]
    if isinstance(exc, OperationalError):
        return api_error_response(_unavailable(exc))
    return _json(ApiError())


def bad_request_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    return _json(InvalidArguments())


def csrf_failure_view(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: the envelope under /api/ (no HTML page reaches an API client)."""
    if not _is_api(request):
        return csrf.csrf_failure(request, reason)
    return _json(Forbidden())


def permission_denied_view(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    if not _is_api(request):
        return defaults.permission_denied(request, exception)
    return _json(Forbidden())
