"""The hits statement's sixth stage: what of the page fits the run's evidence budget (SPEC §6).

Hits come first, best first, then the neighbours of the hits kept, hit by hit, each hit's
nearest first (before it, then after it); a message already in the run's evidence, or already
taken by this search, costs nothing. ``hit_spend`` marks each hit's cost; ``kept_hits`` are the
hits that fit; ``offered`` is every message the answer could carry, in the order the budget
takes them; ``taken`` is each of them once, at its first offer, with whether it fits and
whether it is new to the run (the evidence the next stage records); ``left_out`` how many the
budget left out.

The budget is ``state.remaining``, from the run's row as its lock returned it: the counter the
previous search on the run committed. The evidence rows that search wrote are not in this
statement's snapshot when it waited for the lock (READ COMMITTED takes the snapshot when the
statement starts); one it returned again is then taken as new, and the insert skips it, so
the counter (moved by the rows inserted) can never pass the ceiling.
"""

from __future__ import annotations

from functools import cache

from formation.sql import table
from messages_app.models import RunEvidence


def seen(message_id: str) -> str:
    """Message ``message_id`` (an SQL expression) is already the run's evidence."""
    return f"""EXISTS (SELECT 1 FROM {table(RunEvidence)} AS e
                   WHERE e.workspace_id = %(p_workspace)s AND e.run_id = %(p_run)s
                     AND e.message_id = {message_id})"""


@cache
def hit_spend_cte() -> str:
    """Each hit, whether it is already evidence, and what the new hits up to it cost."""
    return f"""hit_spend AS MATERIALIZED (
        SELECT h.*, sum((NOT h.seen)::int) OVER (ORDER BY h.position) AS spending
        FROM (SELECT p.position, p.id, {seen("p.id")} AS seen FROM page AS p) AS h
    )"""


@cache
def kept_hits_cte() -> str:
    """The hits that fit: free ones, and new ones while the budget lasts (once one does not
    fit none after it does, so the running cost decides)."""
    return """kept_hits AS MATERIALIZED (
        SELECT position, id FROM hit_spend
        WHERE seen OR spending <= (SELECT remaining FROM state)
    )"""


@cache
def offered_cte() -> str:
    """Every message the answer could carry, with the order the budget takes them in: the kept
    hits, then their neighbours (``nearby``), hit by hit, nearest first."""
    return """offered AS MATERIALIZED (
        SELECT h.id, 0 AS part, h.position, 0 AS side, 0 AS distance FROM kept_hits AS h
        UNION ALL
        SELECT n.id, 1, n.position, CASE WHEN n.side = 'before' THEN 0 ELSE 1 END,
               CASE WHEN n.side = 'before' THEN -n.seq ELSE n.seq END
        FROM nearby AS n
        WHERE n.position IN (SELECT position FROM kept_hits)
    )"""


@cache
def taken_cte() -> str:
    """Each offered message once, at its first offer: whether it is new to the run, and whether
    it fits (free, or new while the budget lasts)."""
    return f"""taken AS MATERIALIZED (
        SELECT f.id, f.part, f.position, f.side, f.distance, NOT f.seen AS new,
               f.seen OR f.spending <= (SELECT remaining FROM state) AS fits
        FROM (
            SELECT f.*, sum((NOT f.seen)::int)
                        OVER (ORDER BY f.part, f.position, f.side, f.distance) AS spending
            FROM (
                SELECT DISTINCT ON (o.id) o.*, {seen("o.id")} AS seen
                FROM offered AS o
                ORDER BY o.id, o.part, o.position, o.side, o.distance
            ) AS f
        ) AS f
    )"""


@cache
def left_out_cte() -> str:
    """How many distinct messages the budget left out: hits that did not fit, and neighbours of
    the kept hits that did not."""
    return """left_out AS MATERIALIZED (
        SELECT count(*) AS messages FROM (
            SELECT id FROM hit_spend WHERE id NOT IN (SELECT id FROM kept_hits)
            UNION
            SELECT id FROM taken WHERE NOT fits
        ) AS out
    )"""
