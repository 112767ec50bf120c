"""search_history reads: one statement for the ranked hits, their neighbours, their highlights
and the audit's exclusion counts, all through ``perspective``.

Every statement here embeds the perspective's ``scope_ctes`` and rule fragments and only
narrows what they allow. The history statement reads the search's matches from the projection
once: every match is classified by ``perspective.exclusion_reason``; the eligible ones are
ranked; the best are read, with their text, titles and speakers, from the canonical messages
and checked again there; their neighbours are read and checked by the same statement, so a hit's
text and its context come from the same snapshot that checked them.

Ranking (SPEC §6). Each component is a value in [0, 1] times a fixed weight; the weights add
up to 1, so ``score`` is in [0, 1] and the contributions add up to it exactly:

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
  ``CONTEXT_POOL`` best matches only (``_context_ctes``).
- ``speaker`` (0.15): the sender's name holds a query term.
- ``conversation`` (0.05): it was said in the destination conversation itself.
- ``recency`` (0.02): 1 / (1 + age / 90 days), so a three-month-old message gets half.
- ``actor`` (0.02): the requester, or an account joined to them by a live link, wrote it.
- ``participation`` (0.02): the requester is a current member of its conversation.

Ties are broken by time (newer first), then id. Document frequencies come only from eligible
messages, so what an agent may not see cannot even shift the order of what it may.

A hit matches the query, or is a *named answer*: its sender's name holds a query term and its
eligible neighbours' words give it context (``_candidates_cte``, docs/search.md).

Closeness needs the positions of the query's terms in a document, so it is computed only where
it can change the outcome. The ``fetch`` best by the other components (the *leaders*) get
theirs first; the worst final score among them is a floor the true ``fetch``-th best cannot be
under, so only rows within what closeness could ever add (0.037) of that floor are *contenders*
at all. A gap is found by phrase tests (``a <1> b``, ``a <2> b``, …, evaluated in C) up to
``PHRASE_GAPS``, and only a larger one by reading every position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection

from formation import prepared
from messages_app.models import Account, Agent, RunEvidence
from messages_app.selectors import SUMMARY_COLUMNS, MessageRow
from search_app.limits import Budget
from search_app.models import AgentMemory, MessageSearchDocument, RunMemory
from search_app.perspective import (
    CONVERSATIONS,
    MESSAGES,
    Perspective,
    eligible_condition,
    exclusion_reason,
    memory_eligible_condition,
    memory_exclusion_reason,
    observed_join,
    receivable_reference,
    scope_ctes,
)
from search_app.text import Term, TermQuery, highlight_markers

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
# BM25's term-frequency saturation and length normalisation (Robertson and Zaragoza's k1, b).
BM25_K1 = 0.9
BM25_B = 0.4
# ts_rank of one lexeme with every weight 1 is sum(1/j^2, j=1..tf) / (pi^2/6): times this, the
# saturated frequency sum(1/j^2), 1 for one occurrence.
RANK_TO_FREQUENCY = 1.64493406685
# ts_rank is a float4 (about seven significant digits): its frequency is rounded to six places.
FREQUENCY_DIGITS = 6
RECENCY_HALF_LIFE_SECONDS = 90 * 86_400
# The context signal: how much of each eligible neighbour's wording a message takes, by the
# neighbour's place (negative: before it). The turn before an answer is often the question.
CONTEXT_OFFSETS = {-1: 0.5, -2: 0.25, 1: 0.25, 2: 0.1}
NEIGHBOURS_EACH_SIDE = 2
# A context window reaches twice as far as a message's neighbours: the neighbours of the
# message's neighbours.
WINDOW_EACH_SIDE = 2 * NEIGHBOURS_EACH_SIDE
# The best eligible matches by their own words whose surroundings are read for context.
CONTEXT_POOL = 50
# How many messages each side of a hit are read, nearest first, to find its eligible neighbours.
NEIGHBOUR_SCAN = 200
# Rows ranked beyond the page, so a row the final recheck drops (a projection that drifted)
# does not leave the page short.
RECHECK_MARGIN = 5
# At most this many of a search's matches are classified for the audit's exclusion counts.
EXCLUSION_SCAN = 2_000
MORE_MATCHES = "more_matches"
# Gaps found by phrase tests before positions are read one by one.
PHRASE_GAPS = 6
# Reasons settled before a match's canonical message is looked up to tell a drifted one.
CONVERSATION_REASONS = ("not_observed", "unknown_audience", "audience")

SPEAKERS = ("anyone", "requester", "you")
DOCUMENTS = MessageSearchDocument._meta.db_table
EVIDENCE = RunEvidence._meta.db_table


@dataclass(frozen=True)
class HistoryFilters:
    speaker: str = "anyone"
    after: datetime | None = None
    before: datetime | None = None


@dataclass
class Hit:
    message: MessageRow
    components: dict[str, float]
    values: dict[str, float]
    conversation_title: str = ""
    conversation_kind: str = ""
    speaker_name: str = ""
    # ts_headline's output for the text, marked with ``text.highlight_markers()``.
    marked: str | None = None
    before: list[MessageRow] = field(default_factory=list)
    after: list[MessageRow] = field(default_factory=list)

    @property
    def score(self) -> float:
        """The sum of the contributions: what ``score`` on the wire rounds."""
        return sum(self.components.values())


@dataclass
class HistoryResult:
    """What the history statement read: the hits best first (neighbours attached), which of
    the returned messages are already the run's evidence, and the exclusion counts."""

    hits: list[Hit]
    seen: set
    exclusions: dict[str, int]
    capped: bool


