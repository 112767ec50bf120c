"""Request validation and answer shapes of the lifecycle endpoints (docs/lifecycle.md)."""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from formation.fields import Id, JsonInteger, StrictSerializer, Text, format_timestamp
from messages_app.lifecycle import ConversationRetention, ErasureReport
from messages_app.models import MAX_RETENTION_DAYS, LegalHold
from messages_app.selectors import MessageRow
from messages_app.serializers import MAX_NAME_CHARS, message_summary

# JSON Lines: one JSON value per line, UTF-8 (https://jsonlines.org/).
JSON_LINES = "application/x-ndjson"


class RetentionSetSerializer(StrictSerializer):
    """``{days}``: a period of 1 to 36,500 days, or null to keep messages (required)."""

    days = JsonInteger(min_value=1, max_value=MAX_RETENTION_DAYS, allow_null=True)


class WorkspaceRetentionSerializer(serializers.Serializer):
    days = serializers.IntegerField(
        allow_null=True, help_text="The workspace's default period; null keeps messages."
    )

    def to_representation(self, days: int | None) -> dict[str, Any]:
        return {"days": days}


class ConversationRetentionSerializer(serializers.Serializer):
    conversationId = serializers.UUIDField()
    days = serializers.IntegerField(
        allow_null=True, help_text="The period that applies; null keeps messages."
    )
    inherited = serializers.BooleanField(
        help_text="True: the workspace's period; false: the conversation's own override."
    )

    def to_representation(self, instance: tuple[Any, ConversationRetention]) -> dict[str, Any]:
        conversation_id, retention = instance
        return {
            "conversationId": str(conversation_id),
            "days": retention.days,
            "inherited": retention.inherited,
        }


class LegalHoldCreateSerializer(StrictSerializer):
    conversationId = Id(required=False, allow_null=True)
    reference = Text(max_length=MAX_NAME_CHARS, required=False, allow_blank=True)


class LegalHoldSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    conversationId = serializers.UUIDField(
        source="conversation_id", allow_null=True, help_text="null: the whole workspace."
    )
    reference = serializers.CharField()
    placedAt = serializers.DateTimeField(source="placed_at")
    releasedAt = serializers.DateTimeField(
        source="released_at", allow_null=True, help_text="null while the hold is active."
    )

    def to_representation(self, hold: LegalHold) -> dict[str, Any]:
        return {
            "id": str(hold.id),
            "conversationId": str(hold.conversation_id) if hold.conversation_id else None,
            "reference": hold.reference,
            "placedAt": format_timestamp(hold.placed_at),
            "releasedAt": format_timestamp(hold.released_at),
        }


@extend_schema_serializer(many=False)
class LegalHoldPage(serializers.Serializer):
    """``{items, total, limit, offset}``: one object, not the array a viewset's list implies."""

    items = LegalHoldSerializer(many=True)
    total = serializers.IntegerField(help_text="Matching holds, regardless of paging.")
    limit = serializers.IntegerField()
    offset = serializers.IntegerField()


class ErasureSerializer(serializers.Serializer):
    accountId = serializers.UUIDField()
    erasedMessages = serializers.IntegerField(help_text="Messages erased by this call.")
    removedIdentityLinks = serializers.IntegerField()
    derivedMessagesMarked = serializers.IntegerField(
        help_text="Messages newly marked sourcesErased: their restrictions are unchanged."
    )
    erasedAt = serializers.DateTimeField(help_text="When the account was first erased.")

    def to_representation(self, report: ErasureReport) -> dict[str, Any]:
        return {
            "accountId": str(report.account_id),
            "erasedMessages": report.messages,
            "removedIdentityLinks": report.identity_links,
            "derivedMessagesMarked": report.derived_marked,
            "erasedAt": format_timestamp(report.erased_at),
        }


def json_lines(messages: list[MessageRow]) -> bytes:
    """Message summaries (SPEC §5), one compact JSON object a line."""
    return b"".join(
        json.dumps(message_summary(message), ensure_ascii=False, separators=(",", ":")).encode()
        + b"\n"
        for message in messages
    )
