"""search_history's query syntax (SPEC §6): quoted phrases, ``word*`` prefixes, nothing else.

A double-quoted group is one alternative that matches its words adjacent and in order; a word of
at least two letters or digits ending in ``*`` matches by prefix; every other character is
literal text, a quote without a partner is a plain character, and no input ever raises anything
but ``invalid_arguments`` for a query with nothing searchable. Exact ranked lists; synthetic
text only.
"""

from __future__ import annotations

import json
from math import log

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formation.errors import InvalidArguments
from search_app.query.parse import parse_query
from tests import factories
from tests.factories import at

pytestmark = pytest.mark.django_db

NOW = at(30 * 24 * 60)
URL = "/api/v1/history/search"
ADJACENT = "the release train leaves on friday"
# Both four lexemes long, so length normalisation does not tell them apart.
APART = "the train release is delayed today"


@pytest.fixture
def room(db):
    return factories.joined_room(factories.make_workspace("syntax"), "Alice Example")


def say(room, text: str, minute: float):
    return factories.post(room, room.people[0], text, created_at=at(minute))


def say_apart(room, text: str, minute: float):
    """``say``, after fillers: compared hits are not each other's context (docs/search.md)."""
    return factories.post_apart(room, room.people[0], text, created_at=at(minute))


# One occurrence's BM25-shaped share in a document of the average length: 1 / (1 + k1).
WORD = 1 / 1.9


def search(room, query: str):
    return factories.room_history(room, query, NOW)


def ids(result) -> list:
    return [hit.message.id for hit in result.hits]


# --- phrases --------------------------------------------------------------------------------


def test_a_phrase_matches_only_its_words_adjacent_and_in_order(room):
    adjacent = say_apart(room, ADJACENT, 0)
    apart = say_apart(room, APART, 1)

    assert ids(search(room, '"release train"')) == [adjacent.id]
    # Without quotes both messages hold both words side by side; the newer ranks first.
    assert ids(search(room, "release train")) == [apart.id, adjacent.id]


def test_a_phrase_ranks_above_the_same_words_apart(room):
    """The phrase is one more alternative the adjacent message matches: it ranks first even
    though the other message is newer."""
    adjacent = say_apart(room, ADJACENT, 0)
    apart = say_apart(room, APART, 1)

    result = search(room, '"release train" release train')

    assert ids(result) == [adjacent.id, apart.id]
    first, second = result.hits
    # Each of the three terms has N = 2 eligible matches; the phrase is in one, the words in
    # both: weights ln 3, ln 2, ln 2. A phrase counts once; both documents are four lexemes.
    assert first.values["text"] == pytest.approx(0.9 * WORD + 0.1)
    assert second.values["text"] == pytest.approx(
        0.9 * WORD * 2 * log(2) / (log(3) + 2 * log(2)) + 0.1
    )


def test_a_phrase_keeps_the_gap_of_a_stop_word_and_stems_its_words(room):
    exact = say(room, "releasing the trains", 0)
    say(room, "releasing trains", 1)

    assert ids(search(room, '"release the train"')) == [exact.id]


def test_closeness_counts_from_the_end_of_a_phrase(room):
    """``"release train" friday`` over ADJACENT: friday is three positions after train."""
    message = say(room, ADJACENT, 0)

    (hit,) = search(room, '"release train" friday').hits

    assert hit.message.id == message.id
    assert hit.values["text"] == pytest.approx(0.9 * WORD + 0.1 / (1 + 2 / 3))


def test_phrase_words_are_highlighted(room):
    message = say(room, ADJACENT, 0)
    result = search(room, '"release train"')
    assert result.hits[0].message.id == message.id
    assert result.highlights == [[[4, 7], [12, 5]]]


# --- prefixes -------------------------------------------------------------------------------


def test_a_starred_word_matches_by_prefix(room):
    # Both two lexemes long, so only time orders them.
    released = say_apart(room, "we released it today", 0)
    releasing = say_apart(room, "releasing soon", 1)
    say(room, "a relay race", 2)

    result = search(room, "releas*")

    assert ids(result) == [releasing.id, released.id]
    assert result.highlights == [[[0, 9]], [[3, 8]]]
    assert ids(search(room, "deploy*")) == []


