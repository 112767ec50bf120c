"""Who takes part: accounts, agents, and the identity links between two accounts."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

from formation.admin_kit import FormationAdminMixin, UuidSearchMixin, created
from messages_app.admin.workspaces import HeldRowForm, WorkspaceScopedAdmin
from messages_app.lifecycle.holds import account_edit_refusal
from messages_app.models import Account, Agent, IdentityLink


class AccountForm(HeldRowForm):
    def refusal(self) -> str | None:
        return account_edit_refusal(
            workspace_id=self.instance.workspace_id, account_id=self.instance.pk
        )


@admin.register(Account)
class AccountAdmin(WorkspaceScopedAdmin):
    form = AccountForm
    list_display = ("display_name", "external_id", "workspace", created, "id")
    list_filter = ("workspace",)
    list_select_related = ("workspace",)
    search_fields = ("display_name", "external_id")
    readonly_fields = ("id", "erased_at")
    fields = ("id", "workspace", "display_name", "external_id", "created_at", "erased_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple:
        """An erased account keeps the name and external id erasure gave it."""
        readonly = super().get_readonly_fields(request, obj)
        if obj is not None and obj.erased_at is not None:
            return (*readonly, "display_name", "external_id")
        return readonly


@admin.register(Agent)
class AgentAdmin(WorkspaceScopedAdmin):
    form = HeldRowForm
    list_display = ("name", "workspace", created, "id")
    list_filter = ("workspace",)
    list_select_related = ("workspace",)
    search_fields = ("name",)
    readonly_fields = ("id",)
    fields = ("id", "workspace", "name", "created_at")


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
class IdentityLinkAdmin(FormationAdminMixin, UuidSearchMixin, admin.ModelAdmin):
    """A link can be proposed here (it starts pending); verify and revoke go through the API.

    An existing link is read-only: swapping an account would carry a verification over to a
    different person.
    """

    form = IdentityLinkForm
    # When it was verified or revoked is on the link's page: three timestamps do not fit.
    list_display = ("account", "linked_account", "status", "workspace", created)
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
