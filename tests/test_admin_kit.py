"""formation/admin_kit.py: the admin's plumbing that knows no app (the pages built on it are
tested with their apps, in tests/messages_app/test_admin.py and tests/audit_app/test_admin.py)."""

from __future__ import annotations

import uuid

from django.urls import reverse

from formation.admin_kit import filtered_changelist_url

ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def test_a_filtered_changelist_link_carries_the_filters_parameter():
    url = filtered_changelist_url("messages_app.message", conversation__id__exact=ID)
    assert url == f"/admin/messages_app/message/?conversation__id__exact={ID}"


def test_a_model_is_named_as_its_label_writes_it():
    url = filtered_changelist_url("audit_app.ConversationSearchEvent", agent__id__exact=str(ID))
    changelist = reverse("admin:audit_app_conversationsearchevent_changelist")
    assert url == f"{changelist}?agent__id__exact={ID}"


def test_without_filters_the_link_is_the_whole_list():
    assert filtered_changelist_url("messages_app.Run") == "/admin/messages_app/run/"


def test_a_value_is_quoted_in_the_query_string():
    url = filtered_changelist_url("messages_app.conversation", title__exact="a&b c")
    assert url == "/admin/messages_app/conversation/?title__exact=a%26b+c"
