"""The access log: one JSON line per request, written by us rather than by gunicorn.

A line names the route pattern (``api/v1/messages/<message_id>``), never the path or the query
string, so message ids and search text stay out of the logs (SPEC §9). Each request gets an id,
echoed in ``X-Request-ID``, that every other line logged while handling it also carries. The
same route, method, status and duration are counted in the request metrics
(formation/metrics.py), so both read one clock and one route.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from formation import metrics
from formation.auth import Caller
from formation.json_logging import endpoint_of, request_id_var, route_pattern

logger = logging.getLogger("formation.request")

# An incoming id is kept only if it is a short token: it goes into every log line.
SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Successful probes are logged at DEBUG: an orchestrator calls them every few seconds.
PROBE_ENDPOINTS = frozenset({"healthz", "readyz"})


def request_id_for(request: HttpRequest) -> str:
    """The caller's ``X-Request-ID`` if it is a sane token, else a fresh one."""
    incoming = request.META.get("HTTP_X_REQUEST_ID", "")
    if SANE_REQUEST_ID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


def endpoint_name(request: HttpRequest) -> str:
    """The route pattern; ``static/<path>`` for WhiteNoise's files; ``<unmatched>`` else.

    A middleware that answers early (the database is down) leaves the URL unresolved, so the
    route is looked up here.
    """
    endpoint = endpoint_of(request)
    if endpoint is not None:
        return endpoint
    try:
        return route_pattern(resolve(request.path_info).route)
    except Resolver404:
        pass
    if request.path_info.startswith("/" + settings.STATIC_URL.lstrip("/")):
        return settings.STATIC_URL.strip("/") + "/<path>"
    return "<unmatched>"


def token_kind(request: HttpRequest) -> str:
    """``service``, ``agent``, ``run`` or ``none``.

    DRF copies the authenticated ``Caller`` onto the Django request. ``type() is`` rather than
    ``isinstance``: the latter would evaluate the admin's lazy session user (a database query).
    """
    user = getattr(request, "user", None)
    if type(user) is Caller:
        return str(user.kind)
    return "none"


class RequestLogMiddleware:
    """Outermost middleware: times the whole request, including static files and errors."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_for(request)
        request.request_id = request_id
        context = request_id_var.set(request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            response["X-Request-ID"] = request_id
            self.log(request, response, (time.perf_counter() - started) * 1000)
            return response
        finally:
            request_id_var.reset(context)

    @staticmethod
    def log(request: HttpRequest, response: HttpResponse, duration_ms: float) -> None:
        endpoint = endpoint_name(request)
        # Django's request logger writes after this middleware; RouteNotPath names this route.
        request.log_endpoint = endpoint
        status = response.status_code
        method = request.method if request.method in KNOWN_METHODS else "OTHER"
        if settings.METRICS_ENABLED:
            metrics.REQUESTS.labels(endpoint, method, str(status)).inc()
            metrics.REQUEST_SECONDS.labels(endpoint).observe(duration_ms / 1000)
            metrics.sample_pool()
        if status >= 500:
            level = logging.WARNING
        elif endpoint in PROBE_ENDPOINTS and status < 400:
            level = logging.DEBUG
        else:
            level = logging.INFO
        logger.log(
            level,
            "request",
            extra={
                "endpoint": endpoint,
                "method": method,
                "status": status,
                "duration_ms": round(duration_ms, 1),
                "token_kind": token_kind(request),
            },
        )
