"""search_history reads: ranked hits and their neighbours, both through ``perspective``.

Every statement here embeds the perspective's ``scope_ctes`` and ``eligible_condition`` and
only narrows what they allow. The ranked hit query is a single SQL statement (match,
perspective, ranking and the loading of text, titles and speaker names), so a hit's text always
comes from the same snapshot that checked it.

Ranking (SPEC §6). Each component is a value in [0, 1] times a fixed weight; the weights add
up to 1, so ``score`` is in [0, 1] and the contributions add up to it exactly:

- ``text`` (0.60): 0.8 x *coverage* + 0.2 x *closeness*. Coverage is the share of the query's
  inverse document frequency the message matches: each term weighs ln(1 + N / df) over the N
  eligible matches of this very search, so matching more terms and rarer terms both score
  higher. (``ts_rank_cd`` with normalisation 4 gives ``a | b`` the same score as ``a`` and has
  no notion of rarity, so it is not used.) Closeness is 1 for two different query terms side by
  side, falling as 1 / (1 + (gap - 1) / 3); a one-term match has none. (PostgreSQL stores
  every word past position 16,383 at 16,383, so gaps there count as adjacent, never closer.)
- ``actor`` (0.10): the requester, or an account joined to them by a live link, wrote it.
- ``conversation`` (0.10): it was said in the destination conversation itself.
- ``participation`` (0.05): the requester is a current member of its conversation.
- ``recency`` (0.15): 1 / (1 + age / 30 days), so a month-old message gets half.

Ties are broken by time (newer first), then id. Document frequencies come only from eligible
messages, so what an agent may not see cannot even shift the order of what it may.

Closeness needs the positions of every query term in a document, so it is computed only where
it can change the outcome: any message whose other components already trail the limit-th best
by more than closeness could ever add (0.12) cannot reach the top, and is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection

from messages_app.models import Account, Agent, Conversation, Message, RunEvidence
from search_app.models import AgentMemory, MessageSearchDocument, RunMemory
from search_app.perspective import (
    CONVERSATIONS,
    MEMBERSHIPS,
    MESSAGES,
    Perspective,
    eligible_condition,
    exclusion_reason,
    memory_eligible_condition,
    memory_exclusion_reason,
    receivable_reference,
    scope_ctes,
)
from search_app.text import TermQuery

WEIGHTS = {
    "text": 0.60,
    "actor": 0.10,
    "conversation": 0.10,
    "participation": 0.05,
    "recency": 0.15,
}
COVERAGE_SHARE = 0.8
CLOSENESS_SHARE = 0.2
CLOSENESS_GAP_SCALE = 3.0
RECENCY_HALF_LIFE_SECONDS = 30 * 86_400
NEIGHBOURS_EACH_SIDE = 2
# How many messages each side of a hit are read, nearest first, to find its eligible neighbours.
NEIGHBOUR_SCAN = 200
# Rows ranked beyond the page, so a row the final recheck drops (a projection that drifted)
# does not leave the page short.
RECHECK_MARGIN = 5
# At most this many of a search's matches are classified for the audit's exclusion counts.
EXCLUSION_SCAN = 2_000
MORE_MATCHES = "more_matches"

SPEAKERS = ("anyone", "requester", "you")
DOCUMENTS = MessageSearchDocument._meta.db_table


@dataclass(frozen=True)
class HistoryFilters:
    speaker: str = "anyone"
    after: datetime | None = None
    before: datetime | None = None


@dataclass
class Hit:
    message: Message
    components: dict[str, float]
    values: dict[str, float]
    before: list[Message] = field(default_factory=list)
    after: list[Message] = field(default_factory=list)

    @property
    def score(self) -> float:
        """The sum of the contributions: what ``score`` on the wire rounds."""
        return sum(self.components.values())


def _message_columns(alias: str) -> str:
    """Message ``alias``'s columns, with ``replyToId`` and ``threadId`` only where the run may
    receive the message they name (``perspective.receivable_reference``)."""
    references = ("reply_to_id", "thread_id")
    columns = [
        f"{alias}.{field.column}"
        for field in Message._meta.concrete_fields
        if field.column not in references
    ]
    columns += [f"{receivable_reference(f'{alias}.{name}')} AS {name}" for name in references]
    return ", ".join(columns)


def _filter_sql(filters: HistoryFilters) -> str:
    """The caller's filters, on projection rows ``d``."""
    conditions = []
    if filters.speaker == "requester":
        conditions.append("d.sender_account_id IN (SELECT account_id FROM requester_accounts)")
    elif filters.speaker == "you":
        conditions.append("d.sender_agent_id = %(p_agent)s")
    if filters.after is not None:
        conditions.append("d.created_at > %(f_after)s")
    if filters.before is not None:
        conditions.append("d.created_at < %(f_before)s")
    return "".join(f" AND {condition}" for condition in conditions)


