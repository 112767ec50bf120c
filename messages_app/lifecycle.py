"""The data lifecycle: retention, account erasure, legal holds and export (docs/lifecycle.md).

Erasing a message is exactly what deleting one is (``services.message_delete`` calls
``messages_erase`` too): the body is gone for good in the statement that sets ``deleted_at``,
the search projection's triggers remove its document in that same statement, and the row stays,
with every lineage row and inherited room that names it. So an agent reply or memory based on
an erased message keeps every restriction it inherited (SPEC §3 rule 4, §4): nothing here ever
deletes a lineage row, and derived messages are only marked (``Message.sources_erased``).

Large jobs run in batches of at most ``MAX_BATCH_SIZE`` messages, each batch its own
transaction, so a crash loses at most the batch in flight and the next run carries on from what
is left: every statement only picks messages that are still live, so nothing is erased twice.

Legal holds against erasure and edits. A hold must stop every erasure, and every edit (which
keeps no earlier version), that commits after the hold does. Checking for a hold inside the
erasing or editing transaction is not enough under READ COMMITTED (the hold may commit between
the check and that transaction's commit), so the two take a per-workspace advisory lock: every
erasing or editing transaction holds it shared from before its hold check until its commit, and
placing a hold takes it exclusively. A hold therefore waits for the erasures and edits in
flight to commit, and any that starts after it sees it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit_app.lifecycle import (
    Actor,
    lifecycle_finish,
    lifecycle_progress,
    lifecycle_start,
)
from audit_app.models import LifecycleAction, LifecycleOutcome, LifecycleSubject
from formation import metrics
from formation.errors import InvalidArguments, LegalHoldActive, NotFound
from formation.sql import transaction_advisory_lock
from messages_app.models import (
    MAX_RETENTION_DAYS,
    Account,
    Conversation,
    IdentityLink,
    LegalHold,
    Membership,
    Message,
    MessageLineage,
    Workspace,
)
from messages_app.selectors import SUMMARY_COLUMNS, MessageRow, summary_columns

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 1_000
MAX_BATCH_SIZE = 10_000
# What an erased account is called from then on; its external id becomes null.
ERASED_NAME = "Erased account"

MESSAGES = Message._meta.db_table
CONVERSATIONS = Conversation._meta.db_table
HOLDS = LegalHold._meta.db_table
LINEAGE = MessageLineage._meta.db_table
# The first key of the two-key advisory lock (``pg_advisory_xact_lock(int, int)``): this
# module's own lock space, the workspace's hash the second key. A hash collision between two
# workspaces only makes one wait for the other.
HOLD_LOCK_SPACE = 19_001


def check_batch_size(batch_size: int) -> int:
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise InvalidArguments(f"The batch size must be between 1 and {MAX_BATCH_SIZE}.")
    return batch_size


# --- legal holds ------------------------------------------------------------------------------


def _hold_lock(workspace_id: uuid.UUID, *, exclusive: bool) -> None:
    """The workspace's hold lock until the transaction ends (see the module's docstring)."""
    transaction_advisory_lock(
        "%s, hashtext(%s)", [HOLD_LOCK_SPACE, str(workspace_id)], exclusive=exclusive
    )


def _covering_hold(workspace_id: uuid.UUID, conversations: str, params: list) -> uuid.UUID | None:
    """The oldest active hold on the workspace or on one of ``conversations`` (an SQL set)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT h.id FROM {HOLDS} AS h
                WHERE h.workspace_id = %s AND h.released_at IS NULL
                  AND (h.conversation_id IS NULL OR h.conversation_id IN ({conversations}))
                ORDER BY h.placed_at, h.id LIMIT 1""",
            [workspace_id, *params],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def erasure_guard(
    *, workspace_id: uuid.UUID, conversation_ids: Iterable[uuid.UUID]
) -> uuid.UUID | None:
    """Take the hold lock (shared) and return the hold covering these conversations, if any.

    Call it inside the erasing (or editing) transaction, before anything is changed: the lock is
    held to its commit, so no hold can be placed in between.
    """
    _hold_lock(workspace_id, exclusive=False)
    return _covering_hold(
        workspace_id, "SELECT unnest(%s::uuid[])", [list(dict.fromkeys(conversation_ids))]
    )


HELD_ROW = "A legal hold covers this row: it cannot be changed while the hold is active."


def refuse_if_held(*, workspace_id: uuid.UUID, conversation_ids: Iterable[uuid.UUID]) -> None:
    """``erasure_guard``, raising ``legal_hold_active`` for a covering hold."""
    hold_id = erasure_guard(workspace_id=workspace_id, conversation_ids=conversation_ids)
    if hold_id is not None:
        raise LegalHoldActive(hold_id)


def account_edit_refusal(*, workspace_id: uuid.UUID, account_id: uuid.UUID) -> str | None:
    """Why the account's name and external id may not be changed now (a fixed sentence), or
    None. Call it in the changing transaction: the hold lock (shared) and the account's row
    lock are then held to its commit, so neither a hold nor an erasure comes in between.

    A hold keeps what it covers as it is, and an account is covered exactly when a hold refuses
    its erasure: a workspace hold, or one on a conversation holding its live messages. An erased
    account keeps the name erasure gave it: a form read before the erasure must not bring the
    former name back.
    """
    _hold_lock(workspace_id, exclusive=False)
    erased = (
        Account.objects.select_for_update()
        .filter(workspace_id=workspace_id, pk=account_id)
        .values_list("erased_at", flat=True)
        .first()
    )
    if erased is not None:
        return "This account is erased: its name and external id stay as erasure left them."
    if _covering_hold(workspace_id, _ACCOUNT_ROOMS, [workspace_id, account_id]) is not None:
        return HELD_ROW
    return None


def row_edit_refusal(
    *, workspace_id: uuid.UUID, conversation_id: uuid.UUID | None = None
) -> str | None:
    """Why a conversation (or, without one, another row of the workspace, such as an agent)
    may not be changed now: a hold on the workspace or on that conversation. The hold lock is
    held as ``account_edit_refusal`` holds it."""
    conversations = [] if conversation_id is None else [conversation_id]
    if erasure_guard(workspace_id=workspace_id, conversation_ids=conversations) is not None:
        return HELD_ROW
    return None


def hold_place(
    *,
    workspace_id: uuid.UUID,
    conversation_id: uuid.UUID | None,
    reference: str,
    actor: Actor,
) -> LegalHold:
    """Hold one conversation, or the whole workspace when ``conversation_id`` is None."""
    if (
        conversation_id is not None
        and not Conversation.objects.filter(workspace_id=workspace_id, pk=conversation_id).exists()
    ):
        raise InvalidArguments.for_field("conversationId", "Unknown conversationId.")
    with transaction.atomic():
        # Waits for the erasures and edits in flight; every later one sees this hold.
        _hold_lock(workspace_id, exclusive=True)
        hold = LegalHold.objects.create(
            workspace_id=workspace_id, conversation_id=conversation_id, reference=reference
        )
        _record_hold(hold, LifecycleAction.HOLD_PLACED, actor)
    return hold


def hold_release(*, hold: LegalHold, actor: Actor) -> LegalHold:
    with transaction.atomic():
        released = LegalHold.objects.filter(
            workspace_id=hold.workspace_id, pk=hold.pk, released_at__isnull=True
        ).update(released_at=timezone.now())
        if not released:
            raise InvalidArguments("This legal hold is already released.")
        _record_hold(hold, LifecycleAction.HOLD_RELEASED, actor)
    hold.refresh_from_db(from_queryset=LegalHold.objects.filter(workspace_id=hold.workspace_id))
    return hold


def _record_hold(hold: LegalHold, action: str, actor: Actor) -> None:
    if hold.conversation_id is None:
        subject_kind, subject_id = LifecycleSubject.WORKSPACE, hold.workspace_id
    else:
        subject_kind, subject_id = LifecycleSubject.CONVERSATION, hold.conversation_id
    lifecycle_start(
        workspace_id=hold.workspace_id,
        action=action,
        subject_kind=subject_kind,
        subject_id=subject_id,
        actor=actor,
        hold_id=hold.id,
        finished=True,
    )


# --- erasing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Erased:
    messages: int
    conversations: int
    derived_marked: int


def messages_erase(
    *, workspace_id: uuid.UUID, message_ids: Sequence[uuid.UUID], now: datetime | None = None
) -> Erased:
    """Erase these messages' bodies for good (live ones only), in the caller's transaction,
    after its ``erasure_guard``.

    Three statements, in this order so that two concurrent erasures take their locks in the
    same order: the messages (the search triggers drop their documents in the same statement),
    the messages derived from them (marked, never touched otherwise), then the live counts of
    their conversations, locked in id order.
    """
    if not message_ids:
        return Erased(0, 0, 0)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""UPDATE {MESSAGES} SET content = '', deleted_at = %s, edited_at = NULL
                WHERE workspace_id = %s AND id = ANY(%s::uuid[]) AND deleted_at IS NULL
                RETURNING id, conversation_id""",
            [now or timezone.now(), workspace_id, list(message_ids)],
        )
        erased = cursor.fetchall()
        if not erased:
            return Erased(0, 0, 0)
        # Lineage rows hold the closure, so this reaches every level of derived messages.
        cursor.execute(
            f"""UPDATE {MESSAGES} AS derived SET sources_erased = true
                WHERE derived.workspace_id = %s AND derived.deleted_at IS NULL
                  AND NOT derived.sources_erased
                  AND derived.id IN (SELECT lineage.message_id FROM {LINEAGE} AS lineage
                                     WHERE lineage.workspace_id = %s
                                       AND lineage.source_id = ANY(%s::uuid[]))""",
            [workspace_id, workspace_id, [message_id for message_id, _ in erased]],
        )
        marked = cursor.rowcount
        per_room = Counter(conversation_id for _, conversation_id in erased)
        rooms = sorted(per_room)
        if len(rooms) > 1:
            cursor.execute(
                f"SELECT id FROM {CONVERSATIONS} WHERE workspace_id = %s AND id = ANY(%s::uuid[]) "
                "ORDER BY id FOR NO KEY UPDATE",
                [workspace_id, rooms],
            )
        cursor.execute(
            f"""UPDATE {CONVERSATIONS} AS c SET live_message_count = c.live_message_count - e.n
                FROM unnest(%s::uuid[], %s::bigint[]) AS e(id, n)
                WHERE c.workspace_id = %s AND c.id = e.id""",
            [rooms, [per_room[room] for room in rooms], workspace_id],
        )
    return Erased(messages=len(erased), conversations=len(rooms), derived_marked=marked)


