"""The ingestion API used with a service token (SPEC §5, §8): exact wire shapes, list filters,
memberships, messages (single, bulk, edit, delete), identity links, runs, and the tenancy and
authentication rules every ingestion endpoint shares."""

from __future__ import annotations

import itertools
import random
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from messages_app import limits, services
from messages_app.models import (
    Account,
    Agent,
    ApiToken,
    Conversation,
    IdentityLink,
    Membership,
    Message,
    MessageLineage,
    Run,
    TokenKind,
)
from synthetic.corpus import corpus_vocabulary
from tests import factories
from tests.factories import SUMMARY_KEYS

pytestmark = pytest.mark.django_db

RFC3339_WITH_ZONE = re.compile(
    r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"
)
CAMEL_CASE = re.compile(r"^[a-z][a-zA-Z0-9]*$")
ACCOUNT_KEYS = {"id", "displayName", "externalId", "createdAt"}
AGENT_KEYS = {"id", "name", "createdAt"}
CONVERSATION_KEYS = {"id", "kind", "title", "externalId", "createdAt"}
MEMBERSHIP_KEYS = {"id", "conversationId", "accountId", "agentId", "joinedAt", "leftAt"}
LIST_KEYS = {"items", "total", "limit", "offset"}
RUN_KEYS = {"id", "token", "agentId", "conversationId", "requesterId", "createdAt"}
LINK_KEYS = {"id", "accountId", "linkedAccountId", "status"}


# --- helpers ---------------------------------------------------------------------------------


def is_uuid(value) -> bool:
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False


def is_timestamp(value) -> bool:
    if not isinstance(value, str) or not RFC3339_WITH_ZONE.match(value):
        return False
    return datetime.fromisoformat(value.replace("Z", "+00:00")).tzinfo is not None


def parse_ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def assert_camel_case(body: dict) -> None:
    assert all(CAMEL_CASE.match(key) for key in body), sorted(body)


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:500])
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


def assert_summary(item: dict, *, sender_key: str) -> None:
    other = "senderUserId" if sender_key == "senderAgentId" else "senderAgentId"
    assert set(item) == SUMMARY_KEYS | {sender_key}
    assert other not in item
    assert is_uuid(item["id"])
    assert is_uuid(item["conversationId"])
    assert is_uuid(item[sender_key])
    assert isinstance(item["seq"], int)
    assert not isinstance(item["seq"], bool)
    assert isinstance(item["content"], str)
    assert is_timestamp(item["createdAt"])
    for key in ("replyToId", "threadId"):
        assert item[key] is None or is_uuid(item[key])


def messages_url(conversation) -> str:
    return f"/api/v1/conversations/{conversation.id}/messages"


def bulk_url(conversation) -> str:
    return f"/api/v1/conversations/{conversation.id}/messages/bulk"


def members_url(conversation) -> str:
    return f"/api/v1/conversations/{conversation.id}/members"


def leave_url(conversation) -> str:
    return f"/api/v1/conversations/{conversation.id}/members/leave"


def ts(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def row_counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (
            Account,
            Agent,
            Conversation,
            Membership,
            Message,
            MessageLineage,
            IdentityLink,
            Run,
            ApiToken,
        )
    }


@pytest.fixture
def room(world):
    """A fresh private room of the world with Alice, Bob and the agent as current members."""
    conversation = factories.make_conversation(world.workspace, "private", "ingest room")
    for member in (world.alice, world.bob, world.agent):
        factories.join(conversation, member)
    return conversation


# --- accounts --------------------------------------------------------------------------------


