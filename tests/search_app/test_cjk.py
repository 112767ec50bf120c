"""Chinese, Japanese and Korean text in search_history: words inside sentences without spaces.

Documents carry overlapping character bigrams for every run of Han, kana or Hangul characters
(``formation_search_document``), and a CJK word in a query is the phrase of its bigrams, so a
word of two or more characters is found anywhere inside a sentence; the ranking, reasons and
perspective rules are the ones every search uses. Highlights are code point offsets into the
original text. search_messages stays a literal substring search that is right for one- and
two-character words too. All text is synthetic.
"""

from __future__ import annotations

import sys
from importlib import import_module

import pytest
from django.db import connection

from formation.errors import InvalidArguments
from messages_app import selectors, services
from search_app.query.cjk import CJK_RUN, masked
from search_app.query.parse import parse_query
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

NOW = at(30 * 24 * 60)

JAPANESE = "来週のデータベース移行について決めました"
CHINESE = "数据库迁移计划在星期五"
KOREAN = "데이터베이스이전계획을금요일에확정했습니다"


@pytest.fixture
def room(db):
    """A private room that the agent, Alice (the requester) and Bob joined before anything."""
    return factories.joined_room(factories.make_workspace("cjk"), "Alice Example", "Bob Example")


def say(room, text: str, minute: float):
    return factories.post(room, room.people[1], text, created_at=at(minute))


def say_apart(room, text: str, minute: float):
    """``say``, after fillers: compared hits are not each other's context (docs/search.md)."""
    return factories.post_apart(room, room.people[1], text, created_at=at(minute))


def bm25(length: int, average: float) -> float:
    """One occurrence's BM25-shaped share (k1 0.9, b 0.4); a length counts lexemes (bigrams)."""
    return 1 / (1 + 0.9 * (1 - 0.4 + 0.4 * length / average))


def search(room, query: str):
    return factories.room_history(room, query, NOW)


def found(result) -> list:
    return [hit.message.id for hit in result.hits]


def marks(result, message) -> list[list[int]]:
    spans = dict(zip(found(result), result.highlights, strict=True))
    return spans[message.id]


def words_at(text: str, spans: list[list[int]]) -> list[str]:
    return [text[start : start + length] for start, length in spans]


@pytest.mark.parametrize(
    ("text", "query", "spans"),
    [
        (JAPANESE, "移行", [[9, 2]]),
        (JAPANESE, "来週", [[0, 2]]),
        (JAPANESE, "データ", [[3, 3]]),
        (JAPANESE, "について", [[11, 4]]),
        (CHINESE, "迁移", [[3, 2]]),
        (CHINESE, "数据库", [[0, 3]]),
        (CHINESE, "星期五", [[8, 3]]),
        (KOREAN, "이전", [[6, 2]]),
        (KOREAN, "금요일", [[11, 3]]),
        (KOREAN, "데이터베이스", [[0, 6]]),
    ],
)
def test_a_word_inside_a_sentence_is_found_and_highlighted(room, text, query, spans):
    """Words of two to six characters, inside sentences with no spaces, in three scripts."""
    message = say(room, text, 0)
    say(room, "unrelated english words", 1)

    result = search(room, query)

    assert found(result) == [message.id]
    assert marks(result, message) == spans
    assert words_at(text, spans) == [query]


def test_cjk_hits_are_ranked_like_any_other(room):
    """Two words each in two of three messages: the one holding both first, then newest first;
    coverage and closeness as for words in any script."""
    both = say_apart(room, CHINESE, 0)
    only_first = say_apart(room, "迁移已经完成", 1)
    only_second = say_apart(room, "星期五开会", 2)

    result = search(room, "迁移 星期五")

    assert found(result) == [both.id, only_second.id, only_first.id]
    first, second, third = result.hits
    # Equal rarity, so half the wording each for one word; the two words of CHINESE stand apart:
    # 迁移 ends at bigram position 4, 星期五 starts at 9, a gap of 5. The documents are 10, 5
    # and 4 bigrams long.
    average = 19 / 3
    assert first.values["text"] == pytest.approx(0.9 * bm25(10, average) + 0.1 / (1 + 4 / 3))
    assert second.values["text"] == pytest.approx(0.9 * 0.5 * bm25(4, average))
    assert third.values["text"] == pytest.approx(0.9 * 0.5 * bm25(5, average))
    assert marks(result, both) == [[3, 2], [8, 3]]


def test_a_longer_sentence_query_needs_every_character_in_order(room):
    """A CJK run is one phrase: all of its bigrams, adjacent and in order."""
    message = say(room, JAPANESE, 0)
    say(room, "データ移行", 1)

    assert found(search(room, "データベース移行")) == [message.id]
    with pytest.raises(InvalidArguments):
        parse_query("、。")


def test_bigrams_never_bridge_two_runs(room):
    """ "移行、行動" holds 移行 and 行動 but not 移行動: the bigrams of two runs are kept apart."""
    split = say(room, "移行、行動", 0)
    joined = say(room, "移行動", 1)

    assert found(search(room, "移行動")) == [joined.id]
    assert set(found(search(room, "行動"))) == {split.id, joined.id}