def _hits_sql(p: Perspective, query: TermQuery, filters: HistoryFilters) -> str:
    """Rank eligible matches from the projection, then load and recheck the best from messages.

    ``candidates`` is every eligible match with its per-term flags and non-text signals (one
    pass, no message rows read); ``rarity`` turns the flags into document frequencies;
    ``partial`` scores everything but closeness; ``contenders`` are the rows closeness could
    still lift into the page; ``ranked`` is the page plus a small margin; the final SELECT reads
    those from the canonical messages and applies every rule again.
    """
    terms = range(len(query.lexemes))
    flags = "".join(f", d.document @@ %(q_t{i})s::tsquery AS t{i}" for i in terms)
    frequencies = ", ".join(f"count(*) FILTER (WHERE t{i})::float8 AS df{i}" for i in terms)
    rarities = ", ".join(
        f"CASE WHEN df{i} > 0 THEN ln(1 + matches / df{i}) ELSE 0 END AS w{i}" for i in terms
    )
    covered = " + ".join(f"CASE WHEN c.t{i} THEN w.w{i} ELSE 0 END" for i in terms)
    total_rarity = " + ".join(f"w.w{i}" for i in terms)
    matched_terms = " + ".join(f"c.t{i}::int" for i in terms)
    text_weight = WEIGHTS["text"]
    most_closeness_adds = text_weight * CLOSENESS_SHARE
    return f"""
    WITH {scope_ctes(p)},
    requester_rooms AS MATERIALIZED (
        SELECT conversation_id FROM {MEMBERSHIPS}
        WHERE account_id = %(p_requester)s AND left_at IS NULL
    ), candidates AS MATERIALIZED (
        SELECT d.message_id AS id, d.created_at,
               COALESCE(d.sender_account_id IN (SELECT account_id FROM requester_accounts),
                        false)::int AS actor,
               (d.conversation_id = %(p_destination)s)::int AS same_conversation,
               (d.conversation_id IN (SELECT conversation_id FROM requester_rooms))::int
                   AS participation
               {flags}
        FROM {DOCUMENTS} AS d
        WHERE d.document @@ %(q_any)s::tsquery
          AND {eligible_condition("d", projection=True)}{_filter_sql(filters)}
    ), rarity AS (
        SELECT {rarities}
        FROM (SELECT count(*)::float8 AS matches, {frequencies} FROM candidates) AS frequency
    ), partial AS (
        SELECT c.id, c.created_at, c.actor, c.same_conversation, c.participation,
               ({covered}) / NULLIF({total_rarity}, 0) AS coverage,
               ({matched_terms}) AS matched_terms,
               1 / (1 + GREATEST(date_part('epoch', %(r_now)s::timestamptz - c.created_at), 0)
                        / {RECENCY_HALF_LIFE_SECONDS}) AS recency
        FROM candidates AS c CROSS JOIN rarity AS w
    ), scored_without_closeness AS MATERIALIZED (
        SELECT p.*,
               {text_weight * COVERAGE_SHARE} * p.coverage
               + {WEIGHTS["actor"]} * p.actor
               + {WEIGHTS["conversation"]} * p.same_conversation
               + {WEIGHTS["participation"]} * p.participation
               + {WEIGHTS["recency"]} * p.recency AS partial_score
        FROM partial AS p
    ), cutoff AS (
        SELECT partial_score - {most_closeness_adds} AS floor
        FROM scored_without_closeness
        ORDER BY partial_score DESC LIMIT 1 OFFSET %(r_offset)s
    ), contenders AS MATERIALIZED (
        SELECT s.*,
               CASE WHEN s.matched_terms >= 2 THEN (
                   SELECT min(x.position - x.previous_position)
                   FROM (
                       SELECT u.lexeme, pos.position,
                              lag(pos.position) OVER w AS previous_position,
                              lag(u.lexeme) OVER w AS previous_lexeme
                       FROM {DOCUMENTS} AS d,
                            unnest(d.document) AS u(lexeme, positions, weights),
                            unnest(u.positions) AS pos(position)
                       WHERE d.message_id = s.id AND u.lexeme = ANY(%(q_lexemes)s::text[])
                       WINDOW w AS (ORDER BY pos.position)
                   ) AS x
                   WHERE x.previous_lexeme <> x.lexeme
               ) END AS gap
        FROM scored_without_closeness AS s
        WHERE s.partial_score >= COALESCE((SELECT floor FROM cutoff), '-infinity'::float8)
    ), ranked AS (
        SELECT c.*, c.partial_score + {most_closeness_adds} * c.closeness AS rank_score
        FROM (
            SELECT c.*,
                   CASE WHEN c.gap IS NULL THEN 0::float8
                        ELSE 1 / (1 + (GREATEST(c.gap, 1) - 1) / {CLOSENESS_GAP_SCALE}::float8)
                   END AS closeness
            FROM contenders AS c
        ) AS c
        ORDER BY rank_score DESC, c.created_at DESC, c.id DESC
        LIMIT %(r_fetch)s
    )
    SELECT {_message_columns("m")},
           s.coverage, s.closeness, s.actor, s.same_conversation, s.participation,
           s.recency, s.rank_score,
           conversation.title AS conversation_title, conversation.kind AS conversation_kind,
           COALESCE(account.display_name, agent.name) AS speaker_name
    FROM ranked AS s
    JOIN {MESSAGES} AS m ON m.id = s.id
    JOIN {Conversation._meta.db_table} AS conversation ON conversation.id = m.conversation_id
    LEFT JOIN {Account._meta.db_table} AS account ON account.id = m.sender_account_id
    LEFT JOIN {Agent._meta.db_table} AS agent ON agent.id = m.sender_agent_id
    WHERE {eligible_condition("m")}
    ORDER BY s.rank_score DESC, m.created_at DESC, m.id DESC
    LIMIT %(r_limit)s
    """


