"""Ranking (SPEC §6): the weights of search_history's score and the SQL of each component.

Each component is a value in [0, 1] times a fixed weight; the weights add up to 1, so
``score`` is in [0, 1] and the contributions add up to it exactly:

- ``text`` (0.37): 0.9 x *wording* + 0.1 x *closeness*. Wording is BM25-shaped: each term
  weighs ln(1 + N / df) over the N eligible matches of this very search and scores
  tf / (tf + k1 (1 - b + b length / average length)) (``BM25_K1``, ``BM25_B``; tf saturated as
  ``ts_rank`` does, a phrase once, a length in lexemes); wording is the weighted average over
  the terms, so matching more terms and rarer terms both score higher. A term naming a speaker
  of the matches counts nothing here (``speaker`` scores it) unless every matched term does.
  Closeness is 1 for two different query terms side by side, falling as
  1 / (1 + (gap - 1) / 3); a one-term match has none. (PostgreSQL stores every word past
  position 16,383 at 16,383, so gaps there count as adjacent, never closer.)
- ``context`` (0.37): the wording of the message's eligible neighbours, weighted by
  ``CONTEXT_OFFSETS`` and averaged over the neighbours it has; read around the
  ``CONTEXT_POOL`` best matches only (``history.context``).
- ``speaker`` (0.15): the sender's name holds a query term.
- ``conversation`` (0.05): it was said in the destination conversation itself.
- ``recency`` (0.02): 1 / (1 + age / 90 days), so a three-month-old message gets half.
- ``actor`` (0.02): the requester, or an account joined to them by a live link, wrote it.
- ``participation`` (0.02): the requester is a current member of its conversation.

Ties are broken by time (newer first), then id. Document frequencies come only from eligible
messages, so what an agent may not see cannot even shift the order of what it may.

A hit matches the query, or is a *named answer*: its sender's name holds a query term and its
eligible neighbours' words give it context (``context.candidates_cte``, docs/search.md).

Closeness needs the positions of the query's terms in a document, so it is computed only where
it can change the outcome. The ``fetch`` best by the other components (the *leaders*) get
theirs first; the worst final score among them is a floor the true ``fetch``-th best cannot be
under, so only rows within what closeness could ever add (0.037) of that floor are *contenders*
at all (``history.page``). A gap is found by phrase tests (``a <1> b``, ``a <2> b``, …,
evaluated in C) up to ``PHRASE_GAPS``, and only a larger one by reading every position.
"""

from __future__ import annotations

from typing import Any

from formation.sql import table
from search_app.models import MessageSearchDocument
from search_app.query.parse import Term, TermQuery

WEIGHTS = {
    "text": 0.37,
    "actor": 0.02,
    "conversation": 0.05,
    "participation": 0.02,
    "recency": 0.02,
    "speaker": 0.15,
    "context": 0.37,
}
COVERAGE_SHARE = 0.9
CLOSENESS_SHARE = 0.1
CLOSENESS_GAP_SCALE = 3.0
# What closeness can add to a score at most: a floor this far under a leader's is safe.
MOST_CLOSENESS_ADDS = WEIGHTS["text"] * CLOSENESS_SHARE
# BM25's term-frequency saturation and length normalisation (Robertson and Zaragoza's k1, b).
BM25_K1 = 0.9
BM25_B = 0.4
# How much an identifier's part (a lexeme of weight C: ``parse`` of ``parse.py``, ``user`` of
# ``getUserById``) counts beside a whole word, so that what was typed whole ranks first.
IDENTIFIER_PART_WEIGHT = 0.5
# ts_rank's weights, in its order {D, C, B, A}: words are D, identifier parts C.
RANK_WEIGHTS = f"{{1,{IDENTIFIER_PART_WEIGHT},1,1}}"
# ts_rank of one lexeme with every weight 1 is sum(1/j^2, j=1..tf) / (pi^2/6): times this, the
# saturated frequency sum(1/j^2), 1 for one occurrence.
RANK_TO_FREQUENCY = 1.64493406685
# ts_rank is a float4 (about seven significant digits): its frequency is rounded to six places.
FREQUENCY_DIGITS = 6
RECENCY_HALF_LIFE_SECONDS = 90 * 86_400
# The context signal: how much of each eligible neighbour's wording a message takes, by the
# neighbour's place (negative: before it). The turn before an answer is often the question.
CONTEXT_OFFSETS = {-1: 0.5, -2: 0.25, 1: 0.25, 2: 0.1}
# Gaps found by phrase tests before positions are read one by one.
PHRASE_GAPS = 6
# A hit's ranking values, as the statement names its columns.
RANKING_COLUMNS = (
    "wording",
    "closeness",
    "actor",
    "same_conversation",
    "participation",
    "recency",
    "speaker",
    "context",
)
# Each scored row says whether its sender is one of the speakers the query names
# (``speaker_joins``): the one test of the ``speaker`` component.
NAMED_SPEAKER = "(by_account.account_id IS NOT NULL OR by_agent.agent_id IS NOT NULL)::int"


