"""Conversations and who is in them; each conversation's page links its transcript and its
messages."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from formation.admin_kit import ReadOnlyInline, change_link, field_column, two_part_time
from formation.display import counted
from messages_app.admin.messages import message_changelist_url
from messages_app.admin.transcript import TranscriptViewMixin, transcript_url
from messages_app.admin.workspaces import HeldRowForm, WorkspaceScopedAdmin
from messages_app.lifecycle.holds import row_edit_refusal
from messages_app.models import Conversation, Membership


class ConversationForm(HeldRowForm):
    def refusal(self) -> str | None:
        return row_edit_refusal(
            workspace_id=self.instance.workspace_id, conversation_id=self.instance.pk
        )


class MembershipInline(ReadOnlyInline):
    """Read-only: joining and leaving go through the API, which keeps intervals consistent."""

    model = Membership
    fields = ("member", "member_kind", "joined_at", "left_at")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("account", "agent", "conversation")

    @admin.display(description="member")
    def member(self, obj: Membership) -> str:
        return change_link(obj.account or obj.agent)

    @admin.display(description="kind")
    def member_kind(self, obj: Membership) -> str:
        return "person" if obj.account_id else "agent"


@admin.register(Conversation)
class ConversationAdmin(TranscriptViewMixin, WorkspaceScopedAdmin):
    form = ConversationForm
    list_display = (
        "title",
        field_column("kind", "kind"),  # the API's code: the long label wraps into three lines
        "workspace",
        "external_id",
        field_column("live_message_count", "messages"),
        # Beside both sidebars at 1280 px the read links need the room a one-line time takes.
        field_column("created_at", "created", two_part_time),
        "links",
    )
    list_filter = ("kind", "workspace")
    list_select_related = ("workspace",)
    search_fields = ("title", "external_id")
    # Created once, by the API or here: the time orders the conversation among its
    # workspace's and is never rewritten.
    readonly_fields = ("id", "created_at", "live_message_count", "last_seq", "retention", "links")
    fields = (
        "id",
        "workspace",
        "kind",
        "title",
        "external_id",
        "created_at",
        "live_message_count",
        "last_seq",
        "retention",
        "links",
    )
    inlines = (MembershipInline,)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple:
        """Kind decides the audience (SPEC §3); changing it afterwards would re-open history."""
        readonly = super().get_readonly_fields(request, obj)
        return readonly if obj is None else (*readonly, "kind")

    @admin.display(description="retention")
    def retention(self, obj: Conversation) -> str:
        """Its own period, or the workspace's; set through the API (docs/lifecycle.md)."""
        if obj.retention_override:
            if obj.retention_days is None:
                return "kept (its own setting)"
            return f"{counted(obj.retention_days, 'day')} (its own setting)"
        workspace_days = obj.workspace.retention_days if obj.workspace_id else None
        if workspace_days is None:
            return "kept (neither it nor its workspace has a period)"
        return f"{counted(workspace_days, 'day')} (the workspace's period)"

    @admin.display(description="read")
    def links(self, obj: Conversation) -> str:
        if obj._state.adding:
            return "-"
        return format_html(
            '<a href="{}">Transcript</a> <a href="{}">Messages</a>',
            transcript_url(obj.pk),
            message_changelist_url(obj.pk),
        )
