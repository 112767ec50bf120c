"""Workspaces and who acts in them: people's accounts, agents and the links between
accounts that are one person."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Greatest, Least
from django.utils import timezone

from formation.tenancy import TenantForeignKey, TenantModel
from messages_app.limits import MAX_NAME_CHARS, MAX_RETENTION_DAYS


def retention_in_range(field: str, name: str) -> models.CheckConstraint:
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
        constraints = [retention_in_range("retention_days", "workspace_retention_in_range")]

    def __str__(self) -> str:
        return self.slug


class Account(TenantModel):
    """A human's account in one workspace."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="accounts")
    display_name = models.CharField(max_length=MAX_NAME_CHARS)
    # Null, not "", when absent: the uniqueness of external ids only applies to real ones.
    external_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    created_at = models.DateTimeField(default=timezone.now)
    # Set by account erasure (messages_app/lifecycle/erasure.py): the row stays, so memberships
    # and the lineage of what others derived from its messages stay consistent; its name is
    # replaced.
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
    name = models.CharField(max_length=MAX_NAME_CHARS)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["workspace_id", "created_at", "id"]
        indexes = [models.Index(fields=["workspace", "created_at", "id"], name="agent_ws_created")]

    def __str__(self) -> str:
        return self.name


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
