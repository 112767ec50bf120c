"""The search audit in the admin: trusted administrators only, and read-only for everybody.

Only a user holding ``audit_app.inspect_search_audit`` (superusers hold every permission) sees
the model at all; an ordinary staff user gets no menu entry and a 403 on its URLs. Nobody can
add, change or delete an event here, and there are no bulk actions: events are written by
search_history and removed only by ``prune_search_audit``.

The search box takes a query *text*: it is turned into its digest under every configured audit
key and matched exactly, so an investigator can ask "did anyone search for X?" without the
service ever holding X.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from audit_app.models import INSPECT_PERMISSION, ConversationSearchEvent
from audit_app.selectors import events_for_query_text
from messages_app.admin import CappedCountPaginator


def _may_inspect(request: HttpRequest) -> bool:
    user = request.user
    return user.is_active and user.is_staff and user.has_perm(INSPECT_PERMISSION)


@admin.register(ConversationSearchEvent)
class ConversationSearchEventAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "tool",
        "workspace",
        "agent",
        "run",
        "outcome",
        "result_count",
        "budget_used",
        "key_id",
    )
    list_filter = ("workspace", "agent", "created_at", "tool", "outcome")
    date_hierarchy = "created_at"
    list_select_related = ("workspace", "agent", "run")
    search_fields = ("query_digest",)
    search_help_text = (
        "Type a query text to find the searches for it: it is matched through its digest "
        "under every audit key and is not stored."
    )
    paginator = CappedCountPaginator
    show_full_result_count = False
    actions = None
    fields = (
        "id",
        "created_at",
        "tool",
        "workspace",
        "run",
        "agent",
        "destination",
        "requester",
        "key_id",
        "query_digest",
        "filters",
        "outcome",
        "result_count",
        "budget_used",
        "hit_ids",
        "neighbour_ids",
        "rankings",
        "exclusions",
        "exclusions_capped",
    )
    readonly_fields = fields

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _may_inspect(request)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return _may_inspect(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        if not search_term.strip():
            return queryset, False
        return events_for_query_text(queryset, search_term), False