# --- retention --------------------------------------------------------------------------------


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
    with transaction.atomic():
        Conversation.objects.filter(
            workspace_id=conversation.workspace_id, pk=conversation.pk
        ).update(retention_override=True, retention_days=_check_days(days))
    conversation.refresh_from_db(
        fields=["retention_override", "retention_days"],
        from_queryset=Conversation.objects.filter(workspace_id=conversation.workspace_id),
    )
    return conversation_retention(conversation=conversation)


def conversation_retention_inherit(*, conversation: Conversation) -> ConversationRetention:
    """Drop the override: the workspace's period applies again."""
    with transaction.atomic():
        Conversation.objects.filter(
            workspace_id=conversation.workspace_id, pk=conversation.pk
        ).update(retention_override=False, retention_days=None)
    conversation.refresh_from_db(
        fields=["retention_override", "retention_days"],
        from_queryset=Conversation.objects.filter(workspace_id=conversation.workspace_id),
    )
    return conversation_retention(conversation=conversation)


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


# The conversations of the workspace with a period (their own, else the workspace's; null
# keeps) and at least one live message older than it: one probe of the timeline index each, so
# a run spends no transaction on a conversation with nothing to erase.
_RETAINED_CONVERSATIONS = f"""
    SELECT r.id, r.days FROM (
        SELECT c.id,
               CASE WHEN c.retention_override THEN c.retention_days
                    ELSE w.retention_days END AS days
        FROM {CONVERSATIONS} AS c JOIN {Workspace._meta.db_table} AS w ON w.id = c.workspace_id
        WHERE c.workspace_id = %(ws)s
    ) AS r
    WHERE r.days IS NOT NULL
      AND EXISTS (SELECT 1 FROM {MESSAGES} AS m
                  WHERE m.workspace_id = %(ws)s AND m.conversation_id = r.id
                    AND m.deleted_at IS NULL
                    AND m.created_at < %(now)s - make_interval(days => r.days))
    ORDER BY r.id
"""

