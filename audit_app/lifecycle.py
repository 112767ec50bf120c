"""Lifecycle record writes: plain values in, one ``LifecycleEvent`` row out.

Callers (``messages_app.lifecycle``) pass ids and counts, never objects or text: the record
names what was retained, erased, held or exported without holding any of it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from audit_app.models import LifecycleEvent, LifecycleOutcome
from formation import metrics


@dataclass(frozen=True)
class Actor:
    """Who acted: a token (its kind and id, never the token) or a management command."""

    label: str
    token_id: uuid.UUID | None = None


def lifecycle_start(
    *,
    workspace_id: uuid.UUID,
    action: str,
    subject_kind: str,
    subject_id: uuid.UUID,
    actor: Actor,
    hold_id: uuid.UUID | None = None,
    counts: dict[str, int] | None = None,
    finished: bool = False,
) -> uuid.UUID:
    """Write the row, in the caller's transaction, as the work starts (``started``) or, with
    ``finished``, for work already done (``completed``); return its id."""
    now = timezone.now()
    event = LifecycleEvent.objects.create(
        workspace_id=workspace_id,
        action=action,
        subject_kind=subject_kind,
        subject_id=subject_id,
        hold_id=hold_id,
        actor=actor.label[:100],
        actor_token_id=actor.token_id,
        counts=dict(counts or {}),
        outcome=LifecycleOutcome.COMPLETED if finished else LifecycleOutcome.STARTED,
        created_at=now,
        finished_at=now if finished else None,
    )
    if finished:
        _count_run(action, LifecycleOutcome.COMPLETED)
    return event.id


def lifecycle_progress(*, event_id: uuid.UUID, counts: dict[str, int]) -> None:
    """The counts so far, in the transaction that committed them (so a crash leaves them true)."""
    LifecycleEvent.objects.filter(pk=event_id).update(counts=dict(counts))


def lifecycle_finish(
    *,
    event_id: uuid.UUID,
    action: str,
    counts: dict[str, int],
    outcome: str = LifecycleOutcome.COMPLETED,
    hold_id: uuid.UUID | None = None,
) -> None:
    """Finish the row ``lifecycle_start`` wrote; ``action`` is that row's, for the metrics."""
    fields: dict[str, object] = {
        "counts": dict(counts),
        "outcome": outcome,
        "finished_at": timezone.now(),
    }
    if hold_id is not None:
        fields["hold_id"] = hold_id
    LifecycleEvent.objects.filter(pk=event_id).update(**fields)
    _count_run(action, outcome)


def _count_run(action: str, outcome: str) -> None:
    if settings.METRICS_ENABLED:
        metrics.LIFECYCLE_RUNS.labels(str(action), str(outcome)).inc()
