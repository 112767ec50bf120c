"""Legal holds against erasure and edits (docs/lifecycle.md, "Legal holds").

A hold must stop every erasure, and every edit (which keeps no earlier version), that commits
after the hold does. Checking for a hold inside the erasing or editing transaction is not enough
under READ COMMITTED (the hold may commit between the check and that transaction's commit), so
the two take a per-workspace advisory lock: every erasing or editing transaction holds it shared
from before its hold check until its commit, and placing a hold takes it exclusively. A hold
therefore waits for the erasures and edits in flight to commit, and any that starts after it
sees it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from audit_app.lifecycle import Actor, lifecycle_start
from audit_app.models import LifecycleAction, LifecycleSubject
from formation.errors import InvalidArguments
from formation.sql import named_rows, table, transaction_advisory_lock
from messages_app.errors import LegalHoldActive
from messages_app.models import Account, Conversation, LegalHold, Message

# The first key of the two-key advisory lock (``pg_advisory_xact_lock(int, int)``): the hold
# lock's own space, the workspace's hash the second key. A hash collision between two
# workspaces only makes one wait for the other.
HOLD_LOCK_SPACE = 19_001

HELD_ROW = "A legal hold covers this row: it cannot be changed while the hold is active."

# The conversations an account's erasure would change: those holding its live messages.
_ACCOUNT_ROOMS = f"""
    SELECT DISTINCT conversation_id FROM {table(Message)}
    WHERE workspace_id = %s AND sender_account_id = %s AND deleted_at IS NULL
"""


def _hold_lock(workspace_id: uuid.UUID, *, exclusive: bool) -> None:
    """The workspace's hold lock until the transaction ends (see the module's docstring)."""
    transaction_advisory_lock(
        "%s, hashtext(%s)", [HOLD_LOCK_SPACE, str(workspace_id)], exclusive=exclusive
    )


def _covering_hold(workspace_id: uuid.UUID, conversations: str, params: list) -> uuid.UUID | None:
    """The oldest active hold on the workspace or on one of ``conversations`` (an SQL set)."""
    with named_rows() as cursor:
        cursor.execute(
            f"""SELECT h.id FROM {table(LegalHold)} AS h
                WHERE h.workspace_id = %s AND h.released_at IS NULL
                  AND (h.conversation_id IS NULL OR h.conversation_id IN ({conversations}))
                ORDER BY h.placed_at, h.id LIMIT 1""",
            [workspace_id, *params],
        )
        row = cursor.fetchone()
    return row.id if row else None


def _account_hold(workspace_id: uuid.UUID, account_id: uuid.UUID) -> uuid.UUID | None:
    """The hold covering the account: on the workspace, or on a conversation holding its live
    messages (exactly the holds that refuse its erasure)."""
    return _covering_hold(workspace_id, _ACCOUNT_ROOMS, [workspace_id, account_id])


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


def refuse_if_held(*, workspace_id: uuid.UUID, conversation_ids: Iterable[uuid.UUID]) -> None:
    """``erasure_guard``, raising ``legal_hold_active`` for a covering hold."""
    hold_id = erasure_guard(workspace_id=workspace_id, conversation_ids=conversation_ids)
    if hold_id is not None:
        raise LegalHoldActive(hold_id)


def refuse_if_account_held(*, workspace_id: uuid.UUID, account_id: uuid.UUID) -> None:
    """``refuse_if_held`` for an account's erasure: the hold lock (shared), then
    ``legal_hold_active`` for a hold on the workspace or on a conversation holding its live
    messages."""
    _hold_lock(workspace_id, exclusive=False)
    hold_id = _account_hold(workspace_id, account_id)
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
    if _account_hold(workspace_id, account_id) is not None:
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