def hits_statement(
    p: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> tuple[str, dict[str, object]]:
    """The ranked hits statement and its parameters (the scope included): what
    ``ranked_hits`` runs, and what the benchmark times as the perspective floor."""
    fetch = limit + RECHECK_MARGIN
    params = {
        **p.params(),
        "q_any": query.tsquery,
        "q_lexemes": list(query.lexemes),
        **{f"q_t{i}": query.term(i) for i in range(len(query.lexemes))},
        "f_after": filters.after,
        "f_before": filters.before,
        "r_now": now,
        "r_offset": fetch - 1,
        "r_fetch": fetch,
        "r_limit": limit,
    }
    return _hits_sql(p, query, filters), params


def ranked_hits(
    p: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> list[Hit]:
    """The ``limit`` best eligible matches, best first, with their score components."""
    sql, params = hits_statement(p, query, filters, limit=limit, now=now)
    return [_hit(message) for message in Message.objects.raw(sql, params)]


def _hit(message: Message) -> Hit:
    text = COVERAGE_SHARE * message.coverage + CLOSENESS_SHARE * message.closeness
    values = {
        "text": text,
        "actor": float(message.actor),
        "conversation": float(message.same_conversation),
        "participation": float(message.participation),
        "recency": float(message.recency),
    }
    components = {name: WEIGHTS[name] * value for name, value in values.items()}
    return Hit(message=message, components=components, values=values)


def attach_neighbours(p: Perspective, hits: list[Hit]) -> None:
    """Up to two eligible messages each side of every hit, in conversation order.

    One statement: for each hit, the nearest messages by ``seq`` on each side that pass
    ``eligible_condition``, read with their text. Each side walks the ``(conversation, seq)``
    index away from the hit (the inner ``ORDER BY seq LIMIT`` pins that plan: left to itself
    the planner read the whole window through the timeline index and sorted it) and stops at
    the second eligible message, or after ``NEIGHBOUR_SCAN`` messages, so a hit whose
    surroundings the agent never observed costs a bounded amount and simply has fewer.
    """
    if not hits:
        return
    sql = f"""
        WITH {scope_ctes(p)},
        hit AS (
            SELECT position, conversation_id, seq
            FROM unnest(%(n_conversations)s::uuid[], %(n_seqs)s::bigint[])
                 WITH ORDINALITY AS h(conversation_id, seq, position)
        )
        SELECT {_message_columns("nearby")}, nearby.side, hit.position AS hit_position
        FROM hit
        CROSS JOIN LATERAL (
            (SELECT m.*, 'before' AS side FROM (
                 SELECT * FROM {MESSAGES} AS nearest
                 WHERE nearest.conversation_id = hit.conversation_id AND nearest.seq < hit.seq
                 ORDER BY nearest.seq DESC LIMIT %(n_scan)s
             ) AS m
             WHERE {eligible_condition("m")}
             ORDER BY m.seq DESC LIMIT {NEIGHBOURS_EACH_SIDE})
            UNION ALL
            (SELECT m.*, 'after' AS side FROM (
                 SELECT * FROM {MESSAGES} AS nearest
                 WHERE nearest.conversation_id = hit.conversation_id AND nearest.seq > hit.seq
                 ORDER BY nearest.seq LIMIT %(n_scan)s
             ) AS m
             WHERE {eligible_condition("m")}
             ORDER BY m.seq LIMIT {NEIGHBOURS_EACH_SIDE})
        ) AS nearby
    """
    params = {
        **p.params(),
        "n_conversations": [hit.message.conversation_id for hit in hits],
        "n_seqs": [hit.message.seq for hit in hits],
        "n_scan": NEIGHBOUR_SCAN,
    }
    for message in Message.objects.raw(sql, params):
        hit = hits[message.hit_position - 1]
        (hit.before if message.side == "before" else hit.after).append(message)
    for hit in hits:
        hit.before.sort(key=lambda message: message.seq)
        hit.after.sort(key=lambda message: message.seq)


@dataclass(frozen=True)
class Exclusions:
    """How many matches were withheld, by reason (``perspective.exclusion_reason``)."""

    counts: dict[str, int]
    capped: bool


def exclusion_counts(p: Perspective, query: TermQuery, filters: HistoryFilters) -> Exclusions:
    """Classify the search's matches in the workspace (within the caller's filters).

    Bounded for large corpora: at most ``EXCLUSION_SCAN`` matches, in index order, are read
    from the projection and classified by ``perspective.exclusion_reason`` (which checks the
    canonical message only for "deleted"); ``capped`` says more matches existed.
    """
    sql = f"""
        WITH {scope_ctes(p)},
        matched AS (
            SELECT d.message_id, d.workspace_id, d.conversation_id, d.created_at, d.sender_agent_id
            FROM {DOCUMENTS} AS d
            WHERE d.workspace_id = %(p_workspace)s AND d.document @@ %(q_any)s::tsquery
                  {_filter_sql(filters)}
            LIMIT %(x_scan)s + 1
        ), numbered AS (
            SELECT matched.*, row_number() OVER () AS position FROM matched
        ), classified AS (
            SELECT CASE WHEN d.position > %(x_scan)s THEN '{MORE_MATCHES}'
                        ELSE {exclusion_reason("d", projection=True)} END AS reason
            FROM numbered AS d
            JOIN {CONVERSATIONS} AS c ON c.id = d.conversation_id
        )
        SELECT reason, count(*) FROM classified GROUP BY reason
    """
    params = {
        **p.params(),
        "q_any": query.tsquery,
        "f_after": filters.after,
        "f_before": filters.before,
        "x_scan": EXCLUSION_SCAN,
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = dict(cursor.fetchall())
    capped = rows.pop(MORE_MATCHES, 0) > 0
    counts = {reason: count for reason, count in rows.items() if reason is not None}
    return Exclusions(counts=counts, capped=capped)


def delivery_blockers(p: Perspective, *, run_id) -> dict[str, int]:
    """Why the run's evidence may not reach its destination now: counts by reason (SPEC §4).

    Every evidence message is checked against rules 1 to 4 as they stand at this moment
    (rule 5 concerns what the run may be shown, not what it may say); every memory the run was
    given is checked like a recall (``memory_eligible_condition``). Empty means the reply may
    be delivered.
    """
    sql = f"""
        WITH {scope_ctes(p)}
        SELECT reason, count(*) FROM (
            SELECT {exclusion_reason("m", prompt_rule=False)} AS reason
            FROM {RunEvidence._meta.db_table} AS evidence
            JOIN {MESSAGES} AS m ON m.id = evidence.message_id
            JOIN {CONVERSATIONS} AS c ON c.id = m.conversation_id
            WHERE evidence.run_id = %(d_run)s
            UNION ALL
            SELECT {memory_exclusion_reason("memory")}
            FROM {RunMemory._meta.db_table} AS used
            JOIN {AgentMemory._meta.db_table} AS memory ON memory.id = used.memory_id
            WHERE used.run_id = %(d_run)s
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
        WITH {scope_ctes(p)}
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