# Rows another transaction holds (an edit, a delete) are skipped, not waited for: the next run
# picks them up. The timeline index serves this in time order.
_EXPIRED_BATCH = f"""
    SELECT id FROM {MESSAGES}
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
    progress: Callable[[RetentionReport, uuid.UUID, int], None] | None = None,
) -> list[RetentionReport]:
    """Erase every live message older than its conversation's period, workspace by workspace.

    A message is erased when ``created_at < now - period``: one exactly as old as its period is
    kept. ``now`` is fixed for the whole run, so a run draws one line however long it takes.
    Held conversations with something to erase are skipped (``held_conversations``). Each
    workspace with any period gets one lifecycle row, whose counts follow each batch's commit.
    """
    check_batch_size(batch_size)
    now = now or timezone.now()
    workspaces = Workspace.objects.filter(
        Q(retention_days__isnull=False)
        | Q(conversations__retention_override=True, conversations__retention_days__isnull=False)
    ).distinct()
    if workspace_slug is not None:
        workspaces = workspaces.filter(slug=workspace_slug)
    reports = []
    for workspace in workspaces.order_by("slug"):
        report = RetentionReport(workspace_id=workspace.id, slug=workspace.slug)
        event_id = lifecycle_start(
            workspace_id=workspace.id,
            action=LifecycleAction.RETENTION,
            subject_kind=LifecycleSubject.WORKSPACE,
            subject_id=workspace.id,
            actor=actor,
            counts=report.counts(),
        )
        with connection.cursor() as cursor:
            cursor.execute(_RETAINED_CONVERSATIONS, {"ws": workspace.id, "now": now})
            retained = cursor.fetchall()
        for conversation_id, days in retained:
            _retain_conversation(
                report, event_id, conversation_id, now - timedelta(days=days), batch_size, progress
            )
        lifecycle_finish(
            event_id=event_id, action=LifecycleAction.RETENTION, counts=report.counts()
        )
        reports.append(report)
    return reports


def _retain_conversation(
    report: RetentionReport,
    event_id: uuid.UUID,
    conversation_id: uuid.UUID,
    cutoff: datetime,
    batch_size: int,
    progress: Callable[[RetentionReport, uuid.UUID, int], None] | None,
) -> None:
    touched = False
    while True:
        with transaction.atomic():
            if erasure_guard(workspace_id=report.workspace_id, conversation_ids=[conversation_id]):
                report.held_conversations += 1
                lifecycle_progress(event_id=event_id, counts=report.counts())
                return
            with connection.cursor() as cursor:
                cursor.execute(
                    _EXPIRED_BATCH, [report.workspace_id, conversation_id, cutoff, batch_size]
                )
                ids = [row[0] for row in cursor.fetchall()]
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


# --- account erasure --------------------------------------------------------------------------


@dataclass
class ErasureReport:
    account_id: uuid.UUID
    messages: int = 0
    identity_links: int = 0
    derived_marked: int = 0
    admin_log_entries: int = 0
    erased_at: datetime | None = None

    def counts(self) -> dict[str, int]:
        return {
            "messages": self.messages,
            "identityLinks": self.identity_links,
            "derivedMessagesMarked": self.derived_marked,
            "adminLogEntries": self.admin_log_entries,
        }


_ACCOUNT_BATCH = f"""
    SELECT id, conversation_id FROM {MESSAGES}
    WHERE workspace_id = %s AND sender_account_id = %s AND deleted_at IS NULL
    ORDER BY created_at, id
    LIMIT %s
    FOR UPDATE
