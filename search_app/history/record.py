"""The hits statement's seventh stage: the evidence and the audit event, written by the
statement itself (SPEC §4, §7).

``recorded`` inserts what the search brings the run for the first time (its trigger moves the
run's budget counter by the rows it inserts); ``audited`` writes the call's one
``conversation_search_events`` row: the keyed digest and the filters as ``audit_app`` made them,
the hits and neighbours returned, each hit's ranking as the answer shows it (contributions
rounded to six decimals, the score their sum), the exclusion counts by reason and what the
budget left out. A call on a finished run writes neither; one whose budget is spent writes only
the event, as ``budget_exhausted``. If PostgreSQL refuses either write, or anything at the
commit that ends the statement, the whole statement is undone: no evidence without its audit.

On Citus the statement cannot hold the two ``INSERT``s and still go to one shard (its router
planner refuses an ``INSERT`` in a ``WITH``): there it answers the evidence to record and the
event's computed columns on its state row, and ``write`` inserts them with two statements
routed to the same shard, in the same transaction, under the same lock (``in_statement``).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection

from audit_app.models import EXCLUSION_REASONS, SearchOutcome, SearchTool
from audit_app.services import SEARCH_EVENT_COLUMNS
from formation.bulk_insert import insert_rows
from formation.sql import literals, table
from messages_app.models import RunEvidence
from search_app.history import ranking
from search_app.history.candidates import MORE_MATCHES

SEARCH_TOOL = SearchTool.SEARCH_HISTORY
# Each component's contribution as the answer and the audit show it, from a page row ``p``.
_CONTRIBUTIONS = {
    "text": (
        f"{ranking.WEIGHTS['text']}::float8 * ({ranking.COVERAGE_SHARE}::float8 * p.wording"
        f" + {ranking.CLOSENESS_SHARE}::float8 * p.closeness)"
    ),
    "actor": f"{ranking.WEIGHTS['actor']}::float8 * p.actor",
    "conversation": f"{ranking.WEIGHTS['conversation']}::float8 * p.same_conversation",
    "participation": f"{ranking.WEIGHTS['participation']}::float8 * p.participation",
    "recency": f"{ranking.WEIGHTS['recency']}::float8 * p.recency",
    "speaker": f"{ranking.WEIGHTS['speaker']}::float8 * p.speaker",
    "context": f"{ranking.WEIGHTS['context']}::float8 * p.context",
}
assert set(_CONTRIBUTIONS) == set(ranking.WEIGHTS)


def contribution_columns() -> str:
    """Each component's rounded contribution of page row ``p`` (``c_<name>``), and the score
    (``c_score``): their sum."""
    rounded = {name: f"round(({sql})::numeric, 6)" for name, sql in _CONTRIBUTIONS.items()}
    columns = ", ".join(f"{sql} AS c_{name}" for name, sql in rounded.items())
    return f"{columns}, {' + '.join(rounded.values())} AS c_score"


@cache
def page_scores_cte() -> str:
    """The page with each hit's rounded contributions and score, as recorded and answered."""
    return f"""page_scores AS MATERIALIZED (
        SELECT p.*, {contribution_columns()} FROM page AS p
    )"""


def in_statement() -> bool:
    """Whether the statement writes the evidence and the audit event itself: on PostgreSQL.

    Citus's router planner refuses an ``INSERT`` in a ``WITH`` ("only SELECT, UPDATE, or DELETE
    common table expressions may be router planned"), and a statement it cannot route it plans
    CTE by CTE, each a round trip to the shard with its rows carried back as an intermediate
    result, and a recursive CTE (the walks) not at all. So on Citus the statement only reads
    (one task on the workspace's shard) and answers what to write (``record_columns``), and
    ``write`` inserts it right after, in the same transaction, while the run is still locked:
    no evidence without its audit there either."""
    return not connection.is_citus


# The evidence the call adds, in the order the budget took it.
_EVIDENCE = """ARRAY(SELECT t.id FROM taken AS t WHERE t.fits AND t.new
                     ORDER BY t.part, t.position, t.side, t.distance)"""


@cache
def recorded_cte() -> str:
    """The new messages that fit, inserted as the run's evidence in the order the budget took
    them; the ids actually inserted (none twice, whatever ran at the same time)."""
    return f"""recorded AS (
        INSERT INTO {table(RunEvidence)} (workspace_id, run_id, message_id, tool, created_at)
        SELECT %(p_workspace)s, %(p_run)s, t.id, {literals([SEARCH_TOOL])}, now()
        FROM taken AS t
        WHERE t.fits AND t.new
        ORDER BY t.part, t.position, t.side, t.distance
        ON CONFLICT (workspace_id, run_id, message_id) DO NOTHING
        RETURNING message_id
    )"""


