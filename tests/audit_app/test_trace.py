"""``GET /api/v1/runs/{id}/trace`` (SPEC §7, §8): each search as a ``search_audit`` item.

The workspace's service token sees everything, exclusion counts included; the run's own token
sees the same items with ``exclusions: null`` (they describe messages it may not see). Any other
run, another tenant's run and a run that does not exist are the same ``not_found``, byte for
byte. Items never carry the query text, only its digest.
"""

from __future__ import annotations

import re
import uuid

import pytest
from rest_framework.test import APIClient

from tests import factories
from tests.audit_app.helpers import (
    EXCLUSION_KEYS,
    assert_error,
    events,
    keyed_digest,
    make_event,
    newest_key,
    search,
)
from tests.factories import at

pytestmark = pytest.mark.django_db

ITEM_KEYS = {
    "type",
    "tool",
    "id",
    "createdAt",
    "runId",
    "agentId",
    "conversationId",
    "requesterId",
    "queryDigest",
    "filters",
    "outcome",
    "hitIds",
    "neighbourIds",
    "rankings",
    "exclusions",
    "exclusionsCapped",
    "resultCount",
    "budgetUsed",
}
CAMEL = re.compile(r"^[a-z]+(?:[A-Z][a-z]+)*$")
QUERIES = ["Orbit alpha", "beta report", "gamma"]
RFC3339_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


def trace(client, run_id, **params):
    return client.get(f"/api/v1/runs/{run_id}/trace", params)