"""
_ACCOUNT_ROOMS = f"""
    SELECT DISTINCT conversation_id FROM {MESSAGES}
    WHERE workspace_id = %s AND sender_account_id = %s AND deleted_at IS NULL
"""


def account_erase(
    *,
    workspace_id: uuid.UUID,
    account_id: uuid.UUID,
    actor: Actor,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> ErasureReport:
    """Right to erasure: every message the account wrote is erased as a delete erases it, its
    identity links are removed, its name and external id replaced; the row stays, so
    memberships, runs and the lineage of what others derived from its messages stay whole.

    Refused with ``legal_hold_active`` (nothing changed) while a hold covers the workspace or a
    conversation holding its live messages. Calling it again finishes an erasure that stopped
    midway and is harmless after one that completed. A hold placed while it runs stops it at
    the next batch: what was erased before the hold stays erased, and the record, written when
    it starts, says ``refused``.
    """
    check_batch_size(batch_size)
    if not Account.objects.filter(workspace_id=workspace_id, pk=account_id).exists():
        raise NotFound()
    report = ErasureReport(account_id=account_id)
    with transaction.atomic():
        _hold_lock(workspace_id, exclusive=False)
        hold_id = _covering_hold(workspace_id, _ACCOUNT_ROOMS, [workspace_id, account_id])
        if hold_id is not None:
            raise LegalHoldActive(hold_id)
        event_id = lifecycle_start(
            workspace_id=workspace_id,
            action=LifecycleAction.ERASURE,
            subject_kind=LifecycleSubject.ACCOUNT,
            subject_id=account_id,
            actor=actor,
            counts=report.counts(),
        )
    try:
        while _erase_account_batch(report, event_id, workspace_id, batch_size):
            logger.info("account erasure: %d messages erased so far", report.messages)
        with transaction.atomic():
            refuse_if_held(workspace_id=workspace_id, conversation_ids=[])
            report.identity_links, report.erased_at = _forget_identity(workspace_id, account_id)
            report.admin_log_entries = _forget_admin_log(workspace_id, account_id)
            lifecycle_finish(
                event_id=event_id, action=LifecycleAction.ERASURE, counts=report.counts()
            )
    except LegalHoldActive as refusal:
        lifecycle_finish(
            event_id=event_id,
            action=LifecycleAction.ERASURE,
            counts=report.counts(),
            outcome=LifecycleOutcome.REFUSED,
            hold_id=uuid.UUID(refusal.details["holdId"]),
        )
        raise
    return report


def _erase_account_batch(
    report: ErasureReport, event_id: uuid.UUID, workspace_id: uuid.UUID, batch_size: int
) -> bool:
    """The account's next oldest messages, in a transaction of their own, unless a hold now
    covers one of their conversations; True while more may be left."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_ACCOUNT_BATCH, [workspace_id, report.account_id, batch_size])
            batch = cursor.fetchall()
        refuse_if_held(workspace_id=workspace_id, conversation_ids=[room for _, room in batch])
        erased = messages_erase(
            workspace_id=workspace_id, message_ids=[message_id for message_id, _ in batch]
        )
        report.messages += erased.messages
        report.derived_marked += erased.derived_marked
        lifecycle_progress(event_id=event_id, counts=report.counts())
    return len(batch) == batch_size


