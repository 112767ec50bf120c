"""django-filter FilterSets for the ingestion API's list endpoints (service token)."""

from __future__ import annotations

import django_filters

from messages_app.models import (
    Account,
    Agent,
    Conversation,
    ConversationKind,
    IdentityLink,
    IdentityLinkStatus,
    Membership,
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
    kind = django_filters.ChoiceFilter(field_name="kind", choices=ConversationKind.choices)
    externalId = django_filters.CharFilter(field_name="external_id", max_length=200)

    class Meta:
        model = Conversation
        fields = ["kind", "externalId"]


class MembershipFilter(django_filters.FilterSet):
    current = django_filters.BooleanFilter(field_name="left_at", lookup_expr="isnull")
    accountId = django_filters.UUIDFilter(field_name="account_id")
    agentId = django_filters.UUIDFilter(field_name="agent_id")

    class Meta:
        model = Membership
        fields = ["current", "accountId", "agentId"]


class IdentityLinkFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(field_name="status", choices=IdentityLinkStatus.choices)
    accountId = django_filters.UUIDFilter(method="filter_account")

    class Meta:
        model = IdentityLink
        fields = ["status", "accountId"]

    def filter_account(self, queryset, name, value):
        """Either side of the link: links are symmetric."""
        return queryset.filter(account_id=value) | queryset.filter(linked_account_id=value)
