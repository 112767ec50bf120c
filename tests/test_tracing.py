"""Tracing, with the SDK's in-memory exporter behind ``PrivateSpanExporter``: a request's span,
its tool call's span with the tool's name, outcome and counts, the SQL under them, and no
query text, message text or message id anywhere in what is exported."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from formation import tracing
from messages_app.models import Message
from tests import factories

pytestmark = pytest.mark.django_db

SECRET = "zanzibarquokka"


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    assert tracing.configure(exporter)
    # The test's connection is already open: trace it too.
    connection.ensure_connection()
    tracing.instrument_connection(connection)
    try:
        yield exporter
    finally:
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

        PsycopgInstrumentor.uninstrument_connection(connection.connection)
        connection.connection._is_instrumented_by_opentelemetry = False
        tracing.disable()


def everything(span) -> str:
    """All that leaves the process for one span, as text."""
    return json.dumps(
        {
            "name": span.name,
            "attributes": dict(span.attributes),
            "events": [[e.name, dict(e.attributes or {})] for e in span.events],
            "status": span.status.description,
            "resource": dict(span.resource.attributes),
        },
        default=str,
    )


def test_off_unless_configured(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert not tracing.requested()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert tracing.requested()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing.requested()


def test_a_secret_search_is_traced_without_its_text_or_ids(world, spans):
    message = factories.post(world.private, world.alice, f"the {SECRET} launch plan")
    factories.post(world.private, world.bob, "a neighbour of the plan")
    run, run_api = factories.make_run(world.agent, world.private, world.alice)
    answer = run_api.post("/api/v1/history/search", {"query": SECRET}, format="json")
    assert answer.status_code == 200
    hits = answer.json()["items"]
    assert run_api.get(f"/api/v1/messages/search?query={SECRET}").status_code == 200
    assert run_api.get(f"/api/v1/messages/{message.id}").status_code == 200

    finished = spans.get_finished_spans()
    tool = [s for s in finished if s.name == "tool search_history"]
    assert len(tool) == 1
    assert tool[0].attributes["formation.tool.name"] == "search_history"
    assert tool[0].attributes["formation.tool.outcome"] == "ok"
    assert tool[0].attributes["formation.tool.hits"] == len(hits)
    assert tool[0].attributes["formation.tool.neighbours"] == sum(
        len(hit["before"]) + len(hit["after"]) for hit in hits
    )
    assert {"tool search_messages", "tool get_message"} <= {s.name for s in finished}
    requests = [s for s in finished if "http.route" in s.attributes]
    assert {s.attributes["http.route"] for s in requests} >= {
        "api/v1/history/search",
        "api/v1/messages/search",
    }
    # The tool's span is a child of its request's, and its statements children of it.
    by_id = {s.context.span_id: s for s in finished}
    assert by_id[tool[0].parent.span_id].attributes.get("http.route") == "api/v1/history/search"
    statements = [s for s in finished if s.attributes.get("db.system") == "postgresql"]
    assert any(s.parent and s.parent.span_id == tool[0].context.span_id for s in statements)
    assert all("db.statement" in s.attributes for s in statements)

    secrets = {SECRET, *Message.objects.values_list("content", flat=True)}
    ids = {str(value) for value in Message.objects.values_list("id", flat=True)}
    ids |= {str(run.id), str(world.private.id), str(world.alice.id), str(world.agent.id)}
    for span in finished:
        text = everything(span)
        for value in secrets | ids | {value.replace("-", "") for value in ids}:
            assert value not in text, (span.name, value)


def test_a_failed_tool_call_names_its_error_code(world, spans):
    _, run_api = factories.make_run(world.agent, world.private, world.alice)
    missing = "00000000-0000-4000-8000-000000000000"
    assert run_api.get(f"/api/v1/messages/{missing}").status_code == 404
    (tool,) = [s for s in spans.get_finished_spans() if s.name == "tool get_message"]
    assert tool.attributes["formation.tool.outcome"] == "not_found"
    assert tool.status.description is None
