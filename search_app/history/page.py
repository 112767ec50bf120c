"""The hits statement's fifth stage: closeness where it can change the outcome, the page read
and checked again from the canonical messages, and the hits' neighbours.

``leaders`` are the ``fetch`` best candidates on everything but closeness, with their gap;
``floor`` is the worst final score among them, under which the true ``fetch``-th best cannot
be; ``contenders`` add every other candidate within what closeness could ever add of it;
``ranked`` orders them by their whole score. ``page`` reads the best from the canonical
messages, with their conversations and speakers, and checks every rule again (a drifted
projection row drops out here, which ``statement.RECHECK_MARGIN`` allows for); ``nearby``
finds their neighbours.
"""

from __future__ import annotations

from functools import cache

from formation.sql import table
from messages_app.models import Account, Agent, Conversation, Message
from messages_app.selectors import summary_columns
from search_app.history import ranking
from search_app.history.context import NEIGHBOURS_EACH_SIDE, nearest
from search_app.history.matches import SPEAKER_NAME
from search_app.perspective import eligible_condition, receivable_reference

# What a hit carries besides its summary and ranking values.
NAMING_COLUMNS = ("conversation_title", "conversation_kind", "speaker_name")


@cache
def leaders_cte() -> str:
    """The ``fetch`` best candidates on everything but closeness, with their gap."""
    return f"""leaders AS MATERIALIZED (
        SELECT l.*, {ranking.smallest_gap("l")} AS gap
        FROM (SELECT * FROM candidates
              ORDER BY rank_base DESC, created_at DESC, id DESC LIMIT %(r_fetch)s) AS l
    )"""


@cache
def floor_cte() -> str:
    """The worst whole score among a full set of leaders (else no floor at all)."""
    return f"""floor AS (
        SELECT CASE WHEN count(*) = %(r_fetch)s THEN min({ranking.final_score("gap")})
                    ELSE '-infinity'::float8 END AS score
        FROM leaders
    )"""


@cache
def contenders_cte() -> str:
    """The leaders, and every other candidate that closeness could still lift over the floor,
    with its gap."""
    return f"""contenders AS (
        SELECT * FROM leaders
        UNION ALL
        SELECT c.*, {ranking.smallest_gap("c")} AS gap
        FROM candidates AS c
        WHERE c.rank_base >= (SELECT score FROM floor) - {ranking.MOST_CLOSENESS_ADDS}
          AND c.id NOT IN (SELECT id FROM leaders)
    )"""


@cache
def ranked_cte() -> str:
    """The ``fetch`` best contenders by their whole score."""
    return f"""ranked AS (
        SELECT c.*, {ranking.closeness("c.gap")} AS closeness,
               c.{ranking.final_score("gap")} AS rank_score
        FROM contenders AS c
        ORDER BY rank_score DESC, c.created_at DESC, c.id DESC
        LIMIT %(r_fetch)s
    )"""


@cache
def page_cte() -> str:
    """The ``limit`` best ranked messages that pass every rule on their canonical rows, with
    their summary (references only where the run may receive them), ranking values,
    conversation and speaker."""
    ranking_values = ", ".join(f"s.{column}" for column in ranking.RANKING_COLUMNS)
    return f"""page AS MATERIALIZED (
        SELECT row_number() OVER (ORDER BY s.rank_score DESC, m.created_at DESC, m.id DESC)
                   AS position,
               {summary_columns("m", receivable_reference, named=True)},
               {ranking_values}, s.rank_score,
               conversation.title AS conversation_title, conversation.kind AS conversation_kind,
               {SPEAKER_NAME} AS speaker_name
        FROM ranked AS s
        JOIN {table(Message)} AS m ON m.workspace_id = %(p_workspace)s AND m.id = s.id
        JOIN {table(Conversation)} AS conversation
          ON conversation.workspace_id = %(p_workspace)s
         AND conversation.id = m.conversation_id
        LEFT JOIN {table(Account)} AS account
          ON account.workspace_id = %(p_workspace)s AND account.id = m.sender_account_id
        LEFT JOIN {table(Agent)} AS agent
          ON agent.workspace_id = %(p_workspace)s AND agent.id = m.sender_agent_id
        WHERE {eligible_condition("m", lineage="document")}
        ORDER BY s.rank_score DESC, m.created_at DESC, m.id DESC
        LIMIT %(r_limit)s
    )"""


@cache
def nearby_cte() -> str:
    """Each hit's ``NEIGHBOURS_EACH_SIDE`` eligible neighbours each side, by its position."""
    columns = summary_columns("nearby", receivable_reference, named=True)
    return f"""nearby AS (
        SELECT hit.position, nearby.side, {columns}
        FROM page AS hit
        CROSS JOIN LATERAL (
            {nearest("before", "hit", NEIGHBOURS_EACH_SIDE)}
            UNION ALL
            {nearest("after", "hit", NEIGHBOURS_EACH_SIDE)}
        ) AS nearby
    )"""
