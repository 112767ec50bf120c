"""The hits statement's last stage: its one result set, tagged by ``kind``.

``state``: whether the run is open, the budget it had and what this call added to it, and what
the budget left out; ``hit``: each kept hit with its summary (references only where the run may
receive them), ranking values, rounded contributions, conversation, speaker and highlights;
``neighbour``: each neighbour of a kept hit that fits, by the hit's position; ``exclusion``: the
counts by reason (the audit has them; the metrics count them). Each branch fills the columns of
``ANSWER_COLUMNS`` it has, by name, and leaves the others NULL.
"""

from __future__ import annotations

from functools import cache

from messages_app.selectors import SUMMARY_COLUMNS
from search_app.history import ranking, record
from search_app.history.page import NAMING_COLUMNS

CONTRIBUTION_COLUMNS = (*(f"c_{name}" for name in ranking.WEIGHTS), "c_score")
ANSWER_COLUMNS = (
    "kind",
    "position",
    "side",
    *SUMMARY_COLUMNS,
    *ranking.RANKING_COLUMNS,
    *CONTRIBUTION_COLUMNS,
    *NAMING_COLUMNS,
    "marked",
    "reason",
    "matches",
    "open",
    "used",
    "added",
    "left_out",
)


def _select(values: dict[str, str], columns: tuple[str, ...]) -> str:
    """One branch of the result set: ``values`` by column name, NULL in every other column."""
    return ", ".join(values.get(column, "NULL") for column in columns)


@cache
def answer(*, recorded: bool) -> str:
    """The statement's one result set. The first branch names the columns. Unless the
    statement ``recorded`` the evidence and the audit event itself, its state row also
    answers what to record (``record.RECORD_COLUMNS``, for ``record.write``)."""
    columns = ANSWER_COLUMNS if recorded else (*ANSWER_COLUMNS, *record.RECORD_COLUMNS)
    state = {
        "kind": "'state' AS kind",
        "position": "NULL::bigint AS position",
        "side": "NULL::text AS side",
        **{column: f"NULL AS {column}" for column in SUMMARY_COLUMNS},
        **{column: f"NULL::float8 AS {column}" for column in ranking.RANKING_COLUMNS},
        **{column: f"NULL::numeric AS {column}" for column in CONTRIBUTION_COLUMNS},
        **{column: f"NULL::text AS {column}" for column in NAMING_COLUMNS},
        "marked": "NULL::text AS marked",
        "reason": "NULL::text AS reason",
        "matches": "NULL::bigint AS matches",
        "open": "s.open",
        "used": "s.used",
        "added": "(SELECT count(*) FROM recorded) AS added" if recorded else "0::bigint AS added",
        "left_out": "(SELECT messages FROM left_out) AS left_out",
        **({} if recorded else record.record_columns()),
    }
    hit = {
        "kind": "'hit'",
        "position": "p.position",
        **{
            column: f"p.{column}"
            for column in (
                *SUMMARY_COLUMNS,
                *ranking.RANKING_COLUMNS,
                *CONTRIBUTION_COLUMNS,
                *NAMING_COLUMNS,
            )
        },
        "marked": """ts_headline(%(config)s::regconfig, formation_search_masked(p.content),
                       %(h_query)s::tsquery, %(h_options)s)""",
    }
    neighbour = {
        "kind": "'neighbour'",
        "position": "n.position",
        "side": "n.side",
        **{column: f"n.{column}" for column in SUMMARY_COLUMNS},
    }
    exclusion = {"kind": "'exclusion'", "reason": "c.reason", "matches": "c.matches"}
    return f"""SELECT {_select(state, columns)}
    FROM state AS s
    UNION ALL
    SELECT {_select(hit, columns)}
    FROM page_scores AS p WHERE p.position IN (SELECT position FROM kept_hits)
    UNION ALL
    SELECT {_select(neighbour, columns)}
    FROM nearby AS n
    WHERE n.position IN (SELECT position FROM kept_hits)
      AND n.id IN (SELECT id FROM taken WHERE fits)
    UNION ALL
    SELECT {_select(exclusion, columns)}
    FROM exclusion_counts AS c"""
