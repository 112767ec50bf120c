"""``hits_statement``: search_history's one statement, its stages in the order they run.

One statement does the whole call: it locks the run and reads its scope (``run``), finds each
term's newest eligible matches (``terms``, ``candidates``), scores them on their own words
(``matches``) and their surroundings (``context``), reads the page from the canonical messages
and checks every rule there again, with the hits' neighbours (``page``), takes what fits the
evidence budget (``spend``), records the evidence and the audit event (``record``) and answers
it all as one result set (``answer``). It embeds the perspective's scope and rule fragments and
only narrows what they allow.

On a Citus coordinator the same statement, walks included, is routed whole to the
workspace's shard (one task, no intermediate result: every table it reads is narrowed to
``p_workspace``), except its two writes: Citus routes no ``INSERT`` inside a ``WITH``, so there
the statement answers what to record and ``record.write`` inserts it right after, in the same
transaction (``record.in_statement``). Citus plans it on every call (``formation.prepared``).

It runs as a prepared statement with a generic plan (``formation.prepared``): its text depends
only on the number of terms, every other choice (routes, filters, the budget) is a parameter,
so it is planned once per pooled connection and never again. Every stage reads a bounded number
of rows whatever the plan (``tests/search_app/test_plan_safety.py``).

Every CTE that holds a row per match, or an aggregate of them, is ``MATERIALIZED``: the planner
estimates a word without statistics at a handful of matches, and an inlined aggregate is then
recomputed once per row (quadratic; ``test_broad_matches``).
"""

from __future__ import annotations

from datetime import datetime

from audit_app.services import search_event_statement_parts
from formation.sql import merge_params
from search_app.history import (
    answer,
    candidates,
    context,
    matches,
    page,
    ranking,
    record,
    run,
    spend,
    terms,
)
from search_app.history.results import HistoryFilters
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
    routes: tuple[str, ...] | None = None,
    audit: tuple[str, dict[str, object]] | None = None,
) -> tuple[str, dict[str, object]]:
    """The history statement and its parameters: what ``history_read`` runs.

    ``routes`` are the terms' (``terms.routes``; by default from the column's statistics now);
    ``audit`` is ``audit_app``'s INSERT target and parameters for the call's event
    (``search_event_statement_parts``; by default for the query's terms, with no filters, as
    tests and benchmarks that run the statement alone record it).
    """
    if routes is None:
        routes = terms.routes(query, terms.frequencies(perspective.workspace_id))
    if audit is None:
        audit = search_event_statement_parts(query_text=query.tsquery, filters={})
    insert, audit_params = audit
    ctes = [
        run.run_ctes(),
        matches.requester_rooms_cte(),
        terms.terms_cte(query),
        terms.extent_cte(),
        terms.bucket_keys_cte(),
        candidates.rare_matches_cte(),
        candidates.rare_overflow_cte(),
        candidates.walk_cte(),
        candidates.walked_cte(),
        candidates.named_people_cte(),
        candidates.named_matches_cte(),
        candidates.examined_cte(),
        candidates.excluded_cte(),
        candidates.exclusion_counts_cte(),
        candidates.term_matches_cte(),
        candidates.term_counts_cte(),
        candidates.matches_cte(query),
        matches.match_speakers_cte(query),
        matches.weights_cte(query),
        matches.partial_cte(query),
        context.pool_cte(),
        context.windows_cte(),
        context.window_words_cte(query),
        context.receivers_cte(),
        context.receiver_speakers_cte(query),
        context.candidates_cte(query),
        page.leaders_cte(),
        page.floor_cte(),
        page.contenders_cte(),
        page.ranked_cte(),
        page.page_cte(),
        page.nearby_cte(),
        spend.hit_spend_cte(),
        spend.kept_hits_cte(),
        spend.offered_cte(),
        spend.taken_cte(),
        spend.left_out_cte(),
        record.page_scores_cte(),
        *record.recording_ctes(insert),
    ]
    sql = f"""
    WITH RECURSIVE {_CTE_SEPARATOR.join(ctes)}
    {answer.answer(recorded=record.in_statement())}
    """
    params = merge_params(
        _params(perspective, query, filters, limit=limit, now=now, routes=routes), audit_params
    )
    return sql, params


def _params(
    perspective: Perspective,
    query: TermQuery,
    filters: HistoryFilters,
    *,
    limit: int,
    now: datetime,
    routes: tuple[str, ...],
) -> dict[str, object]:
    """The statement's parameters, each group from the part of it that reads them (their
    prefixes: docs/design.md); ``merge_params`` refuses a name two groups would bind."""
    start, stop = highlight_markers()
    return merge_params(
        perspective.params(),
        {"p_run": perspective.run_id},
        run.run_params(),
        {"config": query.config, "q_any": query.tsquery},
        {f"q_t{i}": query.term(i) for i in range(len(query.terms))},
        terms.term_params(query, routes),
        ranking.closeness_params(query),
        candidates.filter_params(filters.speaker, filters.after, filters.before),
        candidates.exclusion_params(),
        candidates.named_params(),
        context.context_params(),
        {"r_now": now, "r_fetch": limit + RECHECK_MARGIN, "r_limit": limit},
        {
            "h_options": f"HighlightAll=true, StartSel={start}, StopSel={stop}",
            "h_query": query.highlight_tsquery,
        },
    )