def term_frequency(query: TermQuery, index: int, document: str) -> str:
    """Term ``index``'s saturated frequency in ``document`` (0 where it does not match): one
    occurrence counts 1 (an identifier's part ``IDENTIFIER_PART_WEIGHT``), the j-th adds 1/j^2
    (``ts_rank``'s own curve). A phrase counts once."""
    term = f"%(q_t{index})s::tsquery"
    if len(query.terms[index].lexemes) > 1:
        frequency = "1::float8"
    else:
        # ts_rank is a float4: rounded back to the curve's own precision, one occurrence is 1
        # exactly (unrounded it was 0.99999999, and a lone word's text fell short of its value).
        rank = f"ts_rank('{RANK_WEIGHTS}'::float4[], {document}, {term})"
        scale = 10**FREQUENCY_DIGITS
        frequency = f"round({rank} * {RANK_TO_FREQUENCY * scale}::float8) / {scale}"
    return f"CASE WHEN {document} @@ {term} THEN {frequency} ELSE 0::float8 END"


def wording(query: TermQuery, row: str) -> str:
    """BM25's shape over row ``row``'s saturated term frequencies, in [0, 1): each term's
    ``tf / (tf + k1 (1 - b + b length / average))`` weighed by its rarity ``w``."""
    terms = range(len(query.terms))
    norm = f"{BM25_K1} * (1 - {BM25_B} + {BM25_B} * {row}.document_length / w.average_length)"
    weighed = " + ".join(
        f"CASE WHEN {row}.t{i} > 0 THEN w.w{i} * {row}.t{i} / ({row}.t{i} + {norm}) ELSE 0 END"
        for i in terms
    )
    total = " + ".join(f"w.w{i}" for i in terms)
    return f"COALESCE(({weighed}) / NULLIF({total}, 0), 0)"


def matched_terms(query: TermQuery, row: str) -> str:
    """How many of the query's terms row ``row`` matched."""
    return " + ".join(f"({row}.t{i} > 0)::int" for i in range(len(query.terms)))


def speaker_joins(row: str, speakers: str) -> str:
    """The joins ``NAMED_SPEAKER`` reads: row ``row``'s sender among ``speakers`` (hashed, a
    small set), the one test of the ``speaker`` component, for matches and candidates alike."""
    return f"""LEFT JOIN {speakers} AS by_account
              ON by_account.account_id = {row}.sender_account_id
            LEFT JOIN {speakers} AS by_agent ON by_agent.agent_id = {row}.sender_agent_id"""


def signals(row: str, conversation: str) -> str:
    """The requester-wrote-it, destination, requester's-room and recency values of ``row``
    (columns ``sender_account_id``, ``created_at``; its room in ``conversation``)."""
    return f"""COALESCE({row}.sender_account_id IN
                        (SELECT account_id FROM requester_accounts), false)::int AS actor,
               ({conversation} = %(p_destination)s)::int AS same_conversation,
               ({conversation} IN (SELECT conversation_id FROM requester_rooms))::int
                   AS participation,
               1 / (1 + GREATEST(date_part('epoch', %(r_now)s::timestamptz - {row}.created_at),
                                 0) / {RECENCY_HALF_LIFE_SECONDS}) AS recency"""


def own_score(row: str) -> str:
    """Row ``row``'s score on everything but closeness (its wording, context and signals)."""
    return f"""{WEIGHTS["text"] * COVERAGE_SHARE} * {row}.wording
               + {WEIGHTS["context"]} * {row}.context
               + {WEIGHTS["speaker"]} * {row}.speaker
               + {WEIGHTS["actor"]} * {row}.actor
               + {WEIGHTS["conversation"]} * {row}.same_conversation
               + {WEIGHTS["participation"]} * {row}.participation
               + {WEIGHTS["recency"]} * {row}.recency"""