def test_a_prefix_needs_two_characters_before_the_star(room):
    rebuild = say(room, "rebuild it", 0)
    letter = say(room, "plan r", 1)

    assert ids(search(room, "re*")) == [rebuild.id]
    # One letter and a star is the letter itself, a word like any other.
    assert ids(search(room, "r*")) == [letter.id]


def test_a_prefix_inside_a_phrase(room):
    adjacent = say(room, "releasing trains today", 0)
    say(room, "trains releasing today", 1)

    assert ids(search(room, '"releas* train"')) == [adjacent.id]


@pytest.mark.parametrize("query", ['"word"', "word:*", "'word'", "word", "(word)", "!word"])
def test_quoted_and_operator_spellings_still_find_the_word(room, query):
    message = say(room, "one word here", 0)
    say(room, "nothing else", 1)
    assert ids(search(room, query)) == [message.id]


# --- everything else is literal ---------------------------------------------------------------


def test_an_unbalanced_quote_is_a_plain_character(room):
    adjacent = say_apart(room, ADJACENT, 0)
    apart = say_apart(room, APART, 1)

    assert ids(search(room, '"release train')) == [apart.id, adjacent.id]
    assert ids(search(room, '"release" "train')) == [apart.id, adjacent.id]


@pytest.mark.parametrize(
    ("query", "tsquery"),
    [
        ("migration plan", "'migrat' | 'plan'"),
        ('"release train"', "('releas' <-> 'train')"),
        ('"release the train"', "('releas' <2> 'train')"),
        ("releas* train", "'relea':* | 'train'"),
        ('"releas* train" x', "('relea':* <-> 'train') | 'x'"),
        ('"release train', "'releas' | 'train'"),
        ('""', None),
        ('"" x', "'x'"),
        ("a* the*", None),
        ("ab*cd", "'ab' | 'cd'"),
        ("x**", "'x'"),
        ("ab**", "'ab':*"),
        ("*", None),
        ("<-> & | ! :* ( )", None),
        ("it's O'Neil's", "'o' | 'neil'"),
        ('"a \\ b"', "'b'"),
        ("移行", "'移行'"),
        ("移 データ、ベース", "'移' | ('デー' <-> 'ータ') | ('ベー' <-> 'ース')"),
        ('"DB移行"', "('db' <-> '移行')"),
    ],
)
def test_queries_become_exactly_these_terms(db, query, tsquery):
    """Table-driven: what each spelling means, as the ``tsquery`` it becomes."""
    if tsquery is None:
        with pytest.raises(InvalidArguments):
            parse_query(query)
    else:
        assert parse_query(query).tsquery == tsquery


class _Rollback(Exception):
    """Raised to undo one example's evidence and audit rows."""


SYMBOLS = ['"', '"', "*", "*", " ", "'", "\\", ":", "&", "|", "!", "(", ")", "<", ">", "-", "_"]
WORDS = ["a", "re", "release", "train", "the", "x1", "移", "行", "データ", "데이", "ä", "\u00a0"]
ALPHABET = st.sampled_from([*SYMBOLS, *WORDS])


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=st.lists(ALPHABET, max_size=25).map("".join) | st.text(max_size=40))
def test_any_text_with_quotes_and_stars_is_a_search_or_invalid_arguments(room, text):
    """Hypothesis over quotes, stars, operators, CJK and words: the endpoint answers 200, or
    400 invalid_arguments for a query with nothing searchable; never anything else."""
    if not hasattr(room, "client"):
        say(room, ADJACENT, 0)
        say(room, "来週のデータベース移行", 1)
        _, room.client = factories.make_run(room.agent, room, room.people[0])
    body = json.dumps({"query": text or " ", "limit": 20})
    try:
        with transaction.atomic():
            response = room.client.generic("POST", URL, body, content_type="application/json")
            raise _Rollback
    except _Rollback:
        pass
    assert response.status_code in (200, 400), response.content[:300]
    if response.status_code == 400:
        assert response.json()["error"]["code"] == "invalid_arguments"
    else:
        items = response.json()["items"]
        for item in items:
            for start, length in item["highlights"]:
                assert start >= 0
                assert length > 0
                assert start + length <= len(item["text"])
