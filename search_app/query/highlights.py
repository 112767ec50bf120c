"""Which words of a message a query matched, as character offsets, for the answer's
highlights."""

from __future__ import annotations

from django.db import connection

from search_app.query.cjk import CJK_RUN, masked
from search_app.query.parse import TermQuery

# Private-use characters that mark matches in ts_headline's output; never shown to anyone.
# There are more of them (137,468) than a message may hold characters, so a free pair always
# exists.
_MARKER_RANGES = (range(0xE000, 0xF900), range(0xF0000, 0xFFFFE), range(0x100000, 0x10FFFE))


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
    ``marked`` is ``ts_headline``'s output with ``highlight_markers()`` for the text with its
    CJK characters blanked (``masked``), where the caller's statement computed it already; only
    a text holding a marker itself (or with no output) is sent to PostgreSQL again, with
    markers it lacks. CJK text is found here: a CJK term matches its text wherever a run of
    CJK characters holds it, which is what its bigrams test.
    """
    marked = marked or [None] * len(texts)
    start, stop = DEFAULT_MARKERS
    spans: list[list[list[int]] | None] = [
        _offsets(masked(text), output, start, stop)
        if output is not None and start not in text and stop not in text
        else None
        for text, output in zip(texts, marked, strict=True)
    ]
    again = [i for i, span in enumerate(spans) if span is None]
    for i, span in zip(
        again, _highlight_in_database([texts[i] for i in again], query), strict=True
    ):
        spans[i] = span
    return [
        _merged([*span, *_cjk_spans(text, query.cjk)])
        for text, span in zip(texts, spans, strict=True)
    ]


def _cjk_spans(text: str, wanted: tuple[str, ...]) -> list[list[int]]:
    """Where the query's CJK texts occur in ``text``: a single character only as a run of its
    own (as the document indexes it), a longer text anywhere inside a run, left to right."""
    spans: list[list[int]] = []
    if not wanted:
        return spans
    for run in CJK_RUN.finditer(text):
        for target in wanted:
            if len(target) == 1:
                if run.group() == target:
                    spans.append([run.start(), 1])
                continue
            found = run.group().find(target)
            while found >= 0:
                spans.append([run.start() + found, len(target)])
                found = run.group().find(target, found + len(target))
    return spans


def _merged(spans: list[list[int]]) -> list[list[int]]:
    """Spans in text order, overlapping ones joined into one."""
    result: list[list[int]] = []
    for start, length in sorted(spans):
        if result and start < result[-1][0] + result[-1][1]:
            last = result[-1]
            last[1] = max(last[1], start + length - last[0])
        else:
            result.append([start, length])
    return result


def _highlight_in_database(texts: list[str], query: TermQuery) -> list[list[list[int]]]:
    if not texts:
        return []
    markers = [_markers(text) for text in texts]
    options = [f"HighlightAll=true, StartSel={start}, StopSel={stop}" for start, stop in markers]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ts_headline(%s::regconfig, formation_search_masked(body), %s::tsquery, "
            "options) "
            "FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS t(body, options, position) "
            "ORDER BY position",
            [query.config, query.highlight_tsquery, texts, options],
        )
        outputs = [row[0] for row in cursor.fetchall()]
    return [
        _offsets(masked(text), output, start, stop)
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
