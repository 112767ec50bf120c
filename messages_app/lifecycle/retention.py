"""Retention periods and the runs that erase what is older (docs/lifecycle.md, "Retention").

A workspace has a default period and a conversation may override it (null keeps messages). A
run erases, conversation by conversation and batch by batch, every live message older than its
period, exactly as a delete erases it (``erasure.messages_erase``), skipping what a legal hold
covers.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from audit_app.lifecycle import Actor, lifecycle_finish, lifecycle_progress, lifecycle_start
from audit_app.models import LifecycleAction, LifecycleSubject
from formation.errors import InvalidArguments
from formation.sql import named_rows, table
from messages_app.lifecycle.erasure import messages_erase
from messages_app.lifecycle.holds import erasure_guard
from messages_app.limits import DEFAULT_BATCH_SIZE, MAX_RETENTION_DAYS, check_batch_size
from messages_app.models import Conversation, Message, Workspace

# --- periods ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConversationRetention:
    """A conversation's effective period (None keeps its messages) and where it comes from."""

    days: int | None
    inherited: bool


def _check_days(days: int | None) -> int | None:
    if days is not None and not 1 <= days <= MAX_RETENTION_DAYS:
        raise InvalidArguments.for_field(
            "days", f"Must be between 1 and {MAX_RETENTION_DAYS}, or null to keep messages."
        )
    return days


def workspace_retention(*, workspace_id: uuid.UUID) -> int | None:
    return Workspace.objects.filter(pk=workspace_id).values_list("retention_days", flat=True)[0]


def workspace_retention_set(*, workspace_id: uuid.UUID, days: int | None) -> int | None:
    """The workspace's default period in days; None keeps messages."""
    with transaction.atomic():
        Workspace.objects.filter(pk=workspace_id).update(retention_days=_check_days(days))
    return days


def conversation_retention(*, conversation: Conversation) -> ConversationRetention:
    if conversation.retention_override:
        return ConversationRetention(days=conversation.retention_days, inherited=False)
    return ConversationRetention(
        days=workspace_retention(workspace_id=conversation.workspace_id), inherited=True
    )


def conversation_retention_set(
    *, conversation: Conversation, days: int | None
) -> ConversationRetention:
    """Override the workspace's period for this conversation; None keeps its messages."""
    return _conversation_retention_update(conversation, override=True, days=days)


def conversation_retention_inherit(*, conversation: Conversation) -> ConversationRetention:
    """Drop the override: the workspace's period applies again."""
    return _conversation_retention_update(conversation, override=False, days=None)


def _conversation_retention_update(
    conversation: Conversation, *, override: bool, days: int | None
) -> ConversationRetention:
    """Write the conversation's own period (or, without ``override``, its absence), read it
    back, and answer the period that now applies."""
    with transaction.atomic():
        Conversation.objects.filter(
            workspace_id=conversation.workspace_id, pk=conversation.pk
        ).update(retention_override=override, retention_days=_check_days(days))
    conversation.refresh_from_db(
        fields=["retention_override", "retention_days"],
        from_queryset=Conversation.objects.filter(workspace_id=conversation.workspace_id),
    )
    return conversation_retention(conversation=conversation)


# --- runs -------------------------------------------------------------------------------------


@dataclass
class RetentionReport:
    """One workspace's part of a retention run."""

    workspace_id: uuid.UUID
    slug: str
    messages: int = 0
    conversations: int = 0
    held_conversations: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "messages": self.messages,
            "conversations": self.conversations,
            "heldConversations": self.held_conversations,
        }


# Called after each batch's commit with the workspace's report, the conversation and how many
# messages the batch erased (the management command prints it).
Progress = Callable[[RetentionReport, uuid.UUID, int], None]

# The conversations of the workspace with a period (their own, else the workspace's; null
# keeps) and at least one live message older than it: one probe of the timeline index each, so
# a run spends no transaction on a conversation with nothing to erase.
_RETAINED_CONVERSATIONS = f"""
    SELECT r.id, r.days FROM (
        SELECT c.id,
               CASE WHEN c.retention_override THEN c.retention_days
                    ELSE w.retention_days END AS days
        FROM {table(Conversation)} AS c JOIN {table(Workspace)} AS w ON w.id = c.workspace_id
        WHERE c.workspace_id = %(ws)s
    ) AS r
    WHERE r.days IS NOT NULL
      AND EXISTS (SELECT 1 FROM {table(Message)} AS m
                  WHERE m.workspace_id = %(ws)s AND m.conversation_id = r.id
                    AND m.deleted_at IS NULL
                    AND m.created_at < %(now)s - make_interval(days => r.days))
    ORDER BY r.id
"""

