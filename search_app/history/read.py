"""``history_read``: the hits statement run, and its rows read back by column name."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from formation import prepared
from messages_app.selectors import MessageRow, message_row
from search_app.history import ranking
from search_app.history.matches import MORE_MATCHES
from search_app.history.results import HistoryFilters, HistoryResult, Hit
from search_app.history.statement import hits_statement
from search_app.query.parse import TermQuery
from search_app.scope import Perspective


def history_read(
    perspective: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> HistoryResult:
    """Run the history statement: the ``limit`` best eligible matches, best first, with their
    score components, neighbours and highlights, and the exclusion counts."""
    sql, params = hits_statement(perspective, query, filters, limit=limit, now=now)
    hits: dict[int, Hit] = {}
    neighbours: list[tuple[int, str, MessageRow]] = []
    seen: set = set()
    exclusions: dict[str, int] = {}
    for row in prepared.fetch_all(sql, params):
        if row.kind == "exclusion":
            exclusions[row.reason] = row.matches
            continue
        message = message_row(row)
        if row.seen:
            seen.add(message.id)
        if row.kind == "hit":
            hits[row.position] = _hit(message, row)
        else:
            neighbours.append((row.position, row.side, message))
    for position, side, message in neighbours:
        hit = hits[position]
        (hit.before if side == "before" else hit.after).append(message)
    ordered = [hits[position] for position in sorted(hits)]
    for hit in ordered:
        hit.before.sort(key=lambda message: message.seq)
        hit.after.sort(key=lambda message: message.seq)
    capped = exclusions.pop(MORE_MATCHES, 0) > 0
    return HistoryResult(hits=ordered, seen=seen, exclusions=exclusions, capped=capped)


def _hit(message: MessageRow, row: Any) -> Hit:
    """A hit from its row of the result set (``page.ANSWER_COLUMNS``)."""
    values = ranking.hit_values(row)
    return Hit(
        message=message,
        components={name: ranking.WEIGHTS[name] * value for name, value in values.items()},
        values=values,
        conversation_title=row.conversation_title,
        conversation_kind=row.conversation_kind,
        speaker_name=row.speaker_name,
        marked=row.marked,
    )


def ranked_hits(
    perspective: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> list[Hit]:
    """The ``limit`` best eligible matches, best first, with their score components."""
    return history_read(perspective, query, filters, limit=limit, now=now).hits
