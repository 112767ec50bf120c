"""User text into a ``TermQuery``: terms PostgreSQL normalised, quoted so that nothing the
user typed acts as an operator (the syntax is in ``search_app/query/__init__.py``)."""

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
from search_app.query.cjk import is_cjk

MIN_PREFIX = 2

# A word ending in ``*``: letters or digits right before the star, not glued to more of them.
_PREFIX_WORD = re.compile(rf"(?<![^\W_])([^\W_]{{{MIN_PREFIX},}})\*(?![^\W_])")


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
    highlight: str | None = None

    @property
    def operand(self) -> str:
        """The term as an operand of ``|`` or a phrase operator."""
        return self.tsquery if len(self.lexemes) == 1 else f"({self.tsquery})"

    @property
    def highlight_operand(self) -> str:
        """The term as highlights look for it, in text with punctuation blanked
        (``formation_search_masked``): each lexeme holding punctuation as the phrase of its
        words, ``'pars' <-> 'py'`` for ``parse.py``."""
        if self.highlight is None:
            return self.operand
        return f"({self.highlight})"


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

    @property
    def highlight_tsquery(self) -> str:
        """What ``ts_headline`` marks, over text with punctuation blanked."""
        return " | ".join(term.highlight_operand for term in self.terms)

    def term(self, index: int) -> str:
        return self.terms[index].tsquery


def quote_lexeme(lexeme: str) -> str:
    """A lexeme as a quoted ``tsquery`` operand: nothing inside can act as an operator."""
    escaped = lexeme.replace("\\", "\\\\").replace("'", "''")
    return f"'{escaped}'"


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
# answers it alone, whatever the transaction ran before. A query's words are read without
# identifier parts (an identifier typed whole is matched whole); each lexeme holding ASCII
# punctuation comes with its words as highlights see them, the punctuation blanked.
_PUNCTUATION = "[!-/:-@[-`{-~]"
_LEXEMES = """
    WITH config AS MATERIALIZED (SELECT {language} AS name)
    SELECT config.name, found.number, found.lexeme, found.positions, found.words
    FROM config
    LEFT JOIN LATERAL (
        SELECT part.number, lexeme.lexeme, lexeme.positions,
               (SELECT array_agg(array[word.position::text, word.lexeme]
                                 ORDER BY word.position, word.lexeme)
                FROM unnest(to_tsvector(config.name::regconfig,
                                        regexp_replace(lexeme.lexeme, '{punctuation}', ' ', 'g')))
                     AS spelled
                CROSS JOIN LATERAL (SELECT spelled.lexeme, unnest(spelled.positions) AS position)
                     AS word
                WHERE lexeme.lexeme ~ '{punctuation}') AS words
        FROM unnest(%(texts)s::text[]) WITH ORDINALITY AS part(body, number),
             unnest(formation_search_lexemes(config.name::regconfig, part.body, false)) AS lexeme
    ) AS found ON true
"""
_WORKSPACE_LANGUAGE = _LEXEMES.format(
    language=f"COALESCE((SELECT language FROM {table(Workspace)} "
    "WHERE id = %(workspace)s), %(config)s)",
    punctuation=_PUNCTUATION,
)
_GIVEN_LANGUAGE = _LEXEMES.format(language="%(config)s::text", punctuation=_PUNCTUATION)


def _documents(
    texts: list[str], workspace_id, config: str
) -> tuple[str, list[list], dict[str, str]]:
    """The configuration, each text's document as (position, lexeme) in position order, and
    the highlight phrase of each lexeme holding punctuation: one statement, which also reads
    the workspace's language."""
    with connection.cursor() as cursor:
        cursor.execute(
            _GIVEN_LANGUAGE if workspace_id is None else _WORKSPACE_LANGUAGE,
            {"workspace": workspace_id, "config": config, "texts": texts},
        )
        rows = cursor.fetchall()
    documents: list[list] = [[] for _ in texts]
    spelled: dict[str, str] = {}
    for _, number, lexeme, positions, words in rows:
        if number is not None:
            documents[number - 1].extend((position, lexeme) for position in positions)
        if words:
            spelled[lexeme] = _phrase_term([(int(at), word) for at, word in words]).tsquery
    for document in documents:
        document.sort()
    return rows[0][0], documents, spelled


def _phrase_term(
    occurrences: list[tuple[int, str]],
    prefixed: set[int] = frozenset(),
    spelled: dict[str, str] | None = None,
) -> Term:
    """The lexemes in order, each gap between their positions kept (``<2>`` where a stop word
    stood); lexemes at one position are alternatives there. Positions in ``prefixed`` match
    by prefix. ``spelled``: the highlight phrase of lexemes holding punctuation."""
    spelled = spelled or {}
    parts, shown, lexemes, prefixes, cjk = [], [], [], [], []
    previous = None
    run: list[str] = []
    for position, group in groupby(occurrences, key=lambda occurrence: occurrence[0]):
        found = [lexeme for _, lexeme in group]
        star = ":*" if position in prefixed else ""
        operand = " | ".join(f"{quote_lexeme(lexeme)}{star}" for lexeme in found)
        operand = f"({operand})" if len(found) > 1 else operand
        highlighted = " | ".join(
            f"({spelled[lexeme]})"
            if lexeme in spelled and not star
            else f"{quote_lexeme(lexeme)}{star}"
            for lexeme in found
        )
        highlighted = f"({highlighted})" if len(found) > 1 else highlighted
        if previous is not None:
            distance = position - previous
            parts.append("<->" if distance == 1 else f"<{distance}>")
            shown.append(parts[-1])
        parts.append(operand)
        shown.append(highlighted)
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
    highlight = " ".join(shown) if shown != parts else None
    return Term(" ".join(parts), tuple(lexemes), tuple(prefixes), tuple(cjk), highlight)


def _word_terms(
    occurrences: list[tuple[int, str]], spelled: dict[str, str]
) -> list[tuple[int, Term]]:
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
            terms.append(
                (position, Term(quote_lexeme(lexeme), (lexeme,), (False,), (), spelled.get(lexeme)))
            )
    if chain:
        terms.append((chain[0][0], _phrase_term(chain)))
    terms.sort(key=lambda found: found[0])
    return terms


def _last_position(occurrences: list[tuple[int, str]]) -> tuple[int, set[str]] | None:
    if not occurrences:
        return None
    last = occurrences[-1][0]
    return last, {lexeme for position, lexeme in occurrences if position == last}


def _terms(pieces: list[_Phrase], documents: list[list], spelled: dict[str, str]) -> list[Term]:
    terms: list[Term] = []
    for piece in pieces:
        occurrences = documents[piece.text]
        if not occurrences:
            continue
        if piece.kind == "words":
            terms.extend(term for _, term in _word_terms(occurrences, spelled))
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
        terms.append(_phrase_term(occurrences, prefixed, spelled))
    distinct: dict[str, Term] = {}
    for term in terms:
        distinct.setdefault(term.tsquery, term)
    return list(distinct.values())


def parse_query(text: str, *, workspace_id=None, config: str = SEARCH_CONFIG) -> TermQuery:
    """The OR query for ``text`` in the workspace's language (``config`` without one, or for
    a workspace that does not exist); ``invalid_arguments`` when no searchable word is left."""
    pieces, texts = _pieces(text)
    config, documents, spelled = _documents(texts, workspace_id, config)
    terms = _terms(pieces, documents, spelled)
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
