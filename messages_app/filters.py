"""django-filter FilterSets for the ingestion API's list endpoints (service token)."""

from __future__ import annotations

import django_filters
from django.core.exceptions import ValidationError

from messages_app.models import (
    Account,
    Agent,
    Conversation,
    ConversationKind,
    IdentityLink,
    IdentityLinkStatus,
    LegalHold,
    Membership,
)


class _PresentChoiceField(django_filters.fields.ChoiceField):
    """A choice that may be left out but not sent empty: ``?kind=`` is none of the values the
    schema lists, so it is refused like any other, instead of silently filtering nothing."""

    def to_python(self, value: object) -> object:
        return None if value is None else super().to_python(value)

    def validate(self, value: object) -> None:
        if value == "":
            raise ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        super().validate(value)


class _ChoiceFilter(django_filters.ChoiceFilter):
    field_class = _PresentChoiceField


def choice_filter(field_name: str, choices) -> django_filters.ChoiceFilter:
    """A ChoiceFilter whose error names the allowed values, never the value sent."""
    allowed = ", ".join(value for value, _ in choices)
    return _ChoiceFilter(
        field_name=field_name,
        choices=choices,
        error_messages={"invalid_choice": f"Must be one of: {allowed}."},
    )


def true_or_false(method: str) -> django_filters.TypedChoiceFilter:
    """A strict true/false: django-filter's BooleanFilter would ignore any other value."""
    return django_filters.TypedChoiceFilter(
        choices=[("true", "true"), ("false", "false")],
        coerce=lambda value: value == "true",
        method=method,
        error_messages={"invalid_choice": "Must be true or false."},
    )


class AccountFilter(django_filters.FilterSet):
    externalId = django_filters.CharFilter(field_name="external_id", max_length=200)
    displayName = django_filters.CharFilter(
        field_name="display_name", lookup_expr="icontains", max_length=200
    )

    class Meta:
        model = Account
        fields = ["externalId", "displayName"]


class AgentFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains", max_length=200)

    class Meta:
        model = Agent
        fields = ["name"]


class ConversationFilter(django_filters.FilterSet):
    kind = choice_filter("kind", ConversationKind.choices)
    externalId = django_filters.CharFilter(field_name="external_id", max_length=200)

    class Meta:
        model = Conversation
        fields = ["kind", "externalId"]


class MembershipFilter(django_filters.FilterSet):
    current = true_or_false("filter_current")
    accountId = django_filters.UUIDFilter(field_name="account_id")
    agentId = django_filters.UUIDFilter(field_name="agent_id")

    class Meta:
        model = Membership
        fields = ["current", "accountId", "agentId"]

    def filter_current(self, queryset, name, value):
        """true: only current memberships; false: only ended ones."""
        return queryset.filter(left_at__isnull=value)


class IdentityLinkFilter(django_filters.FilterSet):
    status = choice_filter("status", IdentityLinkStatus.choices)
    accountId = django_filters.UUIDFilter(method="filter_account")

    class Meta:
        model = IdentityLink
        fields = ["status", "accountId"]

    def filter_account(self, queryset, name, value):
        """Either side of the link: links are symmetric."""
        return queryset.filter(account_id=value) | queryset.filter(linked_account_id=value)


class LegalHoldFilter(django_filters.FilterSet):
    active = true_or_false("filter_active")
    conversationId = django_filters.UUIDFilter(field_name="conversation_id")

    class Meta:
        model = LegalHold
        fields = ["active", "conversationId"]

    def filter_active(self, queryset, name, value):
        """true: only holds in force; false: only released ones."""
        return queryset.filter(released_at__isnull=value)
