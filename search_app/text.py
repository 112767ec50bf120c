"""Turning any user text into a safe OR query, and finding matched words for highlighting.

Raw user text never reaches ``to_tsquery``: PostgreSQL itself splits and normalises it with
``to_tsvector`` (the same configuration documents are indexed with), and we assemble the
lexemes into a ``tsquery`` literal with every lexeme quoted. ``plainto_tsquery`` and
``websearch_to_tsquery`` would AND the words; SPEC §6 makes them alternatives.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from formation.errors import InvalidArguments
from search_app.models import SEARCH_CONFIG

MAX_QUERY_TERMS = 24

# Private-use characters that mark matches in ts_headline's output; never shown to anyone.
# There are more of them (137,468) than a message may hold characters, so a free pair always
# exists.
_MARKER_RANGES = (range(0xE000, 0xF900), range(0xF0000, 0xFFFFE), range(0x100000, 0x10FFFE))


@dataclass(frozen=True)
class TermQuery:
    """The distinct lexemes of a query, in the order they first appear, and their OR."""

    lexemes: tuple[str, ...]

    @property
    def tsquery(self) -> str:
        return " | ".join(quote_lexeme(lexeme) for lexeme in self.lexemes)

    def term(self, index: int) -> str:
        return quote_lexeme(self.lexemes[index])


def quote_lexeme(lexeme: str) -> str:
    """A lexeme as a quoted ``tsquery`` operand: nothing inside can act as an operator."""
    escaped = lexeme.replace("\\", "\\\\").replace("'", "''")
    return f"'{escaped}'"


def parse_query(text: str) -> TermQuery:
    """The OR query for ``text``; ``invalid_arguments`` when no searchable word is left."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, %s)) "
            "ORDER BY positions[1], lexeme",
            [SEARCH_CONFIG, text],
        )
        lexemes = tuple(row[0] for row in cursor.fetchall())
    if not lexemes:
        raise InvalidArguments.for_field(
            "query", "The query has no searchable words (only stop words or punctuation)."
        )
    if len(lexemes) > MAX_QUERY_TERMS:
        raise InvalidArguments.for_field(
            "query", f"The query has more than {MAX_QUERY_TERMS} distinct words; shorten it."
        )
    return TermQuery(lexemes)


# The markers the hits statement asks ts_headline for: private-use characters that real text
# almost never holds; a text that does is highlighted again with markers it lacks.
DEFAULT_MARKERS = ("\ue000", "\ue001")


def highlight_markers() -> tuple[str, str]:
    """The start and stop markers of highlights computed inside a search statement."""
    return DEFAULT_MARKERS


def _markers(text: str) -> tuple[str, str]:
    """Two private-use characters that do not occur in ``text``."""
    used = set(text)
    free = (chr(code) for codes in _MARKER_RANGES for code in codes if chr(code) not in used)
    return next(free), next(free)


def highlights(
    texts: list[str], query: TermQuery, marked: list[str | None] | None = None
) -> list[list[list[int]]]:
    """For each text, ``[start, length]`` of every word that matched the query.

    PostgreSQL decides what matched (``ts_headline`` with the search configuration, so stemming,
    accents and compound words agree with the search itself); offsets count Unicode code points.
    ``marked`` is ``ts_headline``'s output with ``highlight_markers()`` where the caller's
    statement computed it already; only a text holding a marker itself (or with no output) is
    sent to PostgreSQL again, with markers it lacks.
    """
    marked = marked or [None] * len(texts)
    start, stop = DEFAULT_MARKERS
    spans: list[list[list[int]] | None] = [
        _offsets(text, output, start, stop)
        if output is not None and start not in text and stop not in text
        else None
        for text, output in zip(texts, marked, strict=True)
    ]
    again = [i for i, span in enumerate(spans) if span is None]
    for i, span in zip(
        again, _highlight_in_database([texts[i] for i in again], query), strict=True
    ):
        spans[i] = span
    return spans


def _highlight_in_database(texts: list[str], query: TermQuery) -> list[list[list[int]]]:
    if not texts:
        return []
    markers = [_markers(text) for text in texts]
    options = [f"HighlightAll=true, StartSel={start}, StopSel={stop}" for start, stop in markers]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ts_headline(%s::regconfig, body, %s::tsquery, options) "
            "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(body, options, position) "
            "ORDER BY position",
            [SEARCH_CONFIG, query.tsquery, texts, options],
        )
        outputs = [row[0] for row in cursor.fetchall()]
    return [
        _offsets(text, output, start, stop)
        for text, output, (start, stop) in zip(texts, outputs, markers, strict=True)
    ]


def _offsets(original: str, marked: str, start: str, stop: str) -> list[list[int]]:
    """Map the marked words of ``ts_headline``'s output back onto the original text.

    The output is the original with markers added, except that words too long to index
    (over 2,047 bytes) are left out. So plain stretches are matched character by character
    (leftmost), and each marked word is found whole from there on.
    """
    spans: list[list[int]] = []
    position = 0
    word: list[str] | None = None
    for char in marked:
        if char == start:
            word = []
        elif char == stop and word is not None:
            found = original.find("".join(word), position)
            if found < 0:
                break
            spans.append([found, len(word)])
            position = found + len(word)
            word = None
        elif word is not None:
            word.append(char)
        else:
            found = original.find(char, position)
            if found < 0:
                break
            position = found + 1
    return spans
