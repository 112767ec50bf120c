"""Audit reads, scoped in the queryset: the caller's workspace, and a run token's own run."""

from __future__ import annotations

import uuid

from django.db.models import Q, QuerySet

from audit_app.digests import every_digest
from audit_app.models import ConversationSearchEvent
from formation.auth import Caller
from messages_app.models import Run
from messages_app.selectors import get_or_not_found


def run_search_events(*, caller: Caller, run_id: uuid.UUID) -> QuerySet[ConversationSearchEvent]:
    """The run's search events, oldest first; another workspace's run, or for a run token any
    run but its own, is the same ``not_found`` as a run that does not exist."""
    runs = Run.objects.filter(workspace_id=caller.workspace_id)
    if caller.is_run:
        runs = runs.filter(pk=caller.run_id)
    run = get_or_not_found(runs.only("pk"), run_id)
    return ConversationSearchEvent.objects.filter(
        workspace_id=caller.workspace_id, run=run
    ).order_by("created_at", "id")


def events_for_query_text(
    queryset: QuerySet[ConversationSearchEvent], text: str
) -> QuerySet[ConversationSearchEvent]:
    """Events that searched for ``text``, under whichever configured key wrote them."""
    under_any_key = Q()
    for key_id, query_digest in every_digest(text):
        under_any_key |= Q(key_id=key_id, query_digest=query_digest)
    return queryset.filter(under_any_key)
