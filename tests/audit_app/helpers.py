"""Shared helpers for the search audit tests (SPEC §7): URLs, digests, events and failures.

The digest helpers re-implement what ``audit_app.digests`` documents (NFKC, case folding,
whitespace collapsed, then HMAC-SHA256 under a key's secret) instead of importing it, so a
broken normalisation or a wrong key is caught rather than mirrored.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import unicodedata
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.utils import timezone

from audit_app.models import ConversationSearchEvent
from messages_app.models import Message, Run, RunEvidence
from search_app.models import MessageSearchDocument
from tests import factories

SEARCH_URL = "/api/v1/history/search"
REASONS = (
    "not_observed",
    "deleted",
    "unknown_audience",
    "audience",
    "lineage",
    "current_message",
    "recent_history",
    "budget",
)
NO_EXCLUSIONS = dict.fromkeys(REASONS, 0)
# The same reasons under their wire names (SPEC §8), written out rather than converted.
EXCLUSION_KEYS = (
    "notObserved",
    "deleted",
    "unknownAudience",
    "audience",
    "lineage",
    "currentMessage",
    "recentHistory",
    "budget",
)
TABLE = ConversationSearchEvent._meta.db_table


def trace_url(run_id: object) -> str:
    return f"/api/v1/runs/{run_id}/trace"


def search(client, body: dict):
    return client.post(SEARCH_URL, body, format="json")


def normalised(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def keyed_digest(text: str, secret: str) -> str:
    return hmac.new(secret.encode(), normalised(text).encode(), hashlib.sha256).hexdigest()


def newest_key() -> tuple[str, str]:
    key_id, secret = settings.SEARCH_AUDIT_KEYS[0]
    return key_id, secret


def events(run: Run | None = None):
    rows = ConversationSearchEvent.objects.all()
    if run is not None:
        rows = rows.filter(run=run)
    return rows.order_by("created_at", "id")


def evidence_ids(run: Run) -> set[uuid.UUID]:
    return set(RunEvidence.objects.filter(run=run).values_list("message_id", flat=True))


def pre_spend(run: Run, messages, tool: str = "search_history") -> None:
    """Record messages as the run's evidence, as earlier searches would have."""
    RunEvidence.objects.bulk_create(
        RunEvidence(workspace_id=run.workspace_id, run=run, message=message, tool=tool)
        for message in messages
    )


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return body


def make_event(
    run: Run, *, created_at: datetime | None = None, **fields
) -> ConversationSearchEvent:
    """An event row for ``run`` as the service would write it (for admin and command tests)."""
    key_id, secret = newest_key()
    values = {
        "workspace_id": run.workspace_id,
        "run": run,
        "agent_id": run.agent_id,
        "destination_id": run.conversation_id,
        "requester_id": run.requester_id,
        "key_id": key_id,
        "query_digest": keyed_digest("synthetic query", secret),
        "filters": {"speaker": "anyone", "after": None, "before": None, "limit": 8},
        "exclusions": dict(NO_EXCLUSIONS),
        **fields,
    }
    event = ConversationSearchEvent.objects.create(**values)
    if created_at is not None:
        ConversationSearchEvent.objects.filter(pk=event.pk).update(created_at=created_at)
        event.refresh_from_db()
    return event


def days_ago(days: float) -> datetime:
    return timezone.now() - timedelta(days=days)


def delete_without_triggers(message: Message) -> None:
    """Delete a message the way the service does, with triggers off: a drifted projection.

    ``session_replication_role = replica`` silences ordinary triggers for the rest of the
    transaction (``SET LOCAL``), so the search document survives; the role is put back at once.
    """
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
    try:
        Message.objects.filter(pk=message.pk, deleted_at__isnull=True).update(
            content="", deleted_at=timezone.now(), edited_at=None
        )
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = origin")
    assert MessageSearchDocument.objects.filter(message_id=message.pk).exists()


REFUSE_FUNCTION = "audit_test_refuse_insert"
REFUSE_TRIGGER = "audit_test_refuse_insert"


def refuse_audit_inserts(message: str = "audit refused by the test") -> None:
    """A real PostgreSQL failure on the audit table; its text quotes the whole new row, digest
    included (``factories.refuse_inserts``)."""
    factories.refuse_inserts(TABLE, message, name=REFUSE_FUNCTION)


def allow_audit_inserts() -> None:
    factories.allow_inserts(TABLE, name=REFUSE_FUNCTION)


TEXT_TYPES = (
    "text",
    "character varying",
    "character",
    "json",
    "jsonb",
    "tsvector",
    "ARRAY",
    "USER-DEFINED",
)


def text_columns() -> list[tuple[str, str]]:
    """Every text-like column of every table in the current schema."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT c.table_name, c.column_name
            FROM information_schema.columns AS c
            JOIN information_schema.tables AS t
              ON t.table_schema = c.table_schema AND t.table_name = c.table_name
            WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
              AND c.data_type = ANY(%s)
            ORDER BY 1, 2
            """,
            [list(TEXT_TYPES)],
        )
        return cursor.fetchall()


def columns_holding(word: str) -> list[tuple[str, str]]:
    """The (table, column) pairs where ``word`` occurs, case-insensitively."""
    found = []
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for table, column in text_columns():
            cursor.execute(
                f"SELECT EXISTS (SELECT 1 FROM {quote(table)} "
                f"WHERE {quote(column)}::text ILIKE %s)",
                [f"%{word}%"],
            )
            if cursor.fetchone()[0]:
                found.append((table, column))
    return found


def record_texts(record: logging.LogRecord) -> list[str]:
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return [
        record.getMessage(),
        str(record.msg),
        repr(record.args),
        formatter.format(record),
        repr(record.__dict__),
    ]


def staff_client(username: str, *, codename: str | None = None, superuser: bool = False) -> Client:
    """A logged-in staff user (a real session), holding audit_app's ``codename`` if given."""
    user = User.objects.create_user(
        username=username, password=None, is_staff=True, is_superuser=superuser
    )
    if codename is not None:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="audit_app")
        )
    client = Client()
    client.force_login(user)
    return client
