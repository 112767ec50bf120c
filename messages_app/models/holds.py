"""Legal holds: what retention and erasure must leave in place."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from formation.tenancy import TenantForeignKey, TenantModel
from messages_app.models.conversations import Conversation
from messages_app.models.workspaces import Workspace


class LegalHold(TenantModel):
    """A legal hold on one conversation, or (no conversation) on the whole workspace.

    While a hold is active (not released) retention skips what it covers, and delete, edit and
    erasure of its messages are refused (``legal_hold_active``). Placement and release are
    recorded in the lifecycle record (``audit_app.models.LifecycleEvent``); the row stays.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    conversation = TenantForeignKey(
        Conversation,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="legal_holds",
        help_text="Empty: every conversation of the workspace.",
        db_constraint=False,
    )
    reference = models.CharField(
        max_length=200, blank=True, help_text="The matter or case the hold serves."
    )
    placed_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["workspace_id", "-placed_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(released_at__isnull=True) | Q(released_at__gte=F("placed_at")),
                name="legal_hold_released_after_placed",
            )
        ]
        indexes = [
            models.Index(
                fields=["workspace", "conversation"],
                condition=Q(released_at__isnull=True),
                name="legal_hold_active",
            )
        ]

    def __str__(self) -> str:
        return f"legal hold {self.reference or self.id}"
