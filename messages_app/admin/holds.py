"""Legal holds, browsed only: they are placed and released through the API, which records both
in the lifecycle record."""

from __future__ import annotations

from django.contrib import admin

from formation.admin_kit import IsSetListFilter, ReadOnlyAdmin
from messages_app.models import LegalHold


class ReleasedFilter(IsSetListFilter):
    title = "released"
    parameter_name = "released"
    field_name = "released_at"
    set_label = "Released"
    unset_label = "Active"


@admin.register(LegalHold)
class LegalHoldAdmin(ReadOnlyAdmin):
    """Holds are placed and released through the API, which records both in the lifecycle
    record; here they are only browsed."""

    list_display = ("reference", "conversation", "workspace", "placed_at", "released_at")
    list_filter = ("workspace", ReleasedFilter)
    list_select_related = ("workspace", "conversation")
    search_fields = ("reference",)
    uuid_search_fields = ("id", "conversation_id")
    fields = ("id", "workspace", "conversation", "reference", "placed_at", "released_at")
    readonly_fields = fields
