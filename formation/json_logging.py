"""One JSON object per log line, carrying only fields we chose (SPEC §9).

A record's message and a short list of request fields are written; nothing else a library
attaches to a record (Django's ``request``, an exception's message, which for database errors
can quote a row) ever reaches the output. This module imports nothing from Django, so both
``LOGGING`` (configured before the app registry is ready) and gunicorn's master can load it.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import traceback
from datetime import UTC, datetime
from typing import Any

# The request being handled by this thread (the worker's pool) or task; set by the middleware.
request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "request_id", default=None
)

# The only ``extra=`` fields a line may carry. Adding one here is a privacy decision.
REQUEST_FIELDS = ("request_id", "token_kind", "endpoint", "method", "status", "duration_ms")

NAMED_GROUP = "(?P<"


@functools.cache
def route_pattern(route: str) -> str:
    """A resolver route as a readable pattern: regex groups ``(?P<pk>…)`` become ``<pk>``.

    DRF's routers register regular expressions; path() routes pass through unchanged. Cached:
    the routes are the URLconf's, a fixed set, and every request's log line names one.
    """
    out: list[str] = []
    i = 0
    while i < len(route):
        if route.startswith(NAMED_GROUP, i):
            name_end = route.index(">", i)
            out.append("<" + route[i + len(NAMED_GROUP) : name_end] + ">")
            i = _group_end(route, name_end + 1)
        elif route[i] in "^$":
            i += 1
        elif route.startswith("\\Z", i):
            i += 2
        else:
            out.append(route[i])
            i += 1
    return "".join(out)


def _group_end(route: str, i: int) -> int:
    """Index just past the parenthesis closing the group whose body starts at ``i``."""
    depth, in_class = 1, False
    while i < len(route) and depth:
        char = route[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        i += 1
    return i


def endpoint_of(request: Any) -> str | None:
    """The URL pattern that served the request (never the path: paths carry ids)."""
    match = getattr(request, "resolver_match", None)
    if match is None or not match.route:
        return None
    return route_pattern(match.route)


class RequestContext(logging.Filter):
    """Stamp the request id on every record logged while a request is handled.

    Django's request logger writes after the middleware has returned, so its records take the
    id from the request they carry.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            request = record.__dict__.get("request")
            record.request_id = getattr(request, "request_id", None) or request_id_var.get()
        return True


class RouteNotPath(logging.Filter):
    """Django's request logger names ``request.path`` (with message and conversation ids);
    name the route pattern instead. Must run before ``StripQueryStrings`` drops ``request``."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = record.__dict__.get("request")
        if request is not None and isinstance(record.args, tuple):
            path = getattr(request, "path", None)
            endpoint = (
                getattr(request, "log_endpoint", None) or endpoint_of(request) or "<unmatched>"
            )
            record.args = tuple(endpoint if arg == path else arg for arg in record.args)
        return True


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", <request fields>, "exc_type", "traceback"}``.

    For an exception only its class and the stack frames (code locations) are written: its
    message may quote user data.
    """

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in REQUEST_FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                entry[field] = value
        if record.exc_info and record.exc_info[0] is not None:
            entry["exc_type"] = record.exc_info[0].__qualname__
            entry["traceback"] = "".join(traceback.format_tb(record.exc_info[2]))
        return json.dumps(entry, default=str)
