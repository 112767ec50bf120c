"""Messages: drafts checked, seqs reserved, stored one or thousands at a time, with their
lineage; edits and deletes under the legal holds."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from django.db import connection, transaction
from django.utils import timezone

from formation.bulk_insert import insert_rows
from formation.errors import InvalidArguments, NotFound
from formation.sql import table
from messages_app.lifecycle import erasure, holds
from messages_app.limits import (
    BULK_STATEMENT_CHARS,
    MAX_BULK_CHARS,
    MAX_BULK_MESSAGES,
    MAX_CLOCK_SKEW,
    MAX_LINEAGE_PER_REQUEST,
)
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    Message,
    MessageLineage,
    MessageRole,
    MessageStatus,
)

# A lineage source's id: a UUID, or its text in the synthetic corpus (both sort alike).
SourceId = TypeVar("SourceId", uuid.UUID, str)


@dataclass
class MessageDraft:
    """One message to store, as validated by the API layer (ids not yet resolved)."""

    content: str
    sender_account_id: uuid.UUID | None = None
    sender_agent_id: uuid.UUID | None = None
    role: str | None = None
    status: str | None = None
    created_at: datetime | None = None
    reply_to_id: uuid.UUID | None = None
    thread_id: uuid.UUID | None = None
    lineage: list[uuid.UUID] = field(default_factory=list)


class DraftError(InvalidArguments):
    """A problem with one draft; bulk import adds the item's index to the details."""


def _check_references(conversation: Conversation, drafts: Sequence[MessageDraft]) -> None:
    """Resolve every id the drafts name with one query per kind, inside the workspace."""
    workspace_id = conversation.workspace_id
    account_ids = {d.sender_account_id for d in drafts if d.sender_account_id}
    agent_ids = {d.sender_agent_id for d in drafts if d.sender_agent_id}
    local_ids = {i for d in drafts for i in (d.reply_to_id, d.thread_id) if i}
    lineage_ids = {i for d in drafts for i in d.lineage}

    known_accounts = set(
        Account.objects.filter(workspace_id=workspace_id, pk__in=account_ids).values_list(
            "pk", flat=True
        )
    )
    known_agents = set(
        Agent.objects.filter(workspace_id=workspace_id, pk__in=agent_ids).values_list(
            "pk", flat=True
        )
    )
    # reply_to and thread must be in this conversation; a thread root is not itself in a thread.
    local_messages = dict(
        Message.objects.filter(
            workspace_id=workspace_id, conversation_id=conversation.pk, pk__in=local_ids
        ).values_list("pk", "thread_id")
    )
    known_sources = set(
        Message.objects.filter(workspace_id=workspace_id, pk__in=lineage_ids).values_list(
            "pk", flat=True
        )
    )
    now = timezone.now()
    for index, draft in enumerate(drafts):
        problem: tuple[str, str] | None = None
        if draft.sender_account_id and draft.sender_account_id not in known_accounts:
            problem = ("senderUserId", "Unknown senderUserId.")
        elif draft.sender_agent_id and draft.sender_agent_id not in known_agents:
            problem = ("senderAgentId", "Unknown senderAgentId.")
        elif draft.reply_to_id and draft.reply_to_id not in local_messages:
            problem = ("replyToId", "replyToId is not a message of this conversation.")
        elif draft.thread_id and draft.thread_id not in local_messages:
            problem = ("threadId", "threadId is not a message of this conversation.")
        elif draft.thread_id and local_messages[draft.thread_id] is not None:
            problem = ("threadId", "threadId must name a thread's root message.")
        elif draft.lineage and not draft.sender_agent_id:
            problem = ("lineage", "Only agent-authored messages carry lineage.")
        elif any(source not in known_sources for source in draft.lineage):
            problem = ("lineage", "lineage names an unknown message.")
        elif draft.created_at and draft.created_at > now + MAX_CLOCK_SKEW:
            problem = ("createdAt", "createdAt is in the future.")
        if problem:
            raise DraftError.for_field(problem[0], problem[1], index=index)


def check_bulk_size(contents: Iterable[str]) -> None:
    """Refuse a batch with more than MAX_BULK_CHARS characters of content in all.

    The bulk API checks its raw items with this before validating them one by one, as it checks
    their number; ``messages_create`` checks again before it touches the database.
    """
    if sum(map(len, contents)) > MAX_BULK_CHARS:
        raise InvalidArguments.for_field(
            "messages",
            f"One request may store at most {MAX_BULK_CHARS:,} characters of content in all; "
            "split the import.",
        )


