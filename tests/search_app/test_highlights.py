"""search_history highlights: ``[[start, length], ...]`` in Unicode code points into ``text``.

PostgreSQL decides what matched (the same ``formation_english`` configuration as the search), so
a highlight is exactly a word that the query found: stemmed forms, accented forms and the parts
of compound words. Offsets count code points, as Python's ``str`` does, never UTF-16 units or
UTF-8 bytes, so an emoji before the match moves it by one. All text is synthetic.
"""

from __future__ import annotations

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from messages_app import services
from search_app.models import SEARCH_CONFIG
from search_app.query.parse import parse_query
from tests import factories

pytestmark = pytest.mark.django_db

SEARCH_URL = "/api/v1/history/search"


def highlights_of(world, text: str, query: str) -> list[list[int]]:
    """Post ``text`` now (the agent observes it) and return its highlights for ``query``."""
    message = factories.post(world.private, world.bob, text)
    run, _ = factories.make_run(world.agent, world.private, world.alice)
    result = factories.history(run, query)
    marks = {
        hit.message.id: spans for hit, spans in zip(result.hits, result.highlights, strict=True)
    }
    assert message.id in marks, "the message should be a hit"
    assert result.hits[list(marks).index(message.id)].message.content == text
    return marks[message.id]


def sliced(text: str, spans: list[list[int]]) -> list[str]:
    return [text[start : start + length] for start, length in spans]


@pytest.mark.parametrize(
    ("text", "query", "spans", "words"),
    [
        # Accents: the accented word is found by the plain query and vice versa.
        ("Café au lait, then more café", "cafe", [[0, 4], [24, 4]], ["Café", "café"]),
        ("the cafe is open", "CAFÉ", [[4, 4]], ["cafe"]),
        ("résumé naïve Ångström", "naive", [[7, 5]], ["naïve"]),
        # Astral characters before the match count as one code point each.
        ("😀🎉 migration done", "migration", [[3, 9]], ["migration"]),
        (
            "\U0001d4b3\U0001d4b4\U0001d4b5 café \U0001f469\u200d\U0001f469\u200d\U0001f467 café",
            "cafe",
            [[4, 4], [15, 4]],
            ["café", "café"],
        ),
        # Repeated words: every occurrence, in text order.
        ("alpha beta alpha gamma alpha", "alpha", [[0, 5], [11, 5], [23, 5]], ["alpha"] * 3),
        # Stemmed forms of the query word, whatever their case.
        (
            "Migrations, migrating and MIGRATED",
            "migration",
            [[0, 10], [12, 9], [26, 8]],
            ["Migrations", "migrating", "MIGRATED"],
        ),
        # Several query terms: each matched word, not the words between them.
        ("beta then alpha", "alpha beta", [[0, 4], [10, 5]], ["beta", "alpha"]),
        # Compound words: the matched parts, not the hyphen or the other part.
        ("x foo-bar y", "foo", [[2, 3]], ["foo"]),
        ("x foo-bar y", "bar", [[6, 3]], ["bar"]),
        ("x foo-bar y", "foo-bar", [[2, 3], [6, 3]], ["foo", "bar"]),
        # A ligature folds to "file" but the highlight is the original single code point run.
        ("the ﬁle is here", "file", [[4, 3]], ["ﬁle"]),
        # Private-use characters in the text must not be confused with internal markers.
        ("\ue000\ue001 café \uf8ff", "cafe", [[3, 4]], ["café"]),
    ],
)
def test_exact_highlight_offsets(world, text, query, spans, words):
    """Exact offsets, and each slice of ``text`` is the matched word itself."""
    marks = highlights_of(world, text, query)

    assert marks == spans
    assert sliced(text, marks) == words


def test_words_that_do_not_match_are_not_highlighted(world):
    """Only matched words: neighbours, substrings and stop words stay plain."""
    text = "preamble migrationist the migration"
    marks = highlights_of(world, text, "the migration")

    assert sliced(text, marks) == ["migration"]
    assert marks == [[26, 9]]


def test_highlights_on_the_wire_match_the_service(world):
    """The HTTP body carries the same offsets under ``highlights``, next to ``text``."""
    text = "🚀 Ünïcode café and CAFE"
    message = factories.post(world.private, world.bob, text)
    _, client = factories.make_run(world.agent, world.private, world.alice)

    body = client.post(SEARCH_URL, {"query": "café"}, format="json").json()

    (item,) = [item for item in body["items"] if item["id"] == str(message.id)]
    assert item["text"] == text
    assert item["highlights"] == [[10, 4], [19, 4]]
    assert sliced(item["text"], item["highlights"]) == ["café", "CAFE"]


# --- property: every highlight is a match, every occurrence is highlighted ----------------------

KNOWN = {
    "migration": ("migration", "Migrations", "MIGRATING", "migrated"),
    "cafe": ("café", "Cafe", "CAFÉ", "cafe"),
    "naive": ("naïve", "Naive", "NAÏVE"),
}
# Filler words: any text without whitespace and without the markup characters the parser reads
# as tags and entities (which may swallow their neighbours). Astral, combining, format and
# private-use characters are all included.
FILLER = st.text(
    alphabet=st.characters(
        codec="utf-8",
        exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp"),
        exclude_characters="<>&\x00",
    ),
    min_size=1,
    max_size=8,
)
# Near misses glued to a known form: compounds, file names, addresses, possessives.
GLUED = st.tuples(
    st.sampled_from([form for forms in KNOWN.values() for form in forms]),
    st.sampled_from(["-", ".", "'s", "@", "/", "_", ":", "-x-", ".txt", "\u2019"]),
    FILLER,
).map(lambda parts: "".join(parts))


@st.composite
def texts_with_known_word(draw):
    """(query, text, start offsets of the known word's occurrences)."""
    query = draw(st.sampled_from(sorted(KNOWN)))
    pieces = draw(
        st.lists(
            st.one_of(
                FILLER.map(lambda word: ("filler", word)),
                GLUED.map(lambda word: ("filler", word)),
                st.just(("known", None)),
            ),
            min_size=1,
            max_size=10,
        ).filter(lambda items: any(kind == "known" for kind, _ in items))
    )
    words, starts, position = [], [], 0
    for kind, word in pieces:
        if kind == "known":
            word = draw(st.sampled_from(KNOWN[query]))
            starts.append((position, len(word)))
        words.append(word)
        position += len(word) + 1
    return query, " ".join(words), starts


def matches(slice_text: str, tsquery: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_tsvector(%s::regconfig, %s) @@ %s::tsquery",
            [SEARCH_CONFIG, slice_text, tsquery],
        )
        return cursor.fetchone()[0]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=texts_with_known_word())
def test_every_highlight_matches_and_every_occurrence_is_highlighted(world, case):
    """Random texts with astral and accented filler: each highlighted slice matches the query
    by PostgreSQL's own test, and each occurrence of the known word is highlighted exactly."""
    query, text, occurrences = case
    message = factories.post(world.private, world.bob, text)
    try:
        run, _ = factories.make_run(world.agent, world.private, world.alice)
        result = factories.history(run, query)
        marks = {
            hit.message.id: spans for hit, spans in zip(result.hits, result.highlights, strict=True)
        }
        assert message.id in marks
        spans = marks[message.id]
        tsquery = parse_query(query).tsquery
        for start, length in spans:
            assert start >= 0
            assert length > 0
            assert start + length <= len(text)
            assert matches(text[start : start + length], tsquery)
        assert spans == sorted(spans)
        for occurrence in occurrences:
            assert list(occurrence) in spans
    finally:
        services.message_delete(message=message)
