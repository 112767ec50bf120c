"""Turning any user text into a safe OR query, and finding matched words for highlighting.

The query syntax (SPEC §6), and nothing else:

- words are alternatives (OR): each word the configuration keeps (stop words and punctuation
  are dropped) is one term;
- a double-quoted group is one term, its words adjacent and in order (``"release train"``); a
  quote without a partner is an ordinary character;
- a word of at least ``MIN_PREFIX`` letters or digits followed by ``*`` matches by prefix
  (``releas*``), inside a group too;
- a run of Han, kana or Hangul characters (scripts written without spaces) is one term that
  matches that text anywhere inside a sentence, through the character bigrams its documents
  carry: ``移行`` finds "来週のデータベース移行について".

Raw user text never reaches ``to_tsquery``: PostgreSQL itself splits and normalises every part
with ``formation_search_document``, the function the documents are built with (the workspace's
configuration, bigrams for CJK), and we assemble the lexemes into a ``tsquery`` literal with
every lexeme quoted, so nothing the user types acts as an operator. ``plainto_tsquery`` and
``websearch_to_tsquery`` would AND the words; SPEC §6 makes them alternatives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import groupby, pairwise

from django.db import connection

from formation.errors import InvalidArguments
from formation.sql import table
from messages_app.models import Workspace
from search_app.limits import MAX_QUERY_TERMS
from search_app.models import SEARCH_CONFIG

MIN_PREFIX = 2

# The characters documents index as bigrams (search_app migration 0005, formation_cjk_class;
# tests/search_app/test_cjk.py holds the two to the same code points).
CJK_RANGES = (
    (0x1100, 0x11FF),
    (0x2E80, 0x2FDF),
    (0x3005, 0x3007),
    (0x3021, 0x3029),
    (0x3031, 0x3035),
    (0x303B, 0x303C),
    (0x3041, 0x309F),
    (0x30A1, 0x30FA),
    (0x30FC, 0x30FF),
    (0x3131, 0x318E),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xA960, 0xA97F),
    (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0xFFA0, 0xFFDC),
    (0x1B000, 0x1B16F),
    (0x20000, 0x3FFFF),
)
_CJK_CLASS = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in CJK_RANGES)
CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_CJK_CHARACTER = re.compile(f"[{_CJK_CLASS}]")
# A word ending in ``*``: letters or digits right before the star, not glued to more of them.
_PREFIX_WORD = re.compile(rf"(?<![^\W_])([^\W_]{{{MIN_PREFIX},}})\*(?![^\W_])")

# Private-use characters that mark matches in ts_headline's output; never shown to anyone.
# There are more of them (137,468) than a message may hold characters, so a free pair always
# exists.
_MARKER_RANGES = (range(0xE000, 0xF900), range(0xF0000, 0xFFFFE), range(0x100000, 0x10FFFE))


@dataclass(frozen=True)
class Term:
    """One alternative of the query: a lexeme, a prefix, or a phrase of lexemes.

    ``lexemes`` (with ``prefixes``) are the lexemes it is made of, for the closeness signal's
    position reading; ``cjk`` the CJK text it stands for, which highlights find in the text.
    """

    tsquery: str
    lexemes: tuple[str, ...]
    prefixes: tuple[bool, ...]
    cjk: tuple[str, ...] = ()

    @property
    def operand(self) -> str:
        """The term as an operand of ``|`` or a phrase operator."""
        return self.tsquery if len(self.lexemes) == 1 else f"({self.tsquery})"


@dataclass(frozen=True)
class TermQuery:
    """The distinct terms of a query, in the order they first appear, their OR, and the text
    search configuration they were parsed with (the one their documents use)."""

    terms: tuple[Term, ...]
    config: str = SEARCH_CONFIG
    cjk: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        texts = dict.fromkeys(text for term in self.terms for text in term.cjk)
        object.__setattr__(self, "cjk", tuple(texts))

    @property
    def tsquery(self) -> str:
        return " | ".join(term.operand for term in self.terms)

    def term(self, index: int) -> str:
        return self.terms[index].tsquery


def quote_lexeme(lexeme: str) -> str:
    """A lexeme as a quoted ``tsquery`` operand: nothing inside can act as an operator."""
    escaped = lexeme.replace("\\", "\\\\").replace("'", "''")
    return f"'{escaped}'"


def is_cjk(text: str) -> bool:
    return bool(text) and CJK_RUN.fullmatch(text) is not None


def masked(text: str) -> str:
    """``text`` with its CJK characters blanked one for one (``formation_search_masked``)."""
    return _CJK_CHARACTER.sub(" ", text)


# --- the pieces of a query -------------------------------------------------------------------


@dataclass
class _Phrase:
    """A part of the query that becomes terms: ``words`` (each lexeme a term, CJK runs one term
    each), ``phrase`` (one term, in order) or ``prefix`` (a phrase whose last word matches by
    prefix). ``marks`` are starred words inside a phrase: (the phrase up to the word, the word),
    as indexes into the texts PostgreSQL parses."""

    kind: str
    text: int
    marks: list[tuple[int, int]] = field(default_factory=list)


def _pieces(query: str) -> tuple[list[_Phrase], list[str]]:
    """Split the query into plain stretches, quoted groups and starred words."""
    texts: list[str] = []

    def text(value: str) -> int:
        texts.append(value)
        return len(texts) - 1

    quotes = [position for position, char in enumerate(query) if char == '"']
    if len(quotes) % 2:
        quotes.pop()  # the last quote has no partner: an ordinary character
    bounds = [-1, *quotes, len(query)]
    pieces: list[_Phrase] = []
    for number, (start, end) in enumerate(pairwise(bounds)):
        stretch = query[start + 1 : end]
        if number % 2:  # inside quotes
            phrase = _Phrase("phrase", text(stretch))
            for word in _PREFIX_WORD.finditer(stretch):
                phrase.marks.append((text(stretch[: word.end(1)]), text(word.group(1))))
            pieces.append(phrase)
            continue
        done = 0
        for word in [*_PREFIX_WORD.finditer(stretch), None]:
            plain = stretch[done : word.start() if word else len(stretch)]
            if plain.strip():
                pieces.append(_Phrase("words", text(plain)))
            if word:
                pieces.append(_Phrase("prefix", text(word.group(1))))
                done = word.end()
    return pieces, texts


# The configuration: the workspace's language when a workspace is given (else ``config``).
# Without one (memories) the statement reads no table at all, so on Citus the coordinator
# answers it alone, whatever the transaction ran before.
_LEXEMES = """
    WITH config AS MATERIALIZED (SELECT {language} AS name)
    SELECT config.name, found.number, found.lexeme, found.positions
    FROM config
    LEFT JOIN LATERAL (
        SELECT part.number, lexeme.lexeme, lexeme.positions
        FROM unnest(%(texts)s::text[]) WITH ORDINALITY AS part(body, number),
             unnest(formation_search_document(config.name::regconfig, part.body)) AS lexeme
    ) AS found ON true
