"""The admin's plumbing that knows no app: columns, filters, paging and read-only bases.

Every app's admin builds on these (``messages_app/admin/``, ``search_app/runs/admin.py``,
``audit_app/admin.py``), so a page lists, filters, pages and refuses writes the same way
wherever its model lives. Nothing here imports an app: the pages' stylesheet and script are
named by their static paths (they are served from ``messages_app/static/``, whose URLs every
admin page carries), the autocomplete filter's template is ``formation/templates/``, and a
link to another app's page is built from its URL name.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.widgets import AutocompleteSelect
from django.core.paginator import Paginator
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode

from formation.display import local_time


def compact_time(value: datetime | None) -> str:
    """``2026-03-10 12:00:05`` in the admin's time zone: one short line in a list, to the
    second, and the same format as the detail pages (formation/formats)."""
    return local_time(value)


def field_column(
    field_name: str, description: str, show: Callable[[Any], Any] | None = None
) -> Any:
    """A sortable list column for one field under a short header (a field's verbose name, or
    its choice's long label, makes a column too wide); ``show`` formats the value."""

    @admin.display(description=description, ordering=field_name)
    def column(obj: Model) -> Any:
        value = getattr(obj, field_name)
        return show(value) if show else value

    column.__name__ = description  # the cell's CSS class: field-<description>
    return column


created = field_column("created_at", "created", compact_time)


def two_part_time(value: datetime | None) -> str:
    """``compact_time`` as a date and a time that may sit on two lines, never broken inside."""
    date, _, time = compact_time(value).partition(" ")
    return format_html('<span class="nowrap">{}</span> <span class="nowrap">{}</span>', date, time)


def change_link(obj: Model) -> str:
    """A link to the row's admin page, labelled with its name."""
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj)


def filtered_changelist_url(model: str, **lookups: object) -> str:
    """The changelist of ``model`` (``"app_label.model_name"``) narrowed by ``lookups``, the
    parameters its filters read (``conversation__id__exact=...``), as a filter's link writes
    them. The model is named by string, so a page may link another app's list."""
    app_label, model_name = model.split(".")
    url = reverse(f"admin:{app_label}_{model_name.lower()}_changelist")
    return f"{url}?{urlencode(lookups)}" if lookups else url


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


class AutocompleteListFilter(admin.ListFilter):
    """Filter on a foreign key by picking one row through the admin's autocomplete.

    Django's own related-field filter lists every row of the related table in the sidebar
    (2,000 conversations, every agent); this one loads only the chosen row, and the picker asks
    the related model's admin for 20 matches at a time. The parameter is the one a link would
    carry (``conversation__id__exact``), so links from other pages land on the same filter. A
    user who may not view the related model gets no picker, only the chosen row's name.
    """

    template = "admin/formation/autocomplete_filter.html"
    field_name = ""
    parameter_name = ""  # "<field_name>__id__exact", as links write it

    def __init__(
        self,
        request: HttpRequest,
        params: dict[str, list[str]],
        model: type[Model],
        model_admin: admin.ModelAdmin,
    ) -> None:
        super().__init__(request, params, model, model_admin)
        self.field = model._meta.get_field(self.field_name)
        if self.parameter_name in params:
            self.used_parameters[self.parameter_name] = params.pop(self.parameter_name)[-1]
        related_admin = model_admin.admin_site._registry.get(self.field.related_model)
        self.can_pick = related_admin is not None and related_admin.has_view_permission(request)
        # The widget reads its selected option through a form field's queryset: only that row.
        self.widget = forms.ModelChoiceField(
            queryset=self.field.related_model._default_manager.all(),
            widget=AutocompleteSelect(self.field, model_admin.admin_site),
            required=False,
        ).widget
        self.kept_parameters = [
            (name, value)
            for name, values in request.GET.lists()
            if name not in (self.parameter_name, "p", "e")
            for value in values
        ]

    def value(self) -> uuid.UUID | None:
        """The chosen row's key; ``IncorrectLookupParameters`` (the admin's "?e=1") if the
        parameter is not a UUID."""
        raw = self.used_parameters.get(self.parameter_name)
        if not raw:
            return None
        try:
            return uuid.UUID(raw)
        except ValueError:
            raise IncorrectLookupParameters("not a valid id") from None

    def has_output(self) -> bool:
        return True

    def expected_parameters(self) -> list[str]:
        return [self.parameter_name]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        chosen = self.value()
        if chosen is None:
            return queryset
        return queryset.filter(**{self.field.attname: chosen})

    def choices(self, changelist) -> list[dict[str, Any]]:
        chosen = self.value()
        choices = [
            {
                "selected": chosen is None,
                "query_string": changelist.get_query_string(remove=[self.parameter_name]),
                "display": f"All {self.field.related_model._meta.verbose_name_plural}",
            }
        ]
        if chosen is not None and not self.can_pick:  # the picker shows the chosen row itself
            row = self.field.related_model._default_manager.filter(pk=chosen).first()
            choices.append(
                {
                    "selected": True,
                    "query_string": changelist.get_query_string(),
                    "display": str(row) if row is not None else str(chosen),
                }
            )
        return choices

    def picker(self) -> str:
        """The autocomplete ``<select>``, holding only the chosen row as its option."""
        chosen = self.value()
        return self.widget.render(
            self.parameter_name,
            str(chosen) if chosen else None,
            attrs={"id": f"filter-{self.field_name}", "data-placeholder": "Type to search…"},
        )


