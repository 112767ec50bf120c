"""formation/sql.py: the pieces every raw statement of the apps is built from."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from formation.sql import (
    ParameterCollision,
    literals,
    merge_params,
    named_rows,
    table,
    transaction_advisory_lock,
)
from messages_app.models import Message


def test_a_table_name_is_read_from_its_model():
    assert table(Message) == Message._meta.db_table == "messages_app_message"


def test_literals_are_quoted_by_psycopg_not_by_python_repr():
    assert literals(["audience", "it's"]) == "'audience', 'it''s'"
    assert literals([1, 22]) == "1, 22"


def test_merged_parameters_keep_every_fragments_names():
    assert merge_params({"p_ws": 1}, {"q_any": "a"}, {}) == {"p_ws": 1, "q_any": "a"}


def test_a_name_bound_twice_to_one_value_is_the_same_binding():
    assert merge_params({"p_ws": 1}, {"p_ws": 1}) == {"p_ws": 1}


def test_a_name_bound_twice_to_different_values_is_refused():
    with pytest.raises(ParameterCollision, match="p_ws"):
        merge_params({"p_ws": 1}, {"p_ws": 2})


@pytest.mark.django_db
def test_named_rows_are_read_by_column_name():
    with named_rows() as cursor:
        cursor.execute("SELECT 7 AS seq, 'x' AS body")
        row = cursor.fetchone()
    assert (row.seq, row.body) == (7, "x")


@pytest.mark.django_db
def test_a_named_cursor_leaves_the_next_cursor_with_plain_tuples():

    with named_rows() as cursor:
        cursor.execute("SELECT 1 AS one")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 AS one")
        assert cursor.fetchone() == (1,)


@pytest.mark.django_db(transaction=True)
def test_the_advisory_lock_is_held_until_the_transaction_ends():

    def held() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
            return cursor.fetchone()[0]

    with transaction.atomic():
        transaction_advisory_lock("%s::bigint", [4242], exclusive=True)
        assert held() == 1
    assert held() == 0