"""
_WORKSPACE_LANGUAGE = _LEXEMES.format(
    language=f"COALESCE((SELECT language FROM {table(Workspace)} "
    "WHERE id = %(workspace)s), %(config)s)"
)
_GIVEN_LANGUAGE = _LEXEMES.format(language="%(config)s::text")


def _documents(texts: list[str], workspace_id, config: str) -> tuple[str, list[list]]:
    """The configuration, and each text's document as (position, lexeme), in position order:
    one statement, which also reads the workspace's language."""
    with connection.cursor() as cursor:
        cursor.execute(
            _GIVEN_LANGUAGE if workspace_id is None else _WORKSPACE_LANGUAGE,
            {"workspace": workspace_id, "config": config, "texts": texts},
        )
        rows = cursor.fetchall()
    documents: list[list] = [[] for _ in texts]
    for _, number, lexeme, positions in rows:
        if number is not None:
            documents[number - 1].extend((position, lexeme) for position in positions)
    for document in documents:
        document.sort()
    return rows[0][0], documents


def _phrase_term(occurrences: list[tuple[int, str]], prefixed: set[int] = frozenset()) -> Term:
    """The lexemes in order, each gap between their positions kept (``<2>`` where a stop word
    stood); lexemes at one position are alternatives there. Positions in ``prefixed`` match
    by prefix."""
    parts, lexemes, prefixes, cjk = [], [], [], []
    previous = None
    run: list[str] = []
    for position, group in groupby(occurrences, key=lambda occurrence: occurrence[0]):
        found = [lexeme for _, lexeme in group]
        star = ":*" if position in prefixed else ""
        operand = " | ".join(f"{quote_lexeme(lexeme)}{star}" for lexeme in found)
        operand = f"({operand})" if len(found) > 1 else operand
        if previous is not None:
            distance = position - previous
            parts.append("<->" if distance == 1 else f"<{distance}>")
        parts.append(operand)
        lexemes.extend(found)
        prefixes.extend([bool(star)] * len(found))
        # The CJK text the bigrams spell: consecutive bigrams overlap by one character.
        cjk_bigram = len(found) == 1 and is_cjk(found[0])
        if cjk_bigram and run and previous == position - 1:
            run.append(found[0][-1])
        else:
            if run:
                cjk.append("".join(run))
            run = [found[0]] if cjk_bigram else []
        previous = position
    if run:
        cjk.append("".join(run))
    return Term(" ".join(parts), tuple(lexemes), tuple(prefixes), tuple(cjk))


