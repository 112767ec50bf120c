"""Runs (one agent turn each) and the evidence their searches saw.

Their logic and admin live in ``search_app/runs/``; the tables stay here, beside the messages
that point at them, because moving tables between apps is migration churn with no change of
behaviour."""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.utils import timezone

from formation.tenancy import TenantForeignKey, TenantModel
from messages_app.models.conversations import Conversation
from messages_app.models.messages import Message
from messages_app.models.workspaces import Account, Agent, Workspace


class ToolScope(models.TextChoices):
    MEMBERSHIP = "membership", "Membership (each message flagged deliverable)"
    DELIVERABLE = "deliverable", "Deliverable to the destination only"


class Run(TenantModel):
    """One agent turn, created by the runtime; its tools take agent and audience from here."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    agent = TenantForeignKey(
        Agent, db_constraint=False, on_delete=models.PROTECT, related_name="runs"
    )
    conversation = TenantForeignKey(
        Conversation,
        db_constraint=False,
        on_delete=models.PROTECT,
        related_name="runs",
        help_text="Destination.",
    )
    requester = TenantForeignKey(
        Account, db_constraint=False, on_delete=models.PROTECT, related_name="+"
    )
    current_message = TenantForeignKey(
        Message,
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    recent_message_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The distinct messages search_history has brought into the run's evidence (its budget),
    # kept on the row every search locks by a trigger on the evidence table (migration 0010):
    # a search that waited for the lock reads the count the previous one committed, where a
    # count of evidence rows in the same statement would still see its older snapshot.
    history_evidence_count = models.PositiveIntegerField(default=0, editable=False)
    # What the membership tools (list_messages, get_message, search_messages) return to this
    # run's token: everything membership allows, each message flagged ``deliverable``, or
    # only what the destination may receive (SPEC §3, as search_history applies it).
    tool_scope = models.CharField(
        max_length=16, choices=ToolScope.choices, default=ToolScope.MEMBERSHIP
    )
    # The reply the run delivered (set with ``finished_at``; null for runs that replied
    # before this column existed). A composite key keeps it in the destination (migration 0011).
    reply = TenantForeignKey(
        Message,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )

    class Meta:
        ordering = ["workspace_id", "-created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(tool_scope__in=ToolScope.values), name="run_tool_scope_valid"
            ),
            models.CheckConstraint(
                condition=Q(reply__isnull=True) | Q(finished_at__isnull=False),
                name="run_reply_only_when_finished",
            ),
        ]
        indexes = [models.Index(fields=["workspace", "agent", "created_at"], name="run_ws_agent")]

    def __str__(self) -> str:
        """The agent, where it replies and when, for the admin's titles (no message text)."""
        return f"{self.agent} in {self.conversation} at {self.created_at:%Y-%m-%d %H:%M:%S}"


class RunEvidence(TenantModel):
    """A message a run's tools returned to the model, recorded once per run (SPEC §2, §4).

    The set is the run's evidence budget (at most 400 from search_history) and, at delivery,
    the lineage of the reply.
    """

    # No key of its own, nor index: the composite keys to the run and the message name the
    # workspace already, and a search inserts up to a hundred rows, each checked per key.
    workspace = models.ForeignKey(
        Workspace,
        db_constraint=False,
        db_index=False,
        on_delete=models.PROTECT,
        related_name="+",
    )
    # Read by (workspace, run) through run_evidence_once.
    run = TenantForeignKey(
        Run, db_constraint=False, db_index=False, on_delete=models.CASCADE, related_name="evidence"
    )
    message = TenantForeignKey(
        Message, db_constraint=False, on_delete=models.PROTECT, related_name="+"
    )
    tool = models.CharField(max_length=32, help_text="The tool that first returned the message.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run_id", "created_at", "id"]
        verbose_name_plural = "run evidence"
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "run", "message"], name="run_evidence_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} saw {self.message_id}"
