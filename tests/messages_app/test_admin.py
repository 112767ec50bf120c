"""Admin pages render, stay read-only where writes belong to the API, and never leak a deleted
message's body or a token's digest."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

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
    RunEvidence,
    Workspace,
)

CANARY = "sample status canary-4b1e9"
RAW_TOKEN = "sample-token-value-for-admin-tests"
DIGEST = hashlib.sha256(RAW_TOKEN.encode()).hexdigest()


@dataclass
class AdminWorld:
    workspace: Workspace
    account: Account
    other_account: Account
    agent: Agent
    conversation: Conversation
    first: Message
    reply: Message
    link: IdentityLink
    run: Run
    token: ApiToken


def add_message(
    conversation: Conversation,
    content: str,
    *,
    account: Account | None = None,
    agent: Agent | None = None,
    **extra: object,
) -> Message:
    """Insert a message with the next seq, as the service would, without going through it."""
    conversation.last_seq += 1
    conversation.save(update_fields=["last_seq"])
    return Message.objects.create(
        workspace_id=conversation.workspace_id,
        conversation=conversation,
        seq=conversation.last_seq,
        role="assistant" if agent else "user",
        sender_account=account,
        sender_agent=agent,
        content=content,
        **extra,
    )


def admin_url(model: str, view: str, *args: object) -> str:
    return reverse(f"admin:messages_app_{model}_{view}", args=args)


@pytest.fixture
def admin_world(db) -> AdminWorld:
    """One private conversation between a person and an agent, with a run and its token."""
    workspace = Workspace.objects.create(slug="sample-ws", name="Sample workspace")
    account = Account.objects.create(
        workspace=workspace, display_name="Sample Person", external_id="ext-person-1"
    )
    other_account = Account.objects.create(
        workspace=workspace, display_name="Sample Person Alt", external_id="ext-person-2"
    )
    agent = Agent.objects.create(workspace=workspace, name="Sample Agent")
    conversation = Conversation.objects.create(
        workspace=workspace, kind="private", title="Sample channel", external_id="ext-conv-1"
    )
    joined = timezone.now() - timedelta(days=1)
    for member in ({"account": account}, {"agent": agent}):
        Membership.objects.create(
            workspace=workspace, conversation=conversation, joined_at=joined, **member
        )
    first = add_message(conversation, CANARY, account=account)
    reply = add_message(conversation, "sample reply text", agent=agent, reply_to=first)
    MessageLineage.objects.create(workspace=workspace, message=reply, source=first)
    link = IdentityLink.objects.create(
        workspace=workspace, account=account, linked_account=other_account
    )
    run = Run.objects.create(
        workspace=workspace,
        agent=agent,
        conversation=conversation,
        requester=account,
        current_message=first,
        recent_message_ids=[first.id],
    )
    token = ApiToken.objects.create(
        workspace=workspace,
        kind="run",
        agent=agent,
        run=run,
        digest=DIGEST,
        prefix=RAW_TOKEN[:8],
    )
    return AdminWorld(
        workspace=workspace,
        account=account,
        other_account=other_account,
        agent=agent,
        conversation=conversation,
        first=first,
        reply=reply,
        link=link,
        run=run,
        token=token,
    )


def delete_message(message: Message) -> None:
    """Soft-delete the way the service leaves the row: time set, body erased."""
    Message.objects.filter(pk=message.pk).update(deleted_at=timezone.now(), content="")


MODELS = [
    "workspace",
    "account",
    "agent",
    "conversation",
    "message",
    "identitylink",
    "run",
    "apitoken",
]


@pytest.mark.parametrize("model", MODELS)
def test_changelist_renders(admin_client: Client, admin_world: AdminWorld, model: str) -> None:
    assert admin_client.get(admin_url(model, "changelist")).status_code == 200


@pytest.mark.parametrize(
    ("model", "attribute"),
    [
        ("workspace", "workspace"),
        ("account", "account"),
        ("agent", "agent"),
        ("conversation", "conversation"),
        ("message", "first"),
        ("message", "reply"),
        ("identitylink", "link"),
        ("run", "run"),
        ("apitoken", "token"),
    ],
)
def test_change_page_renders(
    admin_client: Client, admin_world: AdminWorld, model: str, attribute: str
) -> None:
    obj = getattr(admin_world, attribute)
    assert admin_client.get(admin_url(model, "change", obj.pk)).status_code == 200


@pytest.mark.parametrize(
    ("model", "status"),
    [
        ("workspace", 200),
        ("account", 200),
        ("agent", 200),
        ("conversation", 200),
        ("identitylink", 200),
        ("message", 403),
        ("run", 403),
        ("apitoken", 403),
    ],
)
def test_add_page(admin_client: Client, admin_world: AdminWorld, model: str, status: int) -> None:
    assert admin_client.get(admin_url(model, "add")).status_code == status


def test_message_cannot_be_changed_or_deleted(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    message = admin_world.first
    assert admin_client.get(admin_url("message", "delete", message.pk)).status_code == 403
    response = admin_client.post(admin_url("message", "change", message.pk), {"content": "x"})
    assert response.status_code == 403
    message.refresh_from_db()
    assert message.content == CANARY


def test_deleted_message_body_never_rendered(admin_client: Client, admin_world: AdminWorld) -> None:
    changelist = admin_url("message", "changelist")
    change = admin_url("message", "change", admin_world.first.pk)
    assert CANARY in admin_client.get(changelist).content.decode()
    assert CANARY in admin_client.get(change).content.decode()

    delete_message(admin_world.first)

    for url in (changelist, f"{changelist}?deleted=yes", change):
        html = admin_client.get(url).content.decode()
        assert CANARY not in html
        assert "(deleted)" in html
    reply_page = admin_client.get(admin_url("message", "change", admin_world.reply.pk))
    assert CANARY not in reply_page.content.decode()


def test_deleted_filter(admin_client: Client, admin_world: AdminWorld) -> None:
    delete_message(admin_world.first)
    changelist = admin_url("message", "changelist")
    deleted = admin_client.get(f"{changelist}?deleted=yes").context["cl"].result_list
    live = admin_client.get(f"{changelist}?deleted=no").context["cl"].result_list
    assert [m.pk for m in deleted] == [admin_world.first.pk]
    assert [m.pk for m in live] == [admin_world.reply.pk]


def test_message_changelist_queries_do_not_grow_with_rows(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    url = admin_url("message", "changelist")
    admin_client.get(url)
    with CaptureQueriesContext(connection) as few:
        admin_client.get(url)
    conversation = admin_world.conversation
    for number in range(20):
        add_message(conversation, f"sample filler {number}", account=admin_world.account)
        add_message(conversation, f"sample answer {number}", agent=admin_world.agent)
    with CaptureQueriesContext(connection) as many:
        response = admin_client.get(url)
    assert len(response.context["cl"].result_list) == 42
    assert len(many) == len(few)


def test_message_search_by_uuid(admin_client: Client, admin_world: AdminWorld) -> None:
    url = admin_url("message", "changelist")
    by_id = admin_client.get(url, {"q": str(admin_world.reply.pk)}).context["cl"].result_list
    assert [m.pk for m in by_id] == [admin_world.reply.pk]
    by_conversation = admin_client.get(url, {"q": str(admin_world.first.conversation_id)})
    assert [m.pk for m in by_conversation.context["cl"].result_list] == [
        admin_world.first.pk,
        admin_world.reply.pk,
    ]
    # Senders have no index of their own, so a sender id is not searched (no table scan).
    by_sender = admin_client.get(url, {"q": str(admin_world.account.pk)}).context["cl"]
    assert list(by_sender.result_list) == []
    by_external = admin_client.get(url, {"q": "ext-conv-1"}).context["cl"].result_list
    assert [m.pk for m in by_external] == [admin_world.first.pk, admin_world.reply.pk]


def test_message_changelist_counts_at_most_the_cap(
    admin_client: Client, admin_world: AdminWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from messages_app.admin import CappedCountPaginator

    monkeypatch.setattr(CappedCountPaginator, "CAP", 1)
    response = admin_client.get(admin_url("message", "changelist"))
    assert response.status_code == 200
    assert response.context["cl"].result_count == 1
    assert len(response.context["cl"].result_list) >= 2


def test_conversation_messages_link_narrows_the_list(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    other = Conversation.objects.create(
        workspace=admin_world.workspace, kind="public", title="Sample other channel"
    )
    add_message(other, "sample elsewhere", account=admin_world.account)
    page = admin_client.get(admin_url("conversation", "changelist")).content.decode()
    link = f"?conversation__id__exact={admin_world.conversation.pk}"
    assert link in page
    listed = admin_client.get(admin_url("message", "changelist") + link).context["cl"]
    assert [m.pk for m in listed.result_list] == [admin_world.first.pk, admin_world.reply.pk]


def test_conversation_page_lists_members(admin_client: Client, admin_world: AdminWorld) -> None:
    html = admin_client.get(admin_url("conversation", "change", admin_world.conversation.pk))
    text = html.content.decode()
    assert "Sample Person" in text
    assert "Sample Agent" in text


def test_run_page_lists_its_evidence_read_only(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    """Trusted administrators can see what a run's tools returned (SPEC §4), never edit it."""
    RunEvidence.objects.create(
        workspace=admin_world.workspace,
        run=admin_world.run,
        message=admin_world.first,
        tool="search_history",
    )
    page = admin_client.get(admin_url("run", "change", admin_world.run.pk))
    text = page.content.decode()
    assert page.status_code == 200
    assert "search_history" in text
    assert str(admin_world.first) in text
    assert 'name="evidence-0-tool"' not in text  # rendered as text, not as a form field