# Rows another transaction holds (an edit, a delete) are skipped, not waited for: the next run
# picks them up. The timeline index serves this in time order.
_EXPIRED_BATCH = f"""
    SELECT id FROM {table(Message)}
    WHERE workspace_id = %s AND conversation_id = %s AND deleted_at IS NULL
      AND created_at < %s
    ORDER BY created_at, seq
    LIMIT %s
    FOR UPDATE SKIP LOCKED
"""


def retention_apply(
    *,
    actor: Actor,
    now: datetime | None = None,
    workspace_slug: str | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> list[RetentionReport]:
    """Erase every live message older than its conversation's period, workspace by workspace.

    A message is erased when ``created_at < now - period``: one exactly as old as its period is
    kept. ``now`` is fixed for the whole run, so a run draws one line however long it takes.
    Held conversations with something to erase are skipped (``held_conversations``). Each
    workspace with any period gets one lifecycle row, whose counts follow each batch's commit.
    """
    check_batch_size(batch_size)
    now = now or timezone.now()
    return [
        _retain_workspace(workspace, actor, now, batch_size, progress)
        for workspace in _workspaces_with_a_period(workspace_slug).order_by("slug")
    ]


def _workspaces_with_a_period(workspace_slug: str | None) -> QuerySet[Workspace]:
    """The workspaces with a default period or a conversation with its own (or only the one
    named ``workspace_slug``, if it has)."""
    workspaces = Workspace.objects.filter(
        Q(retention_days__isnull=False)
        | Q(conversations__retention_override=True, conversations__retention_days__isnull=False)
    ).distinct()
    if workspace_slug is not None:
        workspaces = workspaces.filter(slug=workspace_slug)
    return workspaces


def _retain_workspace(
    workspace: Workspace,
    actor: Actor,
    now: datetime,
    batch_size: int,
    progress: Progress | None,
) -> RetentionReport:
    """One workspace's part of the run, recorded in one lifecycle row."""
    report = RetentionReport(workspace_id=workspace.id, slug=workspace.slug)
    event_id = lifecycle_start(
        workspace_id=workspace.id,
        action=LifecycleAction.RETENTION,
        subject_kind=LifecycleSubject.WORKSPACE,
        subject_id=workspace.id,
        actor=actor,
        counts=report.counts(),
    )
    with named_rows() as cursor:
        cursor.execute(_RETAINED_CONVERSATIONS, {"ws": workspace.id, "now": now})
        retained = cursor.fetchall()
    for conversation in retained:
        cutoff = now - timedelta(days=conversation.days)
        _retain_conversation(report, event_id, conversation.id, cutoff, batch_size, progress)
    lifecycle_finish(event_id=event_id, action=LifecycleAction.RETENTION, counts=report.counts())
    return report


def _retain_conversation(
    report: RetentionReport,
    event_id: uuid.UUID,
    conversation_id: uuid.UUID,
    cutoff: datetime,
    batch_size: int,
    progress: Progress | None,
) -> None:
    """Erase the conversation's messages older than ``cutoff``, a batch per transaction, until
    none is left or a hold covers it (then it counts as held and is left as it is)."""
    touched = False
    while True:
        with transaction.atomic():
            if erasure_guard(workspace_id=report.workspace_id, conversation_ids=[conversation_id]):
                report.held_conversations += 1
                lifecycle_progress(event_id=event_id, counts=report.counts())
                return
            ids = _expired_batch(report.workspace_id, conversation_id, cutoff, batch_size)
            erased = messages_erase(workspace_id=report.workspace_id, message_ids=ids)
            if erased.messages and not touched:
                touched = True
                report.conversations += 1
            report.messages += erased.messages
            if erased.messages:
                lifecycle_progress(event_id=event_id, counts=report.counts())
        if erased.messages and progress is not None:
            progress(report, conversation_id, erased.messages)
        if len(ids) < batch_size:
            return


def _expired_batch(
    workspace_id: uuid.UUID, conversation_id: uuid.UUID, cutoff: datetime, batch_size: int
) -> list[uuid.UUID]:
    """The ids of the conversation's next oldest live messages created before ``cutoff``,
    locked for the erasing transaction."""
    with named_rows() as cursor:
        cursor.execute(_EXPIRED_BATCH, [workspace_id, conversation_id, cutoff, batch_size])
        return [row.id for row in cursor.fetchall()]
