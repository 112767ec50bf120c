"""search_history, run and memory request validation and response shapes (SPEC §5, camelCase
on the wire), each shape a ``formation.shapes.Shape``."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from formation.fields import Choice, Id, JsonInteger, StrictSerializer, Text, Timestamp
from formation.shapes import Shape
from messages_app.limits import MAX_CONTENT_CHARS, MAX_QUERY_CHARS, MAX_RECENT_MESSAGES
from messages_app.models import ConversationKind, Run, ToolScope
from messages_app.serializers import MessageSummaryShape
from messages_app.text_windows import (
    MAX_TEXT_BOUND,
    MIN_TEXT_BOUND,
    bounded,
    bounded_all,
    spans_in_window,
)
from search_app.history.ranking import WEIGHTS
from search_app.history.results import SPEAKERS, HistoryFilters, HistorySearch, Hit
from search_app.limits import (
    DEFAULT_MEMORIES,
    EVIDENCE_BUDGET,
    MAX_HITS,
    MAX_MEMORIES,
    Budget,
)

RANKING_NAMES = list(WEIGHTS)


class SearchHistoryInput(StrictSerializer):
    """``{query, speaker?, after?, before?, limit?}``; ``null`` means "not given"."""

    query = Text(max_length=MAX_QUERY_CHARS)
    speaker = Choice(choices=SPEAKERS, required=False, allow_null=True)
    after = Timestamp(required=False, allow_null=True)
    before = Timestamp(required=False, allow_null=True)
    limit = JsonInteger(min_value=1, max_value=MAX_HITS, required=False, allow_null=True)
    maxTextLength = JsonInteger(
        min_value=MIN_TEXT_BOUND, max_value=MAX_TEXT_BOUND, required=False, allow_null=True
    )

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


class HistoryConversation(Shape):
    id = serializers.UUIDField(source="message.conversation_id")
    title = serializers.CharField(source="conversation_title")
    kind = serializers.ChoiceField(choices=ConversationKind.values, source="conversation_kind")


class HistorySpeaker(Shape):
    type = serializers.ChoiceField(choices=["user", "agent"])
    id = serializers.UUIDField()
    displayName = serializers.CharField()


class RankingReason(Shape):
    name = serializers.ChoiceField(choices=RANKING_NAMES)
    value = serializers.FloatField()
    contribution = serializers.FloatField()


class HistoryHit(MessageSummaryShape):
    # The message summary's fields, read from the hit's message; the rest given by the search.
    conversation = HistoryConversation()
    time = serializers.DateTimeField(source="created_at")
    speaker = HistorySpeaker()
    text = serializers.CharField(source="content")
    highlights = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="[start, length] of each matched word, in Unicode code points of text (of "
        "its window, where maxTextLength cut it).",
    )
    score = serializers.FloatField(help_text="The sum of the reasons' contributions.")
    reasons = RankingReason(many=True, help_text="All five ranking components, always.")
    before = MessageSummaryShape(
        many=True, help_text="Up to two eligible neighbours before the hit, in order."
    )
    after = MessageSummaryShape(
        many=True, help_text="Up to two eligible neighbours after the hit, in order."
    )


class BudgetShape(Shape):
    used = serializers.IntegerField()
    limit = serializers.IntegerField(help_text=f"Always {EVIDENCE_BUDGET}.")
    remaining = serializers.IntegerField()


class HistorySearchResult(Shape):
    items = HistoryHit(many=True, help_text="Best first.")
    total = serializers.IntegerField(help_text="The number of items returned by this call.")
    budget = BudgetShape()


def ranking(hit: Hit) -> dict[str, Any]:
    """One hit's ranking as the answer's ``reasons`` and the audit's record show it: each
    contribution rounded to six decimals, and the score their rounded sum (rounding the exact
    sum instead can differ in the last digit, so the record would not add up and would
    disagree with the answer)."""
    components = hit.recorded or {name: round(value, 6) for name, value in hit.components.items()}
    return {
        "messageId": str(hit.message.id),
        "score": round(sum(components.values()), 6),
        "components": components,
    }


def _hit(hit: Hit, marks: list[list[int]], text_bound: int | None) -> dict[str, Any]:
    message = bounded(hit.message, text_bound, tuple(marks[0]) if marks else None)
    marks = spans_in_window(marks, message.text_cut)
    ranked = ranking(hit)
    return HistoryHit.render(
        message,
        conversation=HistoryConversation.render(hit),
        speaker=HistorySpeaker.render(
            type="agent" if message.sender_agent_id else "user",
            id=str(message.sender_agent_id or message.sender_account_id),
            displayName=hit.speaker_name,
        ),
        highlights=marks,
        score=ranked["score"],
        reasons=[
            RankingReason.render(
                name=name, value=round(hit.values[name], 6), contribution=contribution
            )
            for name, contribution in ranked["components"].items()
        ],
        before=MessageSummaryShape.render_many(bounded_all(hit.before, text_bound)),
        after=MessageSummaryShape.render_many(bounded_all(hit.after, text_bound)),
    )


def search_history_body(result: HistorySearch, text_bound: int | None = None) -> dict[str, Any]:
    """SPEC §5's body; with ``text_bound`` each text cut to that many characters, a hit's
    around its first highlighted word and its highlights into the window."""
    items = [
        _hit(hit, marks, text_bound)
        for hit, marks in zip(result.hits, result.highlights, strict=True)
    ]
    return HistorySearchResult.render(result, items=items, total=len(items))


class RunContentInput(StrictSerializer):
    """``{content}``: the body of a run's reply or memory."""

    content = Text(max_length=MAX_CONTENT_CHARS, allow_blank=False)


