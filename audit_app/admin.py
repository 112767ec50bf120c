"""The audit records in the admin: trusted administrators only, and read-only for everybody.

Only a user holding ``audit_app.inspect_search_audit`` (superusers hold every permission) sees
the search audit at all; an ordinary staff user gets no menu entry and a 403 on its URLs. Nobody
can add, change or delete an event here, and there are no bulk actions: events are written by
search_history and removed only by ``prune_search_audit``. The lifecycle record is shown the
same way, under its own permission.

The search box takes a query *text*: it is turned into its digest under every configured audit
key and matched exactly, so an investigator can ask "did anyone search for X?" without the
service ever holding X. The text stays in the search box: links to events do not carry the
list's query string (``preserve_filters = False``), so no event page's URL holds it.

An event reads as the trace does (SPEC §8): exclusion reasons under their camelCase names, the
filters each tool records, hits and neighbours as links to their messages, and rankings as a
table of score and components per hit. The messages are ``messages_app``'s, above this app: as
the models' foreign keys do, the page names their model and admin URLs by string
(``MESSAGE_MODEL``, ``admin:messages_app_message_change``), so no import points up.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.apps import apps
from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from audit_app.models import (
    EXCLUSION_REASONS,
    INSPECT_LIFECYCLE_PERMISSION,
    INSPECT_PERMISSION,
    ConversationSearchEvent,
    LifecycleEvent,
    SearchTool,
)
from audit_app.selectors import events_for_query_text
from formation.admin_kit import (
    AutocompleteListFilter,
    FormationAdminMixin,
    InspectOnlyAdmin,
    LargeTableMixin,
    created,
    field_column,
    filtered_changelist_url,
)
from formation.fields import camel_case

# The message model, by name (the search audit's hits and neighbours are its rows).
MESSAGE_MODEL = "messages_app.Message"

# What each tool records in ``filters`` (the model field's help text speaks of search_history).
FILTERS_HELP = {
    SearchTool.SEARCH_HISTORY: (
        "speaker, after and before as the caller gave them (null when not given), and limit."
    ),
    SearchTool.SEARCH_MESSAGES: (
        "conversationId (null: every conversation the agent is in) and limit."
    ),
    SearchTool.MEMORIES: "limit: memory recall takes no other filter.",
}
# The order the API documents them in; jsonb keeps keys in its own order.
FILTER_ORDER = ("speaker", "after", "before", "conversationId", "limit")
NOT_COUNTED = "Not counted: only search_history classifies the matches it withholds."


class AgentFilter(AutocompleteListFilter):
    title = "agent"
    field_name = "agent"
    parameter_name = "agent__id__exact"


class DestinationFilter(AutocompleteListFilter):
    title = "destination"
    field_name = "destination"
    parameter_name = "destination__id__exact"


def _table(name: str, head: SafeString, rows: list[SafeString]) -> SafeString:
    body = format_html_join("", "{}", ((row,) for row in rows))
    return format_html(
        '<table class="audit-table {}"><thead>{}</thead><tbody>{}</tbody></table>',
        name,
        head,
        body,
    )


@admin.register(ConversationSearchEvent)
class ConversationSearchEventAdmin(LargeTableMixin, FormationAdminMixin, InspectOnlyAdmin):
    inspect_permission = INSPECT_PERMISSION
    # Short columns only, so the list fits a 1280 px window beside both sidebars; the
    # workspace, run and key are on each event's page and in the filters.
    list_display = (
        created,
        "tool",
        "agent_link",
        "destination",
        "outcome",
        field_column("result_count", "hits"),
        field_column("budget_used", "budget"),
    )
    list_filter = ("tool", "outcome", "created_at", AgentFilter, DestinationFilter, "workspace")
    date_hierarchy = "created_at"
    search_fields = ("query_digest",)
    search_help_text = (
        "Type a query text to find the searches for it: it is matched through its digest "
        "under every audit key and is not stored."
    )
    # Django carries the list's query string (the searched text, ``q``) into each event's link
    # and page; an event page must not hold the text, so the list's filters are not kept.
    preserve_filters = False
    actions = None
    fields = (
        "id",
        created,
        "tool",
        "workspace",
        "run",
        "agent",
        "destination",
        "requester",
        "key_id",
        "query_digest",
        "search_filters",
        "outcome",
        "result_count",
        "budget_used",
        "hits",
        "neighbours",
        "ranking_table",
        "exclusion_counts",
    )
    readonly_fields = fields

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        if not search_term.strip():
            return queryset, False
        return events_for_query_text(queryset, search_term), False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        """The names the list shows and the agent's, which titles an event's page, joined in
        (a queryset that joins already makes the changelist skip ``list_select_related``)."""
        return super().get_queryset(request).select_related("workspace", "agent", "destination")

    @admin.display(description="agent", ordering="agent__name")
    def agent_link(self, obj: ConversationSearchEvent) -> str:
        """Narrows the list to this agent's searches."""
        url = filtered_changelist_url(
            "audit_app.ConversationSearchEvent", **{AgentFilter.parameter_name: obj.agent_id}
        )
        return format_html('<a href="{}">{}</a>', url, obj.agent)

    @admin.display(description="filters")
    def search_filters(self, obj: ConversationSearchEvent) -> str:
        rows = [
            format_html("<tr><th>{}</th><td>{}</td></tr>", name, self._filter_value(name, value))
            for name, value in sorted(obj.filters.items(), key=_filter_order)
        ]
        help_text = FILTERS_HELP.get(obj.tool, "")
        return format_html(
            '{}<p class="audit-help">{}</p>', _table("filters", mark_safe(""), rows), help_text
        )

    @admin.display(description="hits")
    def hits(self, obj: ConversationSearchEvent) -> str:
        if obj.tool == SearchTool.MEMORIES:
            return self._id_list(obj.hit_ids, links=False, note="memory ids")
        return self._id_list(obj.hit_ids, links=self._message_labels(obj))

    @admin.display(description="neighbours")
    def neighbours(self, obj: ConversationSearchEvent) -> str:
        if obj.tool != SearchTool.SEARCH_HISTORY:
            return f"None: {obj.tool} returns no neighbours."
        return self._id_list(obj.neighbour_ids, links=self._message_labels(obj))

    @admin.display(description="rankings")
    def ranking_table(self, obj: ConversationSearchEvent) -> str:
        """One row per hit, in the order returned: the score and each component that adds up
        to it, as the answer's ``reasons`` gave them."""
        if obj.tool != SearchTool.SEARCH_HISTORY:
            return f"None: {obj.tool} records no ranking components."
        if not obj.rankings:
            return "-"
        components = list(
            dict.fromkeys(name for ranking in obj.rankings for name in ranking["components"])
        )
        head = format_html(
            '<tr><th class="number">#</th><th>message</th><th class="number">score</th>{}</tr>',
            format_html_join("", '<th class="number">{}</th>', ((name,) for name in components)),
        )
        labels = self._message_labels(obj)
        rows = [
            format_html(
                '<tr><td class="number">{}</td><td>{}</td><td class="number">{}</td>{}</tr>',
                position,
                self._message_link(ranking["messageId"], labels, with_id=False),
                _number(ranking["score"]),
                format_html_join(
                    "",
                    '<td class="number">{}</td>',
                    ((_number(ranking["components"].get(name)),) for name in components),
                ),
            )
            for position, ranking in enumerate(obj.rankings, start=1)
        ]
        return _table("rankings", head, rows)

    @admin.display(description="exclusions")
    def exclusion_counts(self, obj: ConversationSearchEvent) -> str:
        """Withheld matches by reason, under the API's names (the trace's ``exclusions``)."""
        if obj.tool != SearchTool.SEARCH_HISTORY:
            return NOT_COUNTED
        rows = [
            format_html(
                '<tr><th>{}</th><td class="number{}">{}</td></tr>',
                camel_case(reason),
                " nonzero" if obj.exclusions.get(reason, 0) else "",
                obj.exclusions.get(reason, 0),
            )
            for reason in EXCLUSION_REASONS
        ]
        capped = (
            "More matches existed than were classified: the counts are a lower bound."
            if obj.exclusions_capped
            else "Every match was classified (exclusionsCapped: false)."
        )
        return format_html(
            '{}<p class="audit-help">{}</p>', _table("exclusions", mark_safe(""), rows), capped
        )

    def _filter_value(self, name: str, value: Any) -> str:
        if value is None:
            return format_html('<span class="quiet">{}</span>', "null")
        if name == "conversationId":
            url = filtered_changelist_url(MESSAGE_MODEL, conversation__id__exact=value)
            return format_html('<a href="{}">{}</a>', url, value)
        return str(value)

    def _message_labels(self, obj: ConversationSearchEvent) -> dict[str, str]:
        """'<conversation title> #<seq>' for every message the event names, in one query, once
        per page. Messages are never hard-deleted, so each id is found; scoped to the event's
        workspace all the same."""
        cached = getattr(obj, "_admin_message_labels", None)
        if cached is not None:
            return cached
        ids = set(obj.neighbour_ids) | {uuid.UUID(ranking["messageId"]) for ranking in obj.rankings}
        if obj.tool != SearchTool.MEMORIES:
            ids |= set(obj.hit_ids)
        rows = (
            apps.get_model(MESSAGE_MODEL)
            .objects.filter(workspace_id=obj.workspace_id, pk__in=ids)
            .values_list("id", "conversation__title", "seq")
        )
        obj._admin_message_labels = {str(pk): f"{title} #{seq}" for pk, title, seq in rows}
        return obj._admin_message_labels

    def _message_link(
        self, message_id: object, labels: dict[str, str], *, with_id: bool = True
    ) -> str:
        key = str(message_id)
        if key not in labels:
            return key
        url = reverse("admin:messages_app_message_change", args=[key])
        if not with_id:
            return format_html('<a href="{}">{}</a>', url, labels[key])
        return format_html(
            '<a href="{}">{}</a> <span class="quiet">{}</span>', url, labels[key], key
        )

    def _id_list(
        self, ids: list[uuid.UUID], *, links: dict[str, str] | bool, note: str = ""
    ) -> str:
        if not ids:
            return "-"
        items = (
            (self._message_link(pk, links),) if links else (format_html("{}", pk),) for pk in ids
        )
        listing = format_html(
            '<ol class="audit-ids">{}</ol>', format_html_join("", "<li>{}</li>", items)
        )
        if note:
            return format_html('{}<p class="audit-help">{}</p>', listing, note)
        return listing