def test_latin_words_glued_to_cjk_are_words_of_their_own(room):
    """ "DB移行" is the word db and the CJK word 移行, each found and highlighted."""
    text = "来週のDB移行を決めた"
    message = say(room, text, 0)

    by_latin = search(room, "db")
    by_both = search(room, '"DB移行"')

    assert found(by_latin) == [message.id]
    assert marks(by_latin, message) == [[3, 2]]
    assert found(by_both) == [message.id]
    assert words_at(text, marks(by_both, message)) == ["DB", "移行"]


def test_korean_with_spaces_still_works_and_phrases_span_the_space(room):
    """Words between spaces are runs of their own; a quoted phrase of two of them matches them
    with the space or without it (Korean spacing varies), but not the other way round."""
    # The spaced sentence holds as many bigrams (20) as the glued one, so only time orders them.
    spaced = say_apart(room, "데이터베이스 이전 계획을 금요일에 확정했습니다 모두함께요", 0)
    glued = say_apart(room, KOREAN, 1)
    reversed_order = say_apart(room, "이전 데이터베이스", 2)

    assert found(search(room, "계획")) == [glued.id, spaced.id]
    assert set(found(search(room, '"데이터베이스 이전"'))) == {spaced.id, glued.id}
    assert found(search(room, "이전")) == [reversed_order.id, glued.id, spaced.id]


def test_perspective_rules_apply_to_cjk_hits(room):
    """A room the agent never joined holds the same word: never returned."""
    visible = say(room, CHINESE, 0)
    hidden = factories.make_conversation(room.workspace, "private", "hidden")
    factories.join(hidden, room.people[0], joined_at=factories.EARLY)
    factories.post(hidden, room.people[0], CHINESE, created_at=at(1))

    result = search(room, "迁移")

    assert found(result) == [visible.id]
    # The only eligible match: a document of the average length.
    assert result.hits[0].values["text"] == pytest.approx(0.9 * bm25(10, 10))


def test_the_document_holds_the_bigrams_and_the_projection_agrees(room):
    message = say(room, "DB移行", 0)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT document::text FROM message_search_documents WHERE message_id = %s",
            [message.id],
        )
        (document,) = cursor.fetchone()
    assert document == "'db':1 '移行':2"


def test_python_and_the_database_agree_on_which_characters_are_cjk(db):
    """``text.CJK_RANGES`` and ``formation_cjk_class()`` hold the same code points: highlights
    blank and search exactly what the documents index."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array_agg(code ORDER BY code) FROM generate_series(1, 1114111) AS code "
            "WHERE code NOT BETWEEN 55296 AND 57343 AND chr(code) ~ formation_cjk_class()"
        )
        (database,) = cursor.fetchone()
    python = [
        code
        for code in range(1, sys.maxunicode + 1)
        if not 0xD800 <= code <= 0xDFFF and CJK_RUN.fullmatch(chr(code))
    ]
    assert database == python
    assert masked("a移b") == "a b"


def test_migration_backfill_rebuilds_cjk_documents(room):
    """Documents written before the bigrams existed (plain to_tsvector) are rebuilt by the
    migration, and only those holding CJK text."""
    cjk = say(room, JAPANESE, 0)
    latin = say(room, "plain words only", 1)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE message_search_documents SET document = "
            "to_tsvector('formation_english'::regconfig, m.content) "
            "FROM messages_app_message AS m WHERE m.id = message_id AND m.id = ANY(%s)",
            [[cjk.id, latin.id]],
        )
        assert found(search(room, "移行")) == []
        migration = import_module("search_app.migrations.0005_search_documents_cjk_language")
        cursor.execute(migration.BACKFILL)
        assert cursor.rowcount == 1
    assert found(search(room, "移行")) == [cjk.id]


# --- search_messages --------------------------------------------------------------------------


@pytest.mark.parametrize("needle", ["迁", "迁移", "移计", "星期五"])
def test_search_messages_finds_short_cjk_substrings_through_the_whole_history(room, needle):
    """One- and two-character substrings leave the trigram index nothing to look up; the whole
    history is still searched and rechecked, also with the index forced and past the walk of
    the newest messages."""
    old = say(room, CHINESE, 0)
    services.messages_create(
        conversation=room,
        drafts=[
            services.MessageDraft(content=f"filler {i}", sender_account_id=room.people[1].id)
            for i in range(selectors.SEARCH_WALK + 20)
        ],
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE messages_app_message")
        cursor.execute("SET LOCAL enable_seqscan = off")
        items = selectors.message_search(
            workspace_id=room.workspace_id, agent_id=room.agent.id, query=needle, limit=5
        )
    assert [item.id for item in items] == [old.id]


def test_search_messages_does_not_split_cjk_into_words(room):
    message = say(room, JAPANESE, 0)
    items = selectors.message_search(
        workspace_id=room.workspace_id, agent_id=room.agent.id, query="ベース移", limit=5
    )
    assert [item.id for item in items] == [message.id]
    assert [run.group() for run in CJK_RUN.finditer(JAPANESE)] == [JAPANESE]