@dataclass
class HistorySearch:
    """What a search_history call answers: the hits the budget let through, their highlight
    offsets, the budget after it, and how many hits the budget cut."""

    hits: list[Hit]
    highlights: list[list[list[int]]]
    budget: Budget
    trimmed: int


def _filter_sql(filters: HistoryFilters, row: str = "d") -> str:
    """The caller's filters, on row ``row`` (a projection row or a message: both carry the
    sender and time columns)."""
    conditions = []
    if filters.speaker == "requester":
        conditions.append(f"{row}.sender_account_id IN (SELECT account_id FROM requester_accounts)")
    elif filters.speaker == "you":
        conditions.append(f"{row}.sender_agent_id = %(p_agent)s")
    if filters.after is not None:
        conditions.append(f"{row}.created_at > %(f_after)s")
    if filters.before is not None:
        conditions.append(f"{row}.created_at < %(f_before)s")
    return "".join(f" AND {condition}" for condition in conditions)


def _summary_columns(alias: str) -> str:
    """Message ``alias``'s summary columns, with ``replyToId`` and ``threadId`` only where the
    run may receive the message they name (``perspective.receivable_reference``)."""
    return ", ".join(
        f"{receivable_reference(f'{alias}.{column}')} AS {column}"
        if column in ("reply_to_id", "thread_id")
        else f"{alias}.{column}"
        for column in SUMMARY_COLUMNS
    )


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


def _gap_sql(row: str) -> str:
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
            FROM {DOCUMENTS} AS d
            WHERE d.workspace_id = %(p_workspace)s AND d.message_id = {row}.id) END"""


def _term_lexemes(query: TermQuery) -> dict[str, list]:
    """Every term's lexemes, with the term they belong to and whether they match by prefix."""
    rows = [
        (lexeme, number, prefix)
        for number, term in enumerate(query.terms)
        for lexeme, prefix in zip(term.lexemes, term.prefixes, strict=True)
    ]
    return {
        "q_lexemes": [lexeme for lexeme, _, _ in rows],
        "q_terms": [number for _, number, _ in rows],
        "q_prefixes": [prefix for _, _, prefix in rows],
    }


def _closeness_sql(gap: str) -> str:
    return (
        f"CASE WHEN {gap} IS NULL THEN 0::float8 "
        f"ELSE 1 / (1 + (GREATEST({gap}, 1) - 1) / {CLOSENESS_GAP_SCALE}::float8) END"
    )


def _nearest(side: str, anchor: str, count: int) -> str:
    """The ``count`` eligible messages nearest message ``anchor`` on one side, nearest first.

    The inner ``ORDER BY seq LIMIT`` walks the ``(conversation, seq)`` index away from the
    anchor and pins that plan (left to itself the planner read the whole window through the
    timeline index and sorted it); it stops at the ``count``-th eligible message or after
    ``NEIGHBOUR_SCAN`` messages, so an anchor whose surroundings the agent never observed
    costs a bounded amount and simply has fewer. Rule 4 is read from the message's projection
    row, like the hits'.
    """
    before = side == "before"
    return f"""(SELECT m.*, '{side}' AS side FROM (
                 SELECT * FROM {MESSAGES} AS nearest
                 WHERE nearest.workspace_id = %(p_workspace)s
                   AND nearest.conversation_id = {anchor}.conversation_id
                   AND nearest.seq {"<" if before else ">"} {anchor}.seq
                 ORDER BY nearest.seq {"DESC" if before else ""} LIMIT {NEIGHBOUR_SCAN}
             ) AS m
             WHERE {eligible_condition("m", lineage="document")}
             ORDER BY m.seq {"DESC" if before else ""} LIMIT {count})"""


