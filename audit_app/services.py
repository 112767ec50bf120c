"""Audit writes (SPEC §7): one search event per search tool call, and pruning old ones."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, OperationalError, connection, transaction
from django.utils import timezone

from audit_app.digests import current_digest
from audit_app.models import (
    EXCLUSION_REASONS,
    ConversationSearchEvent,
    SearchOutcome,
    SearchTool,
)
from formation import metrics
from formation.errors import AuditUnavailable
from formation.sql import table

logger = logging.getLogger(__name__)

PRUNE_BATCH = 5_000


def search_event_record(
    *,
    workspace_id: uuid.UUID,
    run_id: uuid.UUID,
    agent_id: uuid.UUID,
    destination_id: uuid.UUID,
    requester_id: uuid.UUID,
    query_text: str,
    filters: dict[str, object],
    hit_ids: Sequence[uuid.UUID],
    neighbour_ids: Sequence[uuid.UUID],
    rankings: Sequence[dict[str, object]],
    exclusions: dict[str, int],
    exclusions_capped: bool,
    budget_used: int,
    outcome: str = SearchOutcome.ANSWERED,
) -> None:
    """Audit a search_history call inside the caller's transaction; ``audit_unavailable`` if
    that fails.

    Must run in the same transaction as the run's evidence (the caller's ``atomic`` block): the
    error raised here leaves that block and rolls the evidence back with it, so a search that
    cannot be audited returns nothing and leaves nothing behind. ``rankings`` are the answer's,
    per hit in order: ``{messageId, score, components}``.
    """
    key_id, query_digest = current_digest(query_text)
    _insert(
        in_callers_transaction=True,
        tool=SearchTool.SEARCH_HISTORY,
        workspace_id=workspace_id,
        run_id=run_id,
        agent_id=agent_id,
        destination_id=destination_id,
        requester_id=requester_id,
        key_id=key_id,
        query_digest=query_digest,
        filters=filters,
        hit_ids=list(hit_ids),
        neighbour_ids=list(neighbour_ids),
        rankings=list(rankings),
        exclusions={reason: exclusions.get(reason, 0) for reason in EXCLUSION_REASONS},
        exclusions_capped=exclusions_capped,
        outcome=outcome,
        result_count=len(hit_ids),
        budget_used=budget_used,
    )


def lookup_event_record(
    *,
    tool: str,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    run_id: uuid.UUID | None,
    destination_id: uuid.UUID | None,
    requester_id: uuid.UUID | None,
    query_text: str,
    filters: dict[str, object],
    result_ids: Sequence[uuid.UUID],
) -> None:
    """Audit a search_messages call or a memory recall: who, the digest, what came back.

    Written in the caller's transaction when there is one (a run's tool call), so a call that
    cannot be audited returns nothing and records no evidence; ``audit_unavailable`` if not.
    """
    key_id, query_digest = current_digest(query_text)
    _insert(
        # A run's tool call holds a transaction (its evidence); an agent token's has none.
        in_callers_transaction=run_id is not None,
        tool=tool,
        workspace_id=workspace_id,
        run_id=run_id,
        agent_id=agent_id,
        destination_id=destination_id,
        requester_id=requester_id,
        key_id=key_id,
        query_digest=query_digest,
        filters=filters,
        hit_ids=list(result_ids),
        neighbour_ids=[],
        rankings=[],
        exclusions={},
        exclusions_capped=False,
        outcome=SearchOutcome.ANSWERED,
        result_count=len(result_ids),
        budget_used=0,
    )


# Every column an event row sets, with the SQL type its parameter is read as.
_COLUMNS = {
    "id": "uuid",
    "tool": "text",
    "workspace_id": "uuid",
    "run_id": "uuid",
    "agent_id": "uuid",
    "destination_id": "uuid",
    "requester_id": "uuid",
    "key_id": "text",
    "query_digest": "text",
    "filters": "jsonb",
    "hit_ids": "uuid[]",
    "neighbour_ids": "uuid[]",
    "rankings": "jsonb",
    "exclusions": "jsonb",
    "exclusions_capped": "boolean",
    "outcome": "text",
    "result_count": "integer",
    "budget_used": "integer",
    "created_at": "timestamptz",
}
_INSERT = (
    f"INSERT INTO {table(ConversationSearchEvent)} ({', '.join(_COLUMNS)}) VALUES ("
    + ", ".join(f"%({column})s::{kind}" for column, kind in _COLUMNS.items())
    + ")"
)


def search_event_statement_parts(
    *, query_text: str, filters: dict[str, object]
) -> tuple[str, dict[str, object]]:
    """How a statement that searches writes its own search_history event (SPEC §7), in the
    same statement, so that its evidence and its audit are one write: the ``INSERT`` target
    with its columns (the caller's ``SELECT`` answers them in ``SEARCH_EVENT_COLUMNS``' order)
    and the parameters only this app computes (``a_``: the row's id and time, the key id and
    the digest of the query text, the filters as recorded). The text itself is never sent."""
    key_id, query_digest = current_digest(query_text)
    params = {
        "a_id": uuid.uuid4(),
        "a_created_at": timezone.now(),
        "a_key_id": key_id,
        "a_digest": query_digest,
        "a_filters": json.dumps(filters),
    }
    return f"INSERT INTO {table(ConversationSearchEvent)} ({', '.join(_COLUMNS)})", params


# The columns ``search_event_statement_parts``' INSERT names, in order.
SEARCH_EVENT_COLUMNS = tuple(_COLUMNS)


def search_event_refused(error: DatabaseError) -> AuditUnavailable:
    """What a search whose own statement wrote its event answers when PostgreSQL refused that
    statement: the search and its evidence are gone with it (logged by the error's class only:
    its text could quote the row)."""
    logger.error("search audit write failed (%s); the search was refused", type(error).__name__)
    _count_failure("write")
    return AuditUnavailable()


def _insert(*, in_callers_transaction: bool, **values: object) -> None:
    """Insert one event with one statement, in the caller's transaction (its own without one).

    A refused insert is ``audit_unavailable``; a lost connection or a cancelled statement goes
    on as ``unavailable`` (503), like any other statement of the call: the audit row is not the
    cause. A row PostgreSQL refuses only at COMMIT is caught there by ``audited_atomic``. In the
    caller's transaction a refusal aborts it, and its ``atomic`` block rolls everything back;
    any other enclosing transaction (only a test's) gets a savepoint, so it survives the refusal.
    """
    row = {
        **values,
        "id": uuid.uuid4(),
        "created_at": timezone.now(),
        **{name: json.dumps(values[name]) for name in ("filters", "rankings", "exclusions")},
    }
    guard = (
        transaction.atomic()
        if connection.in_atomic_block and not in_callers_transaction
        else nullcontext()
    )
    try:
        with guard, connection.cursor() as cursor:
            cursor.execute(_INSERT, row)
    except OperationalError:
        raise
    except DatabaseError as error:
        # Only the error's class: its text could quote the row.
        logger.error("search audit write failed (%s); the search was refused", type(error).__name__)
        _count_failure("write")
        raise AuditUnavailable() from None


@contextmanager
def audited_atomic() -> Iterator[None]:
    """``transaction.atomic()`` for an audited call: what PostgreSQL refuses only at COMMIT (a
    deferred constraint; Django's own foreign keys are ``DEFERRABLE INITIALLY DEFERRED``) is
    ``audit_unavailable`` too, and like any failed commit it keeps nothing. An error raised
    inside the block passes through unchanged."""
    failed_inside = False
    try:
        with transaction.atomic():
            try:
                yield
            except BaseException:
                failed_inside = True
                raise
    except OperationalError:
        raise
    except DatabaseError as error:
        if failed_inside:
            raise
        logger.error("search audit refused at commit (%s)", type(error).__name__)
        _count_failure("commit")
        raise AuditUnavailable() from None


def _count_failure(stage: str) -> None:
    if settings.METRICS_ENABLED:
        metrics.AUDIT_FAILURES.labels(stage).inc()


def search_events_prune(
    *,
    older_than: timedelta,
    batch_size: int = PRUNE_BATCH,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Delete events older than ``older_than``, ``batch_size`` rows per transaction.

    Small batches keep each transaction's locks and WAL short on a busy table; the cut-off is
    fixed at the start so a long prune does not chase the clock. Returns how many went.
    """
    cutoff = timezone.now() - older_than
    deleted = 0
    while True:
        with transaction.atomic():
            batch = list(
                ConversationSearchEvent.objects.filter(created_at__lt=cutoff)
                .order_by("created_at")
                .values_list("pk", flat=True)[:batch_size]
            )
            if not batch:
                return deleted
            count, _ = ConversationSearchEvent.objects.filter(pk__in=batch).delete()
        deleted += count
        if progress:
            progress(deleted)
