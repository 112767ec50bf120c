"""Every read of a run: what its model has seen (``run_sources``), its status and its trace."""

from __future__ import annotations

import uuid

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from audit_app import selectors as audit_selectors
from audit_app.models import ConversationSearchEvent
from formation.auth import Caller
from formation.tenancy import get_or_not_found
from messages_app.models import Run, RunEvidence
from search_app.models import MemoryLineage, RunMemory
from search_app.scope import Perspective


def run_sources(perspective: Perspective) -> list:
    """What the run's model has seen: its prompt, its evidence, then its memories' sources.

    The prompt (current message and recent history) is in the destination itself, so it never
    blocks delivery, but a message there may carry lineage of its own (an earlier reply), which
    whatever the run writes must inherit. Evidence follows in the order it was returned; each
    message's own sources are added when the lineage is stored (its closure), so chains
    flatten to the originals.
    """
    run_id, workspace_id = perspective.run_id, perspective.workspace_id
    evidence = RunEvidence.objects.filter(workspace_id=workspace_id, run_id=run_id).order_by(
        "created_at", "id"
    )
    recalled = RunMemory.objects.filter(workspace_id=workspace_id, run_id=run_id)
    remembered = MemoryLineage.objects.filter(
        workspace_id=workspace_id, memory__in=recalled.values("memory")
    ).order_by("memory_id", "source_id")
    return list(
        dict.fromkeys(
            [
                *perspective.in_prompt,
                *evidence.values_list("message_id", flat=True),
                *remembered.values_list("source_id", flat=True),
            ]
        )
    )


def run_status(*, workspace_id: uuid.UUID, run_id: object) -> Run:
    """A run of the workspace with ``evidence_count``, the distinct messages its tools have
    returned (``GET /runs/{id}``), or ``NotFound``."""
    # A subquery naming the workspace, not a join by the run's id alone: one shard on Citus.
    evidence = (
        RunEvidence.objects.filter(workspace_id=workspace_id, run_id=OuterRef("pk"))
        .order_by()
        .values("run_id")
        .annotate(rows=Count("*"))
        .values("rows")
    )
    runs = Run.objects.filter(workspace_id=workspace_id).annotate(
        evidence_count=Coalesce(Subquery(evidence), 0)
    )
    return get_or_not_found(runs, run_id)


def run_trace(*, caller: Caller, run_id: uuid.UUID) -> QuerySet[ConversationSearchEvent]:
    """The run's search events, oldest first; another workspace's run, or for a run token any
    run but its own, is the same ``not_found`` as a run that does not exist."""
    runs = Run.objects.filter(workspace_id=caller.workspace_id)
    if caller.is_run:
        runs = runs.filter(pk=caller.run_id)
    run = get_or_not_found(runs.only("pk"), run_id)
    return audit_selectors.run_search_events(workspace_id=caller.workspace_id, run_id=run.pk)
