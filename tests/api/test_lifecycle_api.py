"""The lifecycle endpoints over HTTP (docs/lifecycle.md): retention periods, legal holds that
refuse delete, edit and erasure with ``legal_hold_active``, account erasure, and JSON Lines exports.
"""

from __future__ import annotations

import json
import uuid

import pytest

from audit_app.models import LifecycleEvent, LifecycleOutcome
from messages_app.models import Account
from tests import factories
from tests.audit_app.helpers import assert_error

pytestmark = pytest.mark.django_db


def streamed(response) -> bytes:
    """The whole body; the test client closes the response when the stream ends."""
    assert response.streaming
    return b"".join(response.streaming_content)


def lines(response) -> list[dict]:
    return [json.loads(line) for line in streamed(response).decode().splitlines()]


# --- retention ----------------------------------------------------------------------------------


def test_workspace_and_conversation_retention(world):
    service = world.service
    url = f"/api/v1/conversations/{world.private.id}/retention"
    assert service.get("/api/v1/retention").json() == {"days": None}
    assert service.put("/api/v1/retention", {"days": 30}, format="json").json() == {"days": 30}
    assert service.get(url).json() == {
        "conversationId": str(world.private.id),
        "days": 30,
        "inherited": True,
    }
    own = service.put(url, {"days": None}, format="json")
    assert own.json() == {"conversationId": str(world.private.id), "days": None, "inherited": False}
    assert service.delete(url).json()["inherited"] is True


@pytest.mark.parametrize(
    "body", [{}, {"days": 0}, {"days": 36_501}, {"days": "30"}, {"days": 1.5}, {"days": 3, "x": 1}]
)
def test_retention_bodies_are_checked_and_change_nothing(world, body):
    response = world.service.put("/api/v1/retention", body, format="json")
    assert_error(response, 400, "invalid_arguments")
    assert world.service.get("/api/v1/retention").json() == {"days": None}


def test_retention_of_another_workspace_conversation_is_not_found(world):
    _, _, elsewhere_room, _ = factories.other_workspace()
    response = world.service.put(
        f"/api/v1/conversations/{elsewhere_room.id}/retention", {"days": 3}, format="json"
    )
    assert_error(response, 404, "not_found")


# --- holds --------------------------------------------------------------------------------------


