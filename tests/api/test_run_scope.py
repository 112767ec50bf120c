"""Runs that cannot be poisoned, and what ``GET /runs/{id}`` tells the runtime.

A run token's membership tools (list_messages, get_message, search_messages) flag every message
``deliverable``: whether a reply citing it would pass the final delivery check now. A run made
with ``toolScope: deliverable`` is shown only what its destination may receive (SPEC §3, as
search_history applies it). ``GET /runs/{id}`` answers the run's status, reply, tool scope,
evidence count and budget. The ``world`` fixture joins everyone "now"; all text is synthetic.
"""

from __future__ import annotations

import pytest

from messages_app import services
from messages_app.models import Run
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

LIST_URL = "/api/v1/messages"
SEARCH_URL = "/api/v1/messages/search"
HISTORY_URL = "/api/v1/history/search"


@pytest.fixture
def scene(world):
    """Alice's direct conversation is the destination. A private room of the agent and Bob
    (Alice is not in it) may not reach it; the public room may."""
    secret = factories.make_conversation(world.workspace, "private", "bob-only")
    factories.join(secret, world.agent)
    factories.join(secret, world.bob)
    world.secret = secret
    world.asked = factories.post(world.direct, world.alice, "sample question")
    world.said = factories.post(world.public, world.bob, "sample status public")
    world.hidden = factories.post(secret, world.bob, "sample status secret")
    return world


