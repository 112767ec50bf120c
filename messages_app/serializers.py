"""Request validation and response shapes for the ingestion API and the message tools.

Field names on the wire are camelCase (SPEC §8). Each response shape is a ``formation.shapes``
``Shape``: its fields are what the schema documents and what the body is rendered from.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from formation.errors import InvalidArguments, InvalidArgumentsDetails
from formation.fields import (
    ArgumentInteger,
    Choice,
    Id,
    StrictSerializer,
    Text,
    Timestamp,
    parse_rfc3339,
)
from formation.shapes import Shape, page_shape
from messages_app.limits import (
    MAX_BULK_MESSAGES,
    MAX_CONTENT_CHARS,
    MAX_LINEAGE,
    MAX_NAME_CHARS,
    MAX_QUERY_CHARS,
)
from messages_app.models import ConversationKind, MessageRole, MessageStatus
from messages_app.services import MessageDraft, check_bulk_size
from messages_app.text_windows import MAX_TEXT_BOUND, MIN_TEXT_BOUND


class AccountCreateInput(StrictSerializer):
    displayName = Text(max_length=MAX_NAME_CHARS, allow_blank=False)
    externalId = Text(max_length=MAX_NAME_CHARS, required=False, allow_null=True)


class AccountShape(Shape):
    id = serializers.UUIDField()
    displayName = serializers.CharField(source="display_name")
    externalId = serializers.CharField(source="external_id", allow_null=True)
    createdAt = serializers.DateTimeField(source="created_at")


class AgentCreateInput(StrictSerializer):
    name = Text(max_length=MAX_NAME_CHARS, allow_blank=False)


class AgentShape(Shape):
    id = serializers.UUIDField()
    name = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")


class ConversationCreateInput(StrictSerializer):
    kind = Choice(choices=ConversationKind.values)
    title = Text(max_length=300, allow_blank=False)
    externalId = Text(max_length=MAX_NAME_CHARS, required=False, allow_null=True)


class ConversationShape(Shape):
    id = serializers.UUIDField()
    kind = serializers.CharField()
    title = serializers.CharField()
    externalId = serializers.CharField(source="external_id", allow_null=True)
    createdAt = serializers.DateTimeField(source="created_at")


class _MemberInput(StrictSerializer):
    accountId = Id(required=False)
    agentId = Id(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("accountId" in attrs) == ("agentId" in attrs):
            raise serializers.ValidationError("Give exactly one of accountId and agentId.")
        return attrs


class MemberJoinInput(_MemberInput):
    joinedAt = Timestamp(required=False)


class MemberLeaveInput(_MemberInput):
    leftAt = Timestamp(required=False)


class MembershipShape(Shape):
    id = serializers.UUIDField()
    conversationId = serializers.UUIDField(source="conversation_id")
    accountId = serializers.UUIDField(source="account_id", allow_null=True)
    agentId = serializers.UUIDField(source="agent_id", allow_null=True)
    joinedAt = serializers.DateTimeField(source="joined_at")
    leftAt = serializers.DateTimeField(source="left_at", allow_null=True)


class MessageCreateInput(StrictSerializer):
    senderUserId = Id(required=False)
    senderAgentId = Id(required=False)
    content = Text(max_length=MAX_CONTENT_CHARS, allow_blank=False)
    role = Choice(choices=MessageRole.values, required=False)
    status = Choice(choices=MessageStatus.values, required=False)
    createdAt = Timestamp(required=False)
    replyToId = Id(required=False, allow_null=True)
    threadId = Id(required=False, allow_null=True)
    lineage = serializers.ListField(child=Id(), required=False, max_length=MAX_LINEAGE)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("senderUserId" in attrs) == ("senderAgentId" in attrs):
            raise serializers.ValidationError("Give exactly one of senderUserId and senderAgentId.")
        return attrs

    def to_draft(self) -> MessageDraft:
        return draft_from(self.validated_data)


def draft_from(data: dict[str, Any]) -> MessageDraft:
    return MessageDraft(
        content=data["content"],
        sender_account_id=data.get("senderUserId"),
        sender_agent_id=data.get("senderAgentId"),
        role=data.get("role"),
        status=data.get("status"),
        created_at=data.get("createdAt"),
        reply_to_id=data.get("replyToId"),
        thread_id=data.get("threadId"),
        lineage=list(data.get("lineage", [])),
    )


class MessageListSerializer(serializers.ListSerializer):
    """Refuses a batch over MAX_BULK_CHARS before validating its items, as ``max_length``
    refuses one over MAX_BULK_MESSAGES: validating 30 MB of text would take a second for
    nothing."""

    def to_internal_value(self, data: Any) -> list[dict[str, Any]]:
        if isinstance(data, list):
            check_bulk_size(
                item["content"]
                for item in data
                if isinstance(item, Mapping) and isinstance(item.get("content"), str)
            )
        return super().to_internal_value(data)


class MessageBulkInput(StrictSerializer):
    # One child serializer validates every item: instantiating a serializer per item costs
    # several times more than the validation itself on a 5,000-message import.
    messages = MessageListSerializer(
        child=MessageCreateInput(), min_length=1, max_length=MAX_BULK_MESSAGES
    )

    def validated_drafts(self) -> list[MessageDraft]:
        """The drafts, or an error naming the index of the first invalid message."""
        if self.is_valid():
            return [draft_from(item) for item in self.validated_data["messages"]]
        per_item = self.errors.get("messages")
        # DRF reports a list serializer's item errors as {index: errors} (or a list by index).
        if isinstance(per_item, list):
            per_item = {i: error for i, error in enumerate(per_item) if isinstance(error, dict)}
        if isinstance(per_item, dict):
            failing = sorted(int(i) for i, error in per_item.items() if str(i).isdigit() and error)
            if failing:
                index = failing[0]
                errors = per_item.get(index, per_item.get(str(index)))
                raise InvalidArguments(
                    "A message in the batch is invalid; nothing was stored.",
                    details=InvalidArgumentsDetails.render(index=index, fields=errors),
                )
        raise serializers.ValidationError(self.errors)


class MessageEditInput(StrictSerializer):
    content = Text(max_length=MAX_CONTENT_CHARS, allow_blank=False)


class TextCutShape(Shape):
    """Where a text cut by ``maxTextLength`` lies in the whole text (code points)."""

    start = serializers.IntegerField(help_text="Offset of the window's first character.")
    end = serializers.IntegerField(help_text="Offset just past the window's last character.")
    length = serializers.IntegerField(help_text="Characters in the whole text.")


class MessageSummaryShape(Shape):
    """SPEC §5 message summary: exactly one of senderAgentId / senderUserId is present."""

    id = serializers.UUIDField()
    conversationId = serializers.UUIDField(source="conversation_id")
    seq = serializers.IntegerField()
    role = Choice(choices=MessageRole.values)
    status = Choice(choices=MessageStatus.values)
    senderAgentId = serializers.UUIDField(source="sender_agent_id", required=False)
    senderUserId = serializers.UUIDField(source="sender_account_id", required=False)
    replyToId = serializers.UUIDField(source="reply_to_id", allow_null=True)
    threadId = serializers.UUIDField(source="thread_id", allow_null=True)
    content = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")
    sourcesErased = serializers.BooleanField(
        source="sources_erased",
        help_text="A message this one was based on (its lineage, transitively) has been erased "
        "or deleted since; every restriction it inherited still applies.",
    )
    cut = TextCutShape(
        source="text_cut",
        required=False,
        help_text="Only where maxTextLength cut content: the window shown, of the whole text "
        "(get_message returns it whole).",
    )


class IdentityLinkCreateInput(StrictSerializer):
    accountId = Id()
    linkedAccountId = Id()


class IdentityLinkShape(Shape):
    id = serializers.UUIDField()
    accountId = serializers.UUIDField(source="account_id")
    linkedAccountId = serializers.UUIDField(source="linked_account_id")
    status = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")
    verifiedAt = serializers.DateTimeField(source="verified_at", allow_null=True)
    revokedAt = serializers.DateTimeField(source="revoked_at", allow_null=True)


class ToolMessageSummary(MessageSummaryShape):
    deliverable = serializers.BooleanField(
        required=False,
        help_text="Run tokens only: whether a reply citing this message would pass the final "
        "delivery check now (false: reading it would block the run's reply).",
    )


class MessagePage(Shape):
    items = ToolMessageSummary(many=True, help_text="Newest first.")
    total = serializers.IntegerField(
        help_text="Live messages in the conversation (before beforeDate, if given)."
    )
    limit = serializers.IntegerField()
    offset = serializers.IntegerField(
        required=False, help_text="Offset mode only: absent for before/after/around."
    )
    hasOlder = serializers.BooleanField(source="has_older")
    hasNewer = serializers.BooleanField(source="has_newer")


class MessageSearchResult(Shape):
    items = ToolMessageSummary(many=True, help_text="Newest first.")
    total = serializers.IntegerField(help_text="The number of items returned by this call.")
    limit = serializers.IntegerField()


class MessageBatch(Shape):
    items = MessageSummaryShape(many=True, help_text="In the order they were sent.")


AccountPage = page_shape("AccountPage", AccountShape)
AgentPage = page_shape("AgentPage", AgentShape)
ConversationPage = page_shape("ConversationPage", ConversationShape)
MembershipPage = page_shape("MembershipPage", MembershipShape)
IdentityLinkPage = page_shape("IdentityLinkPage", IdentityLinkShape)


# --- agent tool query strings ----------------------------------------------------------------


class ListMessagesQuery(StrictSerializer):
    """list_messages arguments. ``validate`` resolves the mode: offset paging (optionally before
    a date), or exactly one positional anchor, stored as ``direction`` and ``anchorId``."""

    conversationId = Id()
    limit = ArgumentInteger(min_value=1, max_value=200, default=50)
    offset = ArgumentInteger(min_value=0, max_value=100_000, required=False)
    beforeDate = Timestamp(required=False)
    # before/after/around are message UUIDs; a legacy non-UUID `before` must be RFC 3339.
    before = Text(required=False, max_length=64)
    after = Id(required=False)
    around = Id(required=False)
    maxTextLength = ArgumentInteger(
        min_value=MIN_TEXT_BOUND, max_value=MAX_TEXT_BOUND, required=False
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        before = attrs.pop("before", None)
        if before is not None:
            try:
                attrs["before"] = uuid.UUID(before)
            except ValueError:
                legacy_date = parse_rfc3339(before)
                if legacy_date is None:
                    raise serializers.ValidationError(
                        {"before": ["Must be a message id or an RFC 3339 timestamp."]}
                    ) from None
                if "beforeDate" in attrs:
                    raise serializers.ValidationError(
                        "Give either beforeDate or a date in before, not both."
                    ) from None
                attrs["beforeDate"] = legacy_date
        anchors = [key for key in ("before", "after", "around") if key in attrs]
        if len(anchors) > 1:
            raise serializers.ValidationError("Give at most one of before, after and around.")
        if anchors:
            if "beforeDate" in attrs or "offset" in attrs:
                raise serializers.ValidationError(
                    "before/after/around cannot be combined with beforeDate or offset."
                )
            attrs["direction"] = anchors[0]
            attrs["anchorId"] = attrs.pop(anchors[0])
        else:
            attrs.setdefault("offset", 0)
        return attrs


class SearchMessagesQuery(StrictSerializer):
    query = Text(max_length=MAX_QUERY_CHARS)
    conversationId = Id(required=False)
    limit = ArgumentInteger(min_value=1, max_value=100, default=20)
    maxTextLength = ArgumentInteger(
        min_value=MIN_TEXT_BOUND, max_value=MAX_TEXT_BOUND, required=False
    )

    def validate_query(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Must contain a non-space character.")
        return value
