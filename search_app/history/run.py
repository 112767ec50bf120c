"""The hits statement's first stage: the run, locked, its state and its perspective's scope.

``scope_from_tables`` (``search_app.perspective``) locks the run's row ``FOR UPDATE`` (searches
on one run take turns; the row the lock returns is the newest, so its budget counter is the one
the previous search committed) and reads the scope every rule fragment applies: the permitted
rooms, the agent's intervals in them, the requester's accounts. ``state`` is what the call may
do: nothing on a finished run (``forbidden``, not audited), only its audit event once the budget
is spent (``search_budget_exhausted``), else search (``searching``), which every later stage
waits on.
"""

from __future__ import annotations

from functools import cache

from search_app.limits import EVIDENCE_BUDGET
from search_app.perspective import scope_from_tables


def run_params() -> dict[str, object]:
    """What ``state_cte`` binds: the budget's ceiling."""
    return {"b_limit": EVIDENCE_BUDGET}


@cache
def run_ctes() -> str:
    """The run's row, locked, its scope, and ``state``: ``open``, the budget ``used`` and
    ``remaining``, and ``searching`` (open with budget left)."""
    return f"""{scope_from_tables("UPDATE")},
    state AS MATERIALIZED (
        SELECT r.finished_at IS NULL AS open, r.history_evidence_count AS used,
               GREATEST(%(b_limit)s - r.history_evidence_count, 0) AS remaining,
               r.finished_at IS NULL AND r.history_evidence_count < %(b_limit)s AS searching
        FROM run AS r
    )"""
