"""Workspaces and who acts in them: accounts, agents, and the identity links between accounts."""

from __future__ import annotations

import uuid

from django.db import IntegrityError, transaction
from django.utils import timezone

from formation.errors import InvalidArguments
from messages_app.models import (
    DEFAULT_LANGUAGE,
    Account,
    Agent,
    IdentityLink,
    IdentityLinkStatus,
    Workspace,
)
from messages_app.selectors import text_search_configurations


def workspace_create(*, slug: str, name: str = "", language: str = DEFAULT_LANGUAGE) -> Workspace:
    """A new workspace whose search uses text search configuration ``language``."""
    if language not in text_search_configurations():
        raise InvalidArguments.for_field(
            "language", "Not a text search configuration of this database (see pg_ts_config)."
        )
    try:
        with transaction.atomic():
            return Workspace.objects.create(slug=slug, name=name or slug, language=language)
    except IntegrityError as duplicate:
        raise InvalidArguments("A workspace with this slug already exists.") from duplicate


def account_create(
    *, workspace_id: uuid.UUID, display_name: str, external_id: str | None = None
) -> Account:
    try:
        with transaction.atomic():
            return Account.objects.create(
                workspace_id=workspace_id, display_name=display_name, external_id=external_id
            )
    except IntegrityError as conflict:
        raise InvalidArguments.for_field(
            "externalId", "An account with this externalId already exists."
        ) from conflict


def agent_create(*, workspace_id: uuid.UUID, name: str) -> Agent:
    with transaction.atomic():
        return Agent.objects.create(workspace_id=workspace_id, name=name)


def identity_link_create(
    *, workspace_id: uuid.UUID, account_id: uuid.UUID, linked_account_id: uuid.UUID
) -> IdentityLink:
    if account_id == linked_account_id:
        raise InvalidArguments("An identity link joins two different accounts.")
    known = Account.objects.filter(
        workspace_id=workspace_id, pk__in=[account_id, linked_account_id]
    ).count()
    if known != 2:
        raise InvalidArguments("Unknown accountId or linkedAccountId.")
    try:
        with transaction.atomic():
            return IdentityLink.objects.create(
                workspace_id=workspace_id,
                account_id=account_id,
                linked_account_id=linked_account_id,
            )
    except IntegrityError as duplicate:
        raise InvalidArguments("These accounts already have an unrevoked link.") from duplicate


def identity_link_verify(*, link: IdentityLink) -> IdentityLink:
    with transaction.atomic():
        updated = IdentityLink.objects.filter(
            workspace_id=link.workspace_id, pk=link.pk, status=IdentityLinkStatus.PENDING
        ).update(status=IdentityLinkStatus.VERIFIED, verified_at=timezone.now())
        if not updated:
            raise InvalidArguments("Only a pending link can be verified.")
    link.refresh_from_db(from_queryset=IdentityLink.objects.filter(workspace_id=link.workspace_id))
    return link


def identity_link_revoke(*, link: IdentityLink) -> IdentityLink:
    with transaction.atomic():
        updated = IdentityLink.objects.filter(
            workspace_id=link.workspace_id,
            pk=link.pk,
            status__in=[IdentityLinkStatus.PENDING, IdentityLinkStatus.VERIFIED],
        ).update(status=IdentityLinkStatus.REVOKED, revoked_at=timezone.now())
        if not updated:
            raise InvalidArguments("This link is already revoked.")
    link.refresh_from_db(from_queryset=IdentityLink.objects.filter(workspace_id=link.workspace_id))
    return link
