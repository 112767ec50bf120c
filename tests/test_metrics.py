"""``/metrics``: behind its token, the families operations.md lists, and nothing private.

tests/test_metrics_serving.py scrapes two gunicorn workers."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client
from prometheus_client import REGISTRY

from audit_app.models import ConversationSearchEvent
from messages_app.models import Account, Agent, Conversation, Message, Run, Workspace
from tests import factories

pytestmark = pytest.mark.django_db

TOKEN = "metrics-test-token-0123456789"
SECRET = "zanzibarquokka"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")


@pytest.fixture
def scrape(settings):
    settings.METRICS_TOKEN = TOKEN

    def scrape() -> str:
        response = Client().get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain")
        return response.content.decode()

    return scrape


def test_metrics_do_not_exist_without_a_token(settings):
    settings.METRICS_TOKEN = ""
    assert Client().get("/metrics").status_code == 404
    assert Client().get("/metrics", headers={"authorization": "Bearer "}).status_code == 404


def test_metrics_need_the_token(settings):
    settings.METRICS_TOKEN = TOKEN
    refused = Client().post("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 405
    assert Client().get("/metrics").status_code == 401
    wrong = Client().get("/metrics", headers={"authorization": f"Bearer {TOKEN}x"})
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"] == 'Bearer realm="metrics"'


def test_metrics_off_records_nothing_and_serves_nothing(world, settings):
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ENABLED = False
    before = sample("formation_http_requests_total", endpoint="api/v1/accounts")
    assert world.service.get("/api/v1/accounts").status_code == 200
    assert sample("formation_http_requests_total", endpoint="api/v1/accounts") == before
    response = Client().get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 404


def sample(name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    total = 0.0
    for family in REGISTRY.collect():
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                total += found.value
    return total


def test_tool_calls_are_counted_by_tool_and_outcome(world, scrape):
    message = factories.post(world.private, world.alice)
    ok = sample("formation_tool_calls_total", tool="get_message", outcome="ok")
    missing = sample("formation_tool_calls_total", tool="get_message", outcome="not_found")
    assert world.agent_api.get(f"/api/v1/messages/{message.id}").status_code == 200
    assert world.agent_api.get(f"/api/v1/messages/{uuid.uuid4()}").status_code == 404
    assert sample("formation_tool_calls_total", tool="get_message", outcome="ok") == ok + 1
    assert (
        sample("formation_tool_calls_total", tool="get_message", outcome="not_found") == missing + 1
    )
    text = scrape()
    assert 'formation_tool_duration_seconds_bucket{le="0.0025",tool="get_message"}' in text
    assert 'formation_http_requests_total{endpoint="api/v1/messages/<id:message_id>"' in text


def test_a_scrape_after_a_secret_search_holds_no_text_and_no_id(world, scrape):
    """Every family is there; the secret word, the message texts and every id are not."""
    message = factories.post(world.private, world.alice, f"the {SECRET} launch plan")
    factories.post(world.private, world.bob, "a neighbour of the plan")
    factories.post(world.public, world.bob, f"{SECRET} in public")
    run, run_api = factories.make_run(world.agent, world.private, world.alice)
    answer = run_api.post("/api/v1/history/search", {"query": SECRET}, format="json")
    assert answer.status_code == 200
    assert answer.json()["items"]
    assert run_api.get(f"/api/v1/messages/search?query={SECRET}").status_code == 200
    assert run_api.get(f"/api/v1/messages/{message.id}").status_code == 200
    assert run_api.get(f"/api/v1/messages?conversationId={world.private.id}").status_code == 200
    reply = run_api.post(f"/api/v1/runs/{run.id}/reply", {"content": "noted"}, format="json")
    assert reply.status_code == 201

    text = scrape()
    for family in (
        "formation_http_requests_total",
        "formation_http_request_duration_seconds",
        "formation_tool_calls_total",
        "formation_tool_duration_seconds",
        "formation_search_history_hits",
        "formation_search_history_neighbours",
        "formation_search_budget_exhausted_total",
        "formation_search_exclusions_total",
        "formation_audit_failures_total",
        "formation_delivery_blocked_total",
        "formation_statement_timeouts_total",
        "formation_db_pool_connections",
        "formation_db_pool_waits_total",
        "formation_export_streams_open",
        "formation_lifecycle_runs_total",
        "formation_throttle_store_errors_total",
    ):
        assert f"# HELP {family} " in text, family
    assert "formation_search_history_hits_count" in text
    assert 'formation_tool_calls_total{outcome="ok",tool="search_history"}' in text

    assert SECRET not in text
    for content in Message.objects.values_list("content", flat=True):
        assert content not in text
    models = (Workspace, Account, Agent, Conversation, Message, Run, ConversationSearchEvent)
    ids = {str(value) for model in models for value in model.objects.values_list("id", flat=True)}
    for value in ids:
        assert value not in text
        assert value.replace("-", "") not in text
    assert not UUID.search(text)
    for name in ("Alice Example", "Bob Example", "planning", "general", "acme"):
        assert name not in text


def test_exclusions_and_blocked_deliveries_are_counted_by_reason(world):
    """A private room's message withheld from a public destination that Carol reads too
    (audience), and a reply blocked when the evidence's room gains her as a reader."""
    factories.post(world.private, world.alice, f"{SECRET} private")
    carol = factories.make_account(world.workspace, "Carol Example")
    before = sample("formation_search_exclusions_total", reason="audience")
    _, public_api = factories.make_run(world.agent, world.public, world.alice)
    public_api.post("/api/v1/history/search", {"query": SECRET}, format="json")
    assert sample("formation_search_exclusions_total", reason="audience") > before

    run, run_api = factories.make_run(world.agent, world.direct, world.alice)
    factories.post(world.public, world.bob, f"{SECRET} public")
    assert run_api.post("/api/v1/history/search", {"query": SECRET}, format="json").json()["items"]
    factories.join(world.direct, carol)
    blocked = sample("formation_delivery_blocked_total")
    reply = run_api.post(f"/api/v1/runs/{run.id}/reply", {"content": "noted"}, format="json")
    assert reply.status_code == 409
    assert sample("formation_delivery_blocked_total") == blocked + 1