# The admin's own stylesheet and the filters' script, on top of the autocomplete's (jQuery
# first: the script uses ``django.jQuery``). Every admin page that lists or shows our models
# carries it.
ADMIN_MEDIA = forms.Media(
    js=("admin/js/jquery.init.js", "messages_app/admin.js"),
    css={"all": ("messages_app/admin.css",)},
)


# Django's notices after a save name the row ("The account “<name>” was changed
# successfully."), and django.contrib.messages keeps a notice in a cookie, or in the session row
# when the cookie is full, until the next page: a name erased meanwhile would come back on it.
# Ours name the kind of row only.
SAVED_NOTICE = "The {name} was {done} successfully."
EDIT_AGAIN = " You may edit it again below."
ADD_ANOTHER = " You may add another {name} below."
NOTICE_ATTRIBUTE = "_formation_saved"


class FormationAdminMixin:
    """The stylesheet on every page, the autocomplete's files where a filter needs them, and
    notices after a save that do not name the row."""

    def response_add(self, request: HttpRequest, obj: Model, post_url_continue: Any = None):
        setattr(request, NOTICE_ATTRIBUTE, "added")
        try:
            return super().response_add(request, obj, post_url_continue)
        finally:
            delattr(request, NOTICE_ATTRIBUTE)

    def response_change(self, request: HttpRequest, obj: Model):
        setattr(request, NOTICE_ATTRIBUTE, "changed")
        try:
            return super().response_change(request, obj)
        finally:
            delattr(request, NOTICE_ATTRIBUTE)

    def message_user(
        self, request: HttpRequest, message: str, level: int | str = messages.INFO, *args, **kwargs
    ) -> None:
        """Django's own notice of the save in progress (the only success notice posted while
        ``response_add`` or ``response_change`` runs) is replaced by one without the name."""
        done = getattr(request, NOTICE_ATTRIBUTE, None)
        if done is not None and level == messages.SUCCESS:
            name = self.opts.verbose_name
            message = SAVED_NOTICE.format(name=name, done=done)
            if "_continue" in request.POST:
                message += EDIT_AGAIN
            elif "_addanother" in request.POST:
                message += ADD_ANOTHER.format(name=name)
        super().message_user(request, message, level, *args, **kwargs)

    @property
    def media(self) -> forms.Media:
        media = super().media + ADMIN_MEDIA
        pickers = [f for f in self.list_filter if isinstance(f, type)]
        if any(issubclass(f, AutocompleteListFilter) for f in pickers):
            media += AutocompleteSelect(None, self.admin_site).media
        return media


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


class NoWritesMixin:
    """No add, change or delete, on a model admin or an inline alike (an inline's checks take
    the parent object too)."""

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class LargeTableMixin:
    """For a table that grows to millions of rows: the changelist counts at most
    ``CappedCountPaginator.CAP`` rows, never the unfiltered total, and shows no facets (each
    facet is one more count)."""

    show_full_result_count = False
    paginator = CappedCountPaginator
    show_facets = admin.ShowFacets.NEVER


class ReadOnlyAdmin(NoWritesMixin, FormationAdminMixin, UuidSearchMixin, admin.ModelAdmin):
    """Browse only: these rows are written by the API services, which keep their invariants."""


class InspectOnlyAdmin(NoWritesMixin, admin.ModelAdmin):
    """Shown only to active staff holding ``inspect_permission`` (superusers hold every
    permission), and read-only for everybody: the rows are written by the service alone."""

    inspect_permission: str

    def _may_inspect(self, request: HttpRequest) -> bool:
        user = request.user
        return user.is_active and user.is_staff and user.has_perm(self.inspect_permission)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._may_inspect(request)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._may_inspect(request)


class ReadOnlyInline(NoWritesMixin, admin.TabularInline):
    """Rows shown as text. The ``readonly-rows`` class hides Django's per-row caption (the
    row's ``__str__``), which only repeats what the columns say."""

    extra = 0
    can_delete = False
    show_change_link = False
    classes = ("readonly-rows",)
