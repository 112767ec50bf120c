"""OpenTelemetry tracing, off unless configured: a request's span, its tool call's span and the
SQL statements under them, so a slow search can be followed from HTTP to its statements.

It is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is
set, or ``OTEL_TRACES_EXPORTER`` names ``otlp`` or ``console``; the other standard ``OTEL_*``
variables (service name, headers, sampler, resource attributes) apply as the SDK reads them.
Off, the SDK is not even imported and a tool call pays one ``is None`` test.

Privacy (SPEC §9). Every span goes through ``PrivateSpanExporter`` before it leaves the
process: only the attributes named in ``KEPT_ATTRIBUTES`` (methods, route patterns, status
codes, the database's name and statement text) and our own ``formation.*`` counts are kept;
URLs, paths and query strings (ids and search text), client addresses, user agents, exception
messages (a database error can quote a row) and status descriptions are dropped. Statements are
kept because every value in them is a bound parameter (``%s``), which is never recorded
(``capture_parameters`` stays off); tests/test_tracing.py checks a search for a secret word.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

# The provider and the tool tracer, set by ``configure``; empty while tracing is off.
_state: dict[str, Any] = {}

KEPT_ATTRIBUTES = frozenset(
    {
        "http.method",
        "http.request.method",
        "http.route",
        "http.status_code",
        "http.response.status_code",
        "http.scheme",
        "url.scheme",
        "http.flavor",
        "network.protocol.version",
        "db.system",
        "db.system.name",
        "db.name",
        "db.namespace",
        "db.operation",
        "db.operation.name",
        "db.statement",
        "db.query.text",
        "net.transport",
        "net.peer.name",
        "net.peer.port",
        "server.address",
        "server.port",
    }
)
OWN_PREFIX = "formation."
# Excluded from request spans unless OTEL_PYTHON_DJANGO_EXCLUDED_URLS says otherwise.
UNTRACED_PATHS = "healthz,readyz,metrics,static/"


def requested() -> bool:
    """Whether the environment asks for traces (the standard OTEL_* variables)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(
        exporter
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def _kept(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        key: value
        for key, value in (attributes or {}).items()
        if key in KEPT_ATTRIBUTES or key.startswith(OWN_PREFIX)
    }


def _private_exporter_class() -> type:
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import Status

    class PrivateSpanExporter(SpanExporter):
        """Hands ``inner`` copies of the spans holding only the kept attributes: events keep
        their name and an exception's type, statuses their code."""

        def __init__(self, inner: SpanExporter) -> None:
            self.inner = inner

        @staticmethod
        def private(span: ReadableSpan) -> ReadableSpan:
            events = [
                Event(
                    event.name,
                    {
                        key: value
                        for key, value in (event.attributes or {}).items()
                        if key == "exception.type"
                    },
                    event.timestamp,
                )
                for event in span.events
            ]
            return ReadableSpan(
                name=span.name,
                context=span.context,
                parent=span.parent,
                resource=span.resource,
                attributes=_kept(span.attributes),
                events=events,
                links=[],
                kind=span.kind,
                status=Status(span.status.status_code),
                start_time=span.start_time,
                end_time=span.end_time,
                instrumentation_scope=span.instrumentation_scope,
            )

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return self.inner.export([self.private(span) for span in spans])

        def shutdown(self) -> None:
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return self.inner.force_flush(timeout_millis)

    return PrivateSpanExporter


def _exporter_from_environment() -> Any:
    if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def configure(exporter: Any = None) -> bool:
    """Turn tracing on, from the environment or with ``exporter`` (tests: spans are then
    exported one by one, synchronously). Call before Django loads its middleware (wsgi.py,
    asgi.py). Returns whether tracing is on."""
    if _state:
        return True
    if exporter is None and not requested():
        return False
    from django.db.backends.signals import connection_created
    from opentelemetry import trace
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "formation"}
    provider = TracerProvider(resource=Resource.create(attributes))
    private = _private_exporter_class()
    if exporter is None:
        provider.add_span_processor(BatchSpanProcessor(private(_exporter_from_environment())))
        trace.set_tracer_provider(provider)
    else:
        provider.add_span_processor(SimpleSpanProcessor(private(exporter)))
    _state["provider"] = provider
    _state["tracer"] = provider.get_tracer("formation.tools")
    excluded = os.environ.get("OTEL_PYTHON_DJANGO_EXCLUDED_URLS", UNTRACED_PATHS)
    DjangoInstrumentor().instrument(tracer_provider=provider, excluded_urls=excluded)
    # Each connection Django opens (or takes from its pool) traces its statements; no SQL
    # parameters are recorded and no comment is added to the statements.
    connection_created.connect(_on_connection_created, dispatch_uid="formation.tracing")
    return True


def _on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:
    instrument_connection(connection)


def instrument_connection(connection: Any) -> None:
    """Trace the statements of Django connection ``connection`` (once per psycopg connection)."""
    provider = _state.get("provider")
    raw = getattr(connection, "connection", None)
    if provider is None or raw is None or getattr(raw, "_is_instrumented_by_opentelemetry", False):
        return
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    PsycopgInstrumentor.instrument_connection(raw, tracer_provider=provider)


def disable() -> None:
    """Undo ``configure`` (tests)."""
    if not _state:
        return
    from django.db.backends.signals import connection_created
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    DjangoInstrumentor().uninstrument()
    connection_created.disconnect(dispatch_uid="formation.tracing")
    _state["provider"].shutdown()
    _state.clear()


class ToolSpan:
    """What a tool call reports on its span: its outcome and counts, never its arguments."""

    def __init__(self, span: Any) -> None:
        self.span = span

    def finish(self, *, outcome: str, counts: Mapping[str, int]) -> None:
        if self.span is None:
            return
        self.span.set_attribute("formation.tool.outcome", outcome)
        for name, value in counts.items():
            self.span.set_attribute(f"formation.tool.{name}", value)


@contextmanager
def tool_span(name: str) -> Iterator[ToolSpan]:
    """A span named ``tool <name>`` around one tool call while tracing is on."""
    tracer = _state.get("tracer")
    if tracer is None:
        yield ToolSpan(None)
        return
    with tracer.start_as_current_span(
        f"tool {name}",
        attributes={"formation.tool.name": name},
        record_exception=False,
        set_status_on_exception=True,
    ) as span:
        yield ToolSpan(span)
