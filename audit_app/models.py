"""The search audit (SPEC §7): one row per search tool call, never the query text.

The bottom layer of the apps: it imports none of them. Its foreign keys name the workspace,
run, agent, destination and requester by string (``"messages_app.Run"``), so the database keeps
every constraint while the Python imports point one way, and its writers hand it plain values.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from formation.tenancy import TenantForeignKey, TenantModel

# Why a match was withheld (search_app.perspective.exclusion_reason says in which order the
# checks run; the first one a message fails names it). ``budget`` counts eligible hits and
# neighbours left out by the run's ceiling.
EXCLUSION_REASONS = (
    "not_observed",
    "deleted",
    "unknown_audience",
    "audience",
    "lineage",
    "current_message",
    "recent_history",
    "budget",
)
INSPECT_PERMISSION = "audit_app.inspect_search_audit"


class SearchTool(models.TextChoices):
    SEARCH_HISTORY = "search_history"
    SEARCH_MESSAGES = "search_messages"
    MEMORIES = "memories"


class SearchOutcome(models.TextChoices):
    ANSWERED = "answered"
    BUDGET_EXHAUSTED = "budget_exhausted", "budget exhausted"


class ConversationSearchEvent(TenantModel):
    """Who searched, for which audience, and what came back; the query only as keyed digests.

    Every search tool writes one: search_history (SPEC §7, with rankings and exclusion
    counts), search_messages and memory recall (what they returned). search_messages called
    with an agent token has no run, destination or requester.

    The digest is HMAC-SHA256 under the newest key of ``SEARCH_AUDIT_KEYS``, over the query
    normalised as ``audit_app.digests`` says, so an investigator holding a text can find the
    events that searched for it and nobody holding the table can read what was searched.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # The composite key to the agent names the workspace already; the workspace, run and agent
    # are read through the (…, created_at) indexes below, not indexes of their own.
    workspace = models.ForeignKey(
        "messages_app.Workspace",
        db_constraint=False,
        db_index=False,
        on_delete=models.PROTECT,
        related_name="+",
    )
    tool = models.CharField(
        max_length=32, choices=SearchTool.choices, default=SearchTool.SEARCH_HISTORY
    )
    run = TenantForeignKey(
        "messages_app.Run",
        db_constraint=False,
        db_index=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="search_events",
    )
    agent = TenantForeignKey(
        "messages_app.Agent",
        db_constraint=False,
        db_index=False,
        on_delete=models.PROTECT,
        related_name="+",
    )
    destination = TenantForeignKey(
        "messages_app.Conversation",
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    requester = TenantForeignKey(
        "messages_app.Account",
        db_constraint=False,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
    )
    key_id = models.CharField(max_length=64, help_text="Which audit key made the digest.")
    query_digest = models.CharField(max_length=64, help_text="HMAC-SHA256, hex.")
    filters = models.JSONField(default=dict, help_text="speaker, after, before and limit.")
    hit_ids = ArrayField(
        models.UUIDField(),
        default=list,
        help_text="What was returned, in order: message ids (memory ids for memories).",
    )
    neighbour_ids = ArrayField(models.UUIDField(), default=list)
    rankings = models.JSONField(
        default=list, help_text="Per hit: message id, score and the ranking components."
    )
    exclusions = models.JSONField(default=dict, help_text="Withheld matches, by reason.")
    exclusions_capped = models.BooleanField(
        default=False, help_text="More matches existed than were classified (see docs/search.md)."
    )
    outcome = models.CharField(
        max_length=32, choices=SearchOutcome.choices, default=SearchOutcome.ANSWERED
    )
    result_count = models.PositiveIntegerField(default=0, help_text="Hits returned.")
    budget_used = models.PositiveIntegerField(
        default=0, help_text="The run's search evidence after this call."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "conversation_search_events"
        ordering = ["-created_at", "id"]
        default_permissions = ()
        permissions = [("inspect_search_audit", "Can inspect search audit events")]
        verbose_name = "search audit event"
        constraints = [
            # Only search_messages may be called without a run (with an agent token).
            models.CheckConstraint(
                condition=models.Q(tool=SearchTool.SEARCH_MESSAGES)
                | models.Q(run__isnull=False, destination__isnull=False, requester__isnull=False),
                name="search_event_run_unless_search_messages",
            )
        ]
        indexes = [
            models.Index(fields=["run", "created_at"], name="search_event_run"),
            models.Index(fields=["workspace", "created_at"], name="search_event_workspace"),
            models.Index(fields=["agent", "created_at"], name="search_event_agent"),
            models.Index(fields=["query_digest"], name="search_event_digest"),
            models.Index(fields=["created_at"], name="search_event_created"),
        ]

    def __str__(self) -> str:
        """The tool, the agent's name and the time, for the admin's titles (never the query)."""
        return f"{self.tool} by {self.agent} at {self.created_at:%Y-%m-%d %H:%M:%S}"


INSPECT_LIFECYCLE_PERMISSION = "audit_app.inspect_lifecycle"


class LifecycleAction(models.TextChoices):
    RETENTION = "retention"
    ERASURE = "erasure"
    HOLD_PLACED = "hold_placed", "hold placed"
    HOLD_RELEASED = "hold_released", "hold released"
    EXPORT = "export"


class LifecycleOutcome(models.TextChoices):
    # Written when the work starts; a row still "started" is a run that did not finish (its
    # counts are what it had committed).
    STARTED = "started"
    COMPLETED = "completed"
    REFUSED = "refused", "refused (legal hold)"
    INTERRUPTED = "interrupted"


class LifecycleSubject(models.TextChoices):
    WORKSPACE = "workspace"
    CONVERSATION = "conversation"
    ACCOUNT = "account"


class LifecycleEvent(TenantModel):
    """One retention run, erasure, hold placement or release, or export: who, what, when and
    how many; never message text, names or the hold's reference.

    Ids only, without foreign keys: the record names what it touched as plain values its caller
    gives (``audit_app.lifecycle``), so it never depends on the rows it describes.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace_id = models.UUIDField()
    action = models.CharField(max_length=32, choices=LifecycleAction.choices)
    subject_kind = models.CharField(max_length=16, choices=LifecycleSubject.choices)
    subject_id = models.UUIDField(help_text="The workspace, conversation or account.")
    hold_id = models.UUIDField(null=True, blank=True)
    actor = models.CharField(
        max_length=100, help_text="The token's kind and prefix, or the management command."
    )
    actor_token_id = models.UUIDField(null=True, blank=True)
    outcome = models.CharField(
        max_length=16, choices=LifecycleOutcome.choices, default=LifecycleOutcome.STARTED
    )
    counts = models.JSONField(default=dict, help_text="How many rows of each kind it touched.")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "lifecycle_events"
        ordering = ["-created_at", "id"]
        default_permissions = ()
        permissions = [("inspect_lifecycle", "Can inspect lifecycle records")]
        indexes = [
            models.Index(fields=["workspace_id", "created_at"], name="lifecycle_workspace"),
            models.Index(fields=["subject_id", "created_at"], name="lifecycle_subject"),
            models.Index(fields=["created_at"], name="lifecycle_created"),
        ]

    def __str__(self) -> str:
        return f"{self.action} of {self.subject_kind} at {self.created_at:%Y-%m-%d %H:%M:%S}"
