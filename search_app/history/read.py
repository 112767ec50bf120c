"""``history_read``: the hits statement run, and its rows read back by column name."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from formation import prepared
from messages_app.selectors import message_row
from search_app.history import ranking, record
from search_app.history.candidates import MORE_MATCHES
from search_app.history.results import HistoryFilters, Hit
from search_app.history.statement import hits_statement
from search_app.query.parse import TermQuery
from search_app.scope import Perspective


@dataclass
class HistoryRead:
    """What one run of the statement did: whether the run was found and open, the budget it
    had (``used``) and what the call added to it (``added``), the hits best first with their
    neighbours, how many messages the budget left out, and the exclusion counts."""

    found: bool
    open: bool
    used: int
    added: int
    left_out: int
    hits: list[Hit]
    exclusions: dict[str, int]
    capped: bool


def history_read(
    perspective: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
    routes: tuple[str, ...],
    audit: tuple[str, dict[str, object]],
) -> HistoryRead:
    """Run the history statement (prepared, one round trip) and read what it answered."""
    sql, params = hits_statement(
        perspective, query, filters, limit=limit, now=now, routes=routes, audit=audit
    )
    state = None
    hits: dict[int, Hit] = {}
    neighbours: list[tuple[int, str, Any]] = []
    exclusions: dict[str, int] = {}
    for row in prepared.fetch_all(sql, params):
        if row.kind == "state":
            state = row
        elif row.kind == "exclusion":
            exclusions[row.reason] = row.matches
        elif row.kind == "hit":
            hits[row.position] = _hit(row)
        else:
            neighbours.append((row.position, row.side, message_row(row)))
    for position, side, message in neighbours:
        hit = hits[position]
        (hit.before if side == "before" else hit.after).append(message)
    ordered = [hits[position] for position in sorted(hits)]
    for hit in ordered:
        hit.before.sort(key=lambda message: message.seq)
        hit.after.sort(key=lambda message: message.seq)
    capped = exclusions.pop(MORE_MATCHES, 0) > 0
    if state is None:
        return HistoryRead(False, False, 0, 0, 0, [], {}, False)
    added = state.added if record.in_statement() else record.write(audit[0], params, state)
    return HistoryRead(
        found=True,
        open=state.open,
        used=state.used,
        added=added,
        left_out=state.left_out,
        hits=ordered,
        exclusions=exclusions,
        capped=capped,
    )


def _hit(row: Any) -> Hit:
    """A hit from its row of the result set (``answer.ANSWER_COLUMNS``), with its
    contributions as the statement rounded them for the audit, so the answer shows the same."""
    values = ranking.hit_values(row)
    return Hit(
        message=message_row(row),
        components={name: ranking.WEIGHTS[name] * value for name, value in values.items()},
        values=values,
        recorded={name: float(getattr(row, f"c_{name}")) for name in ranking.WEIGHTS},
        conversation_title=row.conversation_title,
        conversation_kind=row.conversation_kind,
        speaker_name=row.speaker_name,
        marked=row.marked,
    )
