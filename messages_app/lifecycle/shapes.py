"""Request validation and answer shapes of the lifecycle endpoints (docs/lifecycle.md)."""

from __future__ import annotations

import json

from rest_framework import serializers

from formation.fields import Id, JsonInteger, StrictSerializer, Text
from formation.shapes import Shape, page_shape
from messages_app.limits import MAX_NAME_CHARS, MAX_RETENTION_DAYS
from messages_app.selectors import MessageRow
from messages_app.serializers import MessageSummaryShape

# JSON Lines: one JSON value per line, UTF-8 (https://jsonlines.org/).
JSON_LINES = "application/x-ndjson"


class RetentionSetInput(StrictSerializer):
    """``{days}``: a period of 1 to 36,500 days, or null to keep messages (required)."""

    days = JsonInteger(min_value=1, max_value=MAX_RETENTION_DAYS, allow_null=True)


class WorkspaceRetentionShape(Shape):
    days = serializers.IntegerField(
        allow_null=True, help_text="The workspace's default period; null keeps messages."
    )


class ConversationRetentionShape(Shape):
    """Rendered from a ``ConversationRetention`` with the conversation's id given by name."""

    conversationId = serializers.UUIDField()
    days = serializers.IntegerField(
        allow_null=True, help_text="The period that applies; null keeps messages."
    )
    inherited = serializers.BooleanField(
        help_text="True: the workspace's period; false: the conversation's own override."
    )


class LegalHoldCreateInput(StrictSerializer):
    conversationId = Id(required=False, allow_null=True)
    reference = Text(max_length=MAX_NAME_CHARS, required=False, allow_blank=True)


class LegalHoldShape(Shape):
    id = serializers.UUIDField()
    conversationId = serializers.UUIDField(
        source="conversation_id", allow_null=True, help_text="null: the whole workspace."
    )
    reference = serializers.CharField()
    placedAt = serializers.DateTimeField(source="placed_at")
    releasedAt = serializers.DateTimeField(
        source="released_at", allow_null=True, help_text="null while the hold is active."
    )


LegalHoldPage = page_shape("LegalHoldPage", LegalHoldShape)


class ErasureShape(Shape):
    accountId = serializers.UUIDField(source="account_id")
    erasedMessages = serializers.IntegerField(
        source="messages", help_text="Messages erased by this call."
    )
    removedIdentityLinks = serializers.IntegerField(source="identity_links")
    derivedMessagesMarked = serializers.IntegerField(
        source="derived_marked",
        help_text="Messages newly marked sourcesErased: their restrictions are unchanged.",
    )
    erasedAt = serializers.DateTimeField(
        source="erased_at", help_text="When the account was first erased."
    )


def json_lines(messages: list[MessageRow]) -> bytes:
    """Message summaries (SPEC §5), one compact JSON object a line."""
    return b"".join(
        json.dumps(
            MessageSummaryShape.render(message), ensure_ascii=False, separators=(",", ":")
        ).encode()
        + b"\n"
        for message in messages
    )