def _term_frequency(query: TermQuery, index: int, document: str) -> str:
    """Term ``index``'s saturated frequency in ``document`` (0 where it does not match): one
    occurrence counts 1, the j-th adds 1/j^2 (``ts_rank``'s own curve). A phrase counts once."""
    term = f"%(q_t{index})s::tsquery"
    if len(query.terms[index].lexemes) > 1:
        frequency = "1::float8"
    else:
        # ts_rank is a float4: rounded back to the curve's own precision, one occurrence is 1
        # exactly (unrounded it was 0.99999999, and a lone word's text fell short of its value).
        rank = f"ts_rank('{{1,1,1,1}}'::float4[], {document}, {term})"
        scale = 10**FREQUENCY_DIGITS
        frequency = f"round({rank} * {RANK_TO_FREQUENCY * scale}::float8) / {scale}"
    return f"CASE WHEN {document} @@ {term} THEN {frequency} ELSE 0::float8 END"


def _signals(row: str, conversation: str) -> str:
    """The requester-wrote-it, destination, requester's-room and recency values of ``row``
    (columns ``sender_account_id``, ``created_at``; its room in ``conversation``)."""
    return f"""COALESCE({row}.sender_account_id IN
                        (SELECT account_id FROM requester_accounts), false)::int AS actor,
               ({conversation} = %(p_destination)s)::int AS same_conversation,
               ({conversation} IN (SELECT conversation_id FROM requester_rooms))::int
                   AS participation,
               1 / (1 + GREATEST(date_part('epoch', %(r_now)s::timestamptz - {row}.created_at),
                                 0) / {RECENCY_HALF_LIFE_SECONDS}) AS recency"""


def _own_score(row: str) -> str:
    """Row ``row``'s score on everything but closeness (its wording, context and signals)."""
    return f"""{WEIGHTS["text"] * COVERAGE_SHARE} * {row}.wording
               + {WEIGHTS["context"]} * {row}.context
               + {WEIGHTS["speaker"]} * {row}.speaker
               + {WEIGHTS["actor"]} * {row}.actor
               + {WEIGHTS["conversation"]} * {row}.same_conversation
               + {WEIGHTS["participation"]} * {row}.participation
               + {WEIGHTS["recency"]} * {row}.recency"""


def _matches_cte(query: TermQuery, filters: HistoryFilters) -> str:
    """Every match within the caller's filters, classified in one pass over the projection; an
    eligible one carries each term's saturated frequency ``t<i>``, its length, room and sender
    (an excluded one only its reason: the rows are kept for the whole statement, so narrow)."""
    frequencies = "".join(
        f",\n               CASE WHEN classified.reason IS NULL THEN "
        f"{_term_frequency(query, i, 'classified.document')} END AS t{i}"
        for i in range(len(query.terms))
    )
    eligible_only = "".join(
        f",\n               CASE WHEN classified.reason IS NULL THEN {value} END AS {name}"
        for name, value in (
            ("conversation_id", "classified.conversation_id"),
            ("sender_account_id", "classified.sender_account_id"),
            ("sender_agent_id", "classified.sender_agent_id"),
            ("document_length", "length(classified.document)"),
        )
    )
    return f"""matches AS MATERIALIZED (
        SELECT classified.id, classified.created_at, classified.reason {eligible_only}
               {frequencies}
        FROM (
            SELECT d.message_id AS id, d.conversation_id, d.created_at, d.sender_account_id,
                   d.sender_agent_id, d.document,
                   {exclusion_reason("d", projection=True)} AS reason
            FROM {DOCUMENTS} AS d
            {observed_join("d")}
            WHERE d.workspace_id = %(p_workspace)s AND d.document @@ %(q_any)s::tsquery
                  {_filter_sql(filters)}
        ) AS classified
    )"""


