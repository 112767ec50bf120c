"""Every search is audited, not only search_history: search_messages and memory recall too.

Each call writes one ``conversation_search_events`` row (``tool`` names it) with the keyed
digest and what was returned, in the same transaction as the run's evidence or memories, and
fails closed like search_history: no audit row, no answer, nothing recorded.
"""

from __future__ import annotations

import uuid

import pytest

from audit_app.models import ConversationSearchEvent
from messages_app.models import RunEvidence
from search_app.models import RunMemory
from tests import factories
from tests.audit_app.helpers import (
    allow_audit_inserts,
    assert_error,
    columns_holding,
    keyed_digest,
    newest_key,
    refuse_audit_inserts,
    trace_url,
)

pytestmark = pytest.mark.django_db

SEARCH_MESSAGES_URL = "/api/v1/messages/search"


def remember(client, run, content: str) -> None:
    response = client.post(f"/api/v1/runs/{run.id}/memories", {"content": content}, format="json")
    assert response.status_code == 201, response.content


def test_search_messages_with_an_agent_token_is_audited_without_a_run(world):
    said = [factories.post(world.public, world.bob, f"literal Needle {i}") for i in range(3)]
    response = world.agent_api.get(
        SEARCH_MESSAGES_URL, {"query": "needle", "conversationId": str(world.public.id)}
    )
    assert response.status_code == 200
    event = ConversationSearchEvent.objects.get()
    key_id, secret = newest_key()
    assert (event.tool, event.run_id, event.destination_id, event.requester_id) == (
        "search_messages",
        None,
        None,
        None,
    )
    assert (event.workspace_id, event.agent_id) == (world.workspace.id, world.agent.id)
    assert (event.key_id, event.query_digest) == (key_id, keyed_digest("needle", secret))
    assert event.filters == {"conversationId": str(world.public.id), "limit": 20}
    assert event.hit_ids == [message.id for message in reversed(said)]
    assert [item["id"] for item in response.json()["items"]] == [str(i) for i in event.hit_ids]
    assert event.result_count == 3


def test_search_messages_with_a_run_token_is_in_the_runs_trace(world):
    said = factories.post(world.public, world.bob, "literal needle")
    run, client = factories.make_run(world.agent, world.public, world.alice)
    assert client.get(SEARCH_MESSAGES_URL, {"query": "needle"}).status_code == 200
    event = ConversationSearchEvent.objects.get()
    assert (event.run_id, event.destination_id, event.requester_id) == (
        run.id,
        world.public.id,
        world.alice.id,
    )
    (item,) = world.service.get(trace_url(run.id)).json()["items"]
    assert (item["type"], item["tool"], item["hitIds"]) == (
        "search_audit",
        "search_messages",
        [str(said.id)],
    )
    # search_messages counts no exclusions: null even for the service token.
    assert item["exclusions"] is None
    assert item["filters"] == {"conversationId": None, "limit": 20}


def test_memory_recall_is_audited_with_the_memories_it_returned(world):
    writer, writer_client = factories.make_run(world.agent, world.public, world.alice)
    remember(writer_client, writer, "memoryword the plan")
    run, client = factories.make_run(world.agent, world.public, world.alice)
    recalled = client.get("/api/v1/memories", {"query": "memoryword", "limit": 5}).json()
    event = ConversationSearchEvent.objects.get(tool="memories")
    assert event.run_id == run.id
    assert event.hit_ids == [uuid.UUID(item["id"]) for item in recalled["items"]]
    assert event.filters == {"limit": 5}
    assert event.query_digest == keyed_digest("MemoryWord", newest_key()[1])


def test_search_messages_fails_closed_for_agents_and_runs(world):
    factories.post(world.public, world.bob, "literal needle")
    run, client = factories.make_run(world.agent, world.public, world.alice)
    refuse_audit_inserts()
    for caller in (world.agent_api, client):
        response = caller.get(SEARCH_MESSAGES_URL, {"query": "needle"})
        error = assert_error(response, 503, "audit_unavailable")
        assert "needle" not in str(error)
    assert not RunEvidence.objects.filter(run=run).exists()
    allow_audit_inserts()
    assert client.get(SEARCH_MESSAGES_URL, {"query": "needle"}).status_code == 200
    assert RunEvidence.objects.filter(run=run, tool="search_messages").count() == 1


def test_memory_recall_fails_closed(world):
    writer, writer_client = factories.make_run(world.agent, world.public, world.alice)
    remember(writer_client, writer, "memoryword the plan")
    run, client = factories.make_run(world.agent, world.public, world.alice)
    refuse_audit_inserts()
    assert_error(client.get("/api/v1/memories", {"query": "memoryword"}), 503, "audit_unavailable")
    assert not RunMemory.objects.filter(run=run).exists()
    allow_audit_inserts()
    assert client.get("/api/v1/memories", {"query": "memoryword"}).json()["total"] == 1


def test_literal_and_memory_queries_are_never_stored(world):
    canary = "zqxliteral" + uuid.uuid4().hex
    factories.post(world.public, world.bob, "plain words")
    run, client = factories.make_run(world.agent, world.public, world.alice)
    remember(client, run, "memoryword plain")
    assert world.agent_api.get(SEARCH_MESSAGES_URL, {"query": canary}).status_code == 200
    assert client.get(SEARCH_MESSAGES_URL, {"query": canary}).status_code == 200
    assert client.get("/api/v1/memories", {"query": f"memoryword {canary}"}).status_code == 200
    assert ConversationSearchEvent.objects.count() == 3
    assert columns_holding(canary) == []
