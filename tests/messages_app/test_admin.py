"""Admin pages render, stay read-only where writes belong to the API, and never leak a deleted
message's body or a token's digest."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models.signals import pre_save
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit_app.lifecycle import Actor
from messages_app.admin.messages import ERASED_SOURCE
from messages_app.lifecycle import erasure, holds, retention
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
from tests import factories

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
    from formation.admin_kit import CappedCountPaginator

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


# --- names instead of UUIDs ----------------------------------------------------------------


def test_a_membership_reads_member_name_in_conversation_title(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    memberships = Membership.objects.select_related("account", "agent", "conversation")
    assert sorted(str(m) for m in memberships) == [
        "Sample Agent in Sample channel",
        "Sample Person in Sample channel",
    ]
    page = admin_client.get(admin_url("conversation", "change", admin_world.conversation.pk))
    html = page.content.decode()
    assert f"{admin_world.account.pk} in {admin_world.conversation.pk}" not in html
    assert f"{admin_world.agent.pk} in {admin_world.conversation.pk}" not in html
    account_link = admin_url("account", "change", admin_world.account.pk)
    assert f'<a href="{account_link}">Sample Person</a>' in html
    agent_link = admin_url("agent", "change", admin_world.agent.pk)
    assert f'<a href="{agent_link}">Sample Agent</a>' in html


def test_a_message_is_titled_by_its_conversation_and_seq(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    page = admin_client.get(admin_url("message", "change", admin_world.reply.pk))
    html = page.content.decode()
    assert "<title>Sample channel #2 |" in html
    assert f"{admin_world.conversation.pk}#" not in html
    # Its reply-to and its lineage source read the same way, as links.
    assert html.count("Sample channel #1</a>") == 2


def test_the_message_list_names_conversations_and_senders(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    html = admin_client.get(admin_url("message", "changelist")).content.decode()
    list_url = admin_url("message", "changelist")
    narrow = f'href="{list_url}?conversation__id__exact={admin_world.conversation.pk}"'
    assert f"{narrow}>Sample channel</a>" in html
    assert "Sample Person" in html
    assert "Sample Agent" in html
    # No UUID column, which wrapped each row into four lines.
    assert "column-id" not in html
    assert f">{admin_world.first.pk}<" not in html


def test_the_conversation_list_uses_short_codes(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    html = admin_client.get(admin_url("conversation", "changelist")).content.decode()
    assert '<td class="field-kind">private</td>' in html
    assert "Private channel or group DM</td>" not in html


# --- read-only where the spec says so --------------------------------------------------------


def test_a_conversation_created_at_is_read_only(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    conversation = admin_world.conversation
    created = conversation.created_at
    change = admin_url("conversation", "change", conversation.pk)
    assert 'name="created_at_0"' not in admin_client.get(change).content.decode()
    assert (
        'name="created_at_0"'
        not in admin_client.get(admin_url("conversation", "add")).content.decode()
    )

    response = admin_client.post(
        change,
        {
            "title": "Sample channel renamed",
            "external_id": "ext-conv-1",
            "created_at_0": "2001-01-01",
            "created_at_1": "00:00:00",
            "memberships-TOTAL_FORMS": "2",
            "memberships-INITIAL_FORMS": "2",
            "memberships-MIN_NUM_FORMS": "0",
            "memberships-MAX_NUM_FORMS": "1000",
        },
    )

    assert response.status_code == 302
    conversation.refresh_from_db()
    assert conversation.title == "Sample channel renamed"
    assert conversation.created_at == created


def test_saving_a_conversation_keeps_the_counters_its_messages_moved_meanwhile(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    """A message stored between the admin's read of the conversation and its write (here, from
    ``pre_save``) moves ``last_seq``; writing the stale value back would hand the next message a
    seq already taken, and every later one too."""
    conversation = admin_world.conversation

    def message_arrives(sender: type, instance: Conversation, **kwargs: object) -> None:
        if instance.pk == conversation.pk:
            factories.post(conversation, admin_world.account, "sample arriving meanwhile")

    pre_save.connect(message_arrives, sender=Conversation)
    try:
        response = admin_client.post(
            admin_url("conversation", "change", conversation.pk),
            {
                "title": "Sample channel renamed",
                "external_id": "ext-conv-1",
                "memberships-TOTAL_FORMS": "2",
                "memberships-INITIAL_FORMS": "2",
                "memberships-MIN_NUM_FORMS": "0",
                "memberships-MAX_NUM_FORMS": "1000",
            },
        )
    finally:
        pre_save.disconnect(message_arrives, sender=Conversation)

    assert response.status_code == 302
    stored = Conversation.objects.get(pk=conversation.pk)
    newest = Message.objects.filter(conversation=conversation).order_by("-seq").first()
    assert stored.title == "Sample channel renamed"
    assert stored.last_seq == newest.seq
    following = factories.post(conversation, admin_world.account, "sample after the rename")
    assert following.seq == newest.seq + 1


# --- the conversation filter ------------------------------------------------------------------


def test_messages_filter_by_conversation_without_listing_every_conversation(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    others = [
        Conversation.objects.create(
            workspace=admin_world.workspace, kind="public", title=f"Sample roster room {n}"
        )
        for n in range(30)
    ]
    add_message(others[0], "sample elsewhere", account=admin_world.account)
    changelist = admin_url("message", "changelist")

    html = admin_client.get(changelist).content.decode()
    assert "By conversation" in html
    assert "Sample roster room 1<" not in html  # no dropdown of every conversation
    picker = html.split('<select name="conversation__id__exact"')[1].split("</select>")[0]
    assert 'class="admin-autocomplete' in picker
    assert 'data-field-name="conversation"' in picker
    assert picker.count("<option") == 1  # only the empty choice

    chosen = admin_client.get(changelist, {"conversation__id__exact": others[0].pk})
    assert [m.content for m in chosen.context["cl"].result_list] == ["sample elsewhere"]
    picker = chosen.content.decode().split('<select name="conversation__id__exact"')[1]
    assert "Sample roster room 0</option>" in picker.split("</select>")[0]
    assert "Sample roster room 1<" not in chosen.content.decode()

    found = admin_client.get(
        reverse("admin:autocomplete"),
        {
            "app_label": "messages_app",
            "model_name": "message",
            "field_name": "conversation",
            "term": "roster room 17",
        },
    )
    assert [item["text"] for item in found.json()["results"]] == ["Sample roster room 17"]


def test_the_conversation_filter_keeps_the_other_filters(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    html = admin_client.get(
        admin_url("message", "changelist"), {"deleted": "no", "role": "user", "p": "2"}
    ).content.decode()
    form = html.split('<form method="get" class="autocomplete-filter">')[1].split("</form>")[0]
    assert '<input type="hidden" name="deleted" value="no">' in form
    assert '<input type="hidden" name="role" value="user">' in form
    assert 'name="p"' not in form  # a new conversation starts on its first page


def test_a_malformed_conversation_id_is_a_redirect_not_an_error(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    response = admin_client.get(
        admin_url("message", "changelist"), {"conversation__id__exact": "not-a-uuid"}
    )
    assert response.status_code == 302
    assert response["Location"].endswith("?e=1")


def test_the_message_list_narrowed_to_a_conversation_drops_its_column(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    narrowed = admin_client.get(
        admin_url("message", "changelist"),
        {"conversation__id__exact": admin_world.conversation.pk},
    )
    assert "column-conversation_link" not in narrowed.content.decode()
    everything = admin_client.get(admin_url("message", "changelist"))
    assert "column-conversation_link" in everything.content.decode()


# --- the transcript --------------------------------------------------------------------------


def transcript(conversation: Conversation, **params: object) -> str:
    url = reverse("admin:messages_app_conversation_transcript", args=[conversation.pk])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")


def transcript_rows(html: str) -> list[str]:
    body = html.split('<table class="transcript-table">')[1].split("</table>")[0]
    return body.split("<tbody>")[1].split("</tr>")[:-1]


def test_the_transcript_lists_messages_in_seq_order_with_senders(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    conversation = admin_world.conversation
    add_message(conversation, "sample third line", account=admin_world.other_account)
    delete_message(admin_world.first)

    page = admin_client.get(transcript(conversation))

    assert page.status_code == 200
    html = page.content.decode()
    rows = transcript_rows(html)
    assert len(rows) == 3
    assert ['id="seq-1"' in rows[0], 'id="seq-2"' in rows[1], 'id="seq-3"' in rows[2]] == [
        True,
        True,
        True,
    ]
    # The deleted first message: marked, its sender kept, its text nowhere on the page.
    assert 'class="deleted"' in rows[0]
    assert '<em class="deleted-marker">deleted</em>' in rows[0]
    assert "Sample Person" in rows[0]
    assert CANARY not in html
    assert "sample reply text" in rows[1]
    assert "Sample Agent" in rows[1]
    assert "reply to #1" in rows[1]
    assert "sample third line" in rows[2]
    assert "Sample Person Alt" in rows[2]
    message_page = admin_url("message", "change", admin_world.reply.pk)
    assert f'<a href="{message_page}">#2</a>' in rows[1]


@pytest.mark.django_db(transaction=True)
def test_the_transcript_never_shows_a_deleted_body_the_row_still_holds(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    """Belt and braces over the database's own check: even a row marked deleted whose body was
    not erased (a drifted row, constraint dropped) shows no text. The world is committed first
    and the drift is rolled back, constraint and all: on Citus a shard's table cannot be
    altered in the transaction that wrote to it (its deferred key checks are pending there)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            # On Citus the DDL then runs over one connection per node, which the admin's reads
            # of the reference tables in this transaction can share (a placeholder elsewhere).
            cursor.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
            cursor.execute(
                "ALTER TABLE messages_app_message DROP CONSTRAINT message_deleted_has_no_body"
            )
        Message.objects.filter(pk=admin_world.first.pk).update(deleted_at=timezone.now())
        html = admin_client.get(transcript(admin_world.conversation)).content.decode()
        transaction.set_rollback(True)

    assert CANARY not in html
    assert '<em class="deleted-marker">deleted</em>' in transcript_rows(html)[0]