class MemorySearchQuery(StrictSerializer):
    """``GET /memories?query=…&limit=…``."""

    query = Text(max_length=MAX_QUERY_CHARS)
    limit = serializers.IntegerField(min_value=1, max_value=MAX_MEMORIES, default=DEFAULT_MEMORIES)


class Memory(Shape):
    id = serializers.UUIDField()
    agentId = serializers.UUIDField(source="agent_id")
    runId = serializers.UUIDField(source="run_id", help_text="The run that wrote it.")
    content = serializers.CharField()
    createdAt = serializers.DateTimeField(source="created_at")


class MemoryCreated(Memory):
    lineageCount = serializers.IntegerField(
        source="lineage_count", help_text="Source messages it inherits limits from."
    )


class MemorySearchResult(Shape):
    items = Memory(many=True)
    total = serializers.IntegerField(help_text="The number of items returned by this call.")
    limit = serializers.IntegerField()


class RunCreateInput(StrictSerializer):
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


class RunShape(Shape):
    id = serializers.UUIDField()
    agentId = serializers.UUIDField(source="agent_id")
    conversationId = serializers.UUIDField(source="conversation_id")
    requesterId = serializers.UUIDField(source="requester_id")
    createdAt = serializers.DateTimeField(source="created_at")


class RunStatusShape(RunShape):
    """``GET /runs/{id}``: the run, whether it has replied, and what it has used."""

    status = Choice(choices=["open", "replied"])
    replyId = serializers.UUIDField(
        source="reply_id",
        allow_null=True,
        help_text="Null while open (and for a run that replied before replies were recorded).",
    )
    repliedAt = serializers.DateTimeField(source="finished_at", allow_null=True)
    toolScope = Choice(choices=ToolScope.values, source="tool_scope")
    evidenceCount = serializers.IntegerField(
        source="evidence_count",
        help_text="Distinct messages the run's tools have returned (its evidence).",
    )
    budget = BudgetShape(help_text="search_history's evidence budget.")

    @classmethod
    def of(cls, run: Run) -> dict[str, Any]:
        """The body for a run read by ``runs.selectors.run_status`` (with ``evidence_count``)."""
        return cls.render(
            run,
            status="open" if run.finished_at is None else "replied",
            budget=BudgetShape.render(Budget(used=run.history_evidence_count)),
        )


class RunCreated(RunShape):
    token = serializers.CharField(help_text="The run token, shown once; only its hash is kept.")
