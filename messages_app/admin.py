"""Django admin for trusted administrators: browse everything, write little.

Security invariant: no admin page renders the body of a deleted message. Message bodies reach
HTML only through ``message_body`` and ``content_preview``, and both answer "(deleted)" for a
deleted message whatever the row holds. The token digest is never listed in any ``fields``.

Writes that must keep search, audit or proofs in step (messages, memberships, identity-link
status, runs, tokens) go through the API services, so those models are read-only here. Pages stay
fast on a million messages: related rows are joined (``list_select_related``), the changelist of
messages keeps the ``(conversation, seq)`` index order, counts at most ``CappedCountPaginator.CAP``
rows, shows no facets, and a search term that is a UUID becomes an indexed exact match instead
of a text scan.
"""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_permission_codename
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from messages_app.models import (
    Account,
    Agent,
    ApiToken,
    Conversation,
    IdentityLink,
    Membership,
    Message,
    Run,
    RunEvidence,
    Workspace,
)

DELETED_PLACEHOLDER = "(deleted)"
PREVIEW_CHARS = 80


class CappedCountPaginator(Paginator):
    """Counts at most ``CAP`` rows: Django's changelist counts its queryset on every page view,
    which is a scan of the whole table on a million messages. Past the cap the page count shows
    the cap; the rows themselves are always exact."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        return self.object_list[: self.CAP].count()


class IsSetListFilter(admin.SimpleListFilter):
    """Filter on whether a nullable timestamp is set, with labels that say what that means."""

    field_name = ""
    set_label = "Yes"
    unset_label = "No"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        return [("yes", self.set_label), ("no", self.unset_label)]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet | None:
        if self.value() == "yes":
            return queryset.filter(**{f"{self.field_name}__isnull": False})
        if self.value() == "no":
            return queryset.filter(**{f"{self.field_name}__isnull": True})
        return None


class DeletedFilter(IsSetListFilter):
    title = "deleted"
    parameter_name = "deleted"
    field_name = "deleted_at"
    set_label = "Deleted"
    unset_label = "Not deleted"


class RevokedFilter(IsSetListFilter):
    title = "revoked"
    parameter_name = "revoked"
    field_name = "revoked_at"
    set_label = "Revoked"
    unset_label = "Active"


class UuidSearchMixin:
    """Turn a search term that is a UUID into an exact match on ``uuid_search_fields``.

    Django's ``=id`` search compiles to ``UPPER(id::text) = UPPER(%s)``, which no index serves;
    an exact UUID comparison uses the primary key or the foreign-key index.
    """

    uuid_search_fields: tuple[str, ...] = ("id",)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        try:
            value = uuid.UUID(search_term.strip())
        except ValueError:
            return super().get_search_results(request, queryset, search_term)
        match = Q()
        for field in self.uuid_search_fields:
            match |= Q(**{field: value})
        return queryset.filter(match), False


class WorkspaceScopedAdmin(UuidSearchMixin, admin.ModelAdmin):
    """A workspace-scoped row never moves: composite foreign keys pin its references there.

    Deleting from the admin is off because messages and runs hold PROTECT references to these
    rows: the confirmation page would load every protected row and the delete could not succeed.
    """

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple:
        readonly = tuple(super().get_readonly_fields(request, obj))
        return readonly if obj is None else (*readonly, "workspace")

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class ReadOnlyAdmin(UuidSearchMixin, admin.ModelAdmin):
    """Browse only: these rows are written by the API services, which keep their invariants."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Workspace)
class WorkspaceAdmin(UuidSearchMixin, admin.ModelAdmin):
    list_display = ("slug", "name", "created_at", "id")
    search_fields = ("slug", "name")
    readonly_fields = ("id",)
    fields = ("id", "slug", "name", "created_at")

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        """Every row of the tenant holds a PROTECT reference to its workspace."""
        return False


@admin.register(Account)
class AccountAdmin(WorkspaceScopedAdmin):
    list_display = ("display_name", "external_id", "workspace", "created_at", "id")
    list_filter = ("workspace",)
    list_select_related = ("workspace",)
    search_fields = ("display_name", "external_id")
    readonly_fields = ("id",)
    fields = ("id", "workspace", "display_name", "external_id", "created_at")