def seqs_reserve(
    counts: Mapping[uuid.UUID, tuple[int, int]], *, workspace_id: uuid.UUID | None = None
) -> dict[uuid.UUID, int]:
    """Take ``added`` consecutive seqs in each conversation and count ``live`` of them as live
    messages (``counts``: conversation id -> ``(added, live)``); return each one's first seq.

    A write names its conversations' ``workspace_id``, so the statement reads one workspace
    (one shard on Citus); the corpus loader, which reserves for several at once, names none.

    The UPDATE holds the conversations' row locks until commit, so concurrent writers to one
    conversation queue here and a rolled-back transaction gives its numbers back: committed seqs
    are strictly increasing, never reused, and have no gaps. The synthetic corpus
    (``synthetic/corpus/``) reserves its seqs here too.
    """
    ids = list(counts)
    in_workspace = "c.workspace_id = %s AND " if workspace_id else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table(Conversation)} AS c "
            "SET last_seq = c.last_seq + d.added, "
            "live_message_count = c.live_message_count + d.live "
            "FROM unnest(%s::uuid[], %s::bigint[], %s::bigint[]) AS d(id, added, live) "
            f"WHERE {in_workspace}c.id = d.id RETURNING c.id, c.last_seq",
            [
                ids,
                [counts[i][0] for i in ids],
                [counts[i][1] for i in ids],
                *([workspace_id] if workspace_id else []),
            ],
        )
        return {room: last - counts[room][0] + 1 for room, last in cursor.fetchall()}


def _default_role(draft: MessageDraft) -> str:
    if draft.role:
        return draft.role
    return MessageRole.ASSISTANT if draft.sender_agent_id else MessageRole.USER


def messages_create(
    *,
    conversation: Conversation,
    drafts: Sequence[MessageDraft],
    lineage_cap: int | None = MAX_LINEAGE_PER_REQUEST,
) -> list[Message]:
    """Store drafts in order, all or nothing, assigning consecutive seqs.

    ``lineage_cap`` bounds what one API request may name; a run's reply passes ``None``, since
    its lineage is whatever the run read and must be kept whole.
    """
    if not 1 <= len(drafts) <= MAX_BULK_MESSAGES:
        raise InvalidArguments(f"Send between 1 and {MAX_BULK_MESSAGES} messages.")
    check_bulk_size(draft.content for draft in drafts)
    if lineage_cap is not None and sum(len(draft.lineage) for draft in drafts) > lineage_cap:
        raise InvalidArguments(
            f"One request may name at most {lineage_cap} lineage sources in all."
        )
    _check_references(conversation, drafts)
    now = timezone.now()
    with transaction.atomic():
        first_seq = seqs_reserve(
            {conversation.pk: (len(drafts), len(drafts))}, workspace_id=conversation.workspace_id
        )[conversation.pk]
        messages = [
            Message(
                workspace_id=conversation.workspace_id,
                conversation=conversation,
                seq=first_seq + offset,
                role=_default_role(draft),
                status=draft.status or MessageStatus.SENT,
                sender_account_id=draft.sender_account_id,
                sender_agent_id=draft.sender_agent_id,
                content=draft.content,
                created_at=draft.created_at or now,
                reply_to_id=draft.reply_to_id,
                thread_id=draft.thread_id,
            )
            for offset, draft in enumerate(drafts)
        ]
        _insert_messages(messages)
        lineage = _lineage_closure(conversation.workspace_id, messages, drafts)
        if lineage:
            MessageLineage.objects.bulk_create(lineage)
    return messages


# Every column a new message sets, in table order; each travels as one array parameter.
_INSERTED = (
    ("id", "uuid"),
    ("workspace_id", "uuid"),
    ("conversation_id", "uuid"),
    ("seq", "bigint"),
    ("role", "text"),
    ("status", "text"),
    ("sender_account_id", "uuid"),
    ("sender_agent_id", "uuid"),
    ("content", "text"),
    ("created_at", "timestamptz"),
    ("reply_to_id", "uuid"),
    ("thread_id", "uuid"),
)