def _forget_identity(workspace_id: uuid.UUID, account_id: uuid.UUID) -> tuple[int, datetime]:
    """Remove the account's identity links and replace its name and external id; the first
    erasure's time is kept. Returns the links removed and that time."""
    links, _ = (
        IdentityLink.objects.filter(workspace_id=workspace_id)
        .filter(Q(account_id=account_id) | Q(linked_account_id=account_id))
        .delete()
    )
    account = Account.objects.filter(workspace_id=workspace_id, pk=account_id)
    account.update(
        display_name=ERASED_NAME,
        external_id=None,
        erased_at=Coalesce(F("erased_at"), Value(timezone.now())),
    )
    erased_at = account.values_list("erased_at", flat=True).get()
    return links, erased_at


def _forget_admin_log(workspace_id: uuid.UUID, account_id: uuid.UUID) -> int:
    """Rewrite what Django's admin log says about the account, after its name is replaced.

    Each admin save logs the row's name as it was then (``object_repr``, which "Recent actions"
    and the history page show), so every earlier name of the account is there. The account's
    entries and its memberships' ("<name> in <conversation>") are renamed from the rows as they
    are now, and their change messages keep only what changed (field and model names), never
    an object's name. No other entry can hold the account's name or external id, or message
    text: messages, identity links and runs are logged by conversation title and seq or by ids.
    The log is not a tenant table (on Citus it stays on the coordinator), so it is read and
    written in statements of its own. Returns how many entries changed.
    """
    types = ContentType.objects.get_for_models(Account, Membership)
    memberships = Membership.objects.filter(
        workspace_id=workspace_id, account_id=account_id
    ).select_related("account", "agent", "conversation")
    names = {(types[Account].pk, str(account_id)): ERASED_NAME}
    names.update({(types[Membership].pk, str(row.pk)): str(row) for row in memberships})
    entries = LogEntry.objects.filter(
        Q(content_type=types[Account], object_id=str(account_id))
        | Q(
            content_type=types[Membership],
            object_id__in=[object_id for kind, object_id in names if kind != types[Account].pk],
        )
    ).only("id", "content_type_id", "object_id", "object_repr", "change_message")
    rewritten = []
    for entry in entries:
        name = names[(entry.content_type_id, entry.object_id)][:200]
        message = _unnamed_change_message(entry.change_message)
        if (entry.object_repr, entry.change_message) != (name, message):
            entry.object_repr, entry.change_message = name, message
            rewritten.append(entry)
    LogEntry.objects.bulk_update(rewritten, ["object_repr", "change_message"])
    return len(rewritten)


