"""A migration on a cluster whose tables are already distributed (an upgrade): a column with a
check is added, its check under the name Django gives it (formation/postgresql/schema.py).
Citus refuses ``ADD COLUMN ... CHECK (...)`` with the constraint left unnamed.

Runs only in the Citus suite (``make test-citus``); the DDL is undone with the test's
transaction."""

from __future__ import annotations

from django.db import connection, models

from messages_app.models import Conversation


def test_a_column_with_a_check_is_added_to_a_distributed_table(db):
    assert connection.is_citus
    field = models.PositiveIntegerField(null=True)
    field.set_attributes_from_name("sample_count")
    with connection.schema_editor() as editor:
        editor.add_field(Conversation, field)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid = %s::regclass AND contype = 'c' AND conname LIKE %s",
            [Conversation._meta.db_table, "%sample_count%"],
        )
        (name, definition), *others = cursor.fetchall()
        cursor.execute(
            "SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = %s::regclass",
            [Conversation._meta.db_table],
        )
        (distributed,) = cursor.fetchone()
    assert others == []
    assert name.endswith("_check")
    assert definition == "CHECK ((sample_count >= 0))"
    assert distributed == 1