def test_create_account_answers_exact_shape(world):
    response = world.service.post(
        "/api/v1/accounts",
        {"displayName": "Carol Example", "externalId": "ext-carol"},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == ACCOUNT_KEYS
    assert is_uuid(body["id"])
    assert body["displayName"] == "Carol Example"
    assert body["externalId"] == "ext-carol"
    assert is_timestamp(body["createdAt"])
    stored = Account.objects.get(pk=body["id"])
    assert stored.workspace_id == world.workspace.id
    assert stored.display_name == "Carol Example"
    assert stored.external_id == "ext-carol"
    assert parse_ts(body["createdAt"]) == stored.created_at


def test_create_account_without_external_id_answers_null(world):
    response = world.service.post(
        "/api/v1/accounts", {"displayName": "Dana Example"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["externalId"] is None
    assert Account.objects.get(pk=response.json()["id"]).external_id is None


def test_get_account_by_id_answers_the_same_shape(world):
    response = world.service.get(f"/api/v1/accounts/{world.alice.id}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == ACCOUNT_KEYS
    assert body["id"] == str(world.alice.id)
    assert body["displayName"] == "Alice Example"
    assert is_timestamp(body["createdAt"])


def test_get_missing_account_is_not_found(world):
    assert_error(world.service.get(f"/api/v1/accounts/{uuid.uuid4()}"), 404, "not_found")


def test_duplicate_account_external_id_is_invalid_arguments(world):
    first = world.service.post(
        "/api/v1/accounts", {"displayName": "Erin", "externalId": "dup-1"}, format="json"
    )
    assert first.status_code == 201
    before = Account.objects.count()
    second = world.service.post(
        "/api/v1/accounts", {"displayName": "Erin again", "externalId": "dup-1"}, format="json"
    )
    assert_error(second, 400, "invalid_arguments")
    assert Account.objects.count() == before


def test_list_accounts_answers_paged_envelope(world):
    response = world.service.get("/api/v1/accounts")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == LIST_KEYS
    assert body["total"] == 2
    assert body["limit"] == 50
    assert body["offset"] == 0
    assert [item["id"] for item in body["items"]] == [str(world.alice.id), str(world.bob.id)]
    for item in body["items"]:
        assert set(item) == ACCOUNT_KEYS
        assert is_timestamp(item["createdAt"])


def test_list_accounts_pages_with_limit_and_offset(world):
    factories.make_account(world.workspace, "Carol Example")
    response = world.service.get("/api/v1/accounts", {"limit": 1, "offset": 1})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["total"] == 3
    assert body["limit"] == 1
    assert body["offset"] == 1
    assert [item["id"] for item in body["items"]] == [str(world.bob.id)]


def test_list_accounts_filters_by_external_id_and_display_name(world):
    carol = services.account_create(
        workspace_id=world.workspace.id, display_name="Carol Sample", external_id="ext-carol"
    )
    by_external = world.service.get("/api/v1/accounts", {"externalId": "ext-carol"}).json()
    assert [item["id"] for item in by_external["items"]] == [str(carol.id)]
    assert by_external["total"] == 1

    by_name = world.service.get("/api/v1/accounts", {"displayName": "example"}).json()
    assert {item["id"] for item in by_name["items"]} == {str(world.alice.id), str(world.bob.id)}
    assert by_name["total"] == 2

    one_name = world.service.get("/api/v1/accounts", {"displayName": "ALICE"}).json()
    assert [item["id"] for item in one_name["items"]] == [str(world.alice.id)]

    nobody = world.service.get("/api/v1/accounts", {"externalId": "ext-nobody"}).json()
    assert nobody["items"] == []
    assert nobody["total"] == 0


# --- agents ----------------------------------------------------------------------------------


def test_create_agent_answers_exact_shape(world):
    response = world.service.post("/api/v1/agents", {"name": "Scheduler agent"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == AGENT_KEYS
    assert is_uuid(body["id"])
    assert body["name"] == "Scheduler agent"
    assert is_timestamp(body["createdAt"])
    assert Agent.objects.get(pk=body["id"]).workspace_id == world.workspace.id


def test_get_and_list_agents(world):
    second = factories.make_agent(world.workspace, "Triage agent")
    detail = world.service.get(f"/api/v1/agents/{second.id}")
    assert detail.status_code == 200, detail.content
    assert set(detail.json()) == AGENT_KEYS
    assert detail.json()["name"] == "Triage agent"

    listed = world.service.get("/api/v1/agents").json()
    assert set(listed) == LIST_KEYS
    assert listed["total"] == 2
    assert [item["id"] for item in listed["items"]] == [str(world.agent.id), str(second.id)]
    for item in listed["items"]:
        assert set(item) == AGENT_KEYS


# --- conversations ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["public", "direct", "private", "unknown"])
def test_create_conversation_answers_exact_shape(world, kind):
    response = world.service.post(
        "/api/v1/conversations",
        {"kind": kind, "title": f"{kind} room", "externalId": f"ext-{kind}"},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == CONVERSATION_KEYS
    assert is_uuid(body["id"])
    assert body["kind"] == kind
    assert body["title"] == f"{kind} room"
    assert body["externalId"] == f"ext-{kind}"
    assert is_timestamp(body["createdAt"])
    stored = Conversation.objects.get(pk=body["id"])
    assert stored.workspace_id == world.workspace.id
    assert stored.kind == kind


def test_create_conversation_without_external_id(world):
    response = world.service.post(
        "/api/v1/conversations", {"kind": "public", "title": "town hall"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["externalId"] is None


def test_duplicate_conversation_external_id_is_invalid_arguments(world):
    payload = {"kind": "public", "title": "one", "externalId": "ext-room"}
    assert world.service.post("/api/v1/conversations", payload, format="json").status_code == 201
    before = Conversation.objects.count()
    again = world.service.post("/api/v1/conversations", payload, format="json")
    assert_error(again, 400, "invalid_arguments")
    assert Conversation.objects.count() == before


def test_get_conversation_by_id(world):
    response = world.service.get(f"/api/v1/conversations/{world.direct.id}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == CONVERSATION_KEYS
    assert body["kind"] == "direct"
    assert body["title"] == "alice-dm"


def test_list_conversations_filters_by_kind_and_external_id(world):
    tagged = services.conversation_create(
        workspace_id=world.workspace.id, kind="unknown", title="imported", external_id="imp-7"
    )
    everything = world.service.get("/api/v1/conversations").json()
    assert set(everything) == LIST_KEYS
    assert everything["total"] == 4
    assert [item["id"] for item in everything["items"]] == [
        str(world.public.id),
        str(world.private.id),
        str(world.direct.id),
        str(tagged.id),
    ]

    public = world.service.get("/api/v1/conversations", {"kind": "public"}).json()
    assert [item["id"] for item in public["items"]] == [str(world.public.id)]
    assert public["total"] == 1

    unknown = world.service.get("/api/v1/conversations", {"kind": "unknown"}).json()
    assert [item["id"] for item in unknown["items"]] == [str(tagged.id)]

    by_external = world.service.get("/api/v1/conversations", {"externalId": "imp-7"}).json()
    assert [item["id"] for item in by_external["items"]] == [str(tagged.id)]

    both = world.service.get(
        "/api/v1/conversations", {"kind": "public", "externalId": "imp-7"}
    ).json()
    assert both["items"] == []
    assert both["total"] == 0


# --- memberships -----------------------------------------------------------------------------


def test_join_account_answers_membership(world):
    carol = factories.make_account(world.workspace, "Carol Example")
    response = world.service.post(
        members_url(world.private), {"accountId": str(carol.id)}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == MEMBERSHIP_KEYS
    assert is_uuid(body["id"])
    assert body["conversationId"] == str(world.private.id)
    assert body["accountId"] == str(carol.id)
    assert body["agentId"] is None
    assert is_timestamp(body["joinedAt"])
    assert body["leftAt"] is None
    stored = Membership.objects.get(pk=body["id"])
    assert stored.account_id == carol.id
    assert stored.left_at is None


def test_join_agent_with_explicit_joined_at(world):
    helper = factories.make_agent(world.workspace, "Second agent")
    joined = timezone.now() - timedelta(days=3)
    response = world.service.post(
        members_url(world.public),
        {"agentId": str(helper.id), "joinedAt": ts(joined)},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["agentId"] == str(helper.id)
    assert body["accountId"] is None
    assert parse_ts(body["joinedAt"]) == joined
    assert Membership.objects.get(pk=body["id"]).joined_at == joined


def test_joined_at_with_offset_is_normalised(world):
    carol = factories.make_account(world.workspace)
    response = world.service.post(
        members_url(world.private),
        {"accountId": str(carol.id), "joinedAt": "2025-06-01T12:00:00+02:00"},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert parse_ts(response.json()["joinedAt"]) == datetime(2025, 6, 1, 10, 0, tzinfo=UTC)
    assert is_timestamp(response.json()["joinedAt"])


def test_leave_answers_membership_with_left_at(world):
    response = world.service.post(
        leave_url(world.private), {"accountId": str(world.bob.id)}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == MEMBERSHIP_KEYS
    assert body["accountId"] == str(world.bob.id)
    assert is_timestamp(body["leftAt"])
    assert parse_ts(body["leftAt"]) > parse_ts(body["joinedAt"])
    stored = Membership.objects.get(pk=body["id"])
    assert stored.left_at is not None
    assert not Membership.objects.filter(
        conversation=world.private, account=world.bob, left_at__isnull=True
    ).exists()


def test_leave_agent_with_explicit_left_at(world):
    joined = timezone.now() - timedelta(days=10)
    room = factories.make_conversation(world.workspace, "private")
    factories.join(room, world.agent, joined_at=joined)
    left = joined + timedelta(days=2)
    response = world.service.post(
        leave_url(room), {"agentId": str(world.agent.id), "leftAt": ts(left)}, format="json"
    )
    assert response.status_code == 200, response.content
    assert parse_ts(response.json()["leftAt"]) == left
    assert response.json()["agentId"] == str(world.agent.id)


def test_joining_twice_while_current_is_invalid_arguments(world):
    before = Membership.objects.count()
    response = world.service.post(
        members_url(world.private), {"accountId": str(world.alice.id)}, format="json"
    )
    assert_error(response, 400, "invalid_arguments")
    assert Membership.objects.count() == before


def test_leave_when_not_a_member_is_invalid_arguments(world):
    carol = factories.make_account(world.workspace)
    response = world.service.post(
        leave_url(world.private), {"accountId": str(carol.id)}, format="json"
    )
    assert_error(response, 400, "invalid_arguments")


def test_leave_twice_is_invalid_arguments(world):
    first = world.service.post(
        leave_url(world.private), {"accountId": str(world.bob.id)}, format="json"
    )
    assert first.status_code == 200
    second = world.service.post(
        leave_url(world.private), {"accountId": str(world.bob.id)}, format="json"
    )
    assert_error(second, 400, "invalid_arguments")


def test_left_at_before_joined_at_is_invalid_arguments(world):
    joined = timezone.now() - timedelta(days=1)
    room = factories.make_conversation(world.workspace, "private")
    membership = factories.join(room, world.alice, joined_at=joined)
    response = world.service.post(
        leave_url(room),
        {"accountId": str(world.alice.id), "leftAt": ts(joined - timedelta(hours=1))},
        format="json",
    )
    assert_error(response, 400, "invalid_arguments")
    membership.refresh_from_db()
    assert membership.left_at is None


def test_left_at_equal_to_joined_at_is_invalid_arguments(world):
    joined = timezone.now() - timedelta(days=1)
    room = factories.make_conversation(world.workspace, "private")
    factories.join(room, world.alice, joined_at=joined)
    response = world.service.post(
        leave_url(room), {"accountId": str(world.alice.id), "leftAt": ts(joined)}, format="json"
    )
    assert_error(response, 400, "invalid_arguments")


def test_overlapping_rejoin_interval_is_invalid_arguments(world):
    start = timezone.now() - timedelta(days=10)
    room = factories.make_conversation(world.workspace, "private")
    factories.join(room, world.alice, joined_at=start)
    services.membership_leave(
        conversation=room, account_id=world.alice.id, left_at=start + timedelta(days=5)
    )
    before = Membership.objects.count()
    inside = world.service.post(
        members_url(room),
        {"accountId": str(world.alice.id), "joinedAt": ts(start + timedelta(days=2))},
        format="json",
    )
    assert_error(inside, 400, "invalid_arguments")
    # An open interval starting before the closed one would cover it too.
    earlier = world.service.post(
        members_url(room),
        {"accountId": str(world.alice.id), "joinedAt": ts(start - timedelta(days=1))},
        format="json",
    )
    assert_error(earlier, 400, "invalid_arguments")
    assert Membership.objects.count() == before


def test_rejoin_after_leaving_is_allowed(world):
    start = timezone.now() - timedelta(days=10)
    left = start + timedelta(days=5)
    room = factories.make_conversation(world.workspace, "private")
    factories.join(room, world.alice, joined_at=start)
    services.membership_leave(conversation=room, account_id=world.alice.id, left_at=left)
    # Intervals are half-open [joined, left): re-joining at the moment of leaving touches, not
    # overlaps.
    response = world.service.post(
        members_url(room), {"accountId": str(world.alice.id), "joinedAt": ts(left)}, format="json"
    )
    assert response.status_code == 201, response.content
    assert Membership.objects.filter(conversation=room, account=world.alice).count() == 2


def test_join_unknown_member_is_invalid_arguments(world):
    for payload in ({"accountId": str(uuid.uuid4())}, {"agentId": str(uuid.uuid4())}):
        response = world.service.post(members_url(world.private), payload, format="json")
        assert_error(response, 400, "invalid_arguments")


def test_join_missing_conversation_is_not_found(world):
    response = world.service.post(
        f"/api/v1/conversations/{uuid.uuid4()}/members",
        {"accountId": str(world.alice.id)},
        format="json",
    )
    assert_error(response, 404, "not_found")


def test_list_members_filters(world):
    carol = factories.make_account(world.workspace, "Carol Example")
    factories.join(world.private, carol, joined_at=timezone.now() - timedelta(hours=2))
    services.membership_leave(conversation=world.private, account_id=carol.id)

    everything = world.service.get(members_url(world.private)).json()
    assert set(everything) == LIST_KEYS
    assert everything["total"] == 4
    for item in everything["items"]:
        assert set(item) == MEMBERSHIP_KEYS

    current = world.service.get(members_url(world.private), {"current": "true"}).json()
    assert current["total"] == 3
    assert {item["accountId"] or item["agentId"] for item in current["items"]} == {
        str(world.alice.id),
        str(world.bob.id),
        str(world.agent.id),
    }
    assert all(item["leftAt"] is None for item in current["items"])

    former = world.service.get(members_url(world.private), {"current": "false"}).json()
    assert [item["accountId"] for item in former["items"]] == [str(carol.id)]
    assert is_timestamp(former["items"][0]["leftAt"])

    by_account = world.service.get(members_url(world.private), {"accountId": str(world.bob.id)})
    assert [item["accountId"] for item in by_account.json()["items"]] == [str(world.bob.id)]

    by_agent = world.service.get(members_url(world.private), {"agentId": str(world.agent.id)})
    assert [item["agentId"] for item in by_agent.json()["items"]] == [str(world.agent.id)]
    assert by_agent.json()["total"] == 1


# --- messages: single create -----------------------------------------------------------------


def test_create_message_answers_summary_with_server_seq(world, room):
    seqs = []
    for n in range(3):
        response = world.service.post(
            messages_url(room),
            {"senderUserId": str(world.alice.id), "content": f"status note {n}"},
            format="json",
        )
        assert response.status_code == 201, response.content
        body = response.json()
        assert_summary(body, sender_key="senderUserId")
        assert body["conversationId"] == str(room.id)
        assert body["senderUserId"] == str(world.alice.id)
        assert body["content"] == f"status note {n}"
        assert body["status"] == "sent"
        assert body["replyToId"] is None
        assert body["threadId"] is None
        seqs.append(body["seq"])
    assert seqs == [1, 2, 3]
    assert list(room.messages.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3]


def test_seq_is_per_conversation(world, room):
    factories.post(room, world.alice)
    factories.post(room, world.alice)
    response = world.service.post(
        messages_url(world.public),
        {"senderUserId": str(world.bob.id), "content": "first in general"},
        format="json",
    )
    assert response.json()["seq"] == 1


def test_default_role_is_user_for_accounts_and_assistant_for_agents(world, room):
    human = world.service.post(
        messages_url(room), {"senderUserId": str(world.alice.id), "content": "hi"}, format="json"
    )
    agent = world.service.post(
        messages_url(room), {"senderAgentId": str(world.agent.id), "content": "hi"}, format="json"
    )
    assert human.status_code == 201, human.content
    assert agent.status_code == 201, agent.content
    assert human.json()["role"] == "user"
    assert agent.json()["role"] == "assistant"
    assert_summary(agent.json(), sender_key="senderAgentId")
    assert agent.json()["senderAgentId"] == str(world.agent.id)
    assert Message.objects.get(pk=agent.json()["id"]).sender_agent_id == world.agent.id


@pytest.mark.parametrize("role", ["user", "assistant", "system", "tool"])
def test_explicit_role_is_kept(world, room, role):
    response = world.service.post(
        messages_url(room),
        {"senderAgentId": str(world.agent.id), "content": "x", "role": role},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["role"] == role


def test_explicit_status_and_created_at(world, room):
    created = timezone.now() - timedelta(days=2)
    response = world.service.post(
        messages_url(room),
        {
            "senderUserId": str(world.alice.id),
            "content": "imported",
            "status": "pending",
            "createdAt": created.astimezone(UTC).isoformat(),
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "pending"
    assert parse_ts(body["createdAt"]) == created
    assert Message.objects.get(pk=body["id"]).created_at == created


def test_reply_and_thread_in_same_conversation(world, room):
    root = factories.post(room, world.alice, "root")
    response = world.service.post(
        messages_url(room),
        {
            "senderUserId": str(world.bob.id),
            "content": "answer",
            "replyToId": str(root.id),
            "threadId": str(root.id),
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["replyToId"] == str(root.id)
    assert response.json()["threadId"] == str(root.id)
    stored = Message.objects.get(pk=response.json()["id"])
    assert stored.reply_to_id == root.id
    assert stored.thread_id == root.id


@pytest.mark.parametrize("field", ["replyToId", "threadId"])
def test_reference_to_other_conversation_is_invalid_arguments(world, room, field):
    elsewhere = factories.post(world.public, world.alice, "elsewhere")
    before = row_counts()
    response = world.service.post(
        messages_url(room),
        {"senderUserId": str(world.bob.id), "content": "answer", field: str(elsewhere.id)},
        format="json",
    )
    assert_error(response, 400, "invalid_arguments")
    assert row_counts() == before


@pytest.mark.parametrize("field", ["replyToId", "threadId"])
def test_reference_to_missing_message_is_invalid_arguments(world, room, field):
    response = world.service.post(
        messages_url(room),
        {"senderUserId": str(world.bob.id), "content": "answer", field: str(uuid.uuid4())},
        format="json",
    )
    assert_error(response, 400, "invalid_arguments")


def test_lineage_on_agent_message_is_stored(world, room):
    first = factories.post(room, world.alice, "source one")
    second = factories.post(world.public, world.bob, "source two")
    response = world.service.post(
        messages_url(room),
        {
            "senderAgentId": str(world.agent.id),
            "content": "summary",
            "lineage": [str(first.id), str(second.id)],
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    named = MessageLineage.objects.filter(
        workspace_id=world.workspace.id, message_id=response.json()["id"], direct=True
    )
    assert set(named.values_list("source_id", flat=True)) == {first.id, second.id}


def test_lineage_on_account_message_is_invalid_arguments(world, room):
    source = factories.post(room, world.alice, "source")
    before = row_counts()
    response = world.service.post(
        messages_url(room),
        {"senderUserId": str(world.bob.id), "content": "x", "lineage": [str(source.id)]},
        format="json",
    )
    assert_error(response, 400, "invalid_arguments")
    assert row_counts() == before


def test_lineage_naming_unknown_message_is_invalid_arguments(world, room):
    before = row_counts()
    response = world.service.post(
        messages_url(room),
        {"senderAgentId": str(world.agent.id), "content": "x", "lineage": [str(uuid.uuid4())]},
        format="json",
    )
    assert_error(response, 400, "invalid_arguments")
    assert row_counts() == before


def test_unknown_sender_is_invalid_arguments(world, room):
    for payload in (
        {"senderUserId": str(uuid.uuid4()), "content": "x"},
        {"senderAgentId": str(uuid.uuid4()), "content": "x"},
        {"senderUserId": str(world.agent.id), "content": "agent id given as a user id"},
    ):
        response = world.service.post(messages_url(room), payload, format="json")
        assert_error(response, 400, "invalid_arguments")
    assert room.messages.count() == 0


def test_message_into_missing_conversation_is_not_found(world):
    response = world.service.post(
        f"/api/v1/conversations/{uuid.uuid4()}/messages",
        {"senderUserId": str(world.alice.id), "content": "x"},
        format="json",
    )
    assert_error(response, 404, "not_found")


def test_failed_create_does_not_consume_a_seq(world, room):
    factories.post(room, world.alice)
    bad = world.service.post(
        messages_url(room),
        {"senderUserId": str(uuid.uuid4()), "content": "x"},
        format="json",
    )
    assert_error(bad, 400, "invalid_arguments")
    good = world.service.post(
        messages_url(room), {"senderUserId": str(world.alice.id), "content": "x"}, format="json"
    )
    assert good.json()["seq"] == 2


# --- messages: bulk --------------------------------------------------------------------------


def test_bulk_of_one(world, room):
    response = world.service.post(
        bulk_url(room),
        {"messages": [{"senderUserId": str(world.alice.id), "content": "only one"}]},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {"items"}
    assert len(body["items"]) == 1
    assert_summary(body["items"][0], sender_key="senderUserId")
    assert body["items"][0]["seq"] == 1
    assert body["items"][0]["content"] == "only one"
    assert room.messages.count() == 1


def test_bulk_of_5000_is_stored_with_consecutive_seqs(world, room):
    factories.post(room, world.alice, "earlier one")
    factories.post(room, world.alice, "earlier two")
    start = timezone.now() - timedelta(days=30)
    messages = [
        {
            "senderAgentId" if n % 2 else "senderUserId": str(
                world.agent.id if n % 2 else world.bob.id
            ),
            "content": f"imported line {n}",
            "createdAt": ts(start + timedelta(seconds=n)),
        }
        for n in range(5_000)
    ]
    response = world.service.post(bulk_url(room), {"messages": messages}, format="json")
    assert response.status_code == 201, response.content[:500]
    items = response.json()["items"]
    assert set(response.json()) == {"items"}
    assert len(items) == 5_000
    assert [item["seq"] for item in items] == list(range(3, 5_003))
    assert [item["content"] for item in items] == [m["content"] for m in messages]
    assert items[0]["role"] == "user"
    assert items[1]["role"] == "assistant"
    assert_summary(items[0], sender_key="senderUserId")
    assert_summary(items[1], sender_key="senderAgentId")
    assert len({item["id"] for item in items}) == 5_000
    assert room.messages.count() == 5_002
    stored = list(room.messages.order_by("seq").values_list("seq", flat=True))
    assert stored == list(range(1, 5_003))
    assert parse_ts(items[-1]["createdAt"]) == start + timedelta(seconds=4_999)
    # The next single message continues the sequence.
    after = world.service.post(
        messages_url(room), {"senderUserId": str(world.alice.id), "content": "x"}, format="json"
    )
    assert after.json()["seq"] == 5_003


def _bulk_items(world, count: int) -> list[dict]:
    return [
        {"senderUserId": str(world.alice.id), "content": f"bulk line {n}"} for n in range(count)
    ]


def _index_values(details) -> list:
    """Every value stored under an ``index`` key anywhere in the error details."""
    found = []
    if isinstance(details, dict):
        for key, value in details.items():
            if key == "index":
                found.append(value)
            else:
                found.extend(_index_values(value))
    elif isinstance(details, list):
        for value in details:
            found.extend(_index_values(value))
    return found


@pytest.mark.parametrize(
    "bad_item",
    [
        pytest.param({"content": "no sender"}, id="no-sender"),
        pytest.param({"senderUserId": "S", "content": 12}, id="content-number"),
        pytest.param({"senderUserId": "S", "content": "x", "mood": "y"}, id="unknown-field"),
        pytest.param({"senderUserId": str(uuid.uuid4()), "content": "x"}, id="unknown-sender"),
        pytest.param({"senderUserId": "S", "content": "x", "replyToId": "R"}, id="foreign-reply"),
        pytest.param({"senderUserId": "S", "content": "x", "lineage": ["R"]}, id="user-lineage"),
        pytest.param(
            {"senderUserId": "S", "content": "x", "createdAt": "2999-01-01T00:00:00Z"},
            id="future-created-at",
        ),
    ],
)
def test_bulk_with_bad_item_at_index_3_stores_nothing(world, room, bad_item):
    factories.post(room, world.alice, "already here")
    elsewhere = factories.post(world.public, world.alice, "elsewhere")
    bad = {
        key: (
            str(world.alice.id)
            if value == "S"
            else str(elsewhere.id)
            if value == "R"
            else [str(elsewhere.id)]
            if value == ["R"]
            else value
        )
        for key, value in bad_item.items()
    }
    items = _bulk_items(world, 6)
    items[3] = bad
    before = row_counts()
    response = world.service.post(bulk_url(room), {"messages": items}, format="json")
    error = assert_error(response, 400, "invalid_arguments")
    indexes = _index_values(error["details"])
    assert indexes, error["details"]
    # The index is a JSON integer, whichever layer (field validation or reference checks)
    # rejected the item, so a client can find the item without parsing strings.
    assert all(type(value) is int and value == 3 for value in indexes), error["details"]
    assert row_counts() == before
    assert room.messages.count() == 1
    after = world.service.post(
        messages_url(room), {"senderUserId": str(world.alice.id), "content": "x"}, format="json"
    )
    assert after.json()["seq"] == 2


def test_bulk_of_5001_is_invalid_arguments(world, room):
    before = row_counts()
    response = world.service.post(
        bulk_url(room), {"messages": _bulk_items(world, 5_001)}, format="json"
    )
    assert_error(response, 400, "invalid_arguments")
    assert row_counts() == before


def corpus_like_texts(count: int, chars: int) -> list[str]:
    """``count`` texts of ``chars`` characters: corpus words drawn by Zipf's law, as in
    bench/bulk_import_limit.py."""
    rng = random.Random(0)
    words = corpus_vocabulary(0)
    cumulative = list(itertools.accumulate(1 / rank for rank in range(1, len(words) + 1)))
    return [
        " ".join(rng.choices(words, cum_weights=cumulative, k=chars // 3))[:chars]
        for _ in range(count)
    ]


def test_bulk_over_the_character_limit_is_refused_before_its_items_are_looked_at(world, room):
    """The limit in all, not per message: each of these is valid alone, and the first one
    lacks a sender, which is not even reached."""
    items = [
        {"senderUserId": str(world.alice.id), "content": "a" * 100_000}
        for _ in range(limits.MAX_BULK_CHARS // 100_000)
    ]
    items[0].pop("senderUserId")
    items.append({"senderUserId": str(world.alice.id), "content": "b"})
    before = row_counts()
    with CaptureQueriesContext(connection) as queries:
        response = world.service.post(bulk_url(room), {"messages": items}, format="json")
    error = assert_error(response, 400, "invalid_arguments")
    assert error["details"] == {
        "fields": {
            "messages": [
                "One request may store at most 5,000,000 characters of content in all; "
                "split the import."
            ]
        }
    }
    assert row_counts() == before
    assert not [query for query in queries if "messages_app_message" in query["sql"]]
    assert Conversation.objects.get(pk=room.pk).last_seq == 0


def test_bulk_of_exactly_the_character_limit_is_stored_within_the_production_timeout(
    world, room, settings
):
    """1,000 messages of 5,000 characters of corpus-like text: the size the limit is measured
    for (README, "Bulk import") fits the 10 s statement timeout."""
    settings.API_STATEMENT_TIMEOUT_MS = 10_000
    items = [
        {"senderUserId": str(world.bob.id), "content": text}
        for text in corpus_like_texts(1_000, 5_000)
    ]
    assert sum(len(item["content"]) for item in items) == limits.MAX_BULK_CHARS
    response = world.service.post(bulk_url(room), {"messages": items}, format="json")
    assert response.status_code == 201, response.content[:500]
    assert len(response.json()["items"]) == 1_000
    assert room.messages.count() == 1_000


def test_bulk_of_zero_is_invalid_arguments(world, room):
    response = world.service.post(bulk_url(room), {"messages": []}, format="json")
    assert_error(response, 400, "invalid_arguments")
    assert room.messages.count() == 0


# --- messages: edit and delete ---------------------------------------------------------------


def test_patch_edits_content(world, room):
    message = factories.post(room, world.alice, "first draft")
    response = world.service.patch(
        f"/api/v1/messages/{message.id}", {"content": "second draft"}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert_summary(body, sender_key="senderUserId")
    assert body["id"] == str(message.id)
    assert body["content"] == "second draft"
    assert body["seq"] == message.seq
    message.refresh_from_db()
    assert message.content == "second draft"
    assert message.edited_at is not None


def test_patch_deleted_message_is_not_found(world, room):
    message = factories.post(room, world.alice, "gone soon")
    services.message_delete(message=message)
    response = world.service.patch(
        f"/api/v1/messages/{message.id}", {"content": "revive"}, format="json"
    )
    assert_error(response, 404, "not_found")
    message.refresh_from_db()
    assert message.content == ""


def test_patch_missing_message_is_not_found(world):
    response = world.service.patch(
        f"/api/v1/messages/{uuid.uuid4()}", {"content": "x"}, format="json"
    )
    assert_error(response, 404, "not_found")


def test_delete_erases_body_and_second_delete_is_not_found(world, room):
    message = factories.post(room, world.alice, "secret plan text")
    response = world.service.delete(f"/api/v1/messages/{message.id}")
    assert response.status_code == 204, response.content
    assert response.content == b""
    message.refresh_from_db()
    assert message.content == ""
    assert message.deleted_at is not None
    assert message.seq == 1
    again = world.service.delete(f"/api/v1/messages/{message.id}")
    assert_error(again, 404, "not_found")
    # The seq is never reused.
    after = world.service.post(
        messages_url(room), {"senderUserId": str(world.alice.id), "content": "x"}, format="json"
    )
    assert after.json()["seq"] == 2


def test_delete_missing_message_is_not_found(world):
    assert_error(world.service.delete(f"/api/v1/messages/{uuid.uuid4()}"), 404, "not_found")


# --- identity links --------------------------------------------------------------------------


def _link(world, account, linked):
    return world.service.post(
        "/api/v1/identity-links",
        {"accountId": str(account.id), "linkedAccountId": str(linked.id)},
        format="json",
    )


def test_identity_link_lifecycle(world):
    created = _link(world, world.alice, world.bob)
    assert created.status_code == 201, created.content
    body = created.json()
    assert set(body) >= LINK_KEYS
    assert_camel_case(body)
    assert is_uuid(body["id"])
    assert body["accountId"] == str(world.alice.id)
    assert body["linkedAccountId"] == str(world.bob.id)
    assert body["status"] == "pending"
    link_id = body["id"]

    verified = world.service.post(f"/api/v1/identity-links/{link_id}/verify")
    assert verified.status_code == 200, verified.content
    assert verified.json()["status"] == "verified"
    assert verified.json()["id"] == link_id
    assert IdentityLink.objects.get(pk=link_id).status == "verified"

    revoked = world.service.post(f"/api/v1/identity-links/{link_id}/revoke")
    assert revoked.status_code == 200, revoked.content
    assert revoked.json()["status"] == "revoked"
    stored = IdentityLink.objects.get(pk=link_id)
    assert stored.status == "revoked"
    assert stored.revoked_at is not None

    again = world.service.post(f"/api/v1/identity-links/{link_id}/verify")
    assert_error(again, 400, "invalid_arguments")
    assert IdentityLink.objects.get(pk=link_id).status == "revoked"


def test_identity_link_timestamps_are_rfc3339(world):
    body = _link(world, world.alice, world.bob).json()
    for key, value in body.items():
        if key.endswith("At") and value is not None:
            assert is_timestamp(value), (key, value)


def test_revoking_a_pending_link(world):
    link_id = _link(world, world.alice, world.bob).json()["id"]
    revoked = world.service.post(f"/api/v1/identity-links/{link_id}/revoke")
    assert revoked.status_code == 200, revoked.content
    assert revoked.json()["status"] == "revoked"
    assert_error(
        world.service.post(f"/api/v1/identity-links/{link_id}/revoke"), 400, "invalid_arguments"
    )


def test_verifying_twice_is_invalid_arguments(world):
    link_id = _link(world, world.alice, world.bob).json()["id"]
    assert world.service.post(f"/api/v1/identity-links/{link_id}/verify").status_code == 200
    assert_error(
        world.service.post(f"/api/v1/identity-links/{link_id}/verify"), 400, "invalid_arguments"
    )


def test_linking_an_account_to_itself_is_invalid_arguments(world):
    before = IdentityLink.objects.count()
    assert_error(_link(world, world.alice, world.alice), 400, "invalid_arguments")
    assert IdentityLink.objects.count() == before


def test_duplicate_unrevoked_pair_is_invalid_arguments(world):
    assert _link(world, world.alice, world.bob).status_code == 201
    assert_error(_link(world, world.alice, world.bob), 400, "invalid_arguments")
    # The pair is unordered.
    assert_error(_link(world, world.bob, world.alice), 400, "invalid_arguments")
    assert IdentityLink.objects.count() == 1


def test_new_link_allowed_after_revoke(world):
    link_id = _link(world, world.alice, world.bob).json()["id"]
    world.service.post(f"/api/v1/identity-links/{link_id}/revoke")
    again = _link(world, world.bob, world.alice)
    assert again.status_code == 201, again.content
    assert again.json()["status"] == "pending"


def test_link_with_unknown_account_is_invalid_arguments(world):
    response = world.service.post(
        "/api/v1/identity-links",
        {"accountId": str(world.alice.id), "linkedAccountId": str(uuid.uuid4())},
        format="json",
    )
    assert_error(response, 400, "invalid_arguments")


def test_verify_missing_link_is_not_found(world):
    assert_error(
        world.service.post(f"/api/v1/identity-links/{uuid.uuid4()}/verify"), 404, "not_found"
    )


def test_list_identity_links_filters_by_status_and_account(world):
    carol = factories.make_account(world.workspace, "Carol Example")
    dave = factories.make_account(world.workspace, "Dave Example")
    pending = _link(world, world.alice, world.bob).json()["id"]
    verified = _link(world, carol, world.alice).json()["id"]
    world.service.post(f"/api/v1/identity-links/{verified}/verify")
    revoked = _link(world, carol, dave).json()["id"]
    world.service.post(f"/api/v1/identity-links/{revoked}/revoke")

    everything = world.service.get("/api/v1/identity-links").json()
    assert set(everything) == LIST_KEYS
    assert everything["total"] == 3
    assert [item["id"] for item in everything["items"]] == [pending, verified, revoked]

    by_status = world.service.get("/api/v1/identity-links", {"status": "verified"}).json()
    assert [item["id"] for item in by_status["items"]] == [verified]
    assert by_status["total"] == 1

    # Links are symmetric: the filter matches either side.
    by_alice = world.service.get("/api/v1/identity-links", {"accountId": str(world.alice.id)})
    assert [item["id"] for item in by_alice.json()["items"]] == [pending, verified]
    by_dave = world.service.get("/api/v1/identity-links", {"accountId": str(dave.id)}).json()
    assert [item["id"] for item in by_dave["items"]] == [revoked]

    both = world.service.get(
        "/api/v1/identity-links", {"accountId": str(carol.id), "status": "revoked"}
    ).json()
    assert [item["id"] for item in both["items"]] == [revoked]


def test_get_identity_link_by_id(world):
    link_id = _link(world, world.alice, world.bob).json()["id"]
    response = world.service.get(f"/api/v1/identity-links/{link_id}")
    assert response.status_code == 200, response.content
    assert response.json()["id"] == link_id
    assert response.json()["status"] == "pending"


# --- runs ------------------------------------------------------------------------------------


def _run(world, **overrides):
    payload = {
        "agentId": str(world.agent.id),
        "conversationId": str(world.private.id),
        "requesterId": str(world.alice.id),
        **overrides,
    }
    return world.service.post("/api/v1/runs", payload, format="json")


def test_create_run_answers_exact_shape_and_token_reads_messages(world):
    message = factories.post(world.private, world.alice, "what is the plan")
    response = _run(world, currentMessageId=str(message.id))
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == RUN_KEYS
    assert is_uuid(body["id"])
    assert body["agentId"] == str(world.agent.id)
    assert body["conversationId"] == str(world.private.id)
    assert body["requesterId"] == str(world.alice.id)
    assert is_timestamp(body["createdAt"])
    assert isinstance(body["token"], str)
    assert body["token"]
    run = Run.objects.get(pk=body["id"])
    assert run.workspace_id == world.workspace.id
    assert run.current_message_id == message.id
    # Only the digest is stored.
    assert not ApiToken.objects.filter(digest=body["token"]).exists()

    run_client = factories.bearer_client(body["token"])
    listed = run_client.get("/api/v1/messages", {"conversationId": str(world.private.id)})
    assert listed.status_code == 200, listed.content
    assert [item["id"] for item in listed.json()["items"]] == [str(message.id)]


def test_create_run_with_recent_messages(world):
    first = factories.post(world.private, world.alice, "one")
    second = factories.post(world.private, world.bob, "two")
    response = _run(world, recentMessageIds=[str(first.id), str(second.id)])
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert run.recent_message_ids == [first.id, second.id]


def test_get_run_by_id(world):
    run_id = _run(world).json()["id"]
    response = world.service.get(f"/api/v1/runs/{run_id}")
    assert response.status_code == 200, response.content
    assert response.json()["id"] == run_id
    assert "token" not in response.json()


def test_run_with_agent_not_a_member_is_invalid_arguments(world):
    outsider = factories.make_agent(world.workspace, "Outsider agent")
    before = row_counts()
    response = _run(world, agentId=str(outsider.id))
    assert_error(response, 400, "invalid_arguments")
    assert row_counts() == before


def test_run_with_agent_that_left_is_invalid_arguments(world):
    services.membership_leave(conversation=world.private, agent_id=world.agent.id)
    assert_error(_run(world), 400, "invalid_arguments")


@pytest.mark.parametrize("field", ["agentId", "conversationId", "requesterId"])
def test_run_with_unknown_reference_is_invalid_arguments(world, field):
    before = row_counts()
    assert_error(_run(world, **{field: str(uuid.uuid4())}), 400, "invalid_arguments")
    assert row_counts() == before


def test_run_with_current_message_from_other_conversation_is_invalid_arguments(world):
    elsewhere = factories.post(world.public, world.alice, "elsewhere")
    assert_error(_run(world, currentMessageId=str(elsewhere.id)), 400, "invalid_arguments")


# --- authentication --------------------------------------------------------------------------

SOME_ID = "3f0c7a52-9a56-4a52-8d3c-5a1b2c3d4e5f"
INGESTION_ENDPOINTS = [
    ("get", "/api/v1/accounts"),
    ("post", "/api/v1/accounts"),
    ("get", f"/api/v1/accounts/{SOME_ID}"),
    ("get", "/api/v1/agents"),
    ("post", "/api/v1/agents"),
    ("get", f"/api/v1/agents/{SOME_ID}"),
    ("get", "/api/v1/conversations"),
    ("post", "/api/v1/conversations"),
    ("get", f"/api/v1/conversations/{SOME_ID}"),
    ("get", f"/api/v1/conversations/{SOME_ID}/members"),
    ("post", f"/api/v1/conversations/{SOME_ID}/members"),
    ("post", f"/api/v1/conversations/{SOME_ID}/members/leave"),
    ("post", f"/api/v1/conversations/{SOME_ID}/messages"),
    ("post", f"/api/v1/conversations/{SOME_ID}/messages/bulk"),
    ("patch", f"/api/v1/messages/{SOME_ID}"),
    ("delete", f"/api/v1/messages/{SOME_ID}"),
    ("get", "/api/v1/identity-links"),
    ("post", "/api/v1/identity-links"),
    ("get", f"/api/v1/identity-links/{SOME_ID}"),
    ("post", f"/api/v1/identity-links/{SOME_ID}/verify"),
    ("post", f"/api/v1/identity-links/{SOME_ID}/revoke"),
    ("post", "/api/v1/runs"),
    ("get", f"/api/v1/runs/{SOME_ID}"),
]
ENDPOINT_IDS = [f"{method}:{path.replace(SOME_ID, '{id}')}" for method, path in INGESTION_ENDPOINTS]


def _call(client: APIClient, method: str, path: str, world=None):
    """Call an endpoint with a body that would be valid (or close to it) for a POST."""
    if method in ("post", "patch"):
        body = {"content": "sample status"}
        if world is not None and path == "/api/v1/accounts":
            body = {"displayName": "Would-be account"}
        return getattr(client, method)(path, body, format="json")
    return getattr(client, method)(path)


def _credentials(world, variant: str) -> APIClient:
    if variant == "none":
        return APIClient()
    if variant == "malformed":
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION="Token not-a-bearer-token")
        return client
    if variant == "wrong":
        return factories.bearer_client("fmn_service_" + "x" * 43)
    token, raw = services.token_create(workspace_id=world.workspace.id, kind=TokenKind.SERVICE)
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    return factories.bearer_client(raw)


@pytest.mark.parametrize("variant", ["none", "malformed", "wrong", "revoked"])
@pytest.mark.parametrize(("method", "path"), INGESTION_ENDPOINTS, ids=ENDPOINT_IDS)
def test_ingestion_endpoint_without_valid_token_is_unauthenticated(world, method, path, variant):
    client = _credentials(world, variant)
    before = row_counts()
    response = _call(client, method, path, world)
    assert_error(response, 401, "unauthenticated")
    assert row_counts() == before


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Bearer    ",
        "bearer",
        "Basic dXNlcjpwYXNzd29yZA==",
        "Token abc",
        "fmn_service_abc",
        "Bearer " + "a" * 500,
        "Bearer tab\tinside",
    ],
)
def test_malformed_authorization_headers_are_unauthenticated(world, header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/accounts")
    assert_error(response, 401, "unauthenticated")


def test_revoked_token_stops_working(world):
    token, raw = services.token_create(workspace_id=world.workspace.id, kind=TokenKind.SERVICE)
    client = factories.bearer_client(raw)
    assert client.get("/api/v1/accounts").status_code == 200
    token.revoked_at = timezone.now()
    token.save(update_fields=["revoked_at"])
    assert_error(client.get("/api/v1/accounts"), 401, "unauthenticated")


def test_valid_service_token_with_wrong_scheme_is_unauthenticated(world):
    _, raw = services.token_create(workspace_id=world.workspace.id, kind=TokenKind.SERVICE)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {raw}")
    assert_error(client.get("/api/v1/accounts"), 401, "unauthenticated")


@pytest.mark.parametrize(("method", "path"), INGESTION_ENDPOINTS, ids=ENDPOINT_IDS)
def test_agent_token_on_ingestion_endpoint_is_forbidden(world, method, path):
    before = row_counts()
    response = _call(world.agent_api, method, path, world)
    assert_error(response, 403, "forbidden")
    assert row_counts() == before


@pytest.mark.parametrize(("method", "path"), INGESTION_ENDPOINTS, ids=ENDPOINT_IDS)
def test_run_token_on_ingestion_endpoint_is_forbidden(world, method, path):
    token = _run(world).json()["token"]
    before = row_counts()
    response = _call(factories.bearer_client(token), method, path, world)
    assert_error(response, 403, "forbidden")
    assert row_counts() == before


def test_agent_token_cannot_edit_or_delete_a_real_message(world):
    message = factories.post(world.private, world.alice, "keep me")
    patched = world.agent_api.patch(
        f"/api/v1/messages/{message.id}", {"content": "changed"}, format="json"
    )
    assert_error(patched, 403, "forbidden")
    assert_error(world.agent_api.delete(f"/api/v1/messages/{message.id}"), 403, "forbidden")
    message.refresh_from_db()
    assert message.content == "keep me"
    assert message.deleted_at is None


# --- tenancy ---------------------------------------------------------------------------------


@pytest.fixture
def other(world):
    """Workspace B with its own service token, account, agent and room."""
    workspace = factories.make_workspace("beta")
    account = factories.make_account(workspace, "Zed Other")
    agent = factories.make_agent(workspace, "Other agent")
    room = factories.make_conversation(workspace, "private", "beta room")
    factories.join(room, account)
    factories.join(room, agent)
    return {
        "workspace": workspace,
        "account": account,
        "agent": agent,
        "room": room,
        "service": factories.service_client(workspace),
    }


def test_other_workspace_cannot_get_objects_by_id(world, other):
    link = services.identity_link_create(
        workspace_id=world.workspace.id, account_id=world.alice.id, linked_account_id=world.bob.id
    )
    run_id = _run(world).json()["id"]
    paths = [
        f"/api/v1/accounts/{world.alice.id}",
        f"/api/v1/agents/{world.agent.id}",
        f"/api/v1/conversations/{world.private.id}",
        f"/api/v1/conversations/{world.private.id}/members",
        f"/api/v1/identity-links/{link.id}",
        f"/api/v1/runs/{run_id}",
    ]
    for path in paths:
        foreign = other["service"].get(path)
        assert_error(foreign, 404, "not_found")
        # Byte for byte the answer for an id that does not exist at all.
        missing = other["service"].get(path.replace(path.split("/")[4], str(uuid.uuid4())))
        assert foreign.content == missing.content, path


def test_other_workspace_cannot_write_into_objects(world, other):
    message = factories.post(world.private, world.alice, "workspace A text")
    link = services.identity_link_create(
        workspace_id=world.workspace.id, account_id=world.alice.id, linked_account_id=world.bob.id
    )
    service_b = other["service"]
    before = row_counts()
    attempts = [
        service_b.post(
            messages_url(world.private),
            {"senderUserId": str(other["account"].id), "content": "intrusion"},
            format="json",
        ),
        service_b.post(
            messages_url(world.private),
            {"senderUserId": str(world.alice.id), "content": "intrusion"},
            format="json",
        ),
        service_b.post(
            bulk_url(world.private),
            {"messages": [{"senderUserId": str(other["account"].id), "content": "intrusion"}]},
            format="json",
        ),
        service_b.post(
            members_url(world.private), {"accountId": str(other["account"].id)}, format="json"
        ),
        service_b.post(leave_url(world.private), {"accountId": str(world.bob.id)}, format="json"),
        service_b.patch(f"/api/v1/messages/{message.id}", {"content": "defaced"}, format="json"),
        service_b.delete(f"/api/v1/messages/{message.id}"),
        service_b.post(f"/api/v1/identity-links/{link.id}/verify"),
        service_b.post(f"/api/v1/identity-links/{link.id}/revoke"),
    ]
    for response in attempts:
        assert_error(response, 404, "not_found")
    assert row_counts() == before
    message.refresh_from_db()
    assert message.content == "workspace A text"
    assert message.deleted_at is None
    link.refresh_from_db()
    assert link.status == "pending"
    assert Membership.objects.filter(
        conversation=world.private, account=world.bob, left_at__isnull=True
    ).exists()


def test_other_workspace_lists_exclude_foreign_objects(world, other):
    services.account_create(
        workspace_id=world.workspace.id, display_name="Tagged A", external_id="shared-ext"
    )
    services.identity_link_create(
        workspace_id=world.workspace.id, account_id=world.alice.id, linked_account_id=world.bob.id
    )
    service_b = other["service"]

    accounts = service_b.get("/api/v1/accounts").json()
    assert [item["id"] for item in accounts["items"]] == [str(other["account"].id)]
    assert accounts["total"] == 1
    assert service_b.get("/api/v1/accounts", {"externalId": "shared-ext"}).json()["total"] == 0
    assert service_b.get("/api/v1/accounts", {"displayName": "Alice"}).json()["total"] == 0

    agents = service_b.get("/api/v1/agents").json()
    assert [item["id"] for item in agents["items"]] == [str(other["agent"].id)]

    conversations = service_b.get("/api/v1/conversations").json()
    assert [item["id"] for item in conversations["items"]] == [str(other["room"].id)]
    assert service_b.get("/api/v1/conversations", {"kind": "public"}).json()["total"] == 0

    links = service_b.get("/api/v1/identity-links").json()
    assert links["items"] == []
    assert links["total"] == 0
    by_alice = service_b.get("/api/v1/identity-links", {"accountId": str(world.alice.id)}).json()
    assert by_alice["total"] == 0

    # And workspace A's lists exclude B's objects.
    assert str(other["account"].id) not in {
        item["id"] for item in world.service.get("/api/v1/accounts").json()["items"]
    }


def test_other_workspace_cannot_reference_foreign_ids(world, other):
    service_b = other["service"]
    room_b = other["room"]
    message_a = factories.post(world.private, world.alice, "workspace A text")
    before = row_counts()
    attempts = [
        service_b.post(members_url(room_b), {"accountId": str(world.alice.id)}, format="json"),
        service_b.post(members_url(room_b), {"agentId": str(world.agent.id)}, format="json"),
        service_b.post(
            messages_url(room_b),
            {"senderUserId": str(world.alice.id), "content": "spoof"},
            format="json",
        ),
        service_b.post(
            messages_url(room_b),
            {"senderAgentId": str(world.agent.id), "content": "spoof"},
            format="json",
        ),
        service_b.post(
            messages_url(room_b),
            {
                "senderUserId": str(other["account"].id),
                "content": "reply",
                "replyToId": str(message_a.id),
            },
            format="json",
        ),
        service_b.post(
            messages_url(room_b),
            {
                "senderAgentId": str(other["agent"].id),
                "content": "derived",
                "lineage": [str(message_a.id)],
            },
            format="json",
        ),
        service_b.post(
            bulk_url(room_b),
            {"messages": [{"senderUserId": str(world.alice.id), "content": "spoof"}]},
            format="json",
        ),
        service_b.post(
            "/api/v1/identity-links",
            {"accountId": str(other["account"].id), "linkedAccountId": str(world.alice.id)},
            format="json",
        ),
        service_b.post(
            "/api/v1/runs",
            {
                "agentId": str(world.agent.id),
                "conversationId": str(room_b.id),
                "requesterId": str(other["account"].id),
            },
            format="json",
        ),
        service_b.post(
            "/api/v1/runs",
            {
                "agentId": str(other["agent"].id),
                "conversationId": str(world.private.id),
                "requesterId": str(other["account"].id),
            },
            format="json",
        ),
        service_b.post(
            "/api/v1/runs",
            {
                "agentId": str(other["agent"].id),
                "conversationId": str(room_b.id),
                "requesterId": str(world.alice.id),
            },
            format="json",
        ),
    ]
    for response in attempts:
        error = assert_error(response, 400, "invalid_arguments")
        # The foreign id is never confirmed back to the caller.
        assert str(world.alice.id) not in response.content.decode(), error
    assert row_counts() == before


def test_service_token_cannot_read_agent_tools_of_other_workspace(world, other):
    """A B-workspace agent token never reads A's conversation through list_messages."""
    factories.post(world.private, world.alice, "workspace A text")
    agent_b = factories.agent_client(other["agent"])
    response = agent_b.get("/api/v1/messages", {"conversationId": str(world.private.id)})
    assert_error(response, 404, "not_found")
    assert b"workspace A text" not in response.content