@admin.register(Agent)
class AgentAdmin(WorkspaceScopedAdmin):
    list_display = ("name", "workspace", "created_at", "id")
    list_filter = ("workspace",)
    list_select_related = ("workspace",)
    search_fields = ("name",)
    readonly_fields = ("id",)
    fields = ("id", "workspace", "name", "created_at")


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class MembershipInline(ReadOnlyInline):
    """Read-only: joining and leaving go through the API, which keeps intervals consistent."""

    model = Membership
    fields = ("account", "agent", "joined_at", "left_at")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("account", "agent")


class RunEvidenceInline(ReadOnlyInline):
    """What the run's tools returned to the model, in the order it first saw each message."""

    model = RunEvidence
    fields = ("message", "tool", "created_at")
    readonly_fields = fields
    ordering = ("created_at", "id")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("message")


def message_changelist_url(conversation_id: uuid.UUID) -> str:
    """The message changelist narrowed to one conversation, in seq order."""
    url = reverse("admin:messages_app_message_changelist")
    return f"{url}?conversation__id__exact={conversation_id}"


@admin.register(Conversation)
class ConversationAdmin(WorkspaceScopedAdmin):
    list_display = (
        "title",
        "kind",
        "workspace",
        "external_id",
        "live_message_count",
        "last_seq",
        "created_at",
        "links",
    )
    list_filter = ("kind", "workspace")
    list_select_related = ("workspace",)
    search_fields = ("title", "external_id")
    readonly_fields = ("id", "live_message_count", "last_seq", "links")
    fields = (
        "id",
        "workspace",
        "kind",
        "title",
        "external_id",
        "created_at",
        "live_message_count",
        "last_seq",
        "links",
    )
    inlines = (MembershipInline,)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple:
        """Kind decides the audience (SPEC §3); changing it afterwards would re-open history."""
        readonly = super().get_readonly_fields(request, obj)
        return readonly if obj is None else (*readonly, "kind")

    @admin.display(description="messages")
    def links(self, obj: Conversation) -> str:
        if obj._state.adding:
            return "-"
        return format_html('<a href="{}">Messages</a>', message_changelist_url(obj.pk))


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    """Browse messages; edits and deletes go through the API so search stays in step."""

    list_display = (
        "id",
        "conversation",
        "seq",
        "role",
        "status",
        "sender",
        "content_preview",
        "created_at",
        "is_deleted",
        "workspace",
    )
    list_filter = ("workspace", "role", "status", DeletedFilter)
    list_select_related = ("workspace", "conversation", "sender_account", "sender_agent")
    # Only the exact-match search: a text scan of a million bodies is not an admin page's job.
    search_fields = ("=conversation__external_id",)
    # Only indexed columns: senders, replies and threads have no index of their own.
    uuid_search_fields = ("id", "conversation_id")
    # The unique (conversation, seq) index serves this order with no sort; other orders would
    # sort the whole table on every page view, so columns are not sortable.
    ordering = ("conversation_id", "seq")
    sortable_by = ()
    show_full_result_count = False
    paginator = CappedCountPaginator
    show_facets = admin.ShowFacets.NEVER
    fields = (
        "id",
        "workspace",
        "conversation",
        "seq",
        "role",
        "status",
        "sender_account",
        "sender_agent",
        "message_body",
        "created_at",
        "edited_at",
        "deleted_at",
        "reply_to",
        "thread",
        "lineage_sources",
    )
    readonly_fields = fields

    @admin.display(description="sender")
    def sender(self, obj: Message) -> str:
        return str(obj.sender_account or obj.sender_agent)

    @admin.display(description="content")
    def content_preview(self, obj: Message) -> str:
        if obj.is_deleted:
            return DELETED_PLACEHOLDER
        return Truncator(obj.content).chars(PREVIEW_CHARS)

    @admin.display(description="content")
    def message_body(self, obj: Message) -> str:
        """The body, except for a deleted message: its row should hold '' but we never trust it."""
        if obj.is_deleted:
            return DELETED_PLACEHOLDER
        return obj.content

    @admin.display(description="deleted", boolean=True)
    def is_deleted(self, obj: Message) -> bool:
        return obj.is_deleted

    @admin.display(description="lineage")
    def lineage_sources(self, obj: Message) -> str:
        """Source messages by link only; their bodies carry their own audience rules."""
        sources = list(obj.lineage_links.order_by("source_id").values_list("source_id", flat=True))
        if not sources:
            return "-"
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a>',
            (
                (reverse("admin:messages_app_message_change", args=[source_id]), source_id)
                for source_id in sources
            ),
        )


