"""Audit reads, scoped in the queryset by the workspace (and the run) the caller names."""

from __future__ import annotations

import uuid

from django.db.models import Q, QuerySet

from audit_app.digests import every_digest
from audit_app.models import ConversationSearchEvent


def run_search_events(
    *, workspace_id: uuid.UUID, run_id: uuid.UUID
) -> QuerySet[ConversationSearchEvent]:
    """The run's search events, oldest first. Whether the caller may see the run at all is the
    run's owner's check (``search_app.runs.selectors.run_trace``), made before this is read."""
    return ConversationSearchEvent.objects.filter(
        workspace_id=workspace_id, run_id=run_id
    ).order_by("created_at", "id")


def events_for_query_text(
    queryset: QuerySet[ConversationSearchEvent], text: str
) -> QuerySet[ConversationSearchEvent]:
    """Events that searched for ``text``, under whichever configured key wrote them."""
    under_any_key = Q()
    for key_id, query_digest in every_digest(text):
        under_any_key |= Q(key_id=key_id, query_digest=query_digest)
    return queryset.filter(under_any_key)