def _unnamed_change_message(raw: str) -> str:
    """An admin change message reduced to what changed: ``added``, ``changed`` and ``deleted``
    with the model's and the fields' names, without the ``object`` a related row is named by;
    a message that is not Django's JSON list (free text may quote anything) becomes empty."""
    try:
        actions = json.loads(raw)
    except ValueError:
        return ""
    if not isinstance(actions, list):
        return ""
    kept = [
        {kind: {key: value for key, value in detail.items() if key in ("name", "fields")}}
        for action in actions
        if isinstance(action, dict)
        for kind, detail in action.items()
        if kind in ("added", "changed", "deleted") and isinstance(detail, dict)
    ]
    return json.dumps(kept)


# --- export -----------------------------------------------------------------------------------

# A page of an export holds at most ``DEFAULT_BATCH_SIZE`` messages and at most ``PAGE_BYTES``
# bytes of message text (a single larger message is a page of its own), so memory is bounded
# in bytes whatever the messages' sizes, and an export of more than a page of text comes in
# more than one piece, which the production worker streams (formation/serving.py).
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
    f"""SELECT {summary_columns("m")} FROM {MESSAGES} AS m
        WHERE m.workspace_id = %s AND m.conversation_id = %s AND m.deleted_at IS NULL
          AND m.seq > %s
        ORDER BY m.seq
        LIMIT %s""",
    "c.seq",
)
_ACCOUNT_PAGE = _byte_bounded(
    f"""SELECT {summary_columns("m")} FROM {MESSAGES} AS m
        WHERE m.workspace_id = %s AND m.sender_account_id = %s AND m.deleted_at IS NULL
          AND (m.created_at, m.id) > (%s, %s)
        ORDER BY m.created_at, m.id
        LIMIT %s""",
    "c.created_at, c.id",
)
_CONVERSATIONS_PAGE = f"""
    SELECT created_at, id FROM {CONVERSATIONS}
    WHERE workspace_id = %s AND (created_at, id) > (%s, %s)
    ORDER BY created_at, id
    LIMIT %s
"""
# Where each keyset's position is read from the last row of a page.
_SEQ = SUMMARY_COLUMNS.index("seq")
_CREATED_AT = SUMMARY_COLUMNS.index("created_at")
_ID = SUMMARY_COLUMNS.index("id")
_BEFORE_EVERYTHING = (datetime(1, 1, 1, tzinfo=UTC), uuid.UUID(int=0))


