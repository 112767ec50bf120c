"""The hits statement's fourth stage: the surroundings of the best matches, and the context
each message there takes, up to the scored ``candidates``.

``pool`` is the ``CONTEXT_POOL`` best eligible matches by their own score, checked on their
canonical rows; ``windows`` reads ``WINDOW_EACH_SIDE`` eligible messages each side of each (the
same walk as a hit's neighbours, ``nearest``); ``receivers`` are the messages up to
``NEIGHBOURS_EACH_SIDE`` from a pool match, whose own neighbours a window therefore holds, each
taking its neighbours' wording averaged with the weights ``CONTEXT_OFFSETS`` over the
neighbours it has (so a conversation's first or newest message is not marked down for lacking
one side). Only eligible messages are read, so nothing withheld moves a score.
``window_words`` scores the windows' messages from their own documents (a few hundred look-ups
by key, whatever the number of matches; a join to ``partial`` was planned as a nested loop
rescanning it per window row when a fresh word's matches were estimated at a handful,
``test_broad_matches``); a neighbour's words count whatever the caller's filters, which narrow
the hits, not their context.
"""

from __future__ import annotations

from functools import cache

from formation.sql import literals, table
from messages_app.models import Message
from search_app.history import ranking
from search_app.history.candidates import filter_conditions
from search_app.history.matches import MATCH_SENDERS, speakers_cte
from search_app.models import MessageSearchDocument
from search_app.perspective import eligible_condition
from search_app.query.parse import TermQuery

NEIGHBOURS_EACH_SIDE = 2
# A context window reaches twice as far as a message's neighbours: the neighbours of the
# message's neighbours.
WINDOW_EACH_SIDE = 2 * NEIGHBOURS_EACH_SIDE
# The best eligible matches by their own words whose surroundings are read for context.
CONTEXT_POOL = 50
# How many messages each side of a hit are read, nearest first, to find its eligible neighbours.
NEIGHBOUR_SCAN = 200
# The columns of a message a window holds.
WALKED_COLUMNS = (
    "id",
    "conversation_id",
    "seq",
    "created_at",
    "sender_account_id",
    "sender_agent_id",
)


def context_params() -> dict[str, object]:
    """What ``pool_cte`` binds: the size of the pool."""
    return {"r_pool": CONTEXT_POOL}


def nearest(side: str, anchor: str, count: int) -> str:
    """The ``count`` eligible messages nearest message ``anchor`` on one side, nearest first.

    The inner ``ORDER BY seq LIMIT`` walks the ``(conversation, seq)`` index away from the
    anchor and pins that plan (left to itself the planner read the whole window through the
    timeline index and sorted it); it stops at the ``count``-th eligible message or after
    ``NEIGHBOUR_SCAN`` messages, so an anchor whose surroundings the agent never observed
    costs a bounded amount and simply has fewer. Rule 4 is read from the message's projection
    row, like the hits'.
    """
    before = side == "before"
    return f"""(SELECT m.*, {literals([side])} AS side FROM (
                 SELECT * FROM {table(Message)} AS nearest
                 WHERE nearest.workspace_id = %(p_workspace)s
                   AND nearest.conversation_id = {anchor}.conversation_id
                   AND nearest.seq {"<" if before else ">"} {anchor}.seq
                 ORDER BY nearest.seq {"DESC" if before else ""} LIMIT {NEIGHBOUR_SCAN}
             ) AS m
             WHERE {eligible_condition("m", lineage="document")}
             ORDER BY m.seq {"DESC" if before else ""} LIMIT {count})"""


@cache
def pool_cte() -> str:
    """The ``CONTEXT_POOL`` best eligible matches by their own score, checked on their
    canonical rows: the messages whose surroundings are read."""
    return f"""pool AS MATERIALIZED (
        SELECT {", ".join(f"m.{column}" for column in WALKED_COLUMNS)}
        FROM (SELECT id FROM partial
              ORDER BY own_score DESC, created_at DESC, id DESC LIMIT %(r_pool)s) AS best
        JOIN {table(Message)} AS m ON m.workspace_id = %(p_workspace)s AND m.id = best.id
        WHERE {eligible_condition("m", lineage="document")}
    )"""


@cache
def windows_cte() -> str:
    """Each pool match (``position`` 0) and the ``WINDOW_EACH_SIDE`` eligible messages each
    side of it, numbered by their place (negative: before it)."""
    walked = ", ".join(f"near.{column}" for column in WALKED_COLUMNS)
    return f"""windows AS MATERIALIZED (
        SELECT pool.id AS centre, 0 AS position, pool.* FROM pool
        UNION ALL
        SELECT centre.id, -row_number() OVER (PARTITION BY centre.id ORDER BY near.seq DESC),
               {walked}
        FROM pool AS centre
        CROSS JOIN LATERAL {nearest("before", "centre", WINDOW_EACH_SIDE)} AS near
        UNION ALL
        SELECT centre.id, row_number() OVER (PARTITION BY centre.id ORDER BY near.seq),
               {walked}
        FROM pool AS centre
        CROSS JOIN LATERAL {nearest("after", "centre", WINDOW_EACH_SIDE)} AS near
    )"""


def window_words_cte(query: TermQuery) -> str:
    """The windows' messages with their wording, from their own documents."""
    frequencies = ", ".join(
        f"{ranking.term_frequency(query, i, 'd.document')} AS t{i}" for i in range(len(query.terms))
    )
    return f"""window_words AS MATERIALIZED (
        SELECT found.*, {ranking.wording(query, "found")} AS wording,
               ({ranking.matched_terms(query, "found")}) AS matched_terms
        FROM (
            SELECT win.*, COALESCE(length(d.document), 0) AS document_length, {frequencies}
            FROM windows AS win
            LEFT JOIN {table(MessageSearchDocument)} AS d
              ON d.workspace_id = %(p_workspace)s AND d.message_id = win.id
        ) AS found
        CROSS JOIN weights AS w
    )"""


@cache
def receivers_cte() -> str:
    """The messages up to ``NEIGHBOURS_EACH_SIDE`` from a pool match, each with the context
    its neighbours' wording gives it (the best one, if it is in several windows)."""
    offsets = ", ".join(
        f"({offset}, {weight})" for offset, weight in ranking.CONTEXT_OFFSETS.items()
    )
    return f"""receivers AS MATERIALIZED (
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


def receiver_speakers_cte(query: TermQuery) -> str:
    """The participants the query names among the receivers' senders: those of the matches
    (``match_speakers``) and of the others, whose names are read now."""
    return speakers_cte(
        query,
        "receiver_speakers",
        f"SELECT sender_account_id, sender_agent_id FROM receivers EXCEPT {MATCH_SENDERS}",
        known="match_speakers",
    )


def candidates_cte(query: TermQuery) -> str:
    """Every receiver within the caller's filters that the query finds, scored on everything
    but closeness: one that matched it, or one whose sender the query names and whose eligible
    neighbours hold its words (``receiver_speakers``: a named participant's answer to a
    question need not repeat the question's words)."""
    return f"""candidates AS MATERIALIZED (
        SELECT c.*, {ranking.own_score("c")} AS rank_base
        FROM (
            SELECT r.id, r.created_at, r.wording, r.context, r.matched_terms,
                   {ranking.NAMED_SPEAKER} AS speaker, {ranking.signals("r", "r.conversation_id")}
            FROM receivers AS r
            {ranking.speaker_joins("r", "receiver_speakers")}
            WHERE (r.matched_terms > 0 OR (r.context > 0 AND {ranking.NAMED_SPEAKER} = 1))
              {filter_conditions("r")}
        ) AS c
    )"""
