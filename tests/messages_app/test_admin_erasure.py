"""An erased account's former names leave the admin too (docs/lifecycle.md, "Account erasure"),
and the admin changes nothing a legal hold covers (docs/admin.md).

Names are written through the admin itself, as an administrator would, so the admin's log and
its notices hold them exactly as they would in use."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from audit_app.lifecycle import Actor
from audit_app.models import LifecycleEvent
from messages_app.errors import LegalHoldActive
from messages_app.lifecycle import erasure, holds
from messages_app.lifecycle.erasure import ERASED_NAME
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    IdentityLink,
    LegalHold,
    Membership,
    Workspace,
)
from tests import factories

FIRST_NAME, FIRST_EXTERNAL = "Sample Firstname Qx7", "ext-first-qx7"
SECOND_NAME, SECOND_EXTERNAL = "Sample Renamed Zk3", "ext-renamed-zk3"
MESSAGE_TEXT = "sample private words wq9"
FORMER = (FIRST_NAME, FIRST_EXTERNAL, SECOND_NAME, SECOND_EXTERNAL, MESSAGE_TEXT)
ACTOR = Actor(label="test")


@dataclass
class Erasable:
    workspace: Workspace
    account: Account
    other: Account
    agent: Agent
    room: Conversation
    elsewhere: Conversation


@pytest.fixture
def erasable(db) -> Erasable:
    """An account that wrote in one room, with a link. Its ``created_at`` is to the second, as
    the admin's form shows it, so posting the form back does not change it."""
    workspace = factories.make_workspace("erasable")
    account = Account.objects.create(
        workspace=workspace,
        display_name=FIRST_NAME,
        external_id=FIRST_EXTERNAL,
        created_at=factories.T0,
    )
    other = factories.make_account(workspace, "Sample Other")
    agent = factories.make_agent(workspace)
    room = factories.make_conversation(workspace, "private", "sample room")
    elsewhere = factories.make_conversation(workspace, "private", "sample elsewhere")
    for member in (account, other, agent):
        factories.join(room, member)
    factories.post(room, account, MESSAGE_TEXT)
    IdentityLink.objects.create(workspace=workspace, account=account, linked_account=other)
    return Erasable(workspace, account, other, agent, room, elsewhere)


def account_page(account: Account) -> str:
    return reverse("admin:messages_app_account_change", args=[account.pk])


def shown(page: str, field: str) -> str:
    """The value the change form shows in one input."""
    match = re.search(rf'<input[^>]*name="{field}"[^>]*value="([^"]*)"', page)
    assert match, field
    return match.group(1)


def rename(client: Client, account: Account, name: str, external_id: str) -> object:
    """The account's change form, posted as the admin page would post it: the other fields as
    the page shows them (with the hidden initial values of a field with a callable default)."""
    page = client.get(account_page(account)).content.decode()
    created = {
        f"{initial}created_at_{part}": shown(page, f"{initial}created_at_{part}")
        for initial in ("", "initial-")
        for part in (0, 1)
    }
    return client.post(
        account_page(account), {"display_name": name, "external_id": external_id, **created}
    )


def every_admin_page(client: Client) -> dict[str, str]:
    """The index, and every registered model's list, add page, and each row's change and
    history pages (a conversation's transcript too), by URL: what any staff user can open."""
    urls = [reverse("admin:index")]
    for model in admin.site._registry:
        prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        urls += [reverse(f"{prefix}_changelist"), reverse(f"{prefix}_add")]
        views = (
            ("change", "history", "transcript") if model is Conversation else ("change", "history")
        )
        for pk in model._default_manager.values_list("pk", flat=True):
            urls += [reverse(f"{prefix}_{view}", args=[pk]) for view in views]
    pages = {}
    for url in urls:
        response = client.get(url)
        assert response.status_code in (200, 403), url
        pages[url] = response.content.decode()
    return pages


