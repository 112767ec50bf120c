"""Audit writes (SPEC §7): one search event per search tool call, and pruning old ones."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta

from django.db import DatabaseError, OperationalError, connection, transaction
from django.utils import timezone

from audit_app.digests import current_digest
from audit_app.models import (
    EXCLUSION_REASONS,
    ConversationSearchEvent,
    SearchOutcome,
    SearchTool,
)
from formation.errors import AuditUnavailable
from formation.fields import format_timestamp
from messages_app.models import Run
from search_app.queries import HistoryFilters

logger = logging.getLogger(__name__)

PRUNE_BATCH = 5_000


def search_event_record(
    *,
    run: Run,
    query_text: str,
    filters: dict[str, object],
    hits: Sequence,
    exclusions: dict[str, int],
    exclusions_capped: bool,
    budget_used: int,
    outcome: str = SearchOutcome.ANSWERED,
) -> ConversationSearchEvent:
    """Write the event inside the caller's transaction; ``audit_unavailable`` if that fails.

    Must run in the same transaction as the run's evidence (the caller's ``atomic`` block):
    the error raised here leaves that block and rolls the evidence back with it, so a search
    that cannot be audited returns nothing and leaves nothing behind.
    """
    key_id, query_digest = current_digest(query_text)
    hit_ids = [hit.message.id for hit in hits]
    # Each neighbour once, in the order the hits list them; a hit is listed only as a hit.
    neighbour_ids = list(
        dict.fromkeys(
            message.id
            for hit in hits
            for message in (*hit.before, *hit.after)
            if message.id not in hit_ids
        )
    )
    event = ConversationSearchEvent(
        tool=SearchTool.SEARCH_HISTORY,
        workspace_id=run.workspace_id,
        run=run,
        agent_id=run.agent_id,
        destination_id=run.conversation_id,
        requester_id=run.requester_id,
        key_id=key_id,
        query_digest=query_digest,
        filters=filters,
        hit_ids=hit_ids,
        neighbour_ids=neighbour_ids,
        rankings=[_ranking(hit) for hit in hits],
        exclusions={reason: exclusions.get(reason, 0) for reason in EXCLUSION_REASONS},
        exclusions_capped=exclusions_capped,
        outcome=outcome,
        result_count=len(hits),
        budget_used=budget_used,
    )
    return _write(event)


def lookup_event_record(
    *,
    tool: str,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    run_id: uuid.UUID | None,
    query_text: str,
    filters: dict[str, object],
    result_ids: Sequence[uuid.UUID],
) -> ConversationSearchEvent:
    """Audit a search_messages call or a memory recall: who, the digest, what came back.

    Written in the caller's transaction when there is one (a run's tool call), so a call that
    cannot be audited returns nothing and records no evidence; ``audit_unavailable`` if not.
    """
    key_id, query_digest = current_digest(query_text)
    run = (
        Run.objects.filter(pk=run_id).only("conversation_id", "requester_id").first()
        if run_id
        else None
    )
    return _write(
        ConversationSearchEvent(
            tool=tool,
            workspace_id=workspace_id,
            run_id=run_id,
            agent_id=agent_id,
            destination_id=run.conversation_id if run else None,
            requester_id=run.requester_id if run else None,
            key_id=key_id,
            query_digest=query_digest,
            filters=filters,
            hit_ids=list(result_ids),
            result_count=len(result_ids),
        )
    )


def _write(event: ConversationSearchEvent) -> ConversationSearchEvent:
    """Insert the event (a savepoint inside the caller's transaction, its own without one)."""
    try:
        with transaction.atomic():
            event.save(force_insert=True)
            # Foreign keys are checked at commit by default; check them now, so a row
            # PostgreSQL would refuse at commit is refused here, as audit_unavailable.
            with connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    except OperationalError:
        # The database went away or cancelled the statement: the whole call is refused as
        # `unavailable` (503), like any other statement of it; the audit row is not the cause.
        raise
    except DatabaseError as error:
        # Only the error's class: its text could quote the row.
        logger.error("search audit write failed (%s); the search was refused", type(error).__name__)
        raise AuditUnavailable() from None
    return event


def _ranking(hit) -> dict[str, object]:
    """One hit's ranking as the answer's ``reasons`` show it: each contribution rounded to six
    decimals, and the score their rounded sum (rounding the exact sum instead can differ in the
    last digit, so the record would not add up and would disagree with the answer)."""
    components = {name: round(value, 6) for name, value in hit.components.items()}
    return {
        "messageId": str(hit.message.id),
        "score": round(sum(components.values()), 6),
        "components": components,
    }


def filters_record(filters: HistoryFilters, *, limit: int) -> dict[str, object]:
    """The caller's filters as the event stores them (RFC 3339 bounds, null when not given)."""
    return {
        "speaker": filters.speaker,
        "after": format_timestamp(filters.after),
        "before": format_timestamp(filters.before),
        "limit": limit,
    }


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
