"""API tokens, stored only as digests; ``TokenKind`` (which kind of holder a token speaks for)
is formation's, since authentication reads it, and is re-exported here beside the model."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from formation.auth import TokenKind
from formation.tenancy import TenantForeignKey, TenantModel
from messages_app.models.runs import Run
from messages_app.models.workspaces import Agent, Workspace


class ApiToken(TenantModel):
    """A bearer token, stored only as its SHA-256 digest (tokens carry 256 random bits)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="tokens")
    kind = models.CharField(max_length=16, choices=TokenKind.choices)
    agent = TenantForeignKey(
        Agent,
        db_constraint=False,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="tokens",
    )
    run = TenantForeignKey(
        Run,
        db_constraint=False,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="tokens",
    )
    digest = models.CharField(max_length=64, editable=False)
    prefix = models.CharField(max_length=32, editable=False, help_text="For recognising a token.")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["workspace_id", "-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(kind="service") & Q(agent__isnull=True) & Q(run__isnull=True))
                | (Q(kind="agent") & Q(agent__isnull=False) & Q(run__isnull=True))
                | (Q(kind="run") & Q(agent__isnull=False) & Q(run__isnull=False)),
                name="token_kind_matches_subject",
            ),
            # A token names its workspace (see ``formation/auth.py``), so it is found on one
            # shard; digests of 256 random bits do not collide across workspaces.
            models.UniqueConstraint(
                fields=["workspace", "digest"], name="messages_app_apitoken_digest_key"
            ),
        ]
        # Tokens issued before they named their workspace are found by digest alone.
        indexes = [models.Index(fields=["digest"], name="token_digest")]
        verbose_name = "API token"
        verbose_name_plural = "API tokens"

    def __str__(self) -> str:
        return f"{self.kind} {self.prefix}…"