def open_run(world, scope: str | None = None):
    payload = {
        "agentId": str(world.agent.id),
        "conversationId": str(world.direct.id),
        "requesterId": str(world.alice.id),
        "currentMessageId": str(world.asked.id),
    }
    if scope is not None:
        payload["toolScope"] = scope
    response = world.service.post("/api/v1/runs", payload, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    return body["id"], factories.bearer_client(body["token"])


def flags(response) -> dict[str, bool]:
    assert response.status_code == 200, response.content
    return {item["id"]: item["deliverable"] for item in response.json()["items"]}


def reply(client, run_id):
    return client.post(f"/api/v1/runs/{run_id}/reply", {"content": "sample answer"}, format="json")


def test_every_message_a_run_token_reads_says_whether_it_is_deliverable(scene):
    run_id, client = open_run(scene)

    found = flags(client.get(SEARCH_URL, {"query": "sample status"}))
    listed = flags(client.get(LIST_URL, {"conversationId": str(scene.secret.id)}))
    got = client.get(f"/api/v1/messages/{scene.said.id}").json()

    assert found == {str(scene.said.id): True, str(scene.hidden.id): False}
    assert listed == {str(scene.hidden.id): False}
    assert got["deliverable"] is True
    # The warning was right: the run read a message its destination may not see.
    blocked = reply(client, run_id)
    assert blocked.status_code == 409, blocked.content
    assert blocked.json()["error"]["code"] == "delivery_blocked"


def test_an_agent_token_gets_no_flag(scene):
    body = scene.agent_api.get(SEARCH_URL, {"query": "sample status"}).json()
    assert {item["id"] for item in body["items"]} == {str(scene.said.id), str(scene.hidden.id)}
    assert all("deliverable" not in item for item in body["items"])


def test_the_flag_follows_the_audience_as_it_is_now(scene):
    """Alice joins the private room: its message becomes deliverable to her direct room."""
    _, client = open_run(scene)
    assert flags(client.get(SEARCH_URL, {"query": "secret"})) == {str(scene.hidden.id): False}

    factories.join(scene.secret, scene.alice)

    assert flags(client.get(SEARCH_URL, {"query": "secret"})) == {str(scene.hidden.id): True}


def test_a_deliverable_run_is_shown_only_what_its_destination_may_receive(scene):
    run_id, client = open_run(scene, "deliverable")
    before_join = factories.post(scene.public, scene.bob, "sample status early", created_at=at(0))
    deleted = factories.post(scene.direct, scene.alice, "sample status gone")
    answer = factories.post(
        scene.direct, scene.alice, "sample status answer", reply_to_id=deleted.id
    )
    services.message_delete(message=deleted)

    found = flags(client.get(SEARCH_URL, {"query": "sample"}))
    public = client.get(LIST_URL, {"conversationId": str(scene.public.id)}).json()
    secret = client.get(LIST_URL, {"conversationId": str(scene.secret.id)}).json()
    direct = client.get(LIST_URL, {"conversationId": str(scene.direct.id)}).json()
    missing = client.get("/api/v1/messages/00000000-0000-4000-8000-000000000000")
    withheld = client.get(f"/api/v1/messages/{scene.hidden.id}")
    around = client.get(
        LIST_URL, {"conversationId": str(scene.secret.id), "around": str(scene.hidden.id)}
    )

    # Not the secret room's message, not one from before the agent joined, not the run's own
    # current message: exactly what search_history could return.
    assert found == {str(scene.said.id): True, str(answer.id): True}
    assert [item["id"] for item in public["items"]] == [str(scene.said.id)]
    assert public["total"] == 1
    assert (secret["items"], secret["total"], secret["hasOlder"]) == ([], 0, False)
    assert [item["id"] for item in direct["items"]] == [str(answer.id)]
    assert direct["items"][0]["replyToId"] is None  # it names a deleted message
    assert direct["total"] == 1
    assert withheld.status_code == missing.status_code == 404
    assert withheld.content == missing.content
    assert around.status_code == 404
    assert around.content == missing.content
    assert str(before_join.id) not in found
    assert reply(client, run_id).status_code == 201


def test_the_default_scope_still_lists_what_membership_allows(scene):
    _, client = open_run(scene, "membership")
    deleted = factories.post(scene.direct, scene.alice, "sample status gone")
    answer = factories.post(
        scene.direct, scene.alice, "sample status answer", reply_to_id=deleted.id
    )
    services.message_delete(message=deleted)

    direct = client.get(LIST_URL, {"conversationId": str(scene.direct.id)}).json()

    assert [item["id"] for item in direct["items"]] == [str(answer.id), str(scene.asked.id)]
    assert direct["items"][0]["replyToId"] == str(deleted.id)
    assert direct["total"] == 2


@pytest.mark.parametrize("scope", ["everything", "", None, 1, ["deliverable"]])
def test_an_unknown_tool_scope_is_invalid(scene, scope):
    before = Run.objects.count()
    response = scene.service.post(
        "/api/v1/runs",
        {
            "agentId": str(scene.agent.id),
            "conversationId": str(scene.direct.id),
            "requesterId": str(scene.alice.id),
            "toolScope": scope,
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid_arguments"
    assert Run.objects.count() == before


def test_get_run_says_whether_it_replied_and_what_it_used(scene):
    run_id, client = open_run(scene, "deliverable")
    url = f"/api/v1/runs/{run_id}"

    fresh = scene.service.get(url).json()
    assert client.post(HISTORY_URL, {"query": "public"}, format="json").status_code == 200
    factories.post(scene.public, scene.bob, "another")
    assert client.get(LIST_URL, {"conversationId": str(scene.public.id)}).status_code == 200
    used = scene.service.get(url).json()
    delivered = reply(client, run_id).json()
    done = scene.service.get(url).json()

    assert fresh == {
        "id": run_id,
        "agentId": str(scene.agent.id),
        "conversationId": str(scene.direct.id),
        "requesterId": str(scene.alice.id),
        "createdAt": fresh["createdAt"],
        "status": "open",
        "replyId": None,
        "repliedAt": None,
        "toolScope": "deliverable",
        "evidenceCount": 0,
        "budget": {"used": 0, "limit": 400, "remaining": 400},
    }
    # search_history brought in the public message (its budget); list_messages returned it
    # again and one more: two messages of evidence, one of them search_history's.
    assert used["evidenceCount"] == 2
    assert used["budget"] == {"used": 1, "limit": 400, "remaining": 399}
    assert used["status"] == "open"
    assert done["status"] == "replied"
    assert done["replyId"] == delivered["id"]
    assert done["repliedAt"] is not None
    assert done["repliedAt"] >= delivered["createdAt"]
    assert Run.objects.get(pk=run_id).reply_id is not None


def test_get_run_needs_a_service_token_and_its_workspace(scene):
    run_id, client = open_run(scene)
    assert client.get(f"/api/v1/runs/{run_id}").status_code == 403
    other = factories.make_workspace("elsewhere-runs")
    response = factories.service_client(other).get(f"/api/v1/runs/{run_id}")
    assert response.status_code == 404
