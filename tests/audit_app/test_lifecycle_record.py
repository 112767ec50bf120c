"""The lifecycle record (docs/lifecycle.md): one row per retention run, erasure, hold, release
and export, read-only in the admin for holders of ``audit_app.inspect_lifecycle``, and never
holding message text (the privacy canary of ``test_privacy.py``, for the new tables and logs).
"""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit_app.models import LifecycleEvent
from messages_app.models import Message
from tests import factories
from tests.audit_app.helpers import columns_holding, record_texts

pytestmark = pytest.mark.django_db


def every_kind_of_event(world, canary: str, tmp_path) -> list:
    """Retention, a hold and its release, an erasure and three exports, over messages holding
    ``canary`` (and a hold whose reference holds it too: the record names holds by id)."""
    service = world.service
    old = timezone.now() - timedelta(days=40)
    factories.post(world.public, world.alice, f"sample {canary} old", created_at=old)
    factories.post(world.private, world.alice, f"sample {canary} old and held", created_at=old)
    factories.post(world.private, world.bob, f"sample {canary} from bob")
    factories.post(world.private, world.alice, f"sample {canary} kept")
    answers = [
        service.put("/api/v1/retention", {"days": 30}, format="json"),
        service.post(
            "/api/v1/legal-holds",
            {"conversationId": str(world.private.id), "reference": f"case {canary}"},
            format="json",
        ),
    ]
    call_command("apply_retention", stdout=io.StringIO())
    exported = service.get(f"/api/v1/conversations/{world.private.id}/export")
    answers.append(exported)
    assert canary in b"".join(exported.streaming_content).decode()  # the export itself, only
    answers.append(service.post(f"/api/v1/legal-holds/{answers[1].json()['id']}/release"))
    answers.append(service.post(f"/api/v1/accounts/{world.bob.id}/erase"))
    account_export = service.get(f"/api/v1/accounts/{world.alice.id}/export")
    b"".join(account_export.streaming_content)
    answers.append(account_export)
    call_command(
        "export_workspace",
        world.workspace.slug,
        "--output",
        str(tmp_path / "workspace.jsonl"),
        stdout=io.StringIO(),
    )
    assert [a.status_code for a in answers] == [200, 201, 200, 200, 200, 200]
    return answers


def test_every_action_is_recorded_once(world, tmp_path):
    every_kind_of_event(world, "plain", tmp_path)

    rows = list(
        LifecycleEvent.objects.order_by("created_at").values_list(
            "action", "subject_kind", "outcome", "counts"
        )
    )
    assert rows == [
        ("hold_placed", "conversation", "completed", {}),
        (
            "retention",
            "workspace",
            "completed",
            {
                "messages": 1,
                "conversations": 1,
                "heldConversations": 1,
            },
        ),
        ("export", "conversation", "completed", {"messages": 3}),
        ("hold_released", "conversation", "completed", {}),
        (
            "erasure",
            "account",
            "completed",
            {
                "messages": 1,
                "identityLinks": 0,
                "derivedMessagesMarked": 0,
                "adminLogEntries": 0,
            },
        ),
        ("export", "account", "completed", {"messages": 2}),
        ("export", "workspace", "completed", {"messages": 2}),
    ]
    tokens = set(
        LifecycleEvent.objects.exclude(actor_token_id=None).values_list("actor", flat=True)
    )
    assert tokens == {"service token"}
    commands = set(
        LifecycleEvent.objects.filter(actor_token_id=None).values_list("actor", flat=True)
    )
    assert commands == {"manage.py apply_retention", "manage.py export_workspace"}


def test_no_message_text_reaches_the_record_or_the_logs(world, every_log, tmp_path):
    canary = "zqxcanary" + uuid.uuid4().hex
    answers = every_kind_of_event(world, canary, tmp_path)

    superuser = User.objects.create_superuser("root", password=None)
    admin = Client()
    admin.force_login(superuser)
    pages = [admin.get(reverse("admin:audit_app_lifecycleevent_changelist"))]
    pages += [
        admin.get(reverse("admin:audit_app_lifecycleevent_change", args=[pk]))
        for pk in LifecycleEvent.objects.values_list("pk", flat=True)
    ]
    pages.append(admin.get(reverse("admin:messages_app_legalhold_changelist")))
    assert {page.status_code for page in pages} == {200}
    # The retention and erasure answers and the record's pages (a hold's own answers and
    # page show its reference, which is the caller's to give).
    for response in (answers[0], answers[4], *pages[:-1]):
        assert canary not in response.content.decode()
    # Only the live messages and the hold's own reference hold it; no lifecycle column does.
    assert set(columns_holding(canary)) == {
        (Message._meta.db_table, "content"),
        ("message_search_documents", "document"),
        ("messages_app_legalhold", "reference"),
    }
    for record in every_log.records:
        for text in record_texts(record):
            assert canary not in text, record.name


def login(*, inspect: bool) -> Client:
    user = User.objects.create_user(username=f"staff-{inspect}", password=None, is_staff=True)
    if inspect:
        user.user_permissions.add(
            Permission.objects.get(
                codename="inspect_lifecycle", content_type__app_label="audit_app"
            )
        )
    client = Client()
    client.force_login(user)
    return client


def test_the_admin_shows_the_record_only_with_its_permission_and_never_writes(world):
    world.service.post("/api/v1/legal-holds", {}, format="json")
    event = LifecycleEvent.objects.get()
    changelist = reverse("admin:audit_app_lifecycleevent_changelist")
    change = reverse("admin:audit_app_lifecycleevent_change", args=[event.pk])
    staff, inspector = login(inspect=False), login(inspect=True)

    assert staff.get(changelist).status_code == 403
    assert staff.get(change).status_code == 403
    assert "lifecycle" not in staff.get(reverse("admin:index")).content.decode().lower()
    listed = inspector.get(changelist)
    assert [row.pk for row in listed.context["cl"].result_list] == [event.pk]
    page = inspector.get(change)
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()
    assert inspector.get(reverse("admin:audit_app_lifecycleevent_add")).status_code == 403
    assert inspector.post(change, {"outcome": "refused"}).status_code == 403
    assert (
        inspector.get(reverse("admin:audit_app_lifecycleevent_delete", args=[event.pk])).status_code
        == 403
    )
    found = inspector.get(changelist, {"q": str(world.workspace.id)})
    assert [row.pk for row in found.context["cl"].result_list] == [event.pk]
    assert not inspector.get(changelist, {"q": "not an id"}).context["cl"].result_list