class IdentityLinkForm(forms.ModelForm):
    """Reject a cross-workspace pair with a form error instead of a database error."""

    class Meta:
        model = IdentityLink
        fields = ("workspace", "account", "linked_account")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        workspace = cleaned.get("workspace")
        if workspace is None:
            return cleaned
        for name in ("account", "linked_account"):
            account = cleaned.get(name)
            if account is not None and account.workspace_id != workspace.pk:
                self.add_error(name, "This account belongs to another workspace.")
        return cleaned


@admin.register(IdentityLink)
class IdentityLinkAdmin(UuidSearchMixin, admin.ModelAdmin):
    """A link can be proposed here (it starts pending); verify and revoke go through the API.

    An existing link is read-only: swapping an account would carry a verification over to a
    different person.
    """

    form = IdentityLinkForm
    list_display = (
        "id",
        "account",
        "linked_account",
        "status",
        "workspace",
        "created_at",
        "verified_at",
        "revoked_at",
    )
    list_filter = ("status", "workspace")
    list_select_related = ("workspace", "account", "linked_account")
    search_fields = (
        "account__display_name",
        "linked_account__display_name",
        "=account__external_id",
        "=linked_account__external_id",
    )
    uuid_search_fields = ("id", "account_id", "linked_account_id")
    autocomplete_fields = ("account", "linked_account")
    add_fields = ("workspace", "account", "linked_account")
    change_fields = (
        "id",
        "workspace",
        "account",
        "linked_account",
        "status",
        "created_at",
        "verified_at",
        "revoked_at",
    )
    readonly_fields = ("status", "verified_at", "revoked_at")

    def get_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple:
        return self.add_fields if obj is None else self.change_fields

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        """Revoking, not deleting, ends a link: the history of who was linked stays readable."""
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent", "conversation", "requester", "workspace", "created_at")
    list_filter = ("workspace",)
    list_select_related = ("workspace", "agent", "conversation", "requester")
    search_fields = ("agent__name",)
    uuid_search_fields = ("id", "agent_id", "conversation_id", "requester_id")
    ordering = ("-created_at",)
    show_full_result_count = False
    paginator = CappedCountPaginator
    show_facets = admin.ShowFacets.NEVER
    fields = (
        "id",
        "workspace",
        "agent",
        "conversation",
        "requester",
        "current_message",
        "recent_message_ids",
        "created_at",
        "finished_at",
    )
    readonly_fields = fields
    inlines = (RunEvidenceInline,)


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are made by ``manage.py create_token`` and only ever revoked here.

    The digest is deliberately absent from every list and page: with it, an offline guess could
    be checked, and nothing an administrator does needs it. Deleting is off so a revoked token
    stays on record.
    """

    list_display = ("prefix", "kind", "workspace", "agent", "run", "created_at", "revoked_at")
    list_filter = ("kind", RevokedFilter, "workspace")
    list_select_related = ("workspace", "agent", "run")
    search_fields = ("^prefix",)
    uuid_search_fields = ("id", "agent_id", "run_id")
    ordering = ("-created_at",)
    show_full_result_count = False
    paginator = CappedCountPaginator
    show_facets = admin.ShowFacets.NEVER
    fields = ("id", "kind", "prefix", "workspace", "agent", "run", "created_at", "revoked_at")
    readonly_fields = fields
    actions = ("revoke_tokens",)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        """Revoking is a change to the token, so it needs the model's change permission."""
        codename = get_permission_codename("change", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet) -> None:
        selected = list(queryset.values_list("pk", flat=True))
        with transaction.atomic():
            # Lock first so two admins revoking at once log each token once, with one time.
            tokens = list(
                ApiToken.objects.select_for_update().filter(
                    pk__in=selected, revoked_at__isnull=True
                )
            )
            ApiToken.objects.filter(pk__in=[token.pk for token in tokens]).update(
                revoked_at=timezone.now()
            )
            if tokens:
                LogEntry.objects.log_actions(
                    user_id=request.user.pk,
                    queryset=tokens,
                    action_flag=CHANGE,
                    change_message=[{"changed": {"fields": ["Revoked at"]}}],
                )
        self.message_user(request, f"Revoked {len(tokens)} token(s).", messages.SUCCESS)
