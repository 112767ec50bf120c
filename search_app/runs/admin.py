"""Runs in the admin, browsed only: a run is opened, held and finished by its services, which
keep its evidence and its token in step with the delivery check.

The models are ``messages_app``'s (see this package's docstring), so the pages' URLs stay
``admin:messages_app_run_…``; ``search_app/admin.py`` imports this module so that Django's
autodiscovery registers it.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from formation.admin_kit import (
    LargeTableMixin,
    ReadOnlyAdmin,
    ReadOnlyInline,
    compact_time,
    field_column,
)
from messages_app.models import Run, RunEvidence


class RunEvidenceInline(ReadOnlyInline):
    """What the run's tools returned to the model, in the order it first saw each message."""

    model = RunEvidence
    fields = ("message", "tool", "created_at")
    readonly_fields = fields
    ordering = ("created_at", "id")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("message__conversation")


@admin.register(Run)
class RunAdmin(LargeTableMixin, ReadOnlyAdmin):
    # Named by when it started (the link), then who ran where: a UUID tells a reader nothing.
    list_display = (
        field_column("created_at", "started", compact_time),
        "agent",
        "conversation",
        "requester",
        "workspace",
        "short_id",
    )
    list_filter = ("workspace",)
    list_select_related = ("workspace", "agent", "conversation", "requester")
    search_fields = ("agent__name",)
    uuid_search_fields = ("id", "agent_id", "conversation_id", "requester_id")
    ordering = ("-created_at",)
    fields = (
        "id",
        "workspace",
        "agent",
        "conversation",
        "requester",
        "current_message",
        "recent_message_ids",
        "tool_scope",
        "created_at",
        "finished_at",
        "reply",
    )
    readonly_fields = fields
    inlines = (RunEvidenceInline,)

    @admin.display(description="id")
    def short_id(self, obj: Run) -> str:
        """Enough of the id to tell it from a RUN_ID; the search box takes the whole one."""
        return f"{str(obj.pk)[:8]}…"
