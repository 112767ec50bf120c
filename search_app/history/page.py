"""The hits statement's last stage: closeness where it can change the outcome, the page read
and checked again from the canonical messages, the hits' neighbours, and the one result set.

``leaders`` are the ``fetch`` best candidates on everything but closeness, with their gap;
``floor`` is the worst final score among them, under which the true ``fetch``-th best cannot
be; ``contenders`` add every other candidate within what closeness could ever add of it;
``ranked`` orders them by their whole score. ``page`` reads the best from the canonical
messages, with their conversations and speakers, and checks every rule again (a drifted
projection row drops out here, which ``statement.RECHECK_MARGIN`` allows for); ``nearby``
finds their neighbours. ``answer`` returns all of it, and the exclusion counts, as one result
set tagged by ``kind``: each branch fills the columns of ``ANSWER_COLUMNS`` it has, by name,
and leaves the others NULL.
"""

from __future__ import annotations

from functools import cache

from formation.sql import table
from messages_app.models import Account, Agent, Conversation, Message, RunEvidence
from messages_app.selectors import SUMMARY_COLUMNS, summary_columns
from search_app.history import ranking
from search_app.history.context import NEIGHBOURS_EACH_SIDE, nearest
from search_app.history.matches import SPEAKER_NAME
from search_app.perspective import eligible_condition, receivable_reference

# What a hit carries besides its summary and ranking values.
NAMING_COLUMNS = ("conversation_title", "conversation_kind", "speaker_name")
# The columns of the statement's one result set, by name: a hit fills all of them; a
# neighbour its place, summary and ``seen``; an exclusion count its ``reason`` and ``matches``.
ANSWER_COLUMNS = (
    "kind",
    "position",
    "side",
    *SUMMARY_COLUMNS,
    *ranking.RANKING_COLUMNS,
    *NAMING_COLUMNS,
    "marked",
    "seen",
    "reason",
    "matches",
)


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


def _seen(row: str) -> str:
    """Message ``row`` is already the run's evidence."""
    return f"""EXISTS (SELECT 1 FROM {table(RunEvidence)} AS e
                   WHERE e.workspace_id = %(p_workspace)s AND e.run_id = %(p_run)s
                     AND e.message_id = {row}.id)"""


def _select(values: dict[str, str]) -> str:
    """One branch of the result set: ``values`` by column name, NULL in every other column."""
    return ", ".join(values.get(column, "NULL") for column in ANSWER_COLUMNS)


@cache
def answer() -> str:
    """The statement's one result set: the hits, their neighbours and the exclusion counts,
    each row tagged by ``kind``. The first branch names the columns (``ANSWER_COLUMNS``)."""
    hit = {
        "kind": "'hit' AS kind",
        "position": "p.position",
        "side": "NULL AS side",
        **{
            column: f"p.{column}"
            for column in (*SUMMARY_COLUMNS, *ranking.RANKING_COLUMNS, *NAMING_COLUMNS)
        },
        "marked": """ts_headline(%(config)s::regconfig, formation_search_masked(p.content),
                       %(q_any)s::tsquery, %(h_options)s) AS marked""",
        "seen": f"{_seen('p')} AS seen",
        "reason": "NULL AS reason",
        "matches": "NULL::bigint AS matches",
    }
    neighbour = {
        "kind": "'neighbour'",
        "position": "n.position",
        "side": "n.side",
        **{column: f"n.{column}" for column in SUMMARY_COLUMNS},
        "seen": _seen("n"),
    }
    exclusion = {"kind": "'exclusion'", "reason": "excluded.reason", "matches": "count(*)"}
    return f"""SELECT {_select(hit)}
    FROM page AS p
    UNION ALL
    SELECT {_select(neighbour)}
    FROM nearby AS n
    UNION ALL
    SELECT {_select(exclusion)}
    FROM excluded WHERE excluded.reason IS NOT NULL GROUP BY excluded.reason"""
