"""Any text is a safe search_history query (SPEC §5, §6, §9).

Whatever the model types, ``POST /api/v1/history/search`` answers 200 or a 400
``invalid_arguments`` in the error envelope, never a 500: ``& | ! : * ( ) ' "`` and backslashes
are words' punctuation, not ``tsquery`` syntax. A 400 never echoes the query. Query terms are
alternatives (OR).
"""

from __future__ import annotations

import json

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests import factories

pytestmark = pytest.mark.django_db

URL = "/api/v1/history/search"
# Symbols the text-search parser treats as blanks, so wrapping a query in them changes nothing
# about its words; if any part of the query were echoed back, the canary would show.
CANARY = "\u00a7\u00a4\u00a7"

METACHARACTERS = list("&|!:*()'\"\\")
TOKENS = [
    *METACHARACTERS,
    "<->",
    "<2>",
    ":*",
    "!!",
    " ",
    "  ",
    "\t",
    "a",
    "x",
    "7",
    "42",
    "the",
    "and",
    "not",
    "or",
    "sample",
    "migration",
    "O'Neil",
    "back\\slash",
]

HYPOTHESIS = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Any Unicode text, surrogates included (they reach the server as JSON \ud800 escapes).
any_text = st.text(st.characters(exclude_categories=()), max_size=60)
# Texts made of tsquery operators, quotes, backslashes, stop words and a few real words.
operator_text = st.lists(st.sampled_from(TOKENS), max_size=16).map("".join) | st.text(
    st.sampled_from([*METACHARACTERS, " ", "a", "b", "1", "<", ">", "-"]), max_size=30
)


class _Rollback(Exception):
    """Raised to undo one example's writes (evidence, audit)."""


@pytest.fixture
def searcher(world):
    """A run in the public room, which holds a few messages written now (after the joins)."""
    for content in (
        "sample migration plan",
        "alpha rollout notes",
        "it's O'Neil's back-slash \\ report",
    ):
        factories.post(world.public, world.alice, content)
    _, client = factories.make_run(world.agent, world.public, world.alice)
    return client


def search(client, query: str):
    """POST the query as raw JSON (``json.dumps`` escapes lone surrogates, so any str fits).

    Each request runs in a savepoint that is rolled back, so examples never share evidence and
    a failed statement cannot poison the test's transaction for the next example.
    """
    body = json.dumps({"query": query, "limit": 20})
    try:
        with transaction.atomic():
            response = client.generic("POST", URL, body, content_type="application/json")
            raise _Rollback
    except _Rollback:
        pass
    return response


def assert_safe(client, query: str) -> int:
    """200 with items, or 400 invalid_arguments; never a 500; the query is never echoed."""
    response = search(client, query)
    assert response.status_code in (200, 400), (response.status_code, response.content[:300])
    body = response.json()
    if response.status_code == 400:
        assert body["error"]["code"] == "invalid_arguments"
        assert set(body["error"]) >= {"code", "message"}
    else:
        assert isinstance(body["items"], list)
    assert CANARY not in response.content.decode("utf-8")
    return response.status_code


def wrapped(text: str, wrap: bool) -> str:
    return f"{CANARY} {text} {CANARY}" if wrap else text


@HYPOTHESIS
@given(text=any_text, wrap=st.booleans())
def test_any_unicode_text_is_a_safe_query(searcher, text, wrap):
    """Arbitrary Unicode (NUL and lone surrogates included) never breaks the endpoint."""
    event(f"status {assert_safe(searcher, wrapped(text, wrap))}")


@HYPOTHESIS
@given(text=operator_text, wrap=st.booleans())
def test_tsquery_syntax_is_never_parsed_as_operators(searcher, text, wrap):
    """Operators, quotes and backslashes in any arrangement are 200 or 400, never 500."""
    event(f"status {assert_safe(searcher, wrapped(text, wrap))}")


