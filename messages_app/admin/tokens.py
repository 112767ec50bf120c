"""API tokens: made by ``manage.py create_token``, and revoked only here, through the one
revocation service (``services.tokens_revoke``)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth import get_permission_codename
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from formation.admin_kit import (
    IsSetListFilter,
    LargeTableMixin,
    ReadOnlyAdmin,
    compact_time,
    created,
    field_column,
)
from formation.display import counted
from messages_app import services
from messages_app.models import ApiToken

revoked = field_column("revoked_at", "revoked", compact_time)


class RevokedFilter(IsSetListFilter):
    title = "revoked"
    parameter_name = "revoked"
    field_name = "revoked_at"
    set_label = "Revoked"
    unset_label = "Active"


@admin.register(ApiToken)
class ApiTokenAdmin(LargeTableMixin, ReadOnlyAdmin):
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
