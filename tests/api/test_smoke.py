import pytest

from tests import factories

pytestmark = pytest.mark.django_db


def test_service_creates_message_and_agent_lists_it(world):
    created = world.service.post(
        f"/api/v1/conversations/{world.private.id}/messages",
        {"senderUserId": str(world.alice.id), "content": "sample status"},
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["seq"] == 1
    assert body["senderUserId"] == str(world.alice.id)
    assert "senderAgentId" not in body
    listed = world.agent_api.get("/api/v1/messages", {"conversationId": str(world.private.id)})
    assert listed.status_code == 200, listed.json()
    assert [item["id"] for item in listed.json()["items"]] == [body["id"]]
    assert listed.json()["total"] == 1


def test_missing_token_is_unauthenticated_envelope(world):
    response = factories.bearer_client("nope").get("/api/v1/messages")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