@HYPOTHESIS
@given(text=operator_text)
def test_a_real_word_among_operators_still_finds_its_message(searcher, text):
    """A real word survives any surrounding syntax and finds the message that contains it.

    Outside quotes, that is: the surrounding text gets a closing quote if it opens a group, or
    the word would be part of a phrase with whatever else the group holds.
    """
    text += '"' * (text.count('"') % 2)
    response = search(searcher, f"{text} migration {text}")
    assert response.status_code == 200, response.content[:300]
    assert any("migration" in item["text"] for item in response.json()["items"])


def error_of(response) -> dict:
    assert response.status_code == 400, response.content[:300]
    return response.json()["error"]


@pytest.mark.parametrize(
    "query",
    ["", "   ", "\t\n", "the", "and or but", "the of a", "&|!", "( ) :* ' \" \\ <-> !!"],
)
def test_queries_without_a_searchable_word_are_invalid_arguments(searcher, query):
    """Empty, blank, stop-word-only and punctuation-only queries are 400 invalid_arguments."""
    error = error_of(search(searcher, query))
    assert error["code"] == "invalid_arguments"
    if len(query.strip()) > 3:
        assert query not in json.dumps(error, ensure_ascii=False)


@pytest.mark.parametrize(
    "query",
    ["migration\x00", "migration \ud800", "\udfff", "\x00"],
    ids=["nul", "lone-high-surrogate", "lone-low-surrogate", "only-nul"],
)
def test_text_that_is_not_valid_unicode_text_is_invalid_arguments(searcher, query):
    """NUL bytes and lone surrogates cannot be stored or searched: 400, not a 500."""
    assert error_of(search(searcher, query))["code"] == "invalid_arguments"


@pytest.mark.parametrize(
    "query",
    [
        " ".join(f"word{i}x" for i in range(60)),
        "migration " * 40,
        "&" * 400,
        "'" * 300 + "migration",
        "\\" * 200,
    ],
    ids=["many-words", "repeated-word", "many-ampersands", "many-quotes", "many-backslashes"],
)
def test_long_and_repetitive_queries_are_safe(searcher, query):
    """Long, repetitive or word-heavy queries are 200 or 400, never a 500."""
    assert_safe(searcher, query)
    assert_safe(searcher, f"{CANARY} {query} {CANARY}")


@pytest.mark.parametrize("query", [f"the of a {CANARY}", f"&|! {CANARY} and"])
def test_the_error_never_echoes_the_query(searcher, query):
    """Query text is private (SPEC §9): the error's message and details never repeat it."""
    response = search(searcher, query)
    error_of(response)
    assert CANARY not in response.content.decode("utf-8")


def test_apostrophes_and_backslashes_in_a_query_work(searcher):
    """A query with apostrophes and a backslash is an ordinary query (200) and matches."""
    response = search(searcher, "it's O'Neil's \\ back-slash")
    assert response.status_code == 200, response.content[:300]
    texts = [item["text"] for item in response.json()["items"]]
    assert "it's O'Neil's back-slash \\ report" in texts


def test_metacharacters_around_a_real_word_find_its_message(searcher):
    """``& | ! ( ) :* '`` next to a word are ignored, and the word still matches."""
    response = search(searcher, "migration & | ! ( ) :* '")
    assert response.status_code == 200, response.content[:300]
    texts = [item["text"] for item in response.json()["items"]]
    assert texts == ["sample migration plan"]


def test_query_terms_are_alternatives(searcher):
    """A message containing only one of two query words is found (OR, not AND)."""
    response = search(searcher, "rollout zebra")
    assert response.status_code == 200, response.content[:300]
    texts = [item["text"] for item in response.json()["items"]]
    assert texts == ["alpha rollout notes"]

    response = search(searcher, "rollout migration")
    texts = {item["text"] for item in response.json()["items"]}
    assert texts == {"alpha rollout notes", "sample migration plan"}