def _filter_order(item: tuple[str, Any]) -> tuple[int, str]:
    name = item[0]
    return (FILTER_ORDER.index(name) if name in FILTER_ORDER else len(FILTER_ORDER), name)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}".rstrip("0").rstrip(".")


@admin.register(LifecycleEvent)
class LifecycleEventAdmin(InspectOnlyAdmin):
    """The lifecycle record (docs/lifecycle.md): like the search audit, visible only with its
    own permission (``audit_app.inspect_lifecycle``) and read-only for everybody. Rows are
    written by retention, erasure, holds and exports, and name what they touched by id only."""

    inspect_permission = INSPECT_LIFECYCLE_PERMISSION
    list_display = ("created_at", "action", "subject_kind", "outcome", "message_count", "actor")
    list_filter = ("action", "outcome", "subject_kind", "created_at")
    date_hierarchy = "created_at"
    search_fields = ("=workspace_id", "=subject_id", "=hold_id", "=actor_token_id")
    search_help_text = "A workspace, conversation, account, hold or token id."
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = None
    fields = (
        "id",
        "created_at",
        "finished_at",
        "action",
        "outcome",
        "workspace_id",
        "subject_kind",
        "subject_id",
        "hold_id",
        "actor",
        "actor_token_id",
        "counts",
    )
    readonly_fields = fields

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        """An exact id, or nothing: the id columns are UUIDs, never a text to scan."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            wanted = uuid.UUID(term)
        except ValueError:
            return queryset.none(), False
        by_id = (
            Q(workspace_id=wanted)
            | Q(subject_id=wanted)
            | Q(hold_id=wanted)
            | Q(actor_token_id=wanted)
        )
        return queryset.filter(by_id), False

    @admin.display(description="messages")
    def message_count(self, obj: LifecycleEvent) -> object:
        return obj.counts.get("messages", "-")
