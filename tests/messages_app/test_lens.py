"""The pieces the membership tools' statements are built from: the one summary-column builder,
a run's lens (``messages_app.lens``) and the search_messages room filter. Text only: what the
statements do with them is tested through the selectors and the SQL snapshots."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from formation.sql import ParameterCollision
from messages_app import lens as lenses
from messages_app import selectors
from messages_app.selectors import SUMMARY_COLUMNS, MessageRow, message_row, summary_columns


def lens(*, strict: bool) -> lenses.RunLens:
    return lenses.RunLens(
        ctes="scope AS (SELECT 1)",
        params={"p_workspace": "w"},
        deliverable=lambda alias: f"ok({alias})",
        visible=lambda alias: f"seen({alias})",
        reference=lambda column: f"shown({column})",
        strict=strict,
    )


def test_the_summary_columns_of_a_row_in_their_order():
    assert summary_columns("m") == ", ".join(f"m.{column}" for column in SUMMARY_COLUMNS)


def test_a_reference_shows_only_the_columns_naming_another_message_through_it():
    columns = summary_columns("m", lambda column: f"shown({column})").split(", ")
    assert columns[SUMMARY_COLUMNS.index("reply_to_id")] == "shown(m.reply_to_id)"
    assert columns[SUMMARY_COLUMNS.index("thread_id")] == "shown(m.thread_id)"
    assert columns[SUMMARY_COLUMNS.index("content")] == "m.content"


def test_named_referenced_columns_keep_their_names():
    columns = summary_columns("m", lambda column: f"shown({column})", named=True).split(", ")
    assert columns[SUMMARY_COLUMNS.index("thread_id")] == "shown(m.thread_id) AS thread_id"
    assert summary_columns("m", named=True) == summary_columns("m")


def test_a_row_read_by_name_becomes_a_message_row():
    values = {column: f"<{column}>" for column in SUMMARY_COLUMNS}
    row = SimpleNamespace(kind="hit", **values)
    assert message_row(row) == MessageRow(*values.values())
    assert message_row(row).deliverable is None


def test_without_a_lens_nothing_is_added():
    assert lenses.lens_ctes(None) == ""
    assert lenses.lens_visible(None, "m") == ""
    assert lenses.lens_params(None, {"ws": 1}) == {"ws": 1}


def test_a_lens_adds_its_ctes_and_parameters_and_a_strict_one_its_filter():
    assert lenses.lens_ctes(lens(strict=False)) == "scope AS (SELECT 1),"
    assert lenses.lens_visible(lens(strict=False), "m") == ""
    assert lenses.lens_visible(lens(strict=True), "m") == "AND seen(m)"
    assert lenses.lens_params(lens(strict=False), {"ws": 1}) == {"p_workspace": "w", "ws": 1}


def test_only_a_strict_lens_shows_references_through_itself():
    assert lenses.lens_reference(lens(strict=False)) is None
    assert lenses.lens_reference(lens(strict=True))("m.thread_id") == "shown(m.thread_id)"


def test_the_deliverable_flag_reads_the_canonical_message():
    flag = lenses.deliverable_flag(lens(strict=False), "page")
    assert "ok(flagged)" in flag
    assert "flagged.id = page.id" in flag


def test_a_statement_may_not_rebind_a_lens_parameter():
    with pytest.raises(ParameterCollision):
        lenses.lens_params(lens(strict=False), {"p_workspace": "another"})


@pytest.mark.parametrize("strict", [None, False, True])
def test_search_messages_names_its_room_on_both_steps_only_when_asked(strict):
    run_lens = None if strict is None else lens(strict=strict)
    one_room = selectors._search_statement(one_room=True, lens=run_lens)
    every_room = selectors._search_statement(one_room=False, lens=run_lens)
    assert "AND conversation_id = %(room)s" in one_room
    assert "AND m.conversation_id = %(room)s" in one_room
    assert "%(room)s" not in every_room
