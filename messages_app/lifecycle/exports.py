"""JSON Lines exports of a conversation, an account or a workspace (docs/lifecycle.md, "Export").

An export is read a page at a time, each page its own short keyset statement: memory stays one
page whatever the size, and no transaction or cursor stays open while a client reads slowly.
A page holds at most ``DEFAULT_BATCH_SIZE`` messages and at most ``PAGE_BYTES`` bytes of
message text (a single larger message is a page of its own), so memory is bounded in bytes
whatever the messages' sizes, and an export of more than a page of text comes in more than one
piece, which the production worker streams (formation/serving.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connection

from audit_app.lifecycle import Actor, lifecycle_finish, lifecycle_start
from audit_app.models import LifecycleAction, LifecycleOutcome, LifecycleSubject
from formation import metrics
from formation.errors import NotFound
from formation.sql import named_rows, table
from messages_app.limits import DEFAULT_BATCH_SIZE, check_batch_size
from messages_app.models import Account, Conversation, Message
from messages_app.selectors import MessageRow, summary_columns

PAGE_BYTES = 1024 * 1024


def _byte_bounded(candidates: str, order: str) -> str:
    """The page of ``candidates`` (summary columns, in ``order``, limited to the batch size)
    cut before the message whose text would take it past the byte bound, and the number of
    candidates as a last column: fewer rows than candidates means the page was cut, so more
    may follow. ``octet_length`` reads a stored value's size without decompressing or fetching
    it, so the rows cut away cost no I/O on their text."""
    return f"""
    SELECT {summary_columns("page")}, page.candidates FROM (
        SELECT c.*, count(*) OVER () AS candidates,
               row_number() OVER w AS n,
               sum(octet_length(c.content)) OVER w AS running
        FROM ({candidates}) AS c
        WINDOW w AS (ORDER BY {order} ROWS UNBOUNDED PRECEDING)
    ) AS page
    WHERE page.n = 1 OR page.running <= %s
    ORDER BY page.n
"""


_CONVERSATION_PAGE = _byte_bounded(
    f"""SELECT {summary_columns("m")} FROM {table(Message)} AS m
        WHERE m.workspace_id = %s AND m.conversation_id = %s AND m.deleted_at IS NULL
          AND m.seq > %s
        ORDER BY m.seq
        LIMIT %s""",
    "c.seq",
)
_ACCOUNT_PAGE = _byte_bounded(
    f"""SELECT {summary_columns("m")} FROM {table(Message)} AS m
        WHERE m.workspace_id = %s AND m.sender_account_id = %s AND m.deleted_at IS NULL
          AND (m.created_at, m.id) > (%s, %s)
        ORDER BY m.created_at, m.id
        LIMIT %s""",
    "c.created_at, c.id",
)
_CONVERSATIONS_PAGE = f"""
    SELECT created_at, id FROM {table(Conversation)}
    WHERE workspace_id = %s AND (created_at, id) > (%s, %s)
    ORDER BY created_at, id
    LIMIT %s
"""
# The keyset position before every (created_at, id) pair.
_BEFORE_EVERYTHING = (datetime(1, 1, 1, tzinfo=UTC), uuid.UUID(int=0))

# A statement's parameters after the last row of the page before (None: the first page).
Keyset = Callable[[Any | None], list]


def _time_position(last: Any | None) -> tuple[datetime, uuid.UUID]:
    """The (created_at, id) keyset position after ``last``."""
    return (last.created_at, last.id) if last else _BEFORE_EVERYTHING


def _pages(sql: str, params: Keyset, batch_size: int) -> Iterator[list]:
    """Keyset pages of ``sql``, each its own statement, the last one shorter than a batch."""
    last = None
    while True:
        with named_rows() as cursor:
            cursor.execute(sql, [*params(last), batch_size])
            rows = cursor.fetchall()
        if rows:
            yield rows
        if len(rows) < batch_size:
            return
        last = rows[-1]


def _message_pages(
    sql: str, params: Keyset, batch_size: int, page_bytes: int
) -> Iterator[list[MessageRow]]:
    """``_pages`` of a ``_byte_bounded`` statement: a page cut by its bytes is followed by the
    next, and only a page holding every candidate, fewer than the batch size, is the last."""
    last = None
    while True:
        # The hot loop of an export: plain tuples, the summary columns in ``MessageRow``'s
        # order and ``candidates`` last, made into messages once.
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params(last), batch_size, page_bytes])
            rows = cursor.fetchall()
        if not rows:
            return
        messages = [MessageRow(*row[:-1]) for row in rows]
        yield messages
        if len(rows) == rows[0][-1] < batch_size:
            return
        last = messages[-1]


def conversation_export_batches(
    *,
    workspace_id: uuid.UUID,
    conversation_id: uuid.UUID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    page_bytes: int = PAGE_BYTES,
) -> Iterator[list[MessageRow]]:
    """The conversation's live messages in conversation order (seq), a page at a time."""

    def params(last: Any | None) -> list:
        return [workspace_id, conversation_id, last.seq if last else 0]

    return _message_pages(_CONVERSATION_PAGE, params, batch_size, page_bytes)