def test_token_digest_never_rendered(admin_client: Client, admin_world: AdminWorld) -> None:
    urls = [
        admin_url("apitoken", "changelist"),
        admin_url("apitoken", "changelist") + f"?q={admin_world.token.prefix}",
        admin_url("apitoken", "change", admin_world.token.pk),
        admin_url("apitoken", "history", admin_world.token.pk),
    ]
    for url in urls:
        response = admin_client.get(url)
        assert response.status_code == 200
        assert DIGEST not in response.content.decode()
    assert admin_world.token.prefix in admin_client.get(urls[0]).content.decode()


def test_revoke_action(admin_client: Client, admin_world: AdminWorld) -> None:
    already = ApiToken.objects.create(
        workspace=admin_world.workspace,
        kind="service",
        digest=hashlib.sha256(b"sample-other-token").hexdigest(),
        prefix="sampleot",
        revoked_at=timezone.now() - timedelta(days=2),
    )
    earlier = already.revoked_at
    response = admin_client.post(
        admin_url("apitoken", "changelist"),
        {"action": "revoke_tokens", "_selected_action": [admin_world.token.pk, already.pk]},
    )
    assert response.status_code == 302
    admin_world.token.refresh_from_db()
    already.refresh_from_db()
    assert admin_world.token.revoked_at is not None
    assert already.revoked_at == earlier
    logged = LogEntry.objects.values_list("object_id", flat=True)
    assert list(logged) == [str(admin_world.token.pk)]


