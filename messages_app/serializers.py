"""Request validation and response shapes for the ingestion API and the agent tools.

Field names on the wire are camelCase (SPEC §8). Output serializers declare their fields (for
the schema) but build plain dicts directly in ``to_representation``: on a 200-item page that is
several times faster than DRF's field-by-field rendering.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from formation.errors import InvalidArguments
from formation.fields import (
    ArgumentInteger,
    Choice,
    Id,
    StrictSerializer,
    Text,
    Timestamp,
    format_timestamp,
    parse_rfc3339,
)
from messages_app.models import (
    HISTORY_EVIDENCE_BUDGET,
    ConversationKind,
    IdentityLink,
    Membership,
    Message,
    MessageRole,
    MessageStatus,
    Run,
    ToolScope,
)
from messages_app.services import (
    MAX_BULK_MESSAGES,
    MAX_LINEAGE,
    MAX_RECENT_MESSAGES,
    MessageDraft,
    check_bulk_size,
)

MAX_CONTENT_CHARS = 100_000
MAX_NAME_CHARS = 200
MAX_QUERY_CHARS = 500


class AccountCreateSerializer(StrictSerializer):
    displayName = Text(max_length=MAX_NAME_CHARS, allow_blank=False)
    externalId = Text(max_length=MAX_NAME_CHARS, required=False, allow_null=True)


class AccountSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    displayName = serializers.CharField(source="display_name")
    externalId = serializers.CharField(source="external_id", allow_null=True)
    createdAt = serializers.DateTimeField(source="created_at")

    def to_representation(self, account) -> dict[str, Any]:
        return {
            "id": str(account.id),
            "displayName": account.display_name,
            "externalId": account.external_id,
            "createdAt": format_timestamp(account.created_at),
        }


class AgentCreateSerializer(StrictSerializer):
    name = Text(max_length=MAX_NAME_CHARS, allow_blank=False)


class AgentSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")

    def to_representation(self, agent) -> dict[str, Any]:
        return {
            "id": str(agent.id),
            "name": agent.name,
            "createdAt": format_timestamp(agent.created_at),
        }


class ConversationCreateSerializer(StrictSerializer):
    kind = Choice(choices=ConversationKind.values)
    title = Text(max_length=300, allow_blank=False)
    externalId = Text(max_length=MAX_NAME_CHARS, required=False, allow_null=True)


class ConversationSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    kind = serializers.CharField()
    title = serializers.CharField()
    externalId = serializers.CharField(source="external_id", allow_null=True)
    createdAt = serializers.DateTimeField(source="created_at")

    def to_representation(self, conversation) -> dict[str, Any]:
        return {
            "id": str(conversation.id),
            "kind": conversation.kind,
            "title": conversation.title,
            "externalId": conversation.external_id,
            "createdAt": format_timestamp(conversation.created_at),
        }


class _MemberSerializer(StrictSerializer):
    accountId = Id(required=False)
    agentId = Id(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("accountId" in attrs) == ("agentId" in attrs):
            raise serializers.ValidationError("Give exactly one of accountId and agentId.")
        return attrs


class MemberJoinSerializer(_MemberSerializer):
    joinedAt = Timestamp(required=False)


class MemberLeaveSerializer(_MemberSerializer):
    leftAt = Timestamp(required=False)


class MembershipSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    conversationId = serializers.UUIDField(source="conversation_id")
    accountId = serializers.UUIDField(source="account_id", allow_null=True)
    agentId = serializers.UUIDField(source="agent_id", allow_null=True)
    joinedAt = serializers.DateTimeField(source="joined_at")
    leftAt = serializers.DateTimeField(source="left_at", allow_null=True)

    def to_representation(self, membership: Membership) -> dict[str, Any]:
        return {
            "id": str(membership.id),
            "conversationId": str(membership.conversation_id),
            "accountId": str(membership.account_id) if membership.account_id else None,
            "agentId": str(membership.agent_id) if membership.agent_id else None,
            "joinedAt": format_timestamp(membership.joined_at),
            "leftAt": format_timestamp(membership.left_at),
        }


class MessageCreateSerializer(StrictSerializer):
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


class MessageBulkSerializer(StrictSerializer):
    # One child serializer validates every item: instantiating a serializer per item costs
    # several times more than the validation itself on a 5,000-message import.
    messages = MessageListSerializer(
        child=MessageCreateSerializer(), min_length=1, max_length=MAX_BULK_MESSAGES
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
                    details={"index": index, "fields": errors},
                )
        raise serializers.ValidationError(self.errors)


class MessageEditSerializer(StrictSerializer):
    content = Text(max_length=MAX_CONTENT_CHARS, allow_blank=False)


class MessageSummarySerializer(serializers.Serializer):
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

    def to_representation(self, message: Message) -> dict[str, Any]:
        return message_summary(message)


def message_summary(message: Message) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "id": str(message.id),
        "conversationId": str(message.conversation_id),
        "seq": message.seq,
        "role": message.role,
        "status": message.status,
    }
    if message.sender_agent_id:
        summary["senderAgentId"] = str(message.sender_agent_id)
    else:
        summary["senderUserId"] = str(message.sender_account_id)
    summary.update(
        {
            "replyToId": str(message.reply_to_id) if message.reply_to_id else None,
            "threadId": str(message.thread_id) if message.thread_id else None,
            "content": message.content,
            "createdAt": format_timestamp(message.created_at),
        }
    )
    deliverable = getattr(message, "deliverable", None)
    if deliverable is not None:
        summary["deliverable"] = deliverable
    return summary


class IdentityLinkCreateSerializer(StrictSerializer):
    accountId = Id()
    linkedAccountId = Id()


class IdentityLinkSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    accountId = serializers.UUIDField(source="account_id")
    linkedAccountId = serializers.UUIDField(source="linked_account_id")
    status = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")
    verifiedAt = serializers.DateTimeField(source="verified_at", allow_null=True)
    revokedAt = serializers.DateTimeField(source="revoked_at", allow_null=True)

    def to_representation(self, link: IdentityLink) -> dict[str, Any]:
        return {
            "id": str(link.id),
            "accountId": str(link.account_id),
            "linkedAccountId": str(link.linked_account_id),
            "status": link.status,
            "createdAt": format_timestamp(link.created_at),
            "verifiedAt": format_timestamp(link.verified_at),
            "revokedAt": format_timestamp(link.revoked_at),
        }


class RunCreateSerializer(StrictSerializer):
    agentId = Id()
    conversationId = Id()
    requesterId = Id()
    currentMessageId = Id(required=False, allow_null=True)
    recentMessageIds = serializers.ListField(
        child=Id(), required=False, max_length=MAX_RECENT_MESSAGES
    )
    toolScope = Choice(
        choices=ToolScope.values,
        required=False,
        help_text="What list_messages, get_message and search_messages show the run's token: "
        "membership (the default: what membership allows, each message flagged deliverable) "
        "or deliverable (only what the destination may receive, as search_history).",
    )


class RunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    agentId = serializers.UUIDField(source="agent_id")
    conversationId = serializers.UUIDField(source="conversation_id")
    requesterId = serializers.UUIDField(source="requester_id")
    createdAt = serializers.DateTimeField(source="created_at")

    def to_representation(self, run: Run) -> dict[str, Any]:
        return {
            "id": str(run.id),
            "agentId": str(run.agent_id),
            "conversationId": str(run.conversation_id),
            "requesterId": str(run.requester_id),
            "createdAt": format_timestamp(run.created_at),
        }


class RunBudgetSerializer(serializers.Serializer):
    used = serializers.IntegerField()
    limit = serializers.IntegerField(help_text=f"Always {HISTORY_EVIDENCE_BUDGET}.")
    remaining = serializers.IntegerField()


class RunStatusSerializer(RunSerializer):
    """``GET /runs/{id}``: the run, whether it has replied, and what it has used."""

    status = Choice(choices=["open", "replied"])
    replyId = serializers.UUIDField(
        allow_null=True,
        help_text="Null while open (and for a run that replied before replies were recorded).",
    )
    repliedAt = serializers.DateTimeField(allow_null=True)
    toolScope = Choice(choices=ToolScope.values)
    evidenceCount = serializers.IntegerField(
        help_text="Distinct messages the run's tools have returned (its evidence)."
    )
    budget = RunBudgetSerializer(help_text="search_history's evidence budget.")

    def to_representation(self, run: Run) -> dict[str, Any]:
        used = run.history_evidence_count
        return {
            **super().to_representation(run),
            "status": "open" if run.finished_at is None else "replied",
            "replyId": str(run.reply_id) if run.reply_id else None,
            "repliedAt": format_timestamp(run.finished_at),
            "toolScope": run.tool_scope,
            "evidenceCount": run.evidence_count,
            "budget": {
                "used": used,
                "limit": HISTORY_EVIDENCE_BUDGET,
                "remaining": max(HISTORY_EVIDENCE_BUDGET - used, 0),
            },
        }


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

    def validate_query(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("Must contain a non-space character.")
        return value


class ListPageQuery(StrictSerializer):
    limit = serializers.IntegerField(min_value=1, max_value=200, default=50)
    offset = serializers.IntegerField(min_value=0, max_value=1_000_000, default=0)