def test_the_transcript_is_paged_by_seq(
    admin_client: Client, admin_world: AdminWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    from messages_app.admin import transcript as messages_admin

    monkeypatch.setattr(messages_admin, "TRANSCRIPT_PAGE_SIZE", 2)
    conversation = admin_world.conversation
    for number in range(3, 6):
        add_message(conversation, f"sample line {number}", account=admin_world.account)

    def seqs(**params: object) -> list[int]:
        html = admin_client.get(transcript(conversation, **params)).content.decode()
        return [int(row.split('id="seq-')[1].split('"')[0]) for row in transcript_rows(html)]

    assert seqs() == [1, 2]
    assert seqs(page=2) == [3, 4]
    assert seqs(page=3) == [5]
    assert seqs(page=99) == [5]  # clamped to the last page
    assert seqs(page="x") == [1, 2]
    assert seqs(page=0) == [1, 2]
    assert seqs(page="%C2%B2") == [1, 2]  # "²" is a digit to str.isdigit, not to int()
    assert seqs(page="9" * 5000) == [1, 2]  # too long to be a page number, not a 500
    assert seqs(seq=4) == [3, 4]  # the page holding that message
    html = admin_client.get(transcript(conversation, page=2)).content.decode()
    assert "page 2 of 3" in html
    assert 'href="?page=1" rel="prev"' in html
    assert 'href="?page=3" rel="next"' in html


def test_the_transcript_costs_the_same_queries_however_many_messages(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    conversation = admin_world.conversation
    admin_client.get(transcript(conversation))
    with CaptureQueriesContext(connection) as few:
        admin_client.get(transcript(conversation))
    for number in range(20):
        add_message(conversation, f"sample filler {number}", account=admin_world.account)
        add_message(conversation, f"sample answer {number}", agent=admin_world.agent)
    with CaptureQueriesContext(connection) as many:
        html = admin_client.get(transcript(conversation)).content.decode()
    assert len(transcript_rows(html)) == 42
    assert len(many) == len(few)


def test_the_transcript_is_linked_from_the_conversation_and_message_pages(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    conversation = admin_world.conversation
    url = transcript(conversation)
    for page in (
        admin_url("conversation", "change", conversation.pk),
        admin_url("conversation", "changelist"),
    ):
        assert f'href="{url}"' in admin_client.get(page).content.decode()
    message_page = admin_client.get(admin_url("message", "change", admin_world.reply.pk))
    assert f'href="{url}?seq=2#seq-2"' in message_page.content.decode()


def test_the_transcript_needs_view_permission_on_messages(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    staff = User.objects.create_user("sample-staff", password=None, is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client = Client()
    client.force_login(staff)
    url = transcript(admin_world.conversation)

    assert client.get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_message"))
    assert client.get(url).status_code == 200
    missing = reverse("admin:messages_app_conversation_transcript", args=[uuid.uuid4()])
    assert admin_client.get(missing).status_code == 404
    malformed = reverse("admin:messages_app_conversation_transcript", args=["not-a-uuid"])
    assert admin_client.get(malformed).status_code == 404


# --- fitting the page --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "page",
    [
        ("message", "changelist"),
        ("conversation", "changelist"),
        ("conversation", "change"),
        ("apitoken", "changelist"),
    ],
)
def test_admin_pages_carry_the_admin_stylesheet(
    admin_client: Client, admin_world: AdminWorld, page: tuple[str, str]
) -> None:
    model, view = page
    args = (admin_world.conversation.pk,) if view == "change" else ()
    html = admin_client.get(admin_url(model, view, *args)).content.decode()
    assert 'href="/static/messages_app/admin.css"' in html


def test_collectstatic_serves_the_admin_stylesheet_and_script(
    admin_client: Client, admin_world: AdminWorld, settings, tmp_path
) -> None:
    """In production the pages name the hashed copies, and WhiteNoise serves them."""
    from formation import settings as production_settings

    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = production_settings.STORAGES
    settings.WHITENOISE_AUTOREFRESH = False
    call_command("collectstatic", interactive=False, verbosity=0)
    manifest = json.loads((tmp_path / "staticfiles.json").read_text())["paths"]
    css, script = manifest["messages_app/admin.css"], manifest["messages_app/admin.js"]

    html = admin_client.get(admin_url("message", "changelist")).content.decode()
    assert f'href="/static/{css}"' in html
    assert f'src="/static/{script}"' in html
    served = Client().get(f"/static/{css}")
    assert served.status_code == 200
    assert b"field-content_preview" in b"".join(served.streaming_content)


# --- the data lifecycle (docs/lifecycle.md) ----------------------------------------------------


def test_a_reply_derived_from_an_erased_source_is_marked(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    # The world's rows are written without the services: give the room its live count first.
    Conversation.objects.filter(pk=admin_world.conversation.pk).update(live_message_count=2)
    erasure.messages_erase(
        workspace_id=admin_world.workspace.id, message_ids=[admin_world.first.pk]
    )
    page = admin_client.get(admin_url("message", "change", admin_world.reply.pk))

    html = page.content.decode()
    assert f"Sample channel #{admin_world.first.seq}</a>{ERASED_SOURCE}" in html
    assert re.search(r"Sources erased:</label>\s*<div[^>]*><img[^>]*alt=\"True\"", html)
    assert CANARY not in html


def test_legal_holds_are_browsed_but_written_only_through_the_api(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    hold = holds.hold_place(
        workspace_id=admin_world.workspace.id,
        conversation_id=admin_world.conversation.id,
        reference="matter-7",
        actor=Actor(label="test"),
    )
    assert "matter-7" in admin_client.get(admin_url("legalhold", "changelist")).content.decode()
    assert admin_client.get(admin_url("legalhold", "change", hold.pk)).status_code == 200
    assert admin_client.get(admin_url("legalhold", "add")).status_code == 403
    assert admin_client.get(admin_url("legalhold", "delete", hold.pk)).status_code == 403
    active = admin_client.get(admin_url("legalhold", "changelist"), {"released": "no"})
    assert [row.pk for row in active.context["cl"].result_list] == [hold.pk]


def test_the_conversation_page_shows_its_retention(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    """It said "the workspace's period" when the workspace had none."""
    page = admin_url("conversation", "change", admin_world.conversation.pk)
    assert "kept (neither it nor its workspace has a period)" in (
        admin_client.get(page).content.decode()
    )
    retention.workspace_retention_set(workspace_id=admin_world.workspace.id, days=30)
    assert "30 days (the workspace&#x27;s period)" in admin_client.get(page).content.decode()
    retention.conversation_retention_set(conversation=admin_world.conversation, days=1)
    assert "1 day (its own setting)" in admin_client.get(page).content.decode()


def test_the_index_names_api_tokens_and_groups_both_audit_records(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    """It read "Api tokens", and "Lifecycle events" sat under "Search audit"."""
    apps = {
        app["name"]: [model["name"] for model in app["models"]]
        for app in admin_client.get(reverse("admin:index")).context["app_list"]
    }
    assert "API tokens" in apps["Conversations and messages"]
    assert apps["Audit records"] == ["Lifecycle events", "Search audit events"]


def test_a_run_is_named_by_its_agent_conversation_and_time(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    run = admin_world.run
    name = f"Sample Agent in Sample channel at {run.created_at:%Y-%m-%d %H:%M:%S}"
    assert str(run) == name
    page = admin_client.get(admin_url("run", "change", run.pk)).content.decode()
    assert f"<title>{name}" in page
    listed = admin_client.get(admin_url("run", "changelist")).content.decode()
    assert f">{run.pk}<" not in listed
    assert f">{run.created_at:%Y-%m-%d %H:%M:%S}</a>" in listed  # the row's link


def test_lists_and_detail_pages_show_times_alike(
    admin_client: Client, admin_world: AdminWorld
) -> None:
    """The lists showed "2026-03-10 12:00:05", the pages "March 10, 2026, noon"."""
    shown = f"{timezone.localtime(admin_world.run.created_at):%Y-%m-%d %H:%M:%S}"
    listed = admin_client.get(admin_url("run", "changelist")).content.decode()
    page = admin_client.get(admin_url("run", "change", admin_world.run.pk)).content.decode()
    assert shown in listed
    assert f'<div class="readonly">{shown}</div>' in page


def test_revoking_one_token_says_one_token(admin_client: Client, admin_world: AdminWorld) -> None:
    response = admin_client.post(
        admin_url("apitoken", "changelist"),
        {"action": "revoke_tokens", "_selected_action": [admin_world.token.pk]},
        follow=True,
    )
    assert [str(message) for message in response.context["messages"]] == ["Revoked 1 token."]
