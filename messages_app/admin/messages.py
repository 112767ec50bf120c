"""Messages, browsed only: edits and deletes go through the API so search stays in step.

A deleted message's body is never on a page: ``content_preview`` and ``message_body`` answer
"(deleted)" whatever the row holds.
"""

from __future__ import annotations

import uuid

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from formation.admin_kit import (
    AutocompleteListFilter,
    IsSetListFilter,
    LargeTableMixin,
    ReadOnlyAdmin,
    created,
    filtered_changelist_url,
)
from messages_app.admin.transcript import transcript_url
from messages_app.models import Message

DELETED_PLACEHOLDER = "(deleted)"
ERASED_SOURCE = " (erased)"
PREVIEW_CHARS = 80


class DeletedFilter(IsSetListFilter):
    title = "deleted"
    parameter_name = "deleted"
    field_name = "deleted_at"
    set_label = "Deleted"
    unset_label = "Not deleted"


class ConversationFilter(AutocompleteListFilter):
    title = "conversation"
    field_name = "conversation"
    parameter_name = "conversation__id__exact"


def message_changelist_url(conversation_id: uuid.UUID) -> str:
    """The message changelist narrowed to one conversation, in seq order."""
    return filtered_changelist_url(
        "messages_app.message", **{ConversationFilter.parameter_name: conversation_id}
    )


@admin.register(Message)
class MessageAdmin(LargeTableMixin, ReadOnlyAdmin):
    """Browse messages; edits and deletes go through the API so search stays in step."""

    list_display = ("seq_label", "conversation_link", "sender", "content_preview", created, "state")
    list_filter = ("workspace", ConversationFilter, "role", "status", DeletedFilter)
    list_select_related = ("conversation", "sender_account", "sender_agent")
    # Only the exact-match search: a text scan of a million bodies is not an admin page's job.
    search_fields = ("=conversation__external_id",)
    # Only indexed columns: senders, replies and threads have no index of their own.
    uuid_search_fields = ("id", "conversation_id")
    # The unique (conversation, seq) index serves this order with no sort; other orders would
    # sort the whole table on every page view, so columns are not sortable.
    ordering = ("conversation_id", "seq")
    sortable_by = ()
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
        "sources_erased",
        "in_transcript",
    )
    readonly_fields = fields

    def get_list_display(self, request: HttpRequest) -> tuple:
        """Narrowed to one conversation, the conversation column would repeat one title."""
        list_display = super().get_list_display(request)
        if request.GET.get(ConversationFilter.parameter_name):
            return tuple(name for name in list_display if name != "conversation_link")
        return list_display

    @admin.display(description="message")
    def seq_label(self, obj: Message) -> str:
        return f"#{obj.seq}"

    @admin.display(description="conversation")
    def conversation_link(self, obj: Message) -> str:
        """Narrows the list to this conversation (the conversation filter's own parameter)."""
        return format_html(
            '<a href="{}">{}</a>', message_changelist_url(obj.conversation_id), obj.conversation
        )

    @admin.display(description="sender")
    def sender(self, obj: Message) -> str:
        return format_html(
            '{}<div class="quiet">{}</div>', obj.sender_account or obj.sender_agent, obj.role
        )

    @admin.display(description="state")
    def state(self, obj: Message) -> str:
        """Deleted, or the delivery status (sent, pending, failed)."""
        return "deleted" if obj.is_deleted else obj.status

    @admin.display(description="transcript")
    def in_transcript(self, obj: Message) -> str:
        return format_html(
            '<a href="{}">Read it in its conversation</a>',
            transcript_url(obj.conversation_id, seq=obj.seq),
        )

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

    @admin.display(description="lineage")
    def lineage_sources(self, obj: Message) -> str:
        """Source messages by link only, labelled "<conversation title> #<seq>"; their bodies
        carry their own audience rules."""
        sources = obj.lineage_links.order_by("source__conversation__title", "source__seq")
        rows = list(
            sources.values_list(
                "source_id", "source__conversation__title", "source__seq", "source__deleted_at"
            )
        )
        if not rows:
            return "-"
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{} #{}</a>{}',
            (
                (
                    reverse("admin:messages_app_message_change", args=[source_id]),
                    title,
                    seq,
                    ERASED_SOURCE if deleted_at else "",
                )
                for source_id, title, seq, deleted_at in rows
            ),
        )
