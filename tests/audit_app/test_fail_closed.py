"""Fail closed (SPEC §7): a search that cannot be audited is refused and leaves nothing behind.

The failure is real: PostgreSQL refuses the INSERT (a BEFORE INSERT trigger that raises, or a
CHECK constraint added ``NOT VALID`` so existing rows do not matter), inside the test's own
transaction. The answer is 503 ``audit_unavailable``, with no hits, no evidence and no event;
once the obstacle is gone the very same search works.
"""

from __future__ import annotations

import logging
import re

import pytest
from django.db import connection

from formation.errors import AuditUnavailable
from messages_app import services
from messages_app.services import MessageDraft
from tests import factories
from tests.audit_app.helpers import (
    REFUSE_FUNCTION,
    REFUSE_TRIGGER,
    TABLE,
    allow_audit_inserts,
    assert_error,
    events,
    evidence_ids,
    keyed_digest,
    newest_key,
    pre_spend,
    refuse_audit_inserts,
    search,
)
from tests.factories import at

pytestmark = pytest.mark.django_db

QUERY = "orbit report"


@pytest.fixture
def setting():
    """A public room the agent observed, with two matching messages among plain ones."""
    _, agent, alice, room = factories.observed_public_room()
    texts = ["plain words", "orbit report one", "plain words", "orbit report two", "plain"]
    messages = [factories.post(room, alice, t, created_at=at(i)) for i, t in enumerate(texts)]
    run, client = factories.make_run(agent, room, alice)
    return run, client, messages


def assert_refused_without_trace(response, run) -> None:
    body = assert_error(response, 503, "audit_unavailable")
    assert set(body) == {"error"}  # no items, no budget
    text = response.content.decode()
    assert "orbit" not in text.lower()
    assert keyed_digest(QUERY, newest_key()[1]) not in text
    assert "refused by the test" not in text
    assert evidence_ids(run) == set()
    assert not events(run).exists()


def test_a_trigger_refusing_the_insert_makes_the_search_fail_closed(setting, caplog):
    run, client, messages = setting
    refuse_audit_inserts()
    caplog.set_level(logging.DEBUG)

    response = search(client, {"query": QUERY})

    assert_refused_without_trace(response, run)
    # The failure is logged by its class alone: the driver's text quotes the row.
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert re.search(r"search audit write failed \(\w+Error\)", logged)
    assert "refused by the test" not in logged
    assert keyed_digest(QUERY, newest_key()[1]) not in logged

    allow_audit_inserts()
    again = search(client, {"query": QUERY})

    assert again.status_code == 200, again.content
    hits = [item["id"] for item in again.json()["items"]]
    assert hits == [str(messages[3].id), str(messages[1].id)]
    assert evidence_ids(run) == {m.id for m in messages}
    (event,) = events(run)
    assert [str(i) for i in event.hit_ids] == hits
    assert event.budget_used == again.json()["budget"]["used"] == 5


def test_a_check_constraint_refusing_the_insert_makes_the_search_fail_closed(setting):
    run, client, _ = setting
    with connection.cursor() as cursor:
        cursor.execute(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT audit_test_never CHECK (result_count < 0) "
            "NOT VALID"
        )

    assert_refused_without_trace(search(client, {"query": QUERY}), run)

    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {TABLE} DROP CONSTRAINT audit_test_never")
    assert search(client, {"query": QUERY}).status_code == 200
    assert events(run).count() == 1
    assert len(evidence_ids(run)) == 5


def test_the_service_raises_audit_unavailable_and_keeps_no_evidence(setting):
    run, _, messages = setting
    refuse_audit_inserts()

    with pytest.raises(AuditUnavailable):
        factories.history(run, QUERY)

    assert evidence_ids(run) == set()
    assert not events(run).exists()
    allow_audit_inserts()
    result = factories.history(run, QUERY)
    # Nothing was spent by the refused call: the budget starts from zero.
    assert result.budget.used == 5
    assert evidence_ids(run) == {m.id for m in messages}
    assert events(run).count() == 1


def test_a_budget_exhausted_search_that_cannot_be_audited_is_audit_unavailable(setting):
    run, client, _ = setting
    archive = factories.make_conversation(run.workspace, "public", "archive")
    fillers = services.messages_create(
        conversation=archive,
        drafts=[
            MessageDraft(content="filler words", sender_account_id=run.requester_id)
            for _ in range(400)
        ],
    )
    pre_spend(run, fillers)
    refuse_audit_inserts()

    response = search(client, {"query": QUERY})

    assert_error(response, 503, "audit_unavailable")
    assert not events(run).exists()
    allow_audit_inserts()
    assert_error(search(client, {"query": QUERY}), 429, "search_budget_exhausted")
    assert [event.outcome for event in events(run)] == ["budget_exhausted"]


@pytest.mark.django_db(transaction=True)
def test_an_audit_row_refused_at_commit_is_audit_unavailable_and_keeps_nothing():
    """A failure PostgreSQL would raise only at COMMIT (a deferred constraint on the audit row;
    Django's own foreign keys are ``DEFERRABLE INITIALLY DEFERRED``) is raised while the event is
    written (``SET CONSTRAINTS ALL IMMEDIATE``), so it answers 503 ``audit_unavailable``, not
    500; nothing is kept, checked against a real commit (no test transaction around it)."""
    _, agent, alice, room = factories.observed_public_room()
    factories.post(room, alice, "orbit report", created_at=at(1))
    run, client = factories.make_run(agent, room, alice)
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE FUNCTION {REFUSE_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN RAISE EXCEPTION 'audit refused at commit'; END $$"
        )
        cursor.execute(
            f"CREATE CONSTRAINT TRIGGER {REFUSE_TRIGGER} AFTER INSERT ON {TABLE} "
            "DEFERRABLE INITIALLY DEFERRED "
            f"FOR EACH ROW EXECUTE FUNCTION {REFUSE_FUNCTION}()"
        )
    try:
        response = search(client, {"query": QUERY})
        assert evidence_ids(run) == set()
        assert not events(run).exists()
        assert "refused at commit" not in response.content.decode()
        assert_error(response, 503, "audit_unavailable")
    finally:
        allow_audit_inserts()
