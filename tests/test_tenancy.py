"""Tenant rows in the ORM (formation/tenancy.py): every join between two tenant tables equates
the workspace, and saving an existing row never writes its workspace. On Citus both are what
lets the admin work at all (its tests run there, ``make test-citus``); here they are checked on
the SQL and the rows."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection, models
from django.test.utils import CaptureQueriesContext

from formation.tenancy import WORKSPACE_COLUMN, SameWorkspaceJoin, TenantModel
from messages_app.models import Conversation, Membership, Message
from tests import factories

pytestmark = pytest.mark.django_db

SAME_WORKSPACE = (
    '"messages_app_message"."workspace_id" = ("messages_app_conversation"."workspace_id")'
)


def tenant_models() -> list[type[models.Model]]:
    return [
        model
        for model in apps.get_models()
        if any(field.column == WORKSPACE_COLUMN for field in model._meta.concrete_fields)
    ]


def test_every_relation_between_tenant_tables_joins_by_the_workspace_too() -> None:
    """A plain ``ForeignKey`` added between two tenant tables would bring back the joins Citus
    cannot plan."""
    tenant = set(tenant_models())
    plain = [
        f"{model.__name__}.{field.name}"
        for model in tenant
        for field in model._meta.concrete_fields
        if field.is_relation
        and field.related_model in tenant
        and not isinstance(field, SameWorkspaceJoin)
    ]
    assert plain == []
    assert [model.__name__ for model in tenant if not issubclass(model, TenantModel)] == []


def test_a_forward_join_equates_the_workspace() -> None:
    sql = str(Message.objects.select_related("conversation").query)
    assert (
        '"messages_app_message"."conversation_id" = "messages_app_conversation"."id" AND '
        f"({SAME_WORKSPACE})"
    ) in sql


def test_a_reverse_join_and_a_many_to_many_join_equate_the_workspace() -> None:
    reverse = str(Conversation.objects.filter(messages__seq=1).query)
    assert SAME_WORKSPACE in reverse
    through = str(Message.objects.filter(lineage__seq=1).query)
    assert through.count('"messages_app_messagelineage"."workspace_id" = (') == 2, through


def test_joins_return_the_same_rows_as_before() -> None:
    workspace = factories.make_workspace()
    alice = factories.make_account(workspace, "Alice Example")
    room = factories.make_conversation(workspace)
    factories.join(room, alice)
    first = factories.post(room, alice, "sample one")
    factories.post(room, alice, "sample two")
    other = factories.make_workspace()
    factories.post(factories.make_conversation(other), factories.make_account(other), "sample")

    titles = list(
        Message.objects.filter(conversation__workspace=workspace)
        .order_by("seq")
        .values_list("seq", "conversation__title", "sender_account__display_name")
    )
    assert titles == [
        (1, room.title, "Alice Example"),
        (2, room.title, "Alice Example"),
    ]
    assert list(Conversation.objects.filter(messages=first)) == [room]
    assert Membership.objects.filter(conversation=room, account__display_name="Alice Example")


def test_saving_an_existing_row_never_writes_its_workspace() -> None:
    workspace = factories.make_workspace()
    room = factories.make_conversation(workspace)
    room.title = "Renamed sample"
    with CaptureQueriesContext(connection) as queries:
        room.save()

    (update,) = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assigned = update.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert '"title" = ' in assigned
    assert "workspace_id" not in assigned
    found_by = update.split(" WHERE ", 1)[1]
    assert f"\"workspace_id\" = '{workspace.id.hex}'::uuid" in found_by, found_by
    room.refresh_from_db()
    assert (room.title, room.workspace_id) == ("Renamed sample", workspace.id)


def test_a_new_row_is_still_inserted_with_its_workspace() -> None:
    workspace = factories.make_workspace()
    room = Conversation(
        workspace=workspace, kind="private", title="Sample new", external_id="ext-sample-new"
    )
    room.save()
    assert Conversation.objects.get(pk=room.pk).workspace_id == workspace.id


def test_saving_a_row_loaded_in_part_writes_only_what_was_loaded() -> None:
    """As Django saves a deferred instance: one UPDATE of the loaded columns, no reads of the
    others."""
    workspace = factories.make_workspace()
    room = factories.make_conversation(workspace)
    partial = Conversation.objects.only("title").get(pk=room.pk)
    partial.title = "Renamed sample"
    with CaptureQueriesContext(connection) as queries:
        partial.save()

    (update,) = [q["sql"] for q in queries.captured_queries]
    assigned = update.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert assigned.startswith('"title" = ')
    assert " = " not in assigned.removeprefix('"title" = ')
    room.refresh_from_db()
    assert (room.title, room.workspace_id) == ("Renamed sample", workspace.id)


def test_every_relation_between_tenant_tables_is_a_key_with_the_workspace() -> None:
    """The workspace equality the joins add changes no row only because a database key pins
    each reference to its own workspace: ``(workspace_id, column, ...)`` to the target."""
    unkeyed = []
    with connection.cursor() as cursor:
        for model in tenant_models():
            for field in model._meta.concrete_fields:
                if not isinstance(field, SameWorkspaceJoin):
                    continue
                cursor.execute(
                    """SELECT 1 FROM pg_constraint AS key
                       WHERE key.conrelid = %s::regclass AND key.confrelid = %s::regclass
                         AND key.contype = 'f'
                         AND ARRAY(SELECT attname::text FROM pg_attribute
                                   WHERE attrelid = key.conrelid AND attnum = ANY(key.conkey))
                             @> ARRAY[%s, %s]""",
                    [
                        model._meta.db_table,
                        field.related_model._meta.db_table,
                        WORKSPACE_COLUMN,
                        field.column,
                    ],
                )
                if cursor.fetchone() is None:
                    unkeyed.append(f"{model.__name__}.{field.name}")
    assert unkeyed == []