def closeness(gap: str) -> str:
    """Closeness from ``gap`` (an SQL expression): 1 side by side, none for one term."""
    return (
        f"CASE WHEN {gap} IS NULL THEN 0::float8 "
        f"ELSE 1 / (1 + (GREATEST({gap}, 1) - 1) / {CLOSENESS_GAP_SCALE}::float8) END"
    )


def final_score(gap: str) -> str:
    """A candidate's whole score: its ``rank_base`` and its closeness by ``gap``."""
    return f"rank_base + {MOST_CLOSENESS_ADDS} * {closeness(gap)}"


def _phrase_query(terms: tuple[Term, ...], gap: int) -> str:
    """Two different query terms exactly ``gap`` positions apart, either way round (and, for a
    gap of 1, at one position: words past 16,383 all share it). A phrase term's gap is counted
    from its last word to the other's first, as PostgreSQL's phrase operators count it."""
    distances = (0, 1) if gap == 1 else (gap,)
    pairs = [
        f"{first.operand} <{distance}> {second.operand}"
        for first in terms
        for second in terms
        if first != second
        for distance in distances
    ]
    return " | ".join(f"({pair})" for pair in pairs)


def smallest_gap(row: str) -> str:
    """The smallest gap between two different query terms in row ``row``'s document, or NULL
    when it matched one term only; phrase tests first, every position only past them.

    Past the phrase tests, the positions of the terms' lexemes (a prefix term's: those it
    prefixes) are read one by one; for a phrase term that is every word of it, wherever it
    stands, so the gap found is never taken below what the tests ruled out."""
    tests = "".join(
        f"\n                WHEN d.document @@ %(g_{gap})s::tsquery THEN {gap}"
        for gap in range(1, PHRASE_GAPS + 1)
    )
    return f"""CASE WHEN {row}.matched_terms >= 2 THEN (
            SELECT CASE{tests}
                ELSE (
                    SELECT min(GREATEST(x.position - x.previous_position, {PHRASE_GAPS + 1}))
                    FROM (
                        SELECT u.lexeme, q.term, pos.position,
                               lag(pos.position) OVER w AS previous_position,
                               lag(u.lexeme) OVER w AS previous_lexeme,
                               lag(q.term) OVER w AS previous_term
                        FROM unnest(d.document) AS u(lexeme, positions, weights)
                        JOIN unnest(%(q_lexemes)s::text[], %(q_terms)s::int[],
                                    %(q_prefixes)s::bool[]) AS q(lexeme, term, prefix)
                          ON u.lexeme = q.lexeme OR (q.prefix AND starts_with(u.lexeme, q.lexeme))
                        CROSS JOIN unnest(u.positions) AS pos(position)
                        WINDOW w AS (ORDER BY pos.position)
                    ) AS x
                    WHERE x.previous_lexeme <> x.lexeme AND x.previous_term <> x.term)
            END
            FROM {table(MessageSearchDocument)} AS d
            WHERE d.workspace_id = %(p_workspace)s AND d.message_id = {row}.id) END"""


def closeness_params(query: TermQuery) -> dict[str, object]:
    """What ``smallest_gap`` reads: the phrase tests (``g_``), and every term's lexemes with
    the term they belong to and whether they match by prefix."""
    rows = [
        (lexeme, number, prefix)
        for number, term in enumerate(query.terms)
        for lexeme, prefix in zip(term.lexemes, term.prefixes, strict=True)
    ]
    return {
        "q_lexemes": [lexeme for lexeme, _, _ in rows],
        "q_terms": [number for _, number, _ in rows],
        "q_prefixes": [prefix for _, _, prefix in rows],
        **{f"g_{gap}": _phrase_query(query.terms, gap) for gap in range(1, PHRASE_GAPS + 1)},
    }


def hit_values(row: Any) -> dict[str, float]:
    """A hit's value of each component, from its ranking columns read by name."""
    return {
        "text": COVERAGE_SHARE * row.wording + CLOSENESS_SHARE * row.closeness,
        "actor": float(row.actor),
        "conversation": float(row.same_conversation),
        "participation": float(row.participation),
        "recency": float(row.recency),
        "speaker": float(row.speaker),
        "context": float(row.context),
    }