def _excluded_cte() -> str:
    """The first ``EXCLUSION_SCAN`` matches by reason, a drifted projection row told by its
    canonical message (``deleted``), and whether more existed."""
    reasons = ", ".join(f"'{reason}'" for reason in CONVERSATION_REASONS)
    return f"""excluded AS (
        SELECT CASE WHEN x.reason IN ({reasons}) THEN x.reason
                    WHEN NOT EXISTS (SELECT 1 FROM {MESSAGES} AS live
                                     WHERE live.workspace_id = %(p_workspace)s
                                       AND live.id = x.id AND live.deleted_at IS NULL)
                        THEN 'deleted'
                    ELSE x.reason END AS reason
        FROM (SELECT * FROM matches LIMIT %(x_scan)s) AS x
        UNION ALL
        SELECT '{MORE_MATCHES}' FROM (SELECT 1 FROM matches OFFSET %(x_scan)s LIMIT 1) AS more
    )"""


def _speakers_cte(query: TermQuery, name: str, rows: str) -> str:
    """CTE ``name``: the senders of ``rows`` whose names hold a query term, with the terms they
    hold. Every row read is eligible, so these are participants the query names among those
    the agent may see."""
    named = "".join(
        f", name.document @@ %(q_t{i})s::tsquery AS n{i}" for i in range(len(query.terms))
    )
    return f"""{name} AS MATERIALIZED (
        SELECT sender.account_id, sender.agent_id {named}
        FROM (SELECT DISTINCT sender_account_id AS account_id, sender_agent_id AS agent_id
              FROM {rows}) AS sender
        LEFT JOIN {Account._meta.db_table} AS account
          ON account.workspace_id = %(p_workspace)s AND account.id = sender.account_id
        LEFT JOIN {Agent._meta.db_table} AS agent
          ON agent.workspace_id = %(p_workspace)s AND agent.id = sender.agent_id
        CROSS JOIN LATERAL (
            SELECT formation_search_document(%(config)s::regconfig,
                                             COALESCE(account.display_name, agent.name))
                AS document
        ) AS name
        WHERE name.document @@ %(q_any)s::tsquery
    )"""


def _weights_cte(query: TermQuery) -> str:
    """Each term's rarity over this search's eligible matches, and their average length.

    A term that names a participant (``match_speakers``) is a wish for that speaker, scored by
    the ``speaker`` component, so its rarity counts nothing for the words; unless every term
    that matched is a name, when the words are all there is to rank by."""
    terms = range(len(query.terms))
    frequencies = ", ".join(f"count(*) FILTER (WHERE t{i} > 0)::float8 AS df{i}" for i in terms)
    names = ", ".join(f"COALESCE(bool_or(n{i}), false) AS named{i}" for i in terms)
    plain = ", ".join(f"f.df{i} > 0 AND NOT n.named{i} AS plain{i}" for i in terms)
    any_plain = " OR ".join(f"plain{i}" for i in terms)
    rarities = ", ".join(
        f"CASE WHEN df{i} > 0 AND (plain{i} OR NOT ({any_plain})) "
        f"THEN ln(1 + matches / df{i}) ELSE 0 END AS w{i}"
        for i in terms
    )
    return f"""weights AS MATERIALIZED (
        SELECT average_length, {rarities}
        FROM (
            SELECT f.*, {plain}
            FROM (SELECT count(*)::float8 AS matches,
                         avg(document_length)::float8 AS average_length, {frequencies}
                  FROM matches WHERE reason IS NULL) AS f
            CROSS JOIN (SELECT {names} FROM match_speakers) AS n
        ) AS counted
    )"""


def _wording(query: TermQuery, row: str) -> str:
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


def _matched_terms(query: TermQuery, row: str) -> str:
    """How many of the query's terms row ``row`` matched."""
    return " + ".join(f"({row}.t{i} > 0)::int" for i in range(len(query.terms)))


NAMED_SPEAKER = "(by_account.account_id IS NOT NULL OR by_agent.agent_id IS NOT NULL)::int"


def _speaker_joins(row: str, speakers: str) -> str:
    """The joins ``NAMED_SPEAKER`` reads: row ``row``'s sender among ``speakers`` (hashed, a
    small set), the one test of the ``speaker`` component, for matches and candidates alike."""
    return f"""LEFT JOIN {speakers} AS by_account
              ON by_account.account_id = {row}.sender_account_id
            LEFT JOIN {speakers} AS by_agent ON by_agent.agent_id = {row}.sender_agent_id"""


def _partial_cte(query: TermQuery) -> str:
    """The eligible matches with their wording, speaker and signals (context comes later)."""
    return f"""partial AS MATERIALIZED (
        SELECT s.*, {_own_score("s")} AS own_score
        FROM (
            SELECT e.id, e.created_at, {_signals("e", "e.conversation_id")},
                   {_wording(query, "e")} AS wording, 0 AS context,
                   ({_matched_terms(query, "e")}) AS matched_terms,
                   {NAMED_SPEAKER} AS speaker
            FROM matches AS e CROSS JOIN weights AS w
            {_speaker_joins("e", "match_speakers")}
            WHERE e.reason IS NULL
        ) AS s
    )"""