def _word_terms(occurrences: list[tuple[int, str]]) -> list[tuple[int, Term]]:
    """A plain stretch: every lexeme a term of its own, and every run of CJK bigrams (at
    consecutive positions) one phrase term; each with the position it starts at."""
    terms: list[tuple[int, Term]] = []
    seen: set[str] = set()
    chain: list[tuple[int, str]] = []
    for position, lexeme in occurrences:
        if is_cjk(lexeme):
            if chain and chain[-1][0] != position - 1:
                terms.append((chain[0][0], _phrase_term(chain)))
                chain = []
            chain.append((position, lexeme))
        elif lexeme not in seen:
            seen.add(lexeme)
            terms.append((position, Term(quote_lexeme(lexeme), (lexeme,), (False,))))
    if chain:
        terms.append((chain[0][0], _phrase_term(chain)))
    terms.sort(key=lambda found: found[0])
    return terms


def _last_position(occurrences: list[tuple[int, str]]) -> tuple[int, set[str]] | None:
    if not occurrences:
        return None
    last = occurrences[-1][0]
    return last, {lexeme for position, lexeme in occurrences if position == last}


def _terms(pieces: list[_Phrase], documents: list[list]) -> list[Term]:
    terms: list[Term] = []
    for piece in pieces:
        occurrences = documents[piece.text]
        if not occurrences:
            continue
        if piece.kind == "words":
            terms.extend(term for _, term in _word_terms(occurrences))
            continue
        prefixed: set[int] = set()
        if piece.kind == "prefix":
            position, found = _last_position(occurrences)
            if not any(is_cjk(lexeme) for lexeme in found):
                prefixed.add(position)
        for upto, word in piece.marks:
            # The starred word's lexeme is the last one of the phrase up to it, unless the word
            # left none (a stop word): then there is nothing to mark.
            end, own = _last_position(documents[upto]) or (None, set())
            alone = _last_position(documents[word])
            if alone and alone[1] == own and not any(is_cjk(lexeme) for lexeme in own):
                prefixed.add(end)
        terms.append(_phrase_term(occurrences, prefixed))
    distinct: dict[str, Term] = {}
    for term in terms:
        distinct.setdefault(term.tsquery, term)
    return list(distinct.values())


def parse_query(text: str, *, workspace_id=None, config: str = SEARCH_CONFIG) -> TermQuery:
    """The OR query for ``text`` in the workspace's language (``config`` without one, or for
    a workspace that does not exist); ``invalid_arguments`` when no searchable word is left."""
    pieces, texts = _pieces(text)
    config, documents = _documents(texts, workspace_id, config)
    terms = _terms(pieces, documents)
    if not terms:
        raise InvalidArguments.for_field(
            "query", "The query has no searchable words (only stop words or punctuation)."
        )
    if len(terms) > MAX_QUERY_TERMS:
        raise InvalidArguments.for_field(
            "query", f"The query has more than {MAX_QUERY_TERMS} distinct words; shorten it."
        )
    return TermQuery(tuple(terms), config)


# --- highlights ------------------------------------------------------------------------------

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
            [query.config, query.tsquery, texts, options],
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
