"""Workspaces, people, agents, conversations, memberships, messages, identity links and runs.

Invariants that must never break are database constraints, not Python checks: a message's
sender is exactly one of account/agent, ``seq`` is unique per conversation, a deleted message has
no body, membership intervals of one member never overlap, and every reference stays inside its
workspace (and ``reply_to``/``thread`` inside their conversation). Django cannot declare
composite foreign keys, so those are added by ``migrations/0002_same_scope_foreign_keys.py`` on
top of the ``(workspace, id)`` / ``(conversation, id)`` unique keys declared here.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import ArrayField, DateTimeRangeField, RangeOperators
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models
from django.db.models import F, Func, Q
from django.db.models.functions import Greatest, Least, Upper
from django.utils import timezone

from formation.auth import TokenKind
from formation.tenancy import TenantForeignKey, TenantModel


class TsTzRange(Func):
    """``tstzrange(joined_at, left_at, '[)')``: an open-ended interval while left_at is null."""

    function = "TSTZRANGE"
    output_field = DateTimeRangeField()


# The longest retention period a workspace or conversation may set (about a century).
MAX_RETENTION_DAYS = 36_500


def _retention_in_range(field: str, name: str) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=Q(**{f"{field}__isnull": True})
        | Q(**{f"{field}__gte": 1, f"{field}__lte": MAX_RETENTION_DAYS}),
        name=name,
    )


# The text search configuration a workspace gets unless it names another: PostgreSQL's
# ``english`` with accents folded before the stemmer (search_app migration 0001).
DEFAULT_LANGUAGE = "formation_english"


class Workspace(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200, blank=True)
    # The name of a PostgreSQL text search configuration (pg_ts_config, e.g. ``german``):
    # stemming and stop words for its search documents and queries. Text, not ``regconfig``,
    # so a dump restores and pg_upgrade accepts the table; a trigger refuses a name the
    # database has no configuration for (migration 0011).
    language = models.CharField(
        max_length=63,
        default=DEFAULT_LANGUAGE,
        # Also the column's default: COPY and hand-written INSERTs get it too.
        db_default=DEFAULT_LANGUAGE,
        help_text="Text search configuration for search_history (stemming and stop words). "
        "After a change, run manage.py rebuild_search_documents --workspace SLUG.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Messages older than this many days are erased by apply_retention; "
        "empty keeps them. A conversation may override it.",
    )

    class Meta:
        ordering = ["slug"]
        constraints = [_retention_in_range("retention_days", "workspace_retention_in_range")]

    def __str__(self) -> str:
        return self.slug


class Account(TenantModel):
    """A human's account in one workspace."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="accounts")
    display_name = models.CharField(max_length=200)
    # Null, not "", when absent: the uniqueness of external ids only applies to real ones.
    external_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(default=timezone.now)
    # Set by account erasure (messages_app/lifecycle.py): the row stays, so memberships and the
    # lineage of what others derived from its messages stay consistent; its name is replaced.
    erased_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["workspace_id", "created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "external_id"],
                condition=Q(external_id__isnull=False),
                name="account_external_id_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["workspace", "created_at", "id"], name="account_ws_created")
        ]

    def __str__(self) -> str:
        return self.display_name


class Agent(TenantModel):
    """An AI agent in one workspace."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="agents")
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["workspace_id", "created_at", "id"]
        indexes = [models.Index(fields=["workspace", "created_at", "id"], name="agent_ws_created")]

    def __str__(self) -> str:
        return self.name


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
            _retention_in_range("retention_days", "conversation_retention_in_range"),
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
    # the erasure that removed it (messages_app/lifecycle.py). The restrictions stay all the same.
    sources_erased = models.BooleanField(default=False, db_default=False, editable=False)
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


class IdentityLinkStatus(models.TextChoices):
    PENDING = "pending"
    VERIFIED = "verified"
    REVOKED = "revoked"


class IdentityLink(TenantModel):
    """Two accounts of one person. Only a verified link (never revoked) is live."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    account = TenantForeignKey(
        Account, db_constraint=False, on_delete=models.PROTECT, related_name="+"
    )
    linked_account = TenantForeignKey(
        Account, db_constraint=False, on_delete=models.PROTECT, related_name="+"
    )
    status = models.CharField(
        max_length=16, choices=IdentityLinkStatus.choices, default=IdentityLinkStatus.PENDING
    )
    created_at = models.DateTimeField(default=timezone.now)
    verified_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["workspace_id", "created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(account=F("linked_account")), name="identity_link_two_accounts"
            ),
            models.CheckConstraint(
                condition=Q(status__in=IdentityLinkStatus.values), name="identity_link_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status="verified") | Q(verified_at__isnull=False, revoked_at=None),
                name="identity_link_verified_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(status="revoked") | Q(revoked_at__isnull=False),
                name="identity_link_revoked_has_time",
            ),
            # One unrevoked link per unordered pair of accounts.
            models.UniqueConstraint(
                "workspace",
                Least("account", "linked_account"),
                Greatest("account", "linked_account"),
                condition=~Q(status="revoked"),
                name="identity_link_one_open_per_pair",
            ),
        ]
        indexes = [
            models.Index(
                fields=["workspace", "account"],
                condition=Q(status="verified"),
                name="identity_link_live_account",
            ),
            models.Index(
                fields=["workspace", "linked_account"],
                condition=Q(status="verified"),
                name="identity_link_live_linked",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.account_id} ~ {self.linked_account_id} ({self.status})"


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

    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    run = TenantForeignKey(
        Run, db_constraint=False, on_delete=models.CASCADE, related_name="evidence"
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