def _context_ctes(query: TermQuery) -> str:
    """The surroundings of the best matches, and the context each message there takes.

    ``pool`` is the ``CONTEXT_POOL`` best eligible matches by their own score, checked on
    their canonical rows; ``windows`` reads ``WINDOW_EACH_SIDE`` eligible messages each side
    of each (the same walk as a hit's neighbours); ``receivers`` are the messages up to
    ``NEIGHBOURS_EACH_SIDE`` from a pool match, whose own neighbours a window therefore
    holds, each taking its neighbours' wording averaged with the weights ``CONTEXT_OFFSETS``
    over the neighbours it has (so a conversation's first or newest message is not marked
    down for lacking one side). Only eligible messages are read, so nothing withheld moves a
    score. ``window_words`` scores the windows' messages from their own documents (a few
    hundred look-ups by key, whatever the number of matches; a join to ``partial`` was planned
    as a nested loop rescanning it per window row when a fresh word's matches were estimated at
    a handful, ``test_broad_matches``); a neighbour's words count whatever the caller's
    filters, which narrow the hits, not their context.
    """
    frequencies = ", ".join(
        f"{_term_frequency(query, i, 'd.document')} AS t{i}" for i in range(len(query.terms))
    )
    offsets = ", ".join(f"({offset}, {weight})" for offset, weight in CONTEXT_OFFSETS.items())
    message_columns = "id, conversation_id, seq, created_at, sender_account_id, sender_agent_id"
    walked = ", ".join(f"near.{column}" for column in message_columns.split(", "))
    return f"""pool AS MATERIALIZED (
        SELECT {", ".join(f"m.{column}" for column in message_columns.split(", "))}
        FROM (SELECT id FROM partial
              ORDER BY own_score DESC, created_at DESC, id DESC LIMIT %(r_pool)s) AS best
        JOIN {MESSAGES} AS m ON m.workspace_id = %(p_workspace)s AND m.id = best.id
        WHERE {eligible_condition("m", lineage="document")}
    ), windows AS MATERIALIZED (
        SELECT pool.id AS centre, 0 AS position, pool.* FROM pool
        UNION ALL
        SELECT centre.id, -row_number() OVER (PARTITION BY centre.id ORDER BY near.seq DESC),
               {walked}
        FROM pool AS centre
        CROSS JOIN LATERAL {_nearest("before", "centre", WINDOW_EACH_SIDE)} AS near
        UNION ALL
        SELECT centre.id, row_number() OVER (PARTITION BY centre.id ORDER BY near.seq),
               {walked}
        FROM pool AS centre
        CROSS JOIN LATERAL {_nearest("after", "centre", WINDOW_EACH_SIDE)} AS near
    ), window_words AS MATERIALIZED (
        SELECT found.*, {_wording(query, "found")} AS wording,
               ({_matched_terms(query, "found")}) AS matched_terms
        FROM (
            SELECT win.*, COALESCE(length(d.document), 0) AS document_length, {frequencies}
            FROM windows AS win
            LEFT JOIN {DOCUMENTS} AS d
              ON d.workspace_id = %(p_workspace)s AND d.message_id = win.id
        ) AS found
        CROSS JOIN weights AS w
    ), receivers AS MATERIALIZED (
        SELECT DISTINCT ON (r.id) r.*
        FROM (
            SELECT r.centre, r.id, r.conversation_id, r.created_at, r.sender_account_id,
                   r.sender_agent_id, r.wording, r.matched_terms,
                   COALESCE(sum(o.weight * n.wording)
                            / NULLIF(sum(o.weight) FILTER (WHERE n.wording IS NOT NULL), 0), 0)
                       AS context
            FROM window_words AS r
            CROSS JOIN (VALUES {offsets}) AS o(place, weight)
            LEFT JOIN window_words AS n
              ON n.centre = r.centre AND n.position = r.position + o.place
            WHERE r.position BETWEEN -{NEIGHBOURS_EACH_SIDE} AND {NEIGHBOURS_EACH_SIDE}
            GROUP BY r.centre, r.id, r.conversation_id, r.created_at, r.sender_account_id,
                     r.sender_agent_id, r.wording, r.matched_terms
        ) AS r
        ORDER BY r.id, r.context DESC
    )"""


