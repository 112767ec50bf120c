"""``audit_digest`` and ``prune_search_audit`` (SPEC §7): look a query text up, drop old events.

``audit_digest TEXT`` prints ``keyid digest`` for every configured key, newest first: the
values ``conversation_search_events`` is searched by. ``prune_search_audit --older-than DAYS``
deletes only events older than DAYS days, a batch per transaction, and says how many went.
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit_app.models import ConversationSearchEvent
from tests import factories
from tests.audit_app.helpers import days_ago, keyed_digest, make_event, search

pytestmark = pytest.mark.django_db


def run(*args: str) -> list[str]:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


# --- audit_digest --------------------------------------------------------------------------


def test_audit_digest_prints_one_line_per_key_newest_first(settings):
    assert [key for key, _ in settings.SEARCH_AUDIT_KEYS] == ["test2", "test1"]

    lines = run("audit_digest", "Sample  PLAN")

    assert lines == [
        f"test2 {keyed_digest('sample plan', 'test-only-audit-key-two')}",
        f"test1 {keyed_digest('sample plan', 'test-only-audit-key-one')}",
    ]
    assert run("audit_digest", "sample plan") == lines
    assert run("audit_digest", "sample plans") != lines


def test_audit_digest_matches_the_events_a_search_wrote(world, settings):
    factories.post(world.public, world.bob, "sample plan for the week")
    run_row, client = factories.make_run(world.agent, world.public, world.alice)
    assert search(client, {"query": "SAMPLE plan"}).status_code == 200
    settings.SEARCH_AUDIT_KEYS = [
        ("k3", "synthetic-rotated-secret-three"),
        *settings.SEARCH_AUDIT_KEYS,
    ]

    lines = run("audit_digest", "sample   plan")

    assert [line.split(" ")[0] for line in lines] == ["k3", "test2", "test1"]
    pairs = [tuple(line.split(" ")) for line in lines]
    assert all(len(digest) == 64 for _, digest in pairs)
    event = ConversationSearchEvent.objects.get(run=run_row)
    assert (event.key_id, event.query_digest) in pairs
    matching = [
        ConversationSearchEvent.objects.filter(key_id=key, query_digest=digest).count()
        for key, digest in pairs
    ]
    assert matching == [0, 1, 0]


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_audit_digest_refuses_an_empty_text(text):
    with pytest.raises(CommandError):
        run("audit_digest", text)


def test_audit_digest_needs_a_text(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("\n"))
    with pytest.raises(CommandError):
        run("audit_digest")


def test_audit_digest_reads_the_text_from_standard_input(monkeypatch):
    """Left out of the command line, the text stays out of shell history and ``ps``."""
    monkeypatch.setattr("sys.stdin", io.StringIO("Migration  PLAN\n"))
    assert run("audit_digest") == run("audit_digest", "migration plan")


# --- prune_search_audit --------------------------------------------------------------------


@pytest.fixture
def aged(world):
    """Five events ten days old, one just inside a week, one fresh."""
    run_row, _ = factories.make_run(world.agent, world.public, world.alice)
    old = [make_event(run_row, created_at=days_ago(10 + i / 24)) for i in range(5)]
    inside = make_event(run_row, created_at=days_ago(7) + timedelta(minutes=5))
    fresh = make_event(run_row)
    return old, inside, fresh


def test_prune_deletes_only_older_events_in_batches(aged):
    _, inside, fresh = aged

    lines = run("prune_search_audit", "--older-than", "7", "--batch-size", "2")

    assert lines == [
        "deleted 2 so far",
        "deleted 4 so far",
        "deleted 5 so far",
        "deleted 5 search audit events older than 7 days",
    ]
    remaining = set(ConversationSearchEvent.objects.values_list("pk", flat=True))
    assert remaining == {inside.pk, fresh.pk}


def test_prune_with_the_default_batch_deletes_in_one_go(aged):
    _, inside, fresh = aged

    lines = run("prune_search_audit", "--older-than", "9")

    assert lines == ["deleted 5 so far", "deleted 5 search audit events older than 9 days"]
    remaining = set(ConversationSearchEvent.objects.values_list("pk", flat=True))
    assert remaining == {inside.pk, fresh.pk}


def test_prune_with_nothing_old_enough_deletes_nothing(aged):
    lines = run("prune_search_audit", "--older-than", "30")

    assert lines == ["deleted 0 search audit events older than 30 days"]
    assert ConversationSearchEvent.objects.count() == 7


def test_prune_keeps_the_rest_of_the_audit_trail_intact(aged, world):
    """Pruning removes rows, never the runs or messages they refer to."""
    old, *_ = aged
    run("prune_search_audit", "--older-than", "7")
    assert not ConversationSearchEvent.objects.filter(pk__in=[e.pk for e in old]).exists()
    assert world.agent.__class__.objects.filter(pk=world.agent.pk).exists()
    assert old[0].run.__class__.objects.filter(pk=old[0].run_id).exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--older-than", "0"],
        ["--older-than", "-3"],
        ["--older-than", "36501"],
        ["--older-than", "seven"],
        ["--older-than", "1.5"],
        [],
        ["--older-than", "7", "--batch-size", "0"],
        ["--older-than", "7", "--batch-size", "-1"],
    ],
)
def test_prune_refuses_bad_arguments(aged, args):
    with pytest.raises(CommandError):
        run("prune_search_audit", *args)
    assert ConversationSearchEvent.objects.count() == 7
