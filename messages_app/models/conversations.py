"""Conversations (rooms) and the membership intervals that decide who was in one when."""

from __future__ import annotations

import uuid

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.db import models
from django.db.models import F, Func, Q
from django.utils import timezone

from formation.tenancy import TenantForeignKey, TenantModel
from messages_app.models.workspaces import Account, Agent, Workspace, retention_in_range


class TsTzRange(Func):
    """``tstzrange(joined_at, left_at, '[)')``: an open-ended interval while left_at is null."""

    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


class ConversationKind(models.TextChoices):
    PUBLIC = "public", "Workspace-public channel"
    DIRECT = "direct", "Direct (one human and the agent)"
    PRIVATE = "private", "Private channel or group DM"
    UNKNOWN = "unknown", "Unknown audience"


class Conversation(TenantModel):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="conversations")
    kind = models.CharField(max_length=16, choices=ConversationKind.choices)
    title = models.CharField(max_length=300)
    external_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(default=timezone.now)
    # The last seq handed out. Incremented under the row lock in the same transaction as the
    # insert, so a rolled-back insert gives its numbers back and committed seqs have no gaps.
    last_seq = models.BigIntegerField(default=0, editable=False)
    # Live (not deleted) messages, kept in the same transactions as inserts and deletes, so
    # list_messages can answer `total` without counting a conversation of millions each call.
    live_message_count = models.BigIntegerField(default=0, editable=False)
    # With ``retention_override`` this conversation's own period replaces the workspace's
    # (``retention_days`` null then means "keep"); without it the workspace's applies.
    retention_override = models.BooleanField(default=False, db_default=False)
    retention_days = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["workspace_id", "created_at", "id"]
        constraints = [
            retention_in_range("retention_days", "conversation_retention_in_range"),
            models.CheckConstraint(
                condition=Q(retention_override=True) | Q(retention_days__isnull=True),
                name="conversation_retention_days_only_with_override",
            ),
            models.UniqueConstraint(
                fields=["workspace", "external_id"],
                condition=Q(external_id__isnull=False),
                name="conversation_external_id_unique",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=ConversationKind.values), name="conversation_kind_valid"
            ),
            models.CheckConstraint(
                condition=Q(last_seq__gte=0), name="conversation_last_seq_gte_0"
            ),
            models.CheckConstraint(
                condition=Q(live_message_count__gte=0) & Q(live_message_count__lte=F("last_seq")),
                name="conversation_live_count_in_range",
            ),
        ]
        indexes = [
            models.Index(fields=["workspace", "created_at", "id"], name="conversation_ws_created")
        ]

    def __str__(self) -> str:
        return self.title


class Membership(TenantModel):
    """An account or agent in a conversation over ``[joined_at, left_at)``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    conversation = TenantForeignKey(
        Conversation, db_constraint=False, on_delete=models.CASCADE, related_name="memberships"
    )
    account = TenantForeignKey(
        Account,
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="memberships",
    )
    agent = TenantForeignKey(
        Agent,
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="memberships",
    )
    joined_at = models.DateTimeField(default=timezone.now)
    left_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["conversation_id", "joined_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(account__isnull=False) & Q(agent__isnull=True))
                | (Q(account__isnull=True) & Q(agent__isnull=False)),
                name="membership_exactly_one_member",
            ),
            models.CheckConstraint(
                condition=Q(left_at__isnull=True) | Q(left_at__gt=F("joined_at")),
                name="membership_left_after_joined",
            ),
            ExclusionConstraint(
                name="membership_account_no_overlap",
                expressions=[
                    ("workspace", RangeOperators.EQUAL),
                    ("conversation", RangeOperators.EQUAL),
                    ("account", RangeOperators.EQUAL),
                    (
                        TsTzRange("joined_at", "left_at", models.Value("[)")),
                        RangeOperators.OVERLAPS,
                    ),
                ],
                condition=Q(account__isnull=False),
            ),
            ExclusionConstraint(
                name="membership_agent_no_overlap",
                expressions=[
                    ("workspace", RangeOperators.EQUAL),
                    ("conversation", RangeOperators.EQUAL),
                    ("agent", RangeOperators.EQUAL),
                    (
                        TsTzRange("joined_at", "left_at", models.Value("[)")),
                        RangeOperators.OVERLAPS,
                    ),
                ],
                condition=Q(agent__isnull=False),
            ),
        ]
        indexes = [
            # "Which conversations is this agent currently in?" — every agent tool starts here.
            models.Index(
                fields=["workspace", "agent", "conversation"],
                condition=Q(left_at__isnull=True, agent__isnull=False),
                name="membership_current_agent",
            ),
            models.Index(
                fields=["workspace", "account", "conversation"],
                condition=Q(left_at__isnull=True, account__isnull=False),
                name="membership_current_account",
            ),
            models.Index(fields=["workspace", "conversation", "joined_at"], name="membership_conv"),
            # "Was the agent in this conversation when the message was written?" (SPEC §3 rule 1)
            models.Index(
                fields=["agent", "conversation", "joined_at"],
                condition=Q(agent__isnull=False),
                name="membership_agent_interval",
            ),
        ]

    def __str__(self) -> str:
        """Names, for the admin: select ``account``, ``agent`` and ``conversation`` with it."""
        return f"{self.account or self.agent} in {self.conversation}"