def _candidates_cte(query: TermQuery, filters: HistoryFilters) -> str:
    """Every receiver within the caller's filters that the query finds, scored on everything
    but closeness: one that matched it, or one whose sender the query names and whose eligible
    neighbours hold its words (``receiver_speakers``: a named participant's answer to a
    question need not repeat the question's words)."""
    return f"""{_speakers_cte(query, "receiver_speakers", "receivers")},
    candidates AS MATERIALIZED (
        SELECT c.*, {_own_score("c")} AS rank_base
        FROM (
            SELECT r.id, r.created_at, r.wording, r.context, r.matched_terms,
                   {NAMED_SPEAKER} AS speaker, {_signals("r", "r.conversation_id")}
            FROM receivers AS r
            {_speaker_joins("r", "receiver_speakers")}
            WHERE (r.matched_terms > 0 OR (r.context > 0 AND {NAMED_SPEAKER} = 1))
              {_filter_sql(filters, "r")}
        ) AS c
    )"""


def hits_statement(
    p: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> tuple[str, dict[str, object]]:
    """The history statement and its parameters (the scope included): what
    ``history_read`` runs, and what the benchmark times as the perspective floor.

    ``matches`` is every match within the caller's filters, classified in one pass over the
    projection (no message rows read); ``excluded`` counts the first ``EXCLUSION_SCAN`` of them
    by reason; ``match_speakers`` finds the participants the query names; ``weights`` turns
    the eligible ones' term frequencies into rarities; ``partial`` scores them on their own
    words, speaker and signals; ``pool`` … ``receivers`` add the context of their
    surroundings (``_context_ctes``); ``candidates`` scores every receiver on everything but
    closeness; ``leaders`` and ``contenders`` add closeness where it can matter; ``page`` reads
    the best from the canonical messages and checks every rule again; ``nearby`` finds their
    neighbours. One result set answers all of it, tagged by ``kind``.

    Every CTE that holds a row per match, or an aggregate of them, is ``MATERIALIZED``: the
    planner estimates a prefix, or a word without statistics, at a handful of matches, and an
    inlined aggregate is then recomputed once per match (quadratic; ``test_broad_matches``).
    """
    fetch = limit + RECHECK_MARGIN
    most_closeness_adds = WEIGHTS["text"] * CLOSENESS_SHARE
    final_score = f"rank_base + {most_closeness_adds} * {_closeness_sql('gap')}"
    speaker = "COALESCE(account.display_name, agent.name)"
    sql = f"""
    WITH {scope_ctes()},
    requester_rooms AS MATERIALIZED (
        SELECT conversation_id FROM messages_app_membership
        WHERE workspace_id = %(p_workspace)s AND account_id = %(p_requester)s
          AND left_at IS NULL
    ), {_matches_cte(query, filters)},
    {_excluded_cte()},
    {_speakers_cte(query, "match_speakers", "matches WHERE reason IS NULL")},
    {_weights_cte(query)},
    {_partial_cte(query)},
    {_context_ctes(query)},
    {_candidates_cte(query, filters)},
    leaders AS MATERIALIZED (
        SELECT l.*, {_gap_sql("l")} AS gap
        FROM (SELECT * FROM candidates
              ORDER BY rank_base DESC, created_at DESC, id DESC LIMIT %(r_fetch)s) AS l
    ), floor AS (
        SELECT CASE WHEN count(*) = %(r_fetch)s THEN min({final_score})
                    ELSE '-infinity'::float8 END AS score
        FROM leaders
    ), contenders AS (
        SELECT * FROM leaders
        UNION ALL
        SELECT c.*, {_gap_sql("c")} AS gap
        FROM candidates AS c
        WHERE c.rank_base >= (SELECT score FROM floor) - {most_closeness_adds}
          AND c.id NOT IN (SELECT id FROM leaders)
    ), ranked AS (
        SELECT c.*, {_closeness_sql("c.gap")} AS closeness,
               c.{final_score} AS rank_score
        FROM contenders AS c
        ORDER BY rank_score DESC, c.created_at DESC, c.id DESC
        LIMIT %(r_fetch)s
    ), page AS MATERIALIZED (
        SELECT row_number() OVER (ORDER BY s.rank_score DESC, m.created_at DESC, m.id DESC)
                   AS position,
               {_summary_columns("m")},
               s.wording, s.closeness, s.actor, s.same_conversation, s.participation,
               s.recency, s.speaker, s.context, s.rank_score,
               conversation.title AS conversation_title, conversation.kind AS conversation_kind,
               {speaker} AS speaker_name
        FROM ranked AS s
        JOIN {MESSAGES} AS m ON m.workspace_id = %(p_workspace)s AND m.id = s.id
        JOIN {CONVERSATIONS} AS conversation
          ON conversation.workspace_id = %(p_workspace)s
         AND conversation.id = m.conversation_id
        LEFT JOIN {Account._meta.db_table} AS account
          ON account.workspace_id = %(p_workspace)s AND account.id = m.sender_account_id
        LEFT JOIN {Agent._meta.db_table} AS agent
          ON agent.workspace_id = %(p_workspace)s AND agent.id = m.sender_agent_id
        WHERE {eligible_condition("m", lineage="document")}
        ORDER BY s.rank_score DESC, m.created_at DESC, m.id DESC
        LIMIT %(r_limit)s
    ), nearby AS (
        SELECT hit.position, nearby.side, {_summary_columns("nearby")}
        FROM page AS hit
        CROSS JOIN LATERAL (
            {_nearest("before", "hit", NEIGHBOURS_EACH_SIDE)}
            UNION ALL
            {_nearest("after", "hit", NEIGHBOURS_EACH_SIDE)}
        ) AS nearby
    )
    SELECT 'hit' AS kind, p.position, NULL AS side,
           {", ".join(f"p.{column}" for column in SUMMARY_COLUMNS)},
           {", ".join(f"p.{column}" for column in RANKING_COLUMNS)},
           p.conversation_title, p.conversation_kind, p.speaker_name,
           ts_headline(%(config)s::regconfig, formation_search_masked(p.content),
                       %(q_any)s::tsquery, %(h_options)s) AS marked,
           EXISTS (SELECT 1 FROM {EVIDENCE} AS e
                   WHERE e.workspace_id = %(p_workspace)s AND e.run_id = %(p_run)s
                     AND e.message_id = p.id) AS seen,
           NULL AS reason, NULL::bigint AS matches
    FROM page AS p
    UNION ALL
    SELECT 'neighbour', n.position, n.side,
           {", ".join(f"n.{column}" for column in SUMMARY_COLUMNS)},
           {", ".join(["NULL"] * (len(RANKING_COLUMNS) + 4))},
           EXISTS (SELECT 1 FROM {EVIDENCE} AS e
                   WHERE e.workspace_id = %(p_workspace)s AND e.run_id = %(p_run)s
                     AND e.message_id = n.id),
           NULL, NULL
    FROM nearby AS n
    UNION ALL
    SELECT 'exclusion', {", ".join(["NULL"] * EXCLUSION_ROW_NULLS)},
           excluded.reason, count(*)
    FROM excluded WHERE excluded.reason IS NOT NULL GROUP BY excluded.reason
    """
    start, stop = highlight_markers()
    params = {
        **p.params(),
        "p_run": p.run_id,
        "config": query.config,
        "q_any": query.tsquery,
        **_term_lexemes(query),
        **{f"q_t{i}": query.term(i) for i in range(len(query.terms))},
        **{f"g_{gap}": _phrase_query(query.terms, gap) for gap in range(1, PHRASE_GAPS + 1)},
        "f_after": filters.after,
        "f_before": filters.before,
        "r_now": now,
        "r_fetch": fetch,
        "r_limit": limit,
        "r_pool": CONTEXT_POOL,
        "x_scan": EXCLUSION_SCAN,
        "h_options": f"HighlightAll=true, StartSel={start}, StopSel={stop}",
    }
    return sql, params


# A hit's ranking values, in the order the statement returns them.
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
# The exclusion rows of the history statement leave every other column null: position and
# side, the summary, the ranking values, the three naming columns, the highlight and ``seen``.
EXCLUSION_ROW_NULLS = 2 + len(SUMMARY_COLUMNS) + len(RANKING_COLUMNS) + 3 + 2


def history_read(
    p: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> HistoryResult:
    """Run the history statement: the ``limit`` best eligible matches, best first, with their
    score components, neighbours and highlights, and the exclusion counts."""
    sql, params = hits_statement(p, query, filters, limit=limit, now=now)
    rows = prepared.fetch_all(sql, params)
    hits: dict[int, Hit] = {}
    neighbours: list[tuple] = []
    seen: set = set()
    exclusions: dict[str, int] = {}
    summary = slice(3, 3 + len(SUMMARY_COLUMNS))
    for row in rows:
        kind, position, side = row[0], row[1], row[2]
        if kind == "exclusion":
            exclusions[row[-2]] = row[-1]
            continue
        message = MessageRow(*row[summary])
        if row[-3]:
            seen.add(message.id)
        if kind == "hit":
            hits[position] = _hit(message, row[summary.stop :])
        else:
            neighbours.append((position, side, message))
    for position, side, message in neighbours:
        hit = hits[position]
        (hit.before if side == "before" else hit.after).append(message)
    ordered = [hits[position] for position in sorted(hits)]
    for hit in ordered:
        hit.before.sort(key=lambda message: message.seq)
        hit.after.sort(key=lambda message: message.seq)
    capped = exclusions.pop(MORE_MATCHES, 0) > 0
    return HistoryResult(hits=ordered, seen=seen, exclusions=exclusions, capped=capped)


def _hit(message: MessageRow, extra: tuple) -> Hit:
    ranking = dict(zip(RANKING_COLUMNS, extra, strict=False))
    title, kind, speaker, marked = extra[len(RANKING_COLUMNS) : len(RANKING_COLUMNS) + 4]
    values = {
        "text": COVERAGE_SHARE * ranking["wording"] + CLOSENESS_SHARE * ranking["closeness"],
        "actor": float(ranking["actor"]),
        "conversation": float(ranking["same_conversation"]),
        "participation": float(ranking["participation"]),
        "recency": float(ranking["recency"]),
        "speaker": float(ranking["speaker"]),
        "context": float(ranking["context"]),
    }
    return Hit(
        message=message,
        components={name: WEIGHTS[name] * value for name, value in values.items()},
        values=values,
        conversation_title=title,
        conversation_kind=kind,
        speaker_name=speaker,
        marked=marked,
    )


def ranked_hits(
    p: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> list[Hit]:
    """The ``limit`` best eligible matches, best first, with their score components."""
    return history_read(p, query, filters, limit=limit, now=now).hits


def delivery_blockers(p: Perspective, *, run_id) -> dict[str, int]:
    """Why the run's evidence may not reach its destination now: counts by reason (SPEC §4).

    Every evidence message is checked against rules 1 to 4 as they stand at this moment
    (rule 5 concerns what the run may be shown, not what it may say), on the canonical rows;
    every memory the run was given is checked like a recall (``memory_eligible_condition``).
    Empty means the reply may be delivered.
    """
    sql = f"""
        WITH {scope_ctes()}
        SELECT reason, count(*) FROM (
            SELECT {exclusion_reason("m", prompt_rule=False)} AS reason
            FROM {EVIDENCE} AS evidence
            JOIN {MESSAGES} AS m
              ON m.workspace_id = %(p_workspace)s AND m.id = evidence.message_id
            WHERE evidence.workspace_id = %(p_workspace)s AND evidence.run_id = %(d_run)s
            UNION ALL
            SELECT {memory_exclusion_reason("memory")}
            FROM {RunMemory._meta.db_table} AS used
            JOIN {AgentMemory._meta.db_table} AS memory
              ON memory.workspace_id = %(p_workspace)s AND memory.id = used.memory_id
            WHERE used.workspace_id = %(p_workspace)s AND used.run_id = %(d_run)s
        ) AS checked
        WHERE reason IS NOT NULL
        GROUP BY reason
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, {**p.params(), "d_run": run_id})
        return dict(cursor.fetchall())


def memory_hits(p: Perspective, query: TermQuery, *, limit: int) -> list[AgentMemory]:
    """The agent's memories matching ``query`` that the run's destination may receive.

    Ranked like a plain full-text search: ``ts_rank_cd`` over the same configuration and OR
    query as search_history, then newer first, then id.
    """
    sql = f"""
        WITH {scope_ctes()}
        SELECT memory.id, memory.workspace_id, memory.agent_id, memory.run_id, memory.content,
               memory.created_at, ts_rank_cd(memory.document, %(q_any)s::tsquery) AS rank
        FROM {AgentMemory._meta.db_table} AS memory
        WHERE memory.agent_id = %(p_agent)s AND memory.workspace_id = %(p_workspace)s
          AND memory.document @@ %(q_any)s::tsquery
          AND {memory_eligible_condition("memory")}
        ORDER BY rank DESC, memory.created_at DESC, memory.id DESC
        LIMIT %(m_limit)s
    """
    params = {**p.params(), "q_any": query.tsquery, "m_limit": limit}
    return list(AgentMemory.objects.raw(sql, params))
