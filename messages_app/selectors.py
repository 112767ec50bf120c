"""Every read of the agent tools: list_messages, get_message and search_messages.

Security invariant: each function starts from ``agent_visible_messages`` — live messages of the
caller's workspace in conversations where the agent is a *current* member — and only narrows it.
Nothing here ever widens that queryset or filters rows in Python after the fetch. A message the
agent cannot see and a message that does not exist raise the same ``NotFound``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import Q, QuerySet

from formation.errors import NotFound
from messages_app.models import Conversation, Membership, Message

Direction = Literal["before", "after", "around"]
NEWEST_FIRST = ("-created_at", "-seq")
# search_messages reads this many of the newest visible messages before searching them all.
SEARCH_WALK = 2_000
OLDEST_FIRST = ("created_at", "seq")


def get_or_not_found(queryset: QuerySet, pk: object):
    """One row of an already-scoped queryset, or the same ``NotFound`` as a missing one."""
    obj = queryset.filter(pk=pk).first()
    if obj is None:
        raise NotFound()
    return obj


def runtime_message(*, workspace_id: uuid.UUID, message_id: uuid.UUID) -> Message:
    """A live message of the workspace, for the runtime's edit and delete."""
    return get_or_not_found(
        Message.objects.filter(workspace_id=workspace_id, deleted_at__isnull=True), message_id
    )


def agent_conversation_ids(*, workspace_id: uuid.UUID, agent_id: uuid.UUID) -> QuerySet:
    """The conversations the agent is a current member of, as a subquery."""
    return Membership.objects.filter(
        workspace_id=workspace_id, agent_id=agent_id, left_at__isnull=True
    ).values("conversation_id")


def agent_visible_messages(
    *, workspace_id: uuid.UUID, agent_id: uuid.UUID, rooms_as_list: bool = False
) -> QuerySet[Message]:
    """Live messages of the conversations the agent is a current member of.

    ``rooms_as_list`` reads those conversations first and passes their ids as a list: the
    planner then knows how many there are, where it guesses at a subquery (it took the busiest
    agent's 178 rooms for 47 and sorted 200,000 rows instead of walking an index).
    """
    rooms = agent_conversation_ids(workspace_id=workspace_id, agent_id=agent_id)
    return Message.objects.filter(
        workspace_id=workspace_id,
        deleted_at__isnull=True,
        conversation_id__in=list(rooms.values_list("conversation_id", flat=True))
        if rooms_as_list
        else rooms,
    )


def _require_membership(
    *, workspace_id: uuid.UUID, agent_id: uuid.UUID, conversation_id: uuid.UUID
) -> int:
    """The conversation's live message count, if the agent is a current member; else NotFound."""
    live_count = (
        Conversation.objects.filter(
            workspace_id=workspace_id,
            pk=conversation_id,
            memberships__agent_id=agent_id,
            memberships__left_at__isnull=True,
        )
        .values_list("live_message_count", flat=True)
        .first()
    )
    if live_count is None:
        raise NotFound()
    return live_count


def message_get(*, workspace_id: uuid.UUID, agent_id: uuid.UUID, message_id: uuid.UUID) -> Message:
    return get_or_not_found(
        agent_visible_messages(workspace_id=workspace_id, agent_id=agent_id), message_id
    )


@dataclass(frozen=True)
class MessagePage:
    items: list[Message]
    total: int
    limit: int
    offset: int | None
    has_older: bool
    has_newer: bool


def message_list(
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    conversation_id: uuid.UUID,
    limit: int,
    offset: int = 0,
    before_date: datetime | None = None,
) -> MessagePage:
    """Newest first by created_at (seq breaks ties), paged by offset, optionally before a date."""
    live_count = _require_membership(
        workspace_id=workspace_id, agent_id=agent_id, conversation_id=conversation_id
    )
    messages = agent_visible_messages(workspace_id=workspace_id, agent_id=agent_id).filter(
        conversation_id=conversation_id
    )
    if before_date is not None:
        messages = messages.filter(created_at__lt=before_date)
    items = list(messages.order_by(*NEWEST_FIRST)[offset : offset + limit])
    if before_date is None:
        total = live_count
    elif offset == 0 and len(items) < limit:
        total = len(items)  # The first page holds everything: no count query.
    else:
        total = messages.count()
    return MessagePage(
        items=items,
        total=total,
        limit=limit,
        offset=offset,
        has_older=offset + len(items) < total,
        has_newer=offset > 0,
    )