def keys_in(value) -> set[str]:
    """Every key of every object in a JSON value (except the message-id keyed maps)."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys_in(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys_in(v)}
    return set()


@pytest.fixture
def traced(world):
    """A run of the ``world`` agent in the private room with three searches behind it, and an
    unrelated run of the same agent with one search of its own."""
    workspace = world.workspace
    room = factories.make_conversation(workspace, "public", "traced")
    factories.join(room, world.agent, joined_at=at(-600))
    factories.join(room, world.alice, joined_at=at(-600))
    texts = ["orbit alpha report", "plain", "orbit beta report", "plain", "orbit gamma report"]
    messages = [factories.post(room, world.bob, t, created_at=at(i)) for i, t in enumerate(texts)]
    run, run_client = factories.make_run(world.agent, room, world.alice)
    for query in QUERIES:
        assert search(run_client, {"query": query, "limit": 2}).status_code == 200
    other_run, other_client = factories.make_run(world.agent, room, world.alice)
    assert search(other_client, {"query": "orbit"}).status_code == 200
    return run, run_client, other_run, other_client, messages


def test_the_service_token_sees_every_search_oldest_first(world, traced):
    run, *_ = traced

    response = trace(world.service, run.id)

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"items", "total", "limit", "offset"}
    assert (body["total"], body["limit"], body["offset"]) == (3, 50, 0)
    rows = list(events(run))
    items = body["items"]
    assert [item["id"] for item in items] == [str(row.id) for row in rows]
    assert [item["createdAt"] for item in items] == sorted(item["createdAt"] for item in items)
    key_id, secret = newest_key()
    for item, row, query in zip(items, rows, QUERIES, strict=True):
        assert set(item) == ITEM_KEYS
        assert item["type"] == "search_audit"
        assert RFC3339_UTC.match(item["createdAt"])
        assert item["runId"] == str(run.id)
        assert item["agentId"] == str(world.agent.id)
        assert item["conversationId"] == str(run.conversation_id)
        assert item["requesterId"] == str(world.alice.id)
        assert item["queryDigest"] == {"keyId": key_id, "digest": keyed_digest(query, secret)}
        assert item["filters"] == {"speaker": "anyone", "after": None, "before": None, "limit": 2}
        assert item["outcome"] == "answered"
        assert item["hitIds"] == [str(i) for i in row.hit_ids]
        assert item["neighbourIds"] == [str(i) for i in row.neighbour_ids]
        assert item["rankings"] == row.rankings
        assert [r["messageId"] for r in item["rankings"]] == item["hitIds"]
        assert set(item["exclusions"]) == set(EXCLUSION_KEYS)
        assert item["exclusions"]["notObserved"] == row.exclusions["not_observed"]
        assert item["exclusionsCapped"] is False
        assert item["resultCount"] == len(item["hitIds"])
        assert item["budgetUsed"] == row.budget_used
        assert all(CAMEL.match(key) for key in keys_in(item)), keys_in(item)
    assert [len(item["hitIds"]) for item in items] == [2, 2, 1]


def test_exclusion_counts_reach_the_trace(world, traced):
    """A match the agent never observed shows as ``notObserved`` to the runtime only."""
    run, run_client, *_ = traced
    hidden = factories.make_conversation(world.workspace, "public", "hidden")
    factories.join(hidden, world.bob, joined_at=at(-600))
    factories.post(hidden, world.bob, "orbit out of sight", at(1))
    factories.post(hidden, world.bob, "orbit also out of sight", at(2))
    assert search(run_client, {"query": "orbit"}).status_code == 200

    service_items = trace(world.service, run.id).json()["items"]
    run_items = trace(run_client, run.id).json()["items"]

    assert service_items[-1]["exclusions"] == {
        **dict.fromkeys(EXCLUSION_KEYS, 0),
        "notObserved": 2,
    }
    assert run_items[-1]["exclusions"] is None


def test_the_runs_own_token_sees_the_same_items_without_exclusions(world, traced):
    run, run_client, *_ = traced

    as_service = trace(world.service, run.id).json()
    as_run = trace(run_client, run.id)

    assert as_run.status_code == 200, as_run.content
    body = as_run.json()
    assert body["total"] == 3
    for mine, full in zip(body["items"], as_service["items"], strict=True):
        assert set(mine) == ITEM_KEYS
        assert mine["exclusions"] is None
        assert mine["exclusionsCapped"] is None
        assert {k: v for k, v in mine.items() if not k.startswith("exclusions")} == {
            k: v for k, v in full.items() if not k.startswith("exclusions")
        }


def test_paging(world, traced):
    run, *_ = traced
    every = [item["id"] for item in trace(world.service, run.id).json()["items"]]

    page = trace(world.service, run.id, limit=2, offset=1).json()
    assert [item["id"] for item in page["items"]] == every[1:3]
    assert (page["total"], page["limit"], page["offset"]) == (3, 2, 1)
    first = trace(world.service, run.id, limit=2).json()
    assert [item["id"] for item in first["items"]] == every[:2]
    assert first["total"] == 3
    beyond = trace(world.service, run.id, offset=10).json()
    assert beyond["items"] == []
    assert beyond["total"] == 3


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 201},
        {"limit": "two"},
        {"limit": "1.5"},
        {"offset": -1},
        {"offset": "x"},
        {"query": "orbit"},
        {"runId": "x"},
        {"limit": ["1", "2"]},
    ],
)
def test_bad_paging_and_unknown_parameters_are_invalid(world, params):
    run, run_client = factories.make_run(world.agent, world.private, world.alice)
    make_event(run)
    assert trace(world.service, run.id).json()["total"] == 1

    for client in (world.service, run_client):
        response = trace(client, run.id, **params)

        assert_error(response, 400, "invalid_arguments")
        assert "orbit" not in response.content.decode()


def test_a_run_without_searches_has_an_empty_trace(world):
    run, run_client = factories.make_run(world.agent, world.private, world.alice)

    for client in (world.service, run_client):
        body = trace(client, run.id).json()
        assert body["items"] == []
        assert body["total"] == 0


def test_everything_but_the_run_and_its_workspace_is_the_same_not_found(world, traced):
    run, run_client, other_run, other_client, _ = traced
    workspace, agent, room, _ = factories.other_workspace()
    stranger = factories.make_account(workspace, "Dana Example")
    foreign_run, foreign_client = factories.make_run(agent, room, stranger)
    assert search(foreign_client, {"query": "sample"}).status_code == 200
    foreign_service = factories.service_client(workspace)

    answers = [
        trace(other_client, run.id),  # another run's token, same workspace
        trace(run_client, other_run.id),
        trace(foreign_service, run.id),  # another workspace's service token
        trace(world.service, foreign_run.id),
        trace(foreign_client, run.id),
        trace(world.service, uuid.uuid4()),  # a run that does not exist
        trace(run_client, uuid.uuid4()),
    ]

    for response in answers:
        assert_error(response, 404, "not_found")
    assert len({response.content for response in answers}) == 1
    # The runs themselves are fine for the tokens that may see them.
    assert trace(other_client, other_run.id).status_code == 200
    assert trace(foreign_service, foreign_run.id).status_code == 200


def test_an_agent_token_is_forbidden(world, traced):
    run, *_ = traced

    assert_error(trace(world.agent_api, run.id), 403, "forbidden")
    assert_error(trace(world.agent_api, uuid.uuid4()), 403, "forbidden")


def test_no_token_is_unauthenticated(world, traced):
    run, *_ = traced

    assert_error(trace(APIClient(), run.id), 401, "unauthenticated")
    assert_error(trace(factories.bearer_client("not-a-real-token"), run.id), 401, "unauthenticated")


def test_the_trace_never_holds_the_query_text(world, traced):
    run, run_client, *_ = traced
    search(run_client, {"query": "Quasarword orbit", "speaker": "requester"})

    for client in (world.service, run_client):
        text = trace(client, run.id).content.decode().lower()
        for word in ("quasarword", "orbit", "alpha", "beta", "gamma"):
            assert word not in text