def _pages(sql: str, params: Callable[[tuple | None], list], batch_size: int) -> Iterator[list]:
    """Keyset pages of ``sql``: each page its own short statement, so memory stays one page
    whatever the size, and no transaction or cursor stays open while a client reads slowly."""
    last: tuple | None = None
    while True:
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params(last), batch_size])
            rows = cursor.fetchall()
        if rows:
            yield rows
        if len(rows) < batch_size:
            return
        last = rows[-1]


def _message_pages(
    sql: str, params: Callable[[tuple | None], list], batch_size: int, page_bytes: int
) -> Iterator[list[MessageRow]]:
    """``_pages`` of a ``_byte_bounded`` statement: a page cut by its bytes is followed by the
    next, and only a page holding every candidate, fewer than the batch size, is the last."""
    last: tuple | None = None
    while True:
        with connection.cursor() as cursor:
            cursor.execute(sql, [*params(last), batch_size, page_bytes])
            rows = cursor.fetchall()
        if not rows:
            return
        yield [MessageRow(*row[:-1]) for row in rows]
        if len(rows) == rows[0][-1] < batch_size:
            return
        last = rows[-1]


def conversation_export_batches(
    *,
    workspace_id: uuid.UUID,
    conversation_id: uuid.UUID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    page_bytes: int = PAGE_BYTES,
) -> Iterator[list[MessageRow]]:
    """The conversation's live messages in conversation order (seq), a page at a time."""

    def params(last: tuple | None) -> list:
        return [workspace_id, conversation_id, last[_SEQ] if last else 0]

    return _message_pages(_CONVERSATION_PAGE, params, batch_size, page_bytes)


def account_export_batches(
    *,
    workspace_id: uuid.UUID,
    account_id: uuid.UUID,
    batch_size: int = DEFAULT_BATCH_SIZE,
    page_bytes: int = PAGE_BYTES,
) -> Iterator[list[MessageRow]]:
    """Every live message the account wrote, oldest first, across its workspace."""

    def params(last: tuple | None) -> list:
        position = (last[_CREATED_AT], last[_ID]) if last else _BEFORE_EVERYTHING
        return [workspace_id, account_id, *position]

    return _message_pages(_ACCOUNT_PAGE, params, batch_size, page_bytes)


def workspace_export_batches(
    *, workspace_id: uuid.UUID, batch_size: int = DEFAULT_BATCH_SIZE, page_bytes: int = PAGE_BYTES
) -> Iterator[list[MessageRow]]:
    """Every conversation of the workspace, oldest first, each in conversation order."""

    def params(last: tuple | None) -> list:
        return [workspace_id, *(last or _BEFORE_EVERYTHING)]

    for conversations in _pages(_CONVERSATIONS_PAGE, params, batch_size):
        for _, conversation_id in conversations:
            yield from conversation_export_batches(
                workspace_id=workspace_id,
                conversation_id=conversation_id,
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
    batches: Iterator[list[MessageRow]]
    if subject_kind == LifecycleSubject.CONVERSATION:
        if not Conversation.objects.filter(workspace_id=workspace_id, pk=subject_id).exists():
            raise NotFound()
        batches = conversation_export_batches(
            workspace_id=workspace_id, conversation_id=subject_id, batch_size=batch_size
        )
    elif subject_kind == LifecycleSubject.ACCOUNT:
        if not Account.objects.filter(workspace_id=workspace_id, pk=subject_id).exists():
            raise NotFound()
        batches = account_export_batches(
            workspace_id=workspace_id, account_id=subject_id, batch_size=batch_size
        )
    else:
        batches = workspace_export_batches(workspace_id=workspace_id, batch_size=batch_size)
    event_id = lifecycle_start(
        workspace_id=workspace_id,
        action=LifecycleAction.EXPORT,
        subject_kind=subject_kind,
        subject_id=subject_id,
        actor=actor,
    )
    return Export(event_id=event_id, batches=batches)
