"""Conversations and their memberships: who joins and leaves a room, and when."""

from __future__ import annotations

import uuid
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from formation.errors import InvalidArguments
from messages_app.limits import (
    MAX_CLOCK_SKEW,
)
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    Membership,
)


def conversation_create(
    *, workspace_id: uuid.UUID, kind: str, title: str, external_id: str | None = None
) -> Conversation:
    try:
        with transaction.atomic():
            return Conversation.objects.create(
                workspace_id=workspace_id, kind=kind, title=title, external_id=external_id
            )
    except IntegrityError as conflict:
        raise InvalidArguments.for_field(
            "externalId", "A conversation with this externalId already exists."
        ) from conflict


def _member_filter(account_id: uuid.UUID | None, agent_id: uuid.UUID | None) -> Q:
    return Q(account_id=account_id) if account_id else Q(agent_id=agent_id)


def _resolve_member(
    *, workspace_id: uuid.UUID, account_id: uuid.UUID | None, agent_id: uuid.UUID | None
) -> None:
    """The member must exist in the conversation's workspace (else it is an unknown id)."""
    if account_id is not None:
        if not Account.objects.filter(workspace_id=workspace_id, pk=account_id).exists():
            raise InvalidArguments.for_field("accountId", "Unknown accountId.")
    elif not Agent.objects.filter(workspace_id=workspace_id, pk=agent_id).exists():
        raise InvalidArguments.for_field("agentId", "Unknown agentId.")


def membership_join(
    *,
    conversation: Conversation,
    account_id: uuid.UUID | None = None,
    agent_id: uuid.UUID | None = None,
    joined_at: datetime | None = None,
) -> Membership:
    """Add a member from ``joined_at`` (default now); a current member cannot join again."""
    _resolve_member(
        workspace_id=conversation.workspace_id, account_id=account_id, agent_id=agent_id
    )
    joined_at = joined_at or timezone.now()
    if joined_at > timezone.now() + MAX_CLOCK_SKEW:
        raise InvalidArguments.for_field("joinedAt", "joinedAt is in the future.")
    member = _member_filter(account_id, agent_id)
    try:
        with transaction.atomic():
            current = Membership.objects.filter(
                member,
                workspace_id=conversation.workspace_id,
                conversation_id=conversation.pk,
                left_at__isnull=True,
            )
            if current.exists():
                raise InvalidArguments("Already a current member of this conversation.")
            return Membership.objects.create(
                workspace_id=conversation.workspace_id,
                conversation=conversation,
                account_id=account_id,
                agent_id=agent_id,
                joined_at=joined_at,
            )
    except IntegrityError as overlap:
        # The exclusion constraint: this interval overlaps an earlier one (or a concurrent join).
        raise InvalidArguments(
            "This membership would overlap an existing membership interval."
        ) from overlap


def membership_leave(
    *,
    conversation: Conversation,
    account_id: uuid.UUID | None = None,
    agent_id: uuid.UUID | None = None,
    left_at: datetime | None = None,
) -> Membership:
    _resolve_member(
        workspace_id=conversation.workspace_id, account_id=account_id, agent_id=agent_id
    )
    left_at = left_at or timezone.now()
    if left_at > timezone.now() + MAX_CLOCK_SKEW:
        raise InvalidArguments.for_field("leftAt", "leftAt is in the future.")
    current = Membership.objects.filter(
        _member_filter(account_id, agent_id),
        workspace_id=conversation.workspace_id,
        conversation_id=conversation.pk,
        left_at__isnull=True,
    )
    with transaction.atomic():
        membership = current.select_for_update().first()
        if membership is None:
            raise InvalidArguments("Not a current member of this conversation.")
        if left_at <= membership.joined_at:
            raise InvalidArguments.for_field("leftAt", "leftAt must be after joinedAt.")
        current.filter(pk=membership.pk).update(left_at=left_at)
        membership.left_at = left_at
        return membership