def _audit_values(budget_used: str) -> dict[str, str]:
    """The audit event's columns as SQL over the statement's CTEs and state row ``s``, in
    ``SEARCH_EVENT_COLUMNS``' order; ``budget_used`` is what the call leaves used."""
    components = ", ".join(f"{literals([name])}, r.c_{name}" for name in ranking.WEIGHTS)
    zeros = ", ".join(f"{literals([reason])}, 0" for reason in EXCLUSION_REASONS)
    exclusions = f"""jsonb_build_object({zeros})
            || COALESCE((SELECT jsonb_object_agg(reason, matches) FROM exclusion_counts
                         WHERE reason <> {literals([MORE_MATCHES])}), '{{}}'::jsonb)
            || jsonb_build_object('budget', (SELECT messages FROM left_out))"""
    values = {
        "id": "%(a_id)s",
        "tool": literals([SEARCH_TOOL]),
        "workspace_id": "%(p_workspace)s",
        "run_id": "%(p_run)s",
        "agent_id": "%(p_agent)s",
        "destination_id": "%(p_destination)s",
        "requester_id": "%(p_requester)s",
        "key_id": "%(a_key_id)s",
        "query_digest": "%(a_digest)s",
        "filters": "%(a_filters)s::jsonb",
        "hit_ids": "ARRAY(SELECT id FROM kept_hits ORDER BY position)",
        "neighbour_ids": """ARRAY(
            SELECT n.id FROM (
                SELECT DISTINCT ON (n.id) n.id, n.position, n.seq,
                       CASE WHEN n.side = 'before' THEN 0 ELSE 1 END AS side
                FROM nearby AS n JOIN taken AS t ON t.id = n.id AND t.fits
                WHERE n.position IN (SELECT position FROM kept_hits)
                  AND n.id NOT IN (SELECT id FROM kept_hits)
                ORDER BY n.id, n.position, side, n.seq
            ) AS n
            ORDER BY n.position, n.side, n.seq)""",
        "rankings": f"""COALESCE((
            SELECT jsonb_agg(jsonb_build_object(
                       'messageId', r.id::text, 'score', r.c_score,
                       'components', jsonb_build_object({components}))
                   ORDER BY r.position)
            FROM page_scores AS r WHERE r.position IN (SELECT position FROM kept_hits)
        ), '[]'::jsonb)""",
        "exclusions": exclusions,
        "exclusions_capped": (
            f"EXISTS (SELECT 1 FROM exclusion_counts WHERE reason = {literals([MORE_MATCHES])})"
        ),
        "outcome": f"""CASE WHEN s.searching THEN {literals([SearchOutcome.ANSWERED])}
                            ELSE {literals([SearchOutcome.BUDGET_EXHAUSTED])} END""",
        "result_count": "(SELECT count(*) FROM kept_hits)",
        "budget_used": budget_used,
        "created_at": "%(a_created_at)s",
    }
    assert tuple(values) == SEARCH_EVENT_COLUMNS
    return values


@cache
def audited_cte(insert: str) -> str:
    """The call's audit event, on an open run (``insert``: ``audit_app``'s target and
    columns, in ``SEARCH_EVENT_COLUMNS``' order)."""
    values = _audit_values("s.used + (SELECT count(*) FROM recorded)")
    return f"""audited AS (
        {insert}
        SELECT {", ".join(values.values())}
        FROM state AS s WHERE s.open
        RETURNING id
    )"""


def recording_ctes(insert: str) -> tuple[str, ...]:
    """The CTEs that write the evidence and the audit event (none where ``write`` does)."""
    return (recorded_cte(), audited_cte(insert)) if in_statement() else ()


# What the statement answers on its state row for ``write`` (on Citus), and each one's type:
# the audit's columns the statement computes, jsonb as text so that no number is re-read.
_COMPUTED = {
    "hit_ids": "uuid[]",
    "neighbour_ids": "uuid[]",
    "rankings": "jsonb",
    "exclusions": "jsonb",
    "exclusions_capped": "boolean",
    "outcome": "text",
    "result_count": "bigint",
}
RECORD_COLUMNS = ("record_evidence", *(f"audit_{name}" for name in _COMPUTED))


def record_columns() -> dict[str, str]:
    """``RECORD_COLUMNS`` as SQL of the answer's state row ``s`` (where ``write`` records)."""
    values = _audit_values("NULL")
    columns = {"record_evidence": f"{_EVIDENCE} AS record_evidence"}
    for name, kind in _COMPUTED.items():
        value = f"({values[name]})::text" if kind == "jsonb" else values[name]
        columns[f"audit_{name}"] = f"{value} AS audit_{name}"
    return columns


def write(insert: str, params: dict[str, object], state: Any) -> int:
    """Record what the statement answered (``state``: its state row, with ``RECORD_COLUMNS``)
    when it did not write it itself: the evidence, then the audit event, each one statement
    routed to the workspace's shard; how many evidence rows it inserted (a message another call
    of the run recorded meanwhile is skipped, as ``recorded`` skips it)."""
    if not state.open:
        return 0
    evidence = state.record_evidence or []
    added = (
        insert_rows(
            table(RunEvidence),
            (("workspace_id", "uuid"), ("run_id", "uuid"), ("message_id", "uuid")),
            [(params["p_workspace"], params["p_run"], message) for message in evidence],
            fixed={"tool": literals([SEARCH_TOOL]), "created_at": "now()"},
            suffix="ON CONFLICT (workspace_id, run_id, message_id) DO NOTHING",
        )
        if evidence
        else 0
    )
    values = _audit_values("%(audit_budget_used)s::bigint")
    for name, kind in _COMPUTED.items():
        values[name] = f"%(audit_{name})s::{kind}"
    computed = {f"audit_{name}": getattr(state, f"audit_{name}") for name in _COMPUTED}
    with connection.cursor() as cursor:
        cursor.execute(
            f"{insert} VALUES ({', '.join(values.values())})",
            {**params, **computed, "audit_budget_used": state.used + added},
        )
    return added