def test_after_erasure_no_admin_page_and_no_log_entry_names_the_account(
    admin_client: Client, erasable: Erasable
) -> None:
    account = erasable.account
    assert rename(admin_client, account, SECOND_NAME, SECOND_EXTERNAL).status_code == 302
    # The notice waits for the next page in the messages cookie: it names the kind, not the row.
    notice = admin_client.cookies["messages"].value
    assert SECOND_NAME not in notice
    assert FIRST_NAME not in notice
    # A membership entry, as an inline (or an older admin) logs one: "<name> in <room>".
    membership = Membership.objects.get(account=account, conversation=erasable.room)
    LogEntry.objects.log_actions(
        user_id=admin_client.session["_auth_user_id"],
        queryset=[membership],
        action_flag=CHANGE,
        change_message=[{"changed": {"fields": ["Left at"]}}],
        single_object=True,
    )
    assert LogEntry.objects.filter(object_repr__contains=SECOND_NAME).count() == 2

    report = erasure.account_erase(
        workspace_id=erasable.workspace.id, account_id=account.pk, actor=ACTOR
    )

    assert report.admin_log_entries == 2
    event = LifecycleEvent.objects.get(action="erasure", subject_id=account.pk)
    assert event.counts["adminLogEntries"] == 2
    pages = every_admin_page(admin_client)
    index = pages[reverse("admin:index")]
    assert "The account was changed successfully." in index  # the notice, shown once
    assert f">{ERASED_NAME}</a>" in index  # "Recent actions" names it as it is now
    history = pages[reverse("admin:messages_app_account_history", args=[account.pk])]
    assert "Changed Display name and External id." in history
    for url, html in pages.items():
        for former in FORMER:
            assert former not in html, (url, former)
    for entry in LogEntry.objects.all():
        for former in FORMER:
            assert former not in entry.object_repr
            assert former not in entry.change_message
    for session in Session.objects.all():
        for former in FORMER:
            assert former not in str(session.get_decoded())
    assert set(LogEntry.objects.values_list("object_repr", flat=True)) == {
        ERASED_NAME,
        f"{ERASED_NAME} in sample room",
    }
    # Calling it again finds nothing left to rewrite.
    again = erasure.account_erase(
        workspace_id=erasable.workspace.id, account_id=account.pk, actor=ACTOR
    )
    assert again.admin_log_entries == 0


def test_a_change_message_keeps_what_changed_and_loses_every_name() -> None:
    unnamed = erasure._unnamed_change_message
    assert unnamed('[{"changed": {"fields": ["Display name"]}}]') == (
        '[{"changed": {"fields": ["Display name"]}}]'
    )
    assert unnamed(f'[{{"added": {{"name": "membership", "object": "{FIRST_NAME} in x"}}}}]') == (
        '[{"added": {"name": "membership"}}]'
    )
    assert unnamed(f"Changed the name to {FIRST_NAME}.") == ""
    assert unnamed("") == ""


def test_a_form_read_before_the_erasure_does_not_bring_the_name_back(
    admin_client: Client, erasable: Erasable
) -> None:
    account = erasable.account
    erasure.account_erase(workspace_id=erasable.workspace.id, account_id=account.pk, actor=ACTOR)

    page = admin_client.get(account_page(account)).content.decode()
    assert 'name="display_name"' not in page
    assert 'name="external_id"' not in page
    rename(admin_client, account, FIRST_NAME, FIRST_EXTERNAL)
    account.refresh_from_db()
    assert (account.display_name, account.external_id) == (ERASED_NAME, None)
    # Even through a form built before the erasure: the save is refused in its transaction.
    request = RequestFactory().get(account_page(account))
    request.user = User.objects.get(username="admin")
    stale = Account.objects.get(pk=account.pk)
    stale.erased_at = None  # as the admin read it before the erasure
    form_class = admin.site._registry[Account].get_form(request, stale, change=True)
    data = {"display_name": FIRST_NAME, "external_id": FIRST_EXTERNAL}
    form = form_class(data={**data, "created_at": account.created_at}, instance=stale)
    assert not form.is_valid()
    assert "erased" in form.non_field_errors()[0]


def refused(response: object) -> bool:
    """The admin's form came back with the hold's sentence and saved nothing."""
    html = response.content.decode()
    return response.status_code == 200 and "A legal hold covers this row" in html


