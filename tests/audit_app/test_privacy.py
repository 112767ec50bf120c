"""Privacy canary (SPEC §7, §9): the query text is never stored, logged or shown.

A unique synthetic word travels only in search queries: no message, title or name holds it, so
finding it anywhere afterwards can only be a leak. After searches that answer, that find
nothing, that are refused as invalid and that fail closed, the word must be in no column of any
table, no log record (of any logger, at DEBUG, before any handler filter), no trace, no admin
page and no answer.
"""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse

from audit_app.models import ConversationSearchEvent
from messages_app.models import Message
from tests import factories
from tests.audit_app.helpers import (
    allow_audit_inserts,
    columns_holding,
    record_texts,
    refuse_audit_inserts,
    search,
    text_columns,
    trace_url,
)

pytestmark = pytest.mark.django_db

MESSAGES = Message._meta.db_table


def test_the_query_text_is_never_stored_logged_or_shown(world, every_log):
    canary = "zqxcanary" + uuid.uuid4().hex
    shout = canary.upper()
    for text in ("sample plan status", "plain words", "sample notes"):
        factories.post(world.public, world.bob, text)
    assert not Message.objects.filter(content__icontains=canary).exists()
    run, client = factories.make_run(world.agent, world.public, world.alice)

    answers = [
        search(client, {"query": f"sample {shout} plan"}),
        search(client, {"query": canary, "speaker": "requester", "limit": 3}),
        search(client, {"query": f"the {canary}", "after": "2020-01-01T00:00:00Z"}),
    ]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert answers[0].json()["items"]
    invalid = [
        search(client, {"query": canary, "limit": 99}),
        search(client, {"query": canary + " x" * 300}),
        search(client, {"query": canary, "unknownField": canary}),
    ]
    assert [a.status_code for a in invalid] == [400, 400, 400]
    refuse_audit_inserts()
    refused = search(client, {"query": f"sample {canary}"})
    assert refused.status_code == 503
    allow_audit_inserts()

    events = list(ConversationSearchEvent.objects.filter(run=run).order_by("created_at"))
    assert len(events) == 3
    superuser = User.objects.create_superuser("root", password=None)
    admin = Client()
    admin.force_login(superuser)
    pages = [
        admin.get(reverse("admin:audit_app_conversationsearchevent_changelist")),
        admin.get(reverse("admin:messages_app_run_change", args=[run.pk])),
        admin.get(reverse("admin:messages_app_run_changelist")),
    ]
    for event in events:
        pages.append(
            admin.get(reverse("admin:audit_app_conversationsearchevent_change", args=[event.pk]))
        )
        pages.append(
            admin.get(reverse("admin:audit_app_conversationsearchevent_history", args=[event.pk]))
        )
    assert {page.status_code for page in pages} == {200}
    # An investigator's own look-up: the page shows what they typed, nothing else keeps it.
    lookup = admin.get(
        reverse("admin:audit_app_conversationsearchevent_changelist"),
        {"q": f"sample {canary} plan"},
    )
    assert lookup.status_code == 200
    assert [event.pk for event in lookup.context["cl"].result_list] == [events[0].pk]
    traces = [world.service.get(trace_url(run.id)), client.get(trace_url(run.id))]
    assert {t.status_code for t in traces} == {200}
    assert len(traces[0].json()["items"]) == 3

    needle = canary.lower()
    # Answers, traces and admin pages.
    for response in (*answers, *invalid, refused, *traces, *pages):
        assert needle not in response.content.decode().lower()
    # Every column of every table.
    assert columns_holding(canary) == []
    for session in Session.objects.all():
        assert needle not in repr(session.get_decoded()).lower()
    # Every log record of every logger, the non-propagating ones included.
    records = every_log.records
    assert {"formation.request", "django.request", "audit_app.services"} <= {
        record.name for record in records
    }
    for record in records:
        for text in record_texts(record):
            assert needle not in text.lower(), record.name


def test_the_canary_scan_finds_a_planted_canary(world):
    """The scan itself works: a word planted in JSON, text and a search document is found."""
    canary = "zqxcanary" + uuid.uuid4().hex
    run, client = factories.make_run(world.agent, world.public, world.alice)
    factories.post(world.public, world.bob, "sample plan")
    assert search(client, {"query": "sample"}).status_code == 200
    assert columns_holding(canary) == []
    scanned = set(text_columns())
    assert {
        ("conversation_search_events", "filters"),
        ("conversation_search_events", "query_digest"),
        ("conversation_search_events", "hit_ids"),
        ("conversation_search_events", "rankings"),
        (MESSAGES, "content"),
        ("message_search_documents", "document"),
        ("django_admin_log", "change_message"),
        ("django_session", "session_data"),
    } <= scanned

    ConversationSearchEvent.objects.filter(run=run).update(filters={"speaker": canary.upper()})
    factories.post(world.public, world.bob, f"planted {canary}")

    assert set(columns_holding(canary)) == {
        ("conversation_search_events", "filters"),
        (MESSAGES, "content"),
        ("message_search_documents", "document"),
    }
