"""search_history request validation and hit shapes (SPEC §5, camelCase on the wire)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from formation.fields import (
    Choice,
    JsonInteger,
    StrictSerializer,
    Text,
    Timestamp,
    format_timestamp,
)
from messages_app.serializers import MAX_CONTENT_CHARS, MAX_QUERY_CHARS, message_summary
from search_app.models import AgentMemory
from search_app.queries import SPEAKERS, HistoryFilters
from search_app.services import HistorySearch

MAX_HITS = 20
DEFAULT_HITS = 8
MAX_MEMORIES = 50
DEFAULT_MEMORIES = 10


class SearchHistorySerializer(StrictSerializer):
    """``{query, speaker?, after?, before?, limit?}``; ``null`` means "not given"."""

    query = Text(max_length=MAX_QUERY_CHARS)
    speaker = Choice(choices=SPEAKERS, required=False, allow_null=True)
    after = Timestamp(required=False, allow_null=True)
    before = Timestamp(required=False, allow_null=True)
    limit = JsonInteger(min_value=1, max_value=MAX_HITS, required=False, allow_null=True)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        after, before = attrs.get("after"), attrs.get("before")
        if after is not None and before is not None and after >= before:
            raise serializers.ValidationError({"after": ["Must be earlier than before."]})
        return attrs


def history_filters(arguments: dict[str, Any]) -> HistoryFilters:
    """The validated arguments' filters; ``null`` (or nothing) means the default."""
    return HistoryFilters(
        speaker=arguments.get("speaker") or "anyone",
        after=arguments.get("after"),
        before=arguments.get("before"),
    )


def search_history_body(result: HistorySearch) -> dict[str, Any]:
    items = []
    for hit, marks in zip(result.hits, result.highlights, strict=True):
        message = hit.message
        reasons = [
            {
                "name": name,
                "value": round(hit.values[name], 6),
                "contribution": round(contribution, 6),
            }
            for name, contribution in hit.components.items()
        ]
        speaker_type = "agent" if message.sender_agent_id else "user"
        items.append(
            {
                **message_summary(message),
                "conversation": {
                    "id": str(message.conversation_id),
                    "title": hit.conversation_title,
                    "kind": hit.conversation_kind,
                },
                "time": format_timestamp(message.created_at),
                "speaker": {
                    "type": speaker_type,
                    "id": str(message.sender_agent_id or message.sender_account_id),
                    "displayName": hit.speaker_name,
                },
                "text": message.content,
                "highlights": marks,
                "score": round(sum(reason["contribution"] for reason in reasons), 6),
                "reasons": reasons,
                "before": [message_summary(m) for m in hit.before],
                "after": [message_summary(m) for m in hit.after],
            }
        )
    return {"items": items, "total": len(items), "budget": result.budget.summary()}


class RunContentSerializer(StrictSerializer):
    """``{content}``: the body of a run's reply or memory."""

    content = Text(max_length=MAX_CONTENT_CHARS, allow_blank=False)


class MemorySearchQuery(StrictSerializer):
    """``GET /memories?query=…&limit=…``."""

    query = Text(max_length=MAX_QUERY_CHARS)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_MEMORIES, default=DEFAULT_MEMORIES)


def memory_body(memory: AgentMemory) -> dict[str, Any]:
    body = {
        "id": str(memory.id),
        "agentId": str(memory.agent_id),
        "runId": str(memory.run_id),
        "content": memory.content,
        "createdAt": format_timestamp(memory.created_at),
    }
    if hasattr(memory, "lineage_count"):
        body["lineageCount"] = memory.lineage_count
    return body
