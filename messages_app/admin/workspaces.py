"""Workspaces, and what every workspace-scoped page shares: a row that never moves, a save that
writes only the columns the form changed, and a form that a legal hold or an erasure refuses."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Model
from django.http import HttpRequest

from formation.admin_kit import FormationAdminMixin, UuidSearchMixin, created
from messages_app.lifecycle.holds import row_edit_refusal
from messages_app.models import Workspace
from messages_app.selectors import text_search_configurations


class WorkspaceScopedAdmin(FormationAdminMixin, UuidSearchMixin, admin.ModelAdmin):
    """A workspace-scoped row never moves: composite foreign keys pin its references there.

    Deleting from the admin is off because messages and runs hold PROTECT references to these
    rows: the confirmation page would load every protected row and the delete could not succeed.
    """

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple:
        readonly = tuple(super().get_readonly_fields(request, obj))
        return readonly if obj is None else (*readonly, "workspace")

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        """An existing row gets the columns the form changed, and only those: the others may
        have moved since this request read the row (a conversation's ``last_seq`` and
        ``live_message_count`` move with every message stored), and writing them back would
        undo that, handing the next message a seq already taken."""
        if not change:
            super().save_model(request, obj, form, change)
            return
        columns = {field.name for field in obj._meta.concrete_fields}
        changed = [name for name in form.changed_data if name in columns]
        if changed:
            obj.save(update_fields=changed)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class HeldRowForm(forms.ModelForm):
    """A change to an existing row is refused, as a form error, while ``refusal`` gives a
    reason: a legal hold covers the row, or it is an erased account (docs/admin.md). The check
    runs in the admin's saving transaction and keeps its locks to the commit."""

    def refusal(self) -> str | None:
        return row_edit_refusal(workspace_id=self.instance.workspace_id)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.instance._state.adding and self.has_changed():
            reason = self.refusal()
            if reason is not None:
                raise forms.ValidationError(reason, code="held")
        return cleaned


class WorkspaceForm(forms.ModelForm):
    """The language is picked from the database's text search configurations."""

    language = forms.ChoiceField(help_text=Workspace._meta.get_field("language").help_text)

    class Meta:
        model = Workspace
        fields = ("slug", "name", "language", "created_at")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["language"].choices = [(name, name) for name in text_search_configurations()]


@admin.register(Workspace)
class WorkspaceAdmin(FormationAdminMixin, UuidSearchMixin, admin.ModelAdmin):
    form = WorkspaceForm
    list_display = ("slug", "name", "language", created, "id")
    search_fields = ("slug", "name")
    # Retention is set through the API (PUT /api/v1/retention), like every lifecycle change.
    readonly_fields = ("id", "retention_days")
    fields = ("id", "slug", "name", "language", "created_at", "retention_days")

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        """Every row of the tenant holds a PROTECT reference to its workspace."""
        return False

    def save_model(self, request: HttpRequest, obj: Workspace, form: Any, change: bool) -> None:
        """Documents keep the language they were written in until they are rebuilt: say so."""
        super().save_model(request, obj, form, change)
        if change and "language" in form.changed_data:
            self.message_user(
                request,
                "Search documents of this workspace still use its former language: run "
                f"manage.py rebuild_search_documents --workspace {obj.slug}",
                messages.WARNING,
            )
