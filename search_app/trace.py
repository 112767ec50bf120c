"""The run trace's shape (SPEC §8): each search as a ``search_audit`` item, never its text.

Here rather than in ``audit_app``: the trace is a run's endpoint (``search_app/views.py``), and
the audit below keeps only the rows.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from audit_app.models import EXCLUSION_REASONS, ConversationSearchEvent, SearchOutcome, SearchTool
from formation.fields import camel_case
from formation.shapes import Shape, page_shape
from search_app.history.results import SPEAKERS


class QueryDigest(Shape):
    keyId = serializers.CharField(source="key_id")
    digest = serializers.CharField(
        source="query_digest", help_text="HMAC-SHA256 of the query; the text is never kept."
    )


class AuditFilters(Shape):
    """The call's filters: all four for search_history, ``conversationId`` and ``limit`` for
    search_messages, ``limit`` for memories."""

    speaker = serializers.ChoiceField(choices=SPEAKERS, required=False)
    after = serializers.DateTimeField(allow_null=True, required=False)
    before = serializers.DateTimeField(allow_null=True, required=False)
    conversationId = serializers.UUIDField(allow_null=True, required=False)
    limit = serializers.IntegerField()


class AuditRanking(Shape):
    messageId = serializers.UUIDField()
    score = serializers.FloatField()
    components = serializers.DictField(child=serializers.FloatField())


class SearchAuditEvent(Shape):
    type = serializers.ChoiceField(choices=["search_audit"])
    tool = serializers.ChoiceField(choices=SearchTool.values)
    id = serializers.UUIDField()
    createdAt = serializers.DateTimeField(source="created_at")
    runId = serializers.UUIDField(source="run_id")
    agentId = serializers.UUIDField(source="agent_id")
    conversationId = serializers.UUIDField(
        source="destination_id", help_text="The run's destination."
    )
    requesterId = serializers.UUIDField(source="requester_id")
    queryDigest = QueryDigest(source="*")
    filters = AuditFilters()
    outcome = serializers.ChoiceField(choices=SearchOutcome.values)
    hitIds = serializers.ListField(
        child=serializers.UUIDField(),
        source="hit_ids",
        help_text="What was returned, in order: message ids (memory ids for memories).",
    )
    neighbourIds = serializers.ListField(child=serializers.UUIDField(), source="neighbour_ids")
    rankings = AuditRanking(many=True)
    exclusions = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="Withheld matches by reason; null for the run's own token and for tools "
        "other than search_history.",
    )
    exclusionsCapped = serializers.BooleanField(
        allow_null=True, help_text="null where exclusions is null."
    )
    resultCount = serializers.IntegerField(source="result_count")
    budgetUsed = serializers.IntegerField(source="budget_used")


RunTrace = page_shape("RunTrace", SearchAuditEvent)


def search_audit_item(event: ConversationSearchEvent, *, with_exclusions: bool) -> dict[str, Any]:
    """One trace item. Exclusion counts describe messages the run may not see, so only the
    runtime's service token gets them; the run's own token gets ``null``, as does a tool that
    counts none (search_messages, memories)."""
    with_exclusions = with_exclusions and event.tool == SearchTool.SEARCH_HISTORY
    return SearchAuditEvent.render(
        event,
        type="search_audit",
        exclusions=(
            {camel_case(reason): event.exclusions.get(reason, 0) for reason in EXCLUSION_REASONS}
            if with_exclusions
            else None
        ),
        exclusionsCapped=event.exclusions_capped if with_exclusions else None,
    )