def place(world, **body):
    response = world.service.post("/api/v1/legal-holds", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_a_hold_refuses_delete_with_an_error_naming_it(world):
    message = factories.post(world.private, world.alice, "sample held")
    hold = place(world, conversationId=str(world.private.id), reference="matter-19")

    refused = world.service.delete(f"/api/v1/messages/{message.id}")

    body = assert_error(refused, 409, "legal_hold_active")
    assert body["error"]["details"] == {"holdId": hold["id"]}
    assert "matter-19" not in refused.content.decode()
    message.refresh_from_db()
    assert message.deleted_at is None
    assert message.content == "sample held"
    released = world.service.post(f"/api/v1/legal-holds/{hold['id']}/release")
    assert released.status_code == 200
    assert released.json()["releasedAt"] is not None
    assert world.service.delete(f"/api/v1/messages/{message.id}").status_code == 204


@pytest.mark.parametrize("on_workspace", [False, True], ids=["conversation hold", "workspace hold"])
def test_a_hold_refuses_an_edit_with_an_error_naming_it_and_changes_nothing(world, on_workspace):
    """An edit keeps no earlier version, so a hold preserves content against it too."""
    message = factories.post(world.private, world.alice, "sample held")
    hold = place(world) if on_workspace else place(world, conversationId=str(world.private.id))
    before = factories.table_snapshot()
    url = f"/api/v1/messages/{message.id}"

    refused = world.service.patch(url, {"content": "sample rewritten"}, format="json")

    assert assert_error(refused, 409, "legal_hold_active")["error"]["details"] == {
        "holdId": hold["id"]
    }
    assert "sample rewritten" not in refused.content.decode()
    assert factories.table_snapshot() == before
    world.service.post(f"/api/v1/legal-holds/{hold['id']}/release")
    edited = world.service.patch(url, {"content": "sample rewritten"}, format="json")
    assert edited.status_code == 200
    assert edited.json()["content"] == "sample rewritten"


def test_a_hold_on_another_conversation_does_not_refuse_an_edit(world):
    message = factories.post(world.public, world.alice, "sample open")
    place(world, conversationId=str(world.private.id))
    edited = world.service.patch(
        f"/api/v1/messages/{message.id}", {"content": "sample edited"}, format="json"
    )
    assert edited.status_code == 200


def test_holds_are_listed_and_released_once(world):
    workspace_hold = place(world)
    room_hold = place(world, conversationId=str(world.public.id))
    assert workspace_hold["conversationId"] is None

    world.service.post(f"/api/v1/legal-holds/{room_hold['id']}/release")
    again = world.service.post(f"/api/v1/legal-holds/{room_hold['id']}/release")

    assert_error(again, 400, "invalid_arguments")
    active = world.service.get("/api/v1/legal-holds", {"active": "true"}).json()
    assert [item["id"] for item in active["items"]] == [workspace_hold["id"]]
    assert world.service.get("/api/v1/legal-holds").json()["total"] == 2
    assert_error(
        world.service.get("/api/v1/legal-holds", {"active": "maybe"}), 400, "invalid_arguments"
    )
    unknown = world.service.post(
        "/api/v1/legal-holds", {"conversationId": str(uuid.uuid4())}, format="json"
    )
    assert_error(unknown, 400, "invalid_arguments")


# --- erasure ------------------------------------------------------------------------------------


def test_erasure_over_http(world):
    written = factories.post(world.private, world.bob, "sample from bob")
    response = world.service.post(f"/api/v1/accounts/{world.bob.id}/erase")

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {
        "accountId",
        "erasedMessages",
        "removedIdentityLinks",
        "derivedMessagesMarked",
        "erasedAt",
    }
    assert (body["accountId"], body["erasedMessages"]) == (str(world.bob.id), 1)
    written.refresh_from_db()
    assert written.deleted_at is not None
    account = world.service.get(f"/api/v1/accounts/{world.bob.id}").json()
    assert (account["displayName"], account["externalId"]) == ("Erased account", None)


def test_erasure_refused_by_a_hold_names_it_and_changes_nothing(world):
    factories.post(world.private, world.bob, "sample from bob")
    hold = place(world, conversationId=str(world.private.id))
    before = factories.table_snapshot()

    refused = world.service.post(f"/api/v1/accounts/{world.bob.id}/erase")

    assert assert_error(refused, 409, "legal_hold_active")["error"]["details"] == {
        "holdId": hold["id"]
    }
    assert factories.table_snapshot() == before


def test_erasure_takes_no_body(world):
    response = world.service.post(
        f"/api/v1/accounts/{world.bob.id}/erase", {"now": True}, format="json"
    )
    assert_error(response, 400, "invalid_arguments")
    assert Account.objects.get(pk=world.bob.pk).erased_at is None


def test_a_derived_reply_is_marked_in_its_summary(world):
    source = factories.post(world.private, world.bob, "sample private plan")
    reply = factories.post(world.private, world.agent, "sample answer", lineage=[source.id])
    world.service.post(f"/api/v1/accounts/{world.bob.id}/erase")

    summary = world.agent_api.get(f"/api/v1/messages/{reply.id}").json()

    assert summary["sourcesErased"] is True
    reply.refresh_from_db()
    assert reply.sources_erased


# --- export -------------------------------------------------------------------------------------


def test_a_conversation_export_streams_its_live_messages_in_order(world):
    posted = [factories.post(world.private, world.alice, f"sample {i}") for i in range(3)]
    world.service.delete(f"/api/v1/messages/{posted[1].id}")
    factories.post(world.public, world.alice, "sample elsewhere")

    response = world.service.get(f"/api/v1/conversations/{world.private.id}/export")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    exported = lines(response)
    assert [item["id"] for item in exported] == [str(posted[0].id), str(posted[2].id)]
    assert set(exported[0]) == factories.SUMMARY_KEYS | {"senderUserId"}
    assert exported[0]["content"] == "sample 0"
    event = LifecycleEvent.objects.get(action="export")
    assert (event.outcome, event.counts, event.subject_id) == (
        LifecycleOutcome.COMPLETED,
        {"messages": 2},
        world.private.id,
    )


def test_an_account_export_is_everything_it_wrote(world):
    written = [
        factories.post(room, world.bob, "sample", created_at=factories.at(minute))
        for minute, room in enumerate((world.private, world.public, world.private))
    ]
    factories.post(world.public, world.alice, "sample from alice")

    exported = lines(world.service.get(f"/api/v1/accounts/{world.bob.id}/export"))

    assert [item["id"] for item in exported] == [str(m.id) for m in written]


def test_exports_of_another_workspace_are_not_found_and_not_recorded(world):
    elsewhere, _, elsewhere_room, _ = factories.other_workspace()
    stranger = factories.make_account(elsewhere)
    answers = [
        world.service.get(f"/api/v1/conversations/{elsewhere_room.id}/export"),
        world.service.get(f"/api/v1/accounts/{stranger.id}/export"),
        world.service.get(f"/api/v1/accounts/{uuid.uuid4()}/export"),
    ]
    assert {a.content for a in answers} == {answers[2].content}
    for answer in answers:
        assert_error(answer, 404, "not_found")
    assert not LifecycleEvent.objects.exists()


def test_an_export_takes_no_query_and_only_service_tokens(world):
    url = f"/api/v1/conversations/{world.private.id}/export"
    assert_error(world.service.get(url, {"limit": "5"}), 400, "invalid_arguments")
    assert_error(world.agent_api.get(url), 403, "forbidden")
    assert not LifecycleEvent.objects.exists()


def test_an_export_may_be_asked_for_as_json_lines(world):
    factories.post(world.private, world.alice, "sample")
    url = f"/api/v1/conversations/{world.private.id}/export"
    ok = world.service.get(url, HTTP_ACCEPT="application/x-ndjson")
    assert len(lines(ok)) == 1
    missing = world.service.get(
        f"/api/v1/conversations/{uuid.uuid4()}/export", HTTP_ACCEPT="application/x-ndjson"
    )
    assert missing.status_code == 404
    assert json.loads(missing.content)["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("accept", "status", "error_type"),
    [
        ("application/x-ndjson", 200, "application/x-ndjson"),
        ("application/json", 200, "application/json"),
        ("*/*", 200, "application/json"),
        ("application/*;q=0.5, text/html", 200, "application/json"),
        ("text/html, application/x-ndjson;q=0.1", 200, "application/x-ndjson"),
        ("text/html", 406, None),
        ("text/*, image/png", 406, None),
        ("application/x-ndjson;q=0", 406, None),
        ("application/x-ndjson; Q=0.000", 406, None),
        ("application/x-ndjson;q=0.001", 200, "application/x-ndjson"),
        ("text/html;q=2, application/x-ndjson;q=0.5", 200, "application/x-ndjson"),
        ("application/x-ndjson;q=0, */*;q=1", 406, None),
        ("application/*, application/x-ndjson;q=0", 406, None),
    ],
)
def test_an_export_follows_rfc_9110_content_negotiation(world, accept, status, error_type):
    """Quality values count (q=0 refuses, the most specific range wins), and an export no range
    admits is 406 in the error envelope, before anything is recorded; ``application/json``, named
    itself, is still served the export, as it always was."""
    factories.post(world.private, world.alice, "sample")
    url = f"/api/v1/conversations/{world.private.id}/export"
    response = world.service.get(url, HTTP_ACCEPT=accept)
    assert response.status_code == status
    if status == 406:
        assert response["Content-Type"] == "application/json"
        assert json.loads(response.content)["error"] == {
            "code": "not_acceptable",
            "message": "The Accept header admits none of the types this endpoint answers.",
            "details": {},
        }
        assert world.service.head(url, HTTP_ACCEPT=accept).status_code == 406
        assert not LifecycleEvent.objects.exists()
        return
    assert response["Content-Type"] == "application/x-ndjson"
    assert len(lines(response)) == 1
    # Errors take the more acceptable of JSON and JSON Lines.
    missing = world.service.get(f"/api/v1/conversations/{uuid.uuid4()}/export", HTTP_ACCEPT=accept)
    assert (missing.status_code, missing["Content-Type"]) == (404, error_type)


def test_head_of_an_export_starts_nothing(world):
    response = world.service.head(f"/api/v1/conversations/{world.private.id}/export")
    assert response.status_code == 200
    assert not LifecycleEvent.objects.exists()
    missing = world.service.head(f"/api/v1/conversations/{uuid.uuid4()}/export")
    assert missing.status_code == 404