def test_under_a_hold_the_admin_changes_no_account_the_api_may_not_erase(
    admin_client: Client, erasable: Erasable
) -> None:
    account, workspace = erasable.account, erasable.workspace
    service = factories.service_client(workspace)
    for hold in (
        holds.hold_place(
            workspace_id=workspace.id, conversation_id=None, reference="", actor=ACTOR
        ),
        holds.hold_place(
            workspace_id=workspace.id, conversation_id=erasable.room.id, reference="", actor=ACTOR
        ),
    ):
        assert refused(rename(admin_client, account, SECOND_NAME, SECOND_EXTERNAL))
        assert service.post(f"/api/v1/accounts/{account.pk}/erase").status_code == 409
        account.refresh_from_db()
        assert (account.display_name, account.external_id) == (FIRST_NAME, FIRST_EXTERNAL)
        holds.hold_release(hold=hold, actor=ACTOR)

    # A hold on a room without the account's messages covers neither its erasure nor its name.
    holds.hold_place(
        workspace_id=workspace.id, conversation_id=erasable.elsewhere.id, reference="", actor=ACTOR
    )
    assert rename(admin_client, account, SECOND_NAME, SECOND_EXTERNAL).status_code == 302
    account.refresh_from_db()
    assert account.display_name == SECOND_NAME
    # Posting the form unchanged saves nothing, and a hold does not refuse nothing.
    holds.hold_place(workspace_id=workspace.id, conversation_id=None, reference="", actor=ACTOR)
    assert rename(admin_client, account, SECOND_NAME, SECOND_EXTERNAL).status_code == 302
    with pytest.raises(LegalHoldActive):
        erasure.account_erase(workspace_id=workspace.id, account_id=account.pk, actor=ACTOR)


def test_under_a_hold_the_admin_changes_no_conversation_or_agent_it_covers(
    admin_client: Client, erasable: Erasable
) -> None:
    workspace, room = erasable.workspace, erasable.room
    room_page = reverse("admin:messages_app_conversation_change", args=[room.pk])
    members = Membership.objects.filter(conversation=room).count()
    room_form = {
        "title": "sample room renamed",
        "external_id": "",
        "memberships-TOTAL_FORMS": str(members),
        "memberships-INITIAL_FORMS": str(members),
        "memberships-MIN_NUM_FORMS": "0",
        "memberships-MAX_NUM_FORMS": "1000",
    }
    agent_page = reverse("admin:messages_app_agent_change", args=[erasable.agent.pk])
    created = timezone.localtime(erasable.agent.created_at)
    agent_form = {
        "name": "Sample agent renamed",
        "created_at_0": created.strftime("%Y-%m-%d"),
        "created_at_1": created.strftime("%H:%M:%S.%f"),
    }
    on_room = holds.hold_place(
        workspace_id=workspace.id, conversation_id=room.id, reference="", actor=ACTOR
    )
    assert refused(admin_client.post(room_page, room_form))
    assert admin_client.post(agent_page, agent_form).status_code == 302  # not covered
    holds.hold_release(hold=on_room, actor=ACTOR)
    holds.hold_place(workspace_id=workspace.id, conversation_id=None, reference="", actor=ACTOR)
    agent_form["name"] = "Sample agent renamed again"
    assert refused(admin_client.post(agent_page, agent_form))
    assert refused(admin_client.post(room_page, room_form))

    room.refresh_from_db()
    erasable.agent.refresh_from_db()
    assert room.title == "sample room"
    assert erasable.agent.name == "Sample agent renamed"
    assert LegalHold.objects.filter(released_at=None).count() == 1


def test_the_notice_after_adding_names_no_row(admin_client: Client, erasable: Erasable) -> None:
    response = admin_client.post(
        reverse("admin:messages_app_agent_add"),
        {
            "workspace": str(erasable.workspace.pk),
            "name": "Sample agent added wz4",
            "created_at_0": "2026-01-02",
            "created_at_1": "03:04:05",
            "_continue": "1",
        },
        follow=True,
    )
    html = response.content.decode()
    assert "The agent was added successfully. You may edit it again below." in html
    notices = re.findall(r'<li class="success">(.*?)</li>', html, re.S)
    assert notices
    assert not any("wz4" in notice for notice in notices)
