"""Messages, and the lineage that ties an agent's message to what it was written from."""

from __future__ import annotations

import uuid

from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Upper
from django.utils import timezone

from formation.tenancy import TenantForeignKey, TenantModel
from messages_app.models.conversations import Conversation
from messages_app.models.workspaces import Account, Agent, Workspace


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MessageStatus(models.TextChoices):
    SENT = "sent"
    PENDING = "pending"
    FAILED = "failed"


class Message(TenantModel):
    """One message. Foreign keys carry no single-column indexes of their own: workspace and
    conversation lead composite keys already, and senders, replies and threads are only ever
    looked up from the message side (rows are never hard-deleted), so each extra index would
    only slow ingestion."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(
        Workspace, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    conversation = TenantForeignKey(
        Conversation,
        db_constraint=False,
        on_delete=models.PROTECT,
        related_name="messages",
        db_index=False,
    )
    seq = models.BigIntegerField(editable=False)
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    status = models.CharField(max_length=16, choices=MessageStatus.choices, default="sent")
    sender_account = TenantForeignKey(
        Account,
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    sender_agent = TenantForeignKey(
        Agent,
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    content = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    edited_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # Some message in this one's lineage (transitively) has been erased or deleted since: set by
    # the erasure that removed it (messages_app/lifecycle/erasure.py). The restrictions stay all
    # the same.
    sources_erased = models.BooleanField(default=False, db_default=False, editable=False)
    # Not stored: where an answer's copy of the text lies in the whole text, when a bound cut it
    # (messages_app.text_windows.bounded); None for a whole text.
    text_cut = None
    reply_to = TenantForeignKey(
        "self",
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="replies",
        db_index=False,
    )
    thread = TenantForeignKey(
        "self",
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="thread_messages",
        db_index=False,
    )
    lineage = models.ManyToManyField(
        "self",
        through="MessageLineage",
        through_fields=("message", "source"),
        symmetrical=False,
        related_name="derived_messages",
        blank=True,
    )

    class Meta:
        ordering = ["conversation_id", "seq"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "conversation", "id"], name="message_conversation_id_key"
            ),
            models.UniqueConstraint(
                fields=["workspace", "conversation", "seq"], name="message_seq_unique"
            ),
            models.CheckConstraint(condition=Q(seq__gt=0), name="message_seq_positive"),
            models.CheckConstraint(
                condition=(Q(sender_account__isnull=False) & Q(sender_agent__isnull=True))
                | (Q(sender_account__isnull=True) & Q(sender_agent__isnull=False)),
                name="message_exactly_one_sender",
            ),
            models.CheckConstraint(
                condition=Q(deleted_at__isnull=True) | Q(content=""),
                name="message_deleted_has_no_body",
            ),
            models.CheckConstraint(
                condition=Q(role__in=MessageRole.values), name="message_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(status__in=MessageStatus.values), name="message_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(reply_to=F("id")), name="message_not_reply_to_itself"
            ),
            models.CheckConstraint(condition=~Q(thread=F("id")), name="message_not_own_thread"),
        ]
        indexes = [
            # list_messages: newest first within one conversation; deleted rows never listed.
            models.Index(
                F("workspace"),
                F("conversation"),
                F("created_at").desc(),
                F("seq").desc(),
                condition=Q(deleted_at__isnull=True),
                name="message_live_timeline",
            ),
            # search_messages across the agent's rooms, newest first: for a common substring
            # the planner walks this backwards and stops at `limit` matches, instead of
            # rechecking every trigram match and sorting them (BENCHMARKS.md has the figures).
            # No id column: ties on (created_at, seq) are rare and sorted on the fly, and an
            # index ending in id could be picked for `id = ...` lookups over a whole workspace.
            models.Index(
                F("workspace"),
                F("created_at").desc(),
                F("seq").desc(),
                condition=Q(deleted_at__isnull=True),
                name="message_live_ws_timeline",
            ),
            # search_messages: case-insensitive literal substring, i.e. UPPER(content) LIKE ...
            GinIndex(
                F("workspace"),
                OpClass(Upper("content"), name="gin_trgm_ops"),
                name="message_content_trgm",
            ),
            # An account's erasure and export read what it wrote, oldest first, across its
            # workspace's conversations; only live messages, so erased ones leave the index.
            models.Index(
                F("sender_account"),
                F("created_at"),
                F("id"),
                condition=Q(deleted_at__isnull=True, sender_account__isnull=False),
                name="message_live_sender_account",
            ),
        ]

    def __str__(self) -> str:
        """The conversation's title and the seq, for the admin: select ``conversation`` with it."""
        return f"{self.conversation} #{self.seq}"

    @property
    def is_deleted(self) -> bool:
        return self.deleted_at is not None


class MessageLineage(TenantModel):
    """One source message an agent-authored message was based on (SPEC §2, §4).

    Rows hold the *transitive closure*: a message stores its direct sources (``direct``) and
    every source those sources inherited. A message's lineage is fixed when it is stored and its
    sources existed before it, so the closure is exact, and the perspective rule "every source,
    transitively, passes the audience test" is one non-recursive join.
    """

    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    message = TenantForeignKey(
        Message, db_constraint=False, on_delete=models.CASCADE, related_name="lineage_links"
    )
    source = TenantForeignKey(
        Message, db_constraint=False, on_delete=models.PROTECT, related_name="derived_links"
    )
    direct = models.BooleanField(
        default=True, help_text="Named by the message itself, not inherited from a source."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "message", "source"], name="lineage_unique"
            ),
            models.CheckConstraint(condition=~Q(message=F("source")), name="lineage_not_self"),
        ]
        indexes = [models.Index(fields=["workspace", "source"], name="lineage_source")]

    def __str__(self) -> str:
        return f"{self.message_id} <- {self.source_id}"


class MessageLineageRoom(TenantModel):
    """A conversation whose audience a message inherits (SPEC §3 rule 4, §4).

    The closure of rooms: every conversation a source in the message's lineage was said in, the
    rooms those sources inherited, and, for a run's reply, every room the memories the run
    recalled were drawn from (a memory written with no message evidence still carries the room
    it was written in). Rule 4 is then one test on these rows: each must permit the destination.
    Rows from lineage are written by a trigger on ``MessageLineage`` (migration 0009), so every
    path that stores lineage (services, ``COPY``, hand-written SQL) keeps them complete; only
    agent-authored messages carry them, like lineage.
    """

    workspace = models.ForeignKey(
        Workspace, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    message = TenantForeignKey(
        Message,
        db_constraint=False,
        on_delete=models.CASCADE,
        related_name="lineage_rooms",
        db_index=False,
    )
    conversation = TenantForeignKey(
        Conversation,
        db_constraint=False,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "message", "conversation"], name="lineage_room_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.message_id} inherits {self.conversation_id}"
