"""The run trace's items (SPEC §8): each search as ``search_audit``, never its text."""

from __future__ import annotations

from typing import Any

from audit_app.models import EXCLUSION_REASONS, ConversationSearchEvent, SearchTool
from formation.fields import camel_case, format_timestamp


def search_audit_item(event: ConversationSearchEvent, *, with_exclusions: bool) -> dict[str, Any]:
    """One trace item. Exclusion counts describe messages the run may not see, so only the
    runtime's service token gets them; the run's own token gets ``null``, as does a tool that
    counts none (search_messages, memories)."""
    with_exclusions = with_exclusions and event.tool == SearchTool.SEARCH_HISTORY
    exclusions = (
        {camel_case(reason): event.exclusions.get(reason, 0) for reason in EXCLUSION_REASONS}
        if with_exclusions
        else None
    )
    return {
        "type": "search_audit",
        "tool": event.tool,
        "id": str(event.id),
        "createdAt": format_timestamp(event.created_at),
        "runId": str(event.run_id),
        "agentId": str(event.agent_id),
        "conversationId": str(event.destination_id),
        "requesterId": str(event.requester_id),
        "queryDigest": {"keyId": event.key_id, "digest": event.query_digest},
        "filters": event.filters,
        "outcome": event.outcome,
        "hitIds": [str(message_id) for message_id in event.hit_ids],
        "neighbourIds": [str(message_id) for message_id in event.neighbour_ids],
        "rankings": event.rankings,
        "exclusions": exclusions,
        "exclusionsCapped": event.exclusions_capped if with_exclusions else None,
        "resultCount": event.result_count,
        "budgetUsed": event.budget_used,
    }
