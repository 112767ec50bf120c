"""Django admin for trusted administrators: browse everything, write little.

Security invariant: no admin page renders the body of a deleted message. Message bodies reach
HTML only through ``message_body``, ``content_preview`` and the conversation transcript
(``transcript_page``): the first two answer "(deleted)" and the transcript's line holds no text
for a deleted message, whatever the row holds. The token digest is never listed in any
``fields``.

Writes that must keep search, audit or proofs in step (messages, memberships, identity-link
status, runs, tokens) go through the API services, so those models are read-only here. Pages stay
fast on a million messages: related rows are joined (``list_select_related``), the changelist of
messages keeps the ``(conversation, seq)`` index order, counts at most ``CappedCountPaginator.CAP``
rows, shows no facets, and a search term that is a UUID becomes an indexed exact match instead
of a text scan. Foreign-key filters pick one row through the autocomplete
(``AutocompleteListFilter``) instead of listing the related table, and the transcript pages by
seq range. Rows are named ("<conversation title> #<seq>", "<member> in <conversation>"), lists
keep to columns that fit a 1280 px window (``messages_app/static/messages_app/admin.css``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.contrib.admin.widgets import AutocompleteSelect
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import F, Model, Q, QuerySet
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from formation.display import counted, local_time
from messages_app import services
from messages_app.lifecycle import holds
from messages_app.models import (
    Account,
    Agent,
    ApiToken,
    Conversation,
    IdentityLink,
    LegalHold,
    Membership,
    Message,
    Run,
    RunEvidence,
    Workspace,
)
from messages_app.selectors import text_search_configurations

DELETED_PLACEHOLDER = "(deleted)"
ERASED_SOURCE = " (erased)"
PREVIEW_CHARS = 80


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


revoked = field_column("revoked_at", "revoked", compact_time)


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


class ReleasedFilter(IsSetListFilter):
    title = "released"
    parameter_name = "released"
    field_name = "released_at"
    set_label = "Released"
    unset_label = "Active"


class AutocompleteListFilter(admin.ListFilter):
    """Filter on a foreign key by picking one row through the admin's autocomplete.

    Django's own related-field filter lists every row of the related table in the sidebar
    (2,000 conversations, every agent); this one loads only the chosen row, and the picker asks
    the related model's admin for 20 matches at a time. The parameter is the one a link would
    carry (``conversation__id__exact``), so links from other pages land on the same filter. A
    user who may not view the related model gets no picker, only the chosen row's name.
    """

    template = "admin/messages_app/autocomplete_filter.html"
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


class ConversationFilter(AutocompleteListFilter):
    title = "conversation"
    field_name = "conversation"
    parameter_name = "conversation__id__exact"


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


class ReadOnlyAdmin(FormationAdminMixin, UuidSearchMixin, admin.ModelAdmin):
    """Browse only: these rows are written by the API services, which keep their invariants."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


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


class HeldRowForm(forms.ModelForm):
    """A change to an existing row is refused, as a form error, while ``refusal`` gives a
    reason: a legal hold covers the row, or it is an erased account (docs/admin.md). The check
    runs in the admin's saving transaction and keeps its locks to the commit."""

    def refusal(self) -> str | None:
        return holds.row_edit_refusal(workspace_id=self.instance.workspace_id)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.instance._state.adding and self.has_changed():
            reason = self.refusal()
            if reason is not None:
                raise forms.ValidationError(reason, code="held")
        return cleaned


class AccountForm(HeldRowForm):
    def refusal(self) -> str | None:
        return holds.account_edit_refusal(
            workspace_id=self.instance.workspace_id, account_id=self.instance.pk
        )


class ConversationForm(HeldRowForm):
    def refusal(self) -> str | None:
        return holds.row_edit_refusal(
            workspace_id=self.instance.workspace_id, conversation_id=self.instance.pk
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


class ReadOnlyInline(admin.TabularInline):
    """Rows shown as text. The ``readonly-rows`` class hides Django's per-row caption (the
    row's ``__str__``), which only repeats what the columns say."""

    extra = 0
    can_delete = False
    show_change_link = False
    classes = ("readonly-rows",)

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


def change_link(obj: Model) -> str:
    """A link to the row's admin page, labelled with its name."""
    url = reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj)


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


class RunEvidenceInline(ReadOnlyInline):
    """What the run's tools returned to the model, in the order it first saw each message."""

    model = RunEvidence
    fields = ("message", "tool", "created_at")
    readonly_fields = fields
    ordering = ("created_at", "id")

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("message__conversation")


def message_changelist_url(conversation_id: uuid.UUID) -> str:
    """The message changelist narrowed to one conversation, in seq order."""
    url = reverse("admin:messages_app_message_changelist")
    return f"{url}?conversation__id__exact={conversation_id}"


TRANSCRIPT_PAGE_SIZE = 100


def transcript_url(conversation_id: uuid.UUID, *, seq: int | None = None) -> str:
    """The conversation's transcript; with ``seq``, the page holding that message, at it."""
    url = reverse("admin:messages_app_conversation_transcript", args=[conversation_id])
    return url if seq is None else f"{url}?seq={seq}#seq-{seq}"


@dataclass(frozen=True)
class TranscriptLine:
    """One message as the transcript shows it: ``text`` is None for a deleted message."""

    id: uuid.UUID
    seq: int
    created_at: datetime
    sender: str
    role: str
    status: str
    text: str | None
    edited: bool
    reply_to_seq: int | None

    @property
    def deleted(self) -> bool:
        return self.text is None


@dataclass(frozen=True)
class TranscriptPage:
    number: int
    pages: int
    lines: list[TranscriptLine]