def _insert_messages(messages: Sequence[Message]) -> None:
    """One ``INSERT`` (``formation.bulk_insert``) per ``BULK_STATEMENT_CHARS`` of content.

    Twelve array parameters instead of ``bulk_create``'s twelve per row: for 1,000 messages
    the SQL text and the parameter adaptation stop growing with the batch, and PostgreSQL parses
    one small statement. Constraints, foreign keys and the search-document triggers apply as to
    any INSERT. The statement-level triggers build every document of their INSERT inside it, so
    a whole import in one statement took its whole cost under one statement timeout, and a busy
    machine cancelled the largest; split, each part has the timeout to itself. The caller's
    transaction keeps the parts one write: a part refused rolls back those before it.
    """
    for part in _statement_parts(messages, BULK_STATEMENT_CHARS):
        insert_rows(
            table(Message),
            _INSERTED,
            [[getattr(message, column) for column, _ in _INSERTED] for message in part],
        )


def _statement_parts(messages: Sequence[Message], max_chars: int) -> list[Sequence[Message]]:
    """``messages`` in order, cut into consecutive runs of at most ``max_chars`` characters of
    content (a longer message makes a run of its own); never an empty run."""
    parts: list[Sequence[Message]] = []
    start = chars = 0
    for index, message in enumerate(messages):
        length = len(message.content)
        if index > start and chars + length > max_chars:
            parts.append(messages[start:index])
            start, chars = index, 0
        chars += length
    if start < len(messages):
        parts.append(messages[start:])
    return parts


def _lineage_closure(
    workspace_id: uuid.UUID, messages: Sequence[Message], drafts: Sequence[MessageDraft]
) -> list[MessageLineage]:
    """Each message's direct sources plus everything they inherited (see ``MessageLineage``).

    Sources are stored before the message that names them, so their own rows already hold
    their complete closure: one query reads it, no recursion.
    """
    named = {source for draft in drafts for source in draft.lineage}
    if not named:
        return []
    inherited: dict[uuid.UUID, set[uuid.UUID]] = {}
    for message_id, source_id in MessageLineage.objects.filter(
        workspace_id=workspace_id, message_id__in=named
    ).values_list("message_id", "source_id"):
        inherited.setdefault(message_id, set()).add(source_id)
    rows = []
    for message, draft in zip(messages, drafts, strict=True):
        direct, indirect = lineage_sources(draft.lineage, inherited)
        rows += [
            MessageLineage(workspace_id=workspace_id, message=message, source_id=src, direct=True)
            for src in direct
        ]
        rows += [
            MessageLineage(workspace_id=workspace_id, message=message, source_id=src, direct=False)
            for src in indirect
        ]
    return rows


def lineage_sources(
    named: Iterable[SourceId], inherited: Mapping[SourceId, Iterable[SourceId]]
) -> tuple[list[SourceId], list[SourceId]]:
    """A message's lineage closure as it is stored: the sources it names, once each in the
    order named (``direct``), then everything those inherited (``inherited``: each source's own
    closure) that it does not name, sorted. The synthetic corpus builds its closures here too.
    """
    direct = list(dict.fromkeys(named))
    indirect = {src for source in direct for src in inherited.get(source, ())} - set(direct)
    return direct, sorted(indirect)


def message_create(
    *,
    conversation: Conversation,
    draft: MessageDraft,
    lineage_cap: int | None = MAX_LINEAGE_PER_REQUEST,
) -> Message:
    try:
        (message,) = messages_create(
            conversation=conversation, drafts=[draft], lineage_cap=lineage_cap
        )
    except DraftError as problem:
        problem.details.pop("index", None)
        raise
    return message


def message_edit(*, message: Message, content: str) -> Message:
    """Replace the body (no earlier version is kept), so a legal hold on the conversation
    refuses it as it refuses a delete: under the same lock, an edit commits before a hold or
    is refused after it."""
    with transaction.atomic():
        holds.refuse_if_held(
            workspace_id=message.workspace_id, conversation_ids=[message.conversation_id]
        )
        updated = Message.objects.filter(
            workspace_id=message.workspace_id, pk=message.pk, deleted_at__isnull=True
        ).update(content=content, edited_at=timezone.now())
        if not updated:
            raise NotFound()
    message.refresh_from_db(from_queryset=Message.objects.filter(workspace_id=message.workspace_id))
    return message


def message_delete(*, message: Message) -> None:
    """Erase the body for good. The row stays so seq is never reused and replies keep a target.

    The same erasure retention and account erasure apply (``erasure.messages_erase``), and
    refused in the same way while a legal hold covers the conversation.
    """
    with transaction.atomic():
        holds.refuse_if_held(
            workspace_id=message.workspace_id, conversation_ids=[message.conversation_id]
        )
        erased = erasure.messages_erase(workspace_id=message.workspace_id, message_ids=[message.pk])
        if not erased.messages:
            raise NotFound()