def test_identity_link_status_is_read_only(admin_client: Client, admin_world: AdminWorld) -> None:
    url = admin_url("identitylink", "change", admin_world.link.pk)
    response = admin_client.post(url, {"status": "verified"})
    assert response.status_code == 403
    admin_world.link.refresh_from_db()
    assert admin_world.link.status == "pending"


def test_identity_link_add_rejects_another_workspace(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    elsewhere = Workspace.objects.create(slug="sample-elsewhere")
    stranger = Account.objects.create(workspace=elsewhere, display_name="Sample Stranger")
    response = admin_client.post(
        admin_url("identitylink", "add"),
        {
            "workspace": admin_world.workspace.pk,
            "account": admin_world.other_account.pk,
            "linked_account": stranger.pk,
        },
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["linked_account"]
    assert IdentityLink.objects.count() == 1


def test_identity_link_add_starts_pending(admin_client: Client, admin_world: AdminWorld) -> None:
    third = Account.objects.create(workspace=admin_world.workspace, display_name="Sample Third")
    response = admin_client.post(
        admin_url("identitylink", "add"),
        {
            "workspace": admin_world.workspace.pk,
            "account": admin_world.other_account.pk,
            "linked_account": third.pk,
        },
    )
    assert response.status_code == 302
    created = IdentityLink.objects.get(account=admin_world.other_account, linked_account=third)
    assert created.status == "pending"