def account_export_batches(
    *,
    workspace_id: uuid.UUID,
    account_id: uuid.UUID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    page_bytes: int = PAGE_BYTES,
) -> Iterator[list[MessageRow]]:
    """Every live message the account wrote, oldest first, across its workspace."""

    def params(last: Any | None) -> list:
        return [workspace_id, account_id, *_time_position(last)]

    return _message_pages(_ACCOUNT_PAGE, params, batch_size, page_bytes)


def workspace_export_batches(
    *, workspace_id: uuid.UUID, batch_size: int = DEFAULT_BATCH_SIZE, page_bytes: int = PAGE_BYTES
) -> Iterator[list[MessageRow]]:
    """Every conversation of the workspace, oldest first, each in conversation order."""

    def params(last: Any | None) -> list:
        return [workspace_id, *_time_position(last)]

    for conversations in _pages(_CONVERSATIONS_PAGE, params, batch_size):
        for conversation in conversations:
            yield from conversation_export_batches(
                workspace_id=workspace_id,
                conversation_id=conversation.id,
                batch_size=batch_size,
                page_bytes=page_bytes,
            )


@dataclass
class Export:
    """An export on its way out, recorded when it ends.

    The lifecycle row is written by ``export_start`` before the first byte (an export that
    cannot be recorded is not made) and finished when the pages run out (``completed``) or the
    reader goes away first (``interrupted``), with the count of messages handed out. Handed to
    the server, that is: an answer the production worker collects instead of streaming is
    written after this (docs/lifecycle.md, "Export").
    """

    event_id: uuid.UUID
    batches: Iterator[list[MessageRow]]
    exported: int = field(default=0)

    def chunks(self, render: Callable[[list[MessageRow]], bytes]) -> Iterator[bytes]:
        """``render`` of each page, in order (the caller's wire format)."""
        outcome = LifecycleOutcome.INTERRUPTED
        if settings.METRICS_ENABLED:
            metrics.EXPORT_STREAMS.inc()
        try:
            for batch in self.batches:
                self.exported += len(batch)
                yield render(batch)
            outcome = LifecycleOutcome.COMPLETED
        finally:
            if settings.METRICS_ENABLED:
                metrics.EXPORT_STREAMS.dec()
            lifecycle_finish(
                event_id=self.event_id,
                action=LifecycleAction.EXPORT,
                counts={"messages": self.exported},
                outcome=outcome,
            )


def export_start(
    *,
    workspace_id: uuid.UUID,
    subject_kind: str,
    subject_id: uuid.UUID,
    actor: Actor,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> Export:
    """Record an export of a conversation, an account or the whole workspace (``subject_id``
    the workspace's id) and return it; a subject outside the workspace is ``NotFound``."""
    check_batch_size(batch_size)
    batches = _subject_batches(workspace_id, subject_kind, subject_id, batch_size)
    event_id = lifecycle_start(
        workspace_id=workspace_id,
        action=LifecycleAction.EXPORT,
        subject_kind=subject_kind,
        subject_id=subject_id,
        actor=actor,
    )
    return Export(event_id=event_id, batches=batches)


def _subject_batches(
    workspace_id: uuid.UUID, subject_kind: str, subject_id: uuid.UUID, batch_size: int
) -> Iterator[list[MessageRow]]:
    """The pages of the subject's export (not yet read); ``NotFound`` for a conversation or an
    account outside the workspace."""
    if subject_kind == LifecycleSubject.CONVERSATION:
        if not Conversation.objects.filter(workspace_id=workspace_id, pk=subject_id).exists():
            raise NotFound()
        return conversation_export_batches(
            workspace_id=workspace_id, conversation_id=subject_id, batch_size=batch_size
        )
    if subject_kind == LifecycleSubject.ACCOUNT:
        if not Account.objects.filter(workspace_id=workspace_id, pk=subject_id).exists():
            raise NotFound()
        return account_export_batches(
            workspace_id=workspace_id, account_id=subject_id, batch_size=batch_size
        )
    return workspace_export_batches(workspace_id=workspace_id, batch_size=batch_size)
