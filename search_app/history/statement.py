"""``hits_statement``: search_history's one statement, composed from its CTEs' builders.

The statement reads the search's matches from the projection once: every match is classified
by ``perspective.exclusion_reason``; the eligible ones are ranked (``ranking``); the best are
read, with their text, titles and speakers, from the canonical messages and checked again
there; their neighbours are read and checked by the same statement, so a hit's text and its
context come from the same snapshot that checked them. It embeds the perspective's
``scope_ctes`` and rule fragments and only narrows what they allow.
"""

from __future__ import annotations

from datetime import datetime

from formation.sql import merge_params
from search_app.history import context, matches, page, ranking
from search_app.history.results import HistoryFilters
from search_app.perspective import scope_ctes
from search_app.query.highlights import highlight_markers
from search_app.query.parse import TermQuery
from search_app.scope import Perspective

# Rows ranked beyond the page, so a row the final recheck drops (a projection that drifted)
# does not leave the page short.
RECHECK_MARGIN = 5
# Between two CTEs of the statement's WITH clause.
_CTE_SEPARATOR = ",\n    "


def hits_statement(
    perspective: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> tuple[str, dict[str, object]]:
    """The history statement and its parameters (the scope included): what
    ``history_read`` runs, and what the benchmark times as the perspective floor.

    ``matches`` is every match within the caller's filters, classified in one pass over the
    projection (no message rows read); ``excluded`` counts the first ``EXCLUSION_SCAN`` of them
    by reason; ``match_speakers`` finds the participants the query names; ``weights`` turns
    the eligible ones' term frequencies into rarities; ``partial`` scores them on their own
    words, speaker and signals; ``pool`` … ``receivers`` add the context of their
    surroundings (``history.context``); ``candidates`` scores every receiver on everything but
    closeness; ``leaders`` and ``contenders`` add closeness where it can matter; ``page`` reads
    the best from the canonical messages and checks every rule again; ``nearby`` finds their
    neighbours. One result set answers all of it, tagged by ``kind``.

    Every CTE that holds a row per match, or an aggregate of them, is ``MATERIALIZED``: the
    planner estimates a prefix, or a word without statistics, at a handful of matches, and an
    inlined aggregate is then recomputed once per match (quadratic; ``test_broad_matches``).
    """
    ctes = [
        scope_ctes(),
        matches.requester_rooms_cte(),
        matches.matches_cte(query, filters),
        matches.excluded_cte(),
        matches.match_speakers_cte(query),
        matches.weights_cte(query),
        matches.partial_cte(query),
        context.pool_cte(),
        context.windows_cte(),
        context.window_words_cte(query),
        context.receivers_cte(),
        context.receiver_speakers_cte(query),
        context.candidates_cte(query, filters),
        page.leaders_cte(),
        page.floor_cte(),
        page.contenders_cte(),
        page.ranked_cte(),
        page.page_cte(),
        page.nearby_cte(),
    ]
    sql = f"""
    WITH {_CTE_SEPARATOR.join(ctes)}
    {page.answer()}
    """
    return sql, _params(perspective, query, filters, limit=limit, now=now)


def _params(
    perspective: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
) -> dict[str, object]:
    """The statement's parameters, each group from the part of it that reads them (their
    prefixes: docs/design.md); ``merge_params`` refuses a name two groups would bind."""
    start, stop = highlight_markers()
    return merge_params(
        perspective.params(),
        {"p_run": perspective.run_id},
        {"config": query.config, "q_any": query.tsquery},
        {f"q_t{i}": query.term(i) for i in range(len(query.terms))},
        ranking.closeness_params(query),
        matches.filter_params(filters),
        matches.exclusion_params(),
        context.context_params(),
        {"r_now": now, "r_fetch": limit + RECHECK_MARGIN, "r_limit": limit},
        {"h_options": f"HighlightAll=true, StartSel={start}, StopSel={stop}"},
    )