def _older_than(anchor: Message) -> Q:
    # The redundant created_at bound lets the timeline index start at the anchor.
    return Q(created_at__lte=anchor.created_at) & (
        Q(created_at__lt=anchor.created_at) | Q(seq__lt=anchor.seq)
    )


def _newer_than(anchor: Message) -> Q:
    return Q(created_at__gte=anchor.created_at) & (
        Q(created_at__gt=anchor.created_at) | Q(seq__gt=anchor.seq)
    )


def message_list_around(
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    conversation_id: uuid.UUID,
    anchor_id: uuid.UUID,
    direction: Direction,
    limit: int,
) -> MessagePage:
    """The ``limit`` messages nearest an anchor on one side (or limit//2 each side and the anchor
    for ``around``), listed newest first like every page. An unseen anchor is ``NotFound``."""
    live_count = _require_membership(
        workspace_id=workspace_id, agent_id=agent_id, conversation_id=conversation_id
    )
    messages = agent_visible_messages(workspace_id=workspace_id, agent_id=agent_id).filter(
        conversation_id=conversation_id
    )
    anchor = messages.filter(pk=anchor_id).first()
    if anchor is None:
        raise NotFound()
    older: list[Message] = []
    newer: list[Message] = []
    older_limit = limit if direction == "before" else limit // 2
    newer_limit = limit if direction == "after" else limit // 2
    if direction in ("before", "around"):
        older = list(
            messages.filter(_older_than(anchor)).order_by(*NEWEST_FIRST)[: older_limit + 1]
        )
    if direction in ("after", "around"):
        newer = list(
            messages.filter(_newer_than(anchor)).order_by(*OLDEST_FIRST)[: newer_limit + 1]
        )
    # Reading after an anchor always leaves the anchor itself older than the page, and so on.
    has_older = direction == "after" or len(older) > older_limit
    has_newer = direction == "before" or len(newer) > newer_limit
    older, newer = older[:older_limit], newer[:newer_limit]
    items = [*reversed(newer), *([anchor] if direction == "around" else []), *older]
    return MessagePage(
        items=items,
        total=live_count,
        limit=limit,
        offset=None,
        has_older=has_older,
        has_newer=has_newer,
    )


def message_search(
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    query: str,
    limit: int,
    conversation_id: uuid.UUID | None = None,
) -> list[Message]:
    """Case-insensitive literal substring search, newest first.

    Two steps, with the answer of one ``ORDER BY ... LIMIT``. First the newest ``SEARCH_WALK``
    visible messages are read newest first and filtered: that finds a word held by one message
    in a hundred in ~10 ms. Only when they hold fewer than ``limit`` matches (a rarer word, so
    fewer matches to recheck) is the whole history searched: ``icontains`` compiles to
    ``UPPER(content) LIKE UPPER(%s)`` (``%``, ``_`` and ``\\`` escaped), which the
    ``message_content_trgm`` GIN index serves. Left to choose alone, the planner took a word in
    1% of messages for a rare one and rechecked thousands of matches (90-240 ms).
    """
    messages = agent_visible_messages(
        workspace_id=workspace_id, agent_id=agent_id, rooms_as_list=True
    )
    if conversation_id is not None:
        _require_membership(
            workspace_id=workspace_id, agent_id=agent_id, conversation_id=conversation_id
        )
        messages = messages.filter(conversation_id=conversation_id)
    # Newest first like list_messages; seq orders ties inside a conversation, id across them.
    newest_first = ("-created_at", "-seq", "-id")
    found = _matches_among(messages.order_by(*newest_first)[:SEARCH_WALK], query, limit)
    if len(found) == limit:
        # The newest `limit` matches overall: any other match is older than all of these.
        return found
    matches = messages.filter(content__icontains=query).order_by(*newest_first)
    return list(matches[:limit])


def _matches_among(newest: QuerySet[Message], query: str, limit: int) -> list[Message]:
    """The newest ``limit`` messages of ``newest`` (a sliced, ordered queryset) holding
    ``query``, matched exactly as ``icontains`` matches."""
    try:
        inner, params = newest.query.sql_with_params()
    except EmptyResultSet:  # an agent in no room: Django knows without asking PostgreSQL
        return []
    pattern = f"%{connection.ops.prep_for_like_query(query)}%"
    sql = (
        f"SELECT * FROM ({inner}) AS newest WHERE UPPER(newest.content) LIKE UPPER(%s) "
        "ORDER BY newest.created_at DESC, newest.seq DESC, newest.id DESC LIMIT %s"
    )
    return list(Message.objects.raw(sql, (*params, pattern, limit)))
