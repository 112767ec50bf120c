"""API tokens: made with their only plain-text copy, and revoked."""

from __future__ import annotations

import secrets
import uuid

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from formation.auth import token_digest, token_text
from messages_app.models import (
    Agent,
    ApiToken,
    Run,
)


def token_create(
    *,
    workspace_id: uuid.UUID,
    kind: str,
    agent: Agent | None = None,
    run: Run | None = None,
) -> tuple[ApiToken, str]:
    """Make a token and return it with its only plain-text copy (never stored)."""
    secret = secrets.token_urlsafe(32)
    raw = token_text(kind, workspace_id, secret)
    with transaction.atomic():
        token = ApiToken.objects.create(
            workspace_id=workspace_id,
            kind=kind,
            agent=agent,
            run=run,
            digest=token_digest(raw),
            prefix=f"fmn_{kind}_{secret[:6]}",
        )
    return token, raw


def token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke one token (``tokens_revoke``); one already revoked keeps its time."""
    tokens_revoke(tokens=ApiToken.objects.filter(workspace_id=token.workspace_id, pk=token.pk))
    token.refresh_from_db(from_queryset=ApiToken.objects.filter(workspace_id=token.workspace_id))
    return token


def tokens_revoke(*, tokens: QuerySet[ApiToken]) -> list[ApiToken]:
    """Revoke every token of ``tokens`` still live, all at one time; the ones this call revoked
    (as they were read, before the update). One already revoked keeps its time.

    Each token is locked before it is revoked, so two callers revoking at once revoke (and an
    admin logs) each token once, with one time; one workspace at a time, so on Citus each lock
    and update is on one shard.
    """
    selected: dict[uuid.UUID, list[uuid.UUID]] = {}
    for workspace_id, pk in tokens.values_list("workspace_id", "pk"):
        selected.setdefault(workspace_id, []).append(pk)
    revoked: list[ApiToken] = []
    with transaction.atomic():
        now = timezone.now()
        for workspace_id in sorted(selected):
            live = ApiToken.objects.filter(
                workspace_id=workspace_id, pk__in=selected[workspace_id], revoked_at__isnull=True
            )
            locked = list(live.select_for_update())
            live.filter(pk__in=[token.pk for token in locked]).update(revoked_at=now)
            revoked += locked
    return revoked
