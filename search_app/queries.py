"""The perspective's other reads: the final delivery check and memory recall.

Like the hits statement (``search_app.history``), each statement here embeds the perspective's
``scope_ctes`` and rule fragments and only narrows what they allow.
"""

from __future__ import annotations

from django.db import connection

from formation.sql import merge_params, table
from messages_app.models import Message, RunEvidence
from search_app.models import AgentMemory, RunMemory
from search_app.perspective import (
    exclusion_reason,
    memory_eligible_condition,
    memory_exclusion_reason,
    scope_ctes,
)
from search_app.query.parse import TermQuery
from search_app.scope import Perspective


def delivery_blockers(perspective: Perspective, *, run_id) -> dict[str, int]:
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
            FROM {table(RunEvidence)} AS evidence
            JOIN {table(Message)} AS m
              ON m.workspace_id = %(p_workspace)s AND m.id = evidence.message_id
            WHERE evidence.workspace_id = %(p_workspace)s AND evidence.run_id = %(d_run)s
            UNION ALL
            SELECT {memory_exclusion_reason("memory")}
            FROM {table(RunMemory)} AS used
            JOIN {table(AgentMemory)} AS memory
              ON memory.workspace_id = %(p_workspace)s AND memory.id = used.memory_id
            WHERE used.workspace_id = %(p_workspace)s AND used.run_id = %(d_run)s
        ) AS checked
        WHERE reason IS NOT NULL
        GROUP BY reason
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, merge_params(perspective.params(), {"d_run": run_id}))
        return dict(cursor.fetchall())


def memory_hits(perspective: Perspective, query: TermQuery, *, limit: int) -> list[AgentMemory]:
    """The agent's memories matching ``query`` that the run's destination may receive.

    Ranked like a plain full-text search: ``ts_rank_cd`` over the same configuration and OR
    query as search_history, then newer first, then id.
    """
    sql = f"""
        WITH {scope_ctes()}
        SELECT memory.id, memory.workspace_id, memory.agent_id, memory.run_id, memory.content,
               memory.created_at, ts_rank_cd(memory.document, %(q_any)s::tsquery) AS rank
        FROM {table(AgentMemory)} AS memory
        WHERE memory.agent_id = %(p_agent)s AND memory.workspace_id = %(p_workspace)s
          AND memory.document @@ %(q_any)s::tsquery
          AND {memory_eligible_condition("memory")}
        ORDER BY rank DESC, memory.created_at DESC, memory.id DESC
        LIMIT %(m_limit)s
    """
    params = merge_params(perspective.params(), {"q_any": query.tsquery, "m_limit": limit})
    return list(AgentMemory.objects.raw(sql, params))
