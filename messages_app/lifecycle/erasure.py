"""Erasing messages and accounts (docs/lifecycle.md, "Erasure is a delete", "Account erasure").

Erasing a message is exactly what deleting one is (``services.message_delete`` calls
``messages_erase`` too): the body is gone for good in the statement that sets ``deleted_at``,
the search projection's triggers remove its document in that same statement, and the row stays,
with every lineage row and inherited room that names it. So an agent reply or memory based on
an erased message keeps every restriction it inherited (SPEC §3 rule 4, §4): nothing here ever
deletes a lineage row, and derived messages are only marked (``Message.sources_erased``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit_app.lifecycle import Actor, lifecycle_finish, lifecycle_progress, lifecycle_start
from audit_app.models import LifecycleAction, LifecycleOutcome, LifecycleSubject
from formation.errors import NotFound
from formation.sql import named_rows, table
from messages_app.errors import LegalHoldActive
from messages_app.lifecycle.holds import refuse_if_account_held, refuse_if_held
from messages_app.limits import DEFAULT_BATCH_SIZE, check_batch_size
from messages_app.models import (
    Account,
    Conversation,
    IdentityLink,
    Membership,
    Message,
    MessageLineage,
)

logger = logging.getLogger(__name__)

# What an erased account is called from then on; its external id becomes null.
ERASED_NAME = "Erased account"


# --- messages ---------------------------------------------------------------------------------


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
    with named_rows() as cursor:
        erased = _erase_bodies(cursor, workspace_id, message_ids, now or timezone.now())
        if not erased:
            return Erased(0, 0, 0)
        marked = _mark_derived(cursor, workspace_id, [row.id for row in erased])
        rooms = _recount_rooms(cursor, workspace_id, Counter(row.conversation_id for row in erased))
    return Erased(messages=len(erased), conversations=rooms, derived_marked=marked)


def _erase_bodies(
    cursor: Any, workspace_id: uuid.UUID, message_ids: Sequence[uuid.UUID], now: datetime
) -> list[Any]:
    """The live ones of these messages emptied and deleted: their ids and conversations."""
    cursor.execute(
        f"""UPDATE {table(Message)} SET content = '', deleted_at = %s, edited_at = NULL
            WHERE workspace_id = %s AND id = ANY(%s::uuid[]) AND deleted_at IS NULL
            RETURNING id, conversation_id""",
        [now, workspace_id, list(message_ids)],
    )
    return cursor.fetchall()


def _mark_derived(cursor: Any, workspace_id: uuid.UUID, erased_ids: list[uuid.UUID]) -> int:
    """Mark the live messages derived from the erased ones (``sources_erased``); how many.
    Lineage rows hold the closure, so this reaches every level of derived messages."""
    cursor.execute(
        f"""UPDATE {table(Message)} AS derived SET sources_erased = true
            WHERE derived.workspace_id = %s AND derived.deleted_at IS NULL
              AND NOT derived.sources_erased
              AND derived.id IN (SELECT lineage.message_id FROM {table(MessageLineage)} AS lineage
                                 WHERE lineage.workspace_id = %s
                                   AND lineage.source_id = ANY(%s::uuid[]))""",
        [workspace_id, workspace_id, erased_ids],
    )
    return cursor.rowcount


def _recount_rooms(cursor: Any, workspace_id: uuid.UUID, per_room: Counter) -> int:
    """Lower the conversations' live counts by what was erased in each (locked in id order, so
    that two erasures never wait on each other in a cycle); how many conversations."""
    rooms = sorted(per_room)
    if len(rooms) > 1:
        cursor.execute(
            f"SELECT id FROM {table(Conversation)} WHERE workspace_id = %s "
            "AND id = ANY(%s::uuid[]) ORDER BY id FOR NO KEY UPDATE",
            [workspace_id, rooms],
        )
    cursor.execute(
        f"""UPDATE {table(Conversation)} AS c SET live_message_count = c.live_message_count - e.n
            FROM unnest(%s::uuid[], %s::bigint[]) AS e(id, n)
            WHERE c.workspace_id = %s AND c.id = e.id""",
        [rooms, [per_room[room] for room in rooms], workspace_id],
    )
    return len(rooms)


# --- accounts ---------------------------------------------------------------------------------


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
    SELECT id, conversation_id FROM {table(Message)}
    WHERE workspace_id = %s AND sender_account_id = %s AND deleted_at IS NULL
    ORDER BY created_at, id
    LIMIT %s
    FOR UPDATE
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
    event_id = _start_account_erasure(report, workspace_id, actor)
    try:
        while _erase_account_batch(report, event_id, workspace_id, batch_size):
            logger.info("account erasure: %d messages erased so far", report.messages)
        _finish_account_erasure(report, event_id, workspace_id)
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


def _start_account_erasure(
    report: ErasureReport, workspace_id: uuid.UUID, actor: Actor
) -> uuid.UUID:
    """The erasure's lifecycle row, written unless a hold covers the account (then
    ``legal_hold_active``, and nothing is written)."""
    with transaction.atomic():
        refuse_if_account_held(workspace_id=workspace_id, account_id=report.account_id)
        return lifecycle_start(
            workspace_id=workspace_id,
            action=LifecycleAction.ERASURE,
            subject_kind=LifecycleSubject.ACCOUNT,
            subject_id=report.account_id,
            actor=actor,
            counts=report.counts(),
        )


def _erase_account_batch(
    report: ErasureReport, event_id: uuid.UUID, workspace_id: uuid.UUID, batch_size: int
) -> bool:
    """The account's next oldest messages, in a transaction of their own, unless a hold now
    covers one of their conversations; True while more may be left."""
    with transaction.atomic():
        with named_rows() as cursor:
            cursor.execute(_ACCOUNT_BATCH, [workspace_id, report.account_id, batch_size])
            batch = cursor.fetchall()
        refuse_if_held(
            workspace_id=workspace_id, conversation_ids=[row.conversation_id for row in batch]
        )
        erased = messages_erase(workspace_id=workspace_id, message_ids=[row.id for row in batch])
        report.messages += erased.messages
        report.derived_marked += erased.derived_marked
        lifecycle_progress(event_id=event_id, counts=report.counts())
    return len(batch) == batch_size


def _finish_account_erasure(
    report: ErasureReport, event_id: uuid.UUID, workspace_id: uuid.UUID
) -> None:
    """With the messages erased: the account's identity forgotten, here and in the admin's log,
    and the record finished, in one transaction, unless a workspace hold came first."""
    with transaction.atomic():
        refuse_if_held(workspace_id=workspace_id, conversation_ids=[])
        report.identity_links, report.erased_at = _forget_identity(workspace_id, report.account_id)
        report.admin_log_entries = _forget_admin_log(workspace_id, report.account_id)
        lifecycle_finish(event_id=event_id, action=LifecycleAction.ERASURE, counts=report.counts())


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