def transcript_page(
    conversation: Conversation, *, page: str | None = None, seq: str | None = None
) -> TranscriptPage:
    """One page of the conversation's messages in seq order, ``TRANSCRIPT_PAGE_SIZE`` seqs a
    page: page ``n`` is the seq range ``((n-1)*size, n*size]``, which the unique
    ``(conversation, seq)`` index reads directly at any depth (committed seqs have no gaps, so
    pages are full), and ``last_seq`` gives the page count without counting rows.

    ``page`` and ``seq`` are raw query values; anything that is not a number means page 1, and
    numbers are clamped to the pages there are. A deleted message's text never leaves here.
    """
    pages = max(1, math.ceil(conversation.last_seq / TRANSCRIPT_PAGE_SIZE))
    number = _positive_int(page) or 1
    wanted_seq = _positive_int(seq)
    if wanted_seq is not None:
        number = math.ceil(wanted_seq / TRANSCRIPT_PAGE_SIZE)
    number = min(number, pages)
    first = (number - 1) * TRANSCRIPT_PAGE_SIZE
    rows = (
        Message.objects.filter(
            workspace_id=conversation.workspace_id,
            conversation=conversation,
            seq__gt=first,
            seq__lte=first + TRANSCRIPT_PAGE_SIZE,
        )
        .select_related("sender_account", "sender_agent")
        .annotate(reply_to_seq=F("reply_to__seq"))
        .order_by("seq")
    )
    lines = [
        TranscriptLine(
            id=message.id,
            seq=message.seq,
            created_at=message.created_at,
            sender=str(message.sender_account or message.sender_agent),
            role=message.role,
            status=message.status,
            text=None if message.is_deleted else message.content,
            edited=message.edited_at is not None,
            reply_to_seq=message.reply_to_seq,
        )
        for message in rows
    ]
    return TranscriptPage(number=number, pages=pages, lines=lines)


def _positive_int(raw: str | None) -> int | None:
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 18:
        return None
    value = int(raw)
    return value if value > 0 else None


@admin.register(Conversation)
class ConversationAdmin(WorkspaceScopedAdmin):
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

    def get_urls(self) -> list[URLPattern]:
        transcript = path(
            "<path:object_id>/transcript/",
            self.admin_site.admin_view(self.transcript_view),
            name="messages_app_conversation_transcript",
        )
        return [transcript, *super().get_urls()]

    def transcript_view(self, request: HttpRequest, object_id: str) -> TemplateResponse:
        """The conversation read top to bottom: messages in seq order, paged, with senders'
        names; a deleted message is marked as such and its text is not on the page."""
        conversation = self.get_object(request, unquote(object_id))
        if conversation is None:
            raise Http404("No such conversation.")
        message_admin = self.admin_site._registry[Message]
        if not (
            self.has_view_permission(request, conversation)
            and message_admin.has_view_permission(request)
        ):
            raise PermissionDenied
        page = transcript_page(
            conversation, page=request.GET.get("page"), seq=request.GET.get("seq")
        )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Transcript of {conversation}",
            "subtitle": None,
            "opts": self.opts,
            "conversation": conversation,
            "page": page,
            "media": self.media,
        }
        return TemplateResponse(request, "admin/messages_app/conversation/transcript.html", context)

    @admin.display(description="read")
    def links(self, obj: Conversation) -> str:
        if obj._state.adding:
            return "-"
        return format_html(
            '<a href="{}">Transcript</a> <a href="{}">Messages</a>',
            transcript_url(obj.pk),
            message_changelist_url(obj.pk),
        )


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
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


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
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


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    """Tokens are made by ``manage.py create_token`` and only ever revoked here.

    The digest is deliberately absent from every list and page: with it, an offline guess could
    be checked, and nothing an administrator does needs it. Deleting is off so a revoked token
    stays on record.
    """

    # The prefix names the kind (fmn_service_, fmn_agent_, fmn_run_); the kind is a filter.
    list_display = ("prefix", "workspace", "agent", "run_link", created, revoked)
    list_filter = ("kind", RevokedFilter, "workspace")
    list_select_related = ("workspace", "agent")
    search_fields = ("^prefix",)
    uuid_search_fields = ("id", "agent_id", "run_id")
    ordering = ("-created_at",)
    show_full_result_count = False
    paginator = CappedCountPaginator
    show_facets = admin.ShowFacets.NEVER
    fields = ("id", "kind", "prefix", "workspace", "agent", "run", "created_at", "revoked_at")
    readonly_fields = fields
    actions = ("revoke_tokens",)

    @admin.display(description="run")
    def run_link(self, obj: ApiToken) -> str:
        """The run's id, shortened: a whole UUID would not fit the list."""
        if obj.run_id is None:
            return "-"
        url = reverse("admin:messages_app_run_change", args=[obj.run_id])
        return format_html('<a href="{}">{}…</a>', url, str(obj.run_id)[:8])

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        """Revoking is a change to the token, so it needs the model's change permission."""
        codename = get_permission_codename("change", self.opts)
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    @admin.action(description="Revoke selected tokens", permissions=["revoke"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet) -> None:
        """The tokens this call revoked are logged, in the transaction that revoked them; one
        already revoked keeps its time and gets no entry."""
        with transaction.atomic():
            tokens = services.tokens_revoke(tokens=queryset)
            if tokens:
                LogEntry.objects.log_actions(
                    user_id=request.user.pk,
                    queryset=tokens,
                    action_flag=CHANGE,
                    change_message=[{"changed": {"fields": ["Revoked at"]}}],
                )
        self.message_user(request, f"Revoked {counted(len(tokens), 'token')}.", messages.SUCCESS)
