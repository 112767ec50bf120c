"""The hits statement's second stage: each term's newest eligible matches, the candidates.

Every term keeps its newest ``terms.TERM_CANDIDATES`` eligible matches (newest by time, then
id), and one more is read to know whether it has more. They are found by the term's route
(``terms``), each of which reads only what it needs:

- ``rare_matches``: the terms routed ``all``, every match of them, in one scan of the bucket
  index over every bucket of the agent's extent, which reads at most ``RARE_READ`` matches
  (``rare_overflow``: past that the terms are walked through the rooms instead);
- ``walk``: the other terms, step by step: a bucket of the index (newest first) or a slice of
  the agent's rooms read through the timeline index (slices double, newest first), until a term
  has one match more than it keeps, or its extent ends. A walk of slices that has not found
  them after ``terms.WALK_SLICES`` slices goes on through the buckets from the newest; a bucket
  walk that reads ``BUCKET_READ`` matches stops there and the term is walked through the rooms
  from the newest, for good (``rooms``), so no path reads more than its bound, the term's
  matches or the agent's own rooms; ``walked`` is each term's rows from the route it ended on.

Each match read is classified by ``perspective.exclusion_reason`` (a slice reads only the
agent's own intervals, so only rules 4 and 5 can withhold there). ``examined`` is what the
search read, for the audit's counts (``excluded``: the first ``EXCLUSION_SCAN`` of it by
reason, ``exclusion_counts`` their counts); ``term_matches`` each term's eligible matches in
order; ``matches`` the candidates, with their documents' term frequencies, for the scoring that
follows. Every CTE holds a bounded
number of rows, so no plan of this stage can read more than its steps allow.
"""

from __future__ import annotations

from functools import cache

from formation.sql import literals, table
from messages_app.models import Account, Membership
from search_app.history.terms import ALL, BUCKETS, ROOMS, SLICES, term_columns
from search_app.models import MessageSearchDocument
from search_app.perspective import (
    counted_exclusion_reason,
    eligible_condition,
    exclusion_reason,
    observed_by,
    observed_join,
)
from search_app.query.parse import TermQuery

# At most this many of what a search read are classified for the audit's exclusion counts.
EXCLUSION_SCAN = 2_000
MORE_MATCHES = "more_matches"
# The participants the query names whose own messages are read as candidates, at most.
NAMED_PEOPLE = 4
# The most of their eligible messages read (newest first) and tested against the query's terms.
NAMED_READ = 2_000
# The columns of a match as the candidate CTEs carry it.
MATCH_COLUMNS = (
    "id",
    "conversation_id",
    "created_at",
    "sender_account_id",
    "sender_agent_id",
    "document",
    "reason",
)


def filter_conditions(row: str = "d", *, by_time: bool = False) -> str:
    """The caller's filters, on row ``row`` (a projection row or a message: both carry the
    sender and time columns); each one holds for every row when its parameter is NULL, so one
    statement serves every combination.

    The time bounds are index conditions only ``by_time`` (the walk through the rooms' timeline
    index, which they narrow): elsewhere they are written so that no index can take them, so
    that no plan reads the GIN index's matches through a timeline instead (a plan made while
    the tables were small did, reading every document of the workspace per step)."""
    after = f"{row}.created_at > COALESCE(%(f_after)s::timestamptz, '-infinity')"
    before = f"{row}.created_at < COALESCE(%(f_before)s::timestamptz, 'infinity')"
    times = f"AND {after} AND {before}" if by_time else f"AND ({after} AND {before}) IS TRUE"
    return f"""
        AND (%(f_speaker)s::text <> 'requester'
             OR {row}.sender_account_id IN (SELECT account_id FROM requester_accounts))
        AND (%(f_speaker)s::text <> 'you' OR {row}.sender_agent_id = %(p_agent)s)
        {times}"""


def filter_params(speaker: str, after: object, before: object) -> dict[str, object]:
    """What ``filter_conditions`` binds."""
    return {"f_speaker": speaker, "f_after": after, "f_before": before}


def named_params() -> dict[str, object]:
    """What ``named_people_cte`` and ``named_matches_cte`` bind: their bounds."""
    return {"c_named_people": NAMED_PEOPLE, "c_named_read": NAMED_READ}


@cache
def named_people_cte() -> str:
    """The participants the query names (as the ``speaker`` signal tells them: a query term in
    their name), among the accounts that were ever members of the agent's observed rooms, at
    most ``NAMED_PEOPLE`` (by id: no message decides which)."""
    return f"""named_people AS MATERIALIZED (
        SELECT a.id AS account_id
        FROM {table(Account)} AS a
        WHERE a.workspace_id = %(p_workspace)s AND (SELECT searching FROM state)
          AND a.id IN (SELECT mb.account_id FROM {table(Membership)} AS mb
                       WHERE mb.workspace_id = %(p_workspace)s AND mb.account_id IS NOT NULL
                         AND mb.conversation_id IN (SELECT conversation_id
                                                    FROM observed_intervals))
          AND formation_search_document(%(config)s::regconfig, a.display_name)
              @@ %(q_any)s::tsquery
        ORDER BY a.id
        LIMIT %(c_named_people)s
    )"""


@cache
def named_matches_cte() -> str:
    """The named participants' own matches: their newest ``NAMED_READ`` eligible messages
    (read through the sender index, one probe per person and interval of the agent, each
    reading only that interval and stopping at ``NAMED_READ`` eligible rows), each tested
    against the query's terms. Only the agent's intervals are read (``observed_by``, rule 1's
    one spelling; the ``COALESCE`` bound beside it says the interval's end again in a form the
    sender index can start a scan from) and rules 4 and 5 are tested before the bound counts a
    row, so no withheld message takes an eligible one's place."""
    return f"""named_matches AS MATERIALIZED (
        SELECT r.id, r.conversation_id, r.created_at, r.sender_account_id, r.sender_agent_id,
               r.document, NULL::text AS reason
        FROM (
            SELECT x.* FROM named_people AS p
            CROSS JOIN observed_intervals AS d_observed
            CROSS JOIN LATERAL (
                SELECT d.message_id AS id, d.conversation_id, d.created_at,
                       d.sender_account_id, d.sender_agent_id, d.document
                FROM {table(MessageSearchDocument)} AS d
                WHERE d.workspace_id = %(p_workspace)s
                  AND d.sender_account_id = p.account_id
                  AND {observed_by("d_observed", "d")}
                  AND d.created_at < COALESCE(d_observed.left_at, 'infinity')
                  AND {eligible_condition("d", projection=True)}
                  {filter_conditions("d", by_time=True)}
                ORDER BY d.created_at DESC, d.message_id DESC
                LIMIT %(c_named_read)s
            ) AS x
            ORDER BY x.created_at DESC, x.id DESC
            LIMIT %(c_named_read)s
        ) AS r
        WHERE ts_match_vq(r.document, %(q_any)s::tsquery)
    )"""


def exclusion_params() -> dict[str, object]:
    """What ``excluded_cte`` binds: the size of the exclusion scan."""
    return {"x_scan": EXCLUSION_SCAN}


def _classified(alias: str, *, every_document: bool = False) -> str:
    """A match's columns from projection row ``alias``, its document only when it is eligible
    (a withheld one is only counted) unless ``every_document``."""
    reason = exclusion_reason(alias, projection=True)
    document = (
        f"{alias}.document"
        if every_document
        else f"CASE WHEN {reason} IS NULL THEN {alias}.document END"
    )
    return f"""{alias}.message_id AS id, {alias}.conversation_id, {alias}.created_at,
               {alias}.sender_account_id, {alias}.sender_agent_id, {document} AS document,
               {reason} AS reason"""


@cache
def rare_matches_cte() -> str:
    """Every match of the ``all`` terms, in one scan of the bucket index over the extent."""
    return f"""rare_matches AS MATERIALIZED (
        SELECT {_classified("d", every_document=True)}
        FROM {table(MessageSearchDocument)} AS d
        {observed_join("d")}
        WHERE %(q_rare)s::tsquery IS NOT NULL AND (SELECT searching FROM state)
          AND formation_search_bucket(d.workspace_id, d.created_at)
              = ANY ((SELECT keys FROM bucket_keys)::bigint[])
          AND d.workspace_id = %(p_workspace)s AND d.document @@ %(q_rare)s::tsquery
          {filter_conditions("d")}
        LIMIT %(c_rare_read)s
    )"""


@cache
def rare_overflow_cte() -> str:
    """Whether the ``all`` terms had more matches than that scan reads (their statistics were
    stale, or called them rarer than they are): then they are walked instead, and what it read
    is dropped, so no route reads more than its bound. A term in at least ``OVERFLOW_SHARE`` of
    what it read walks the rooms (it is dense), any other the buckets."""
    return """rare_overflow AS MATERIALIZED (
        SELECT count(*) >= %(c_rare_read)s AS overflow FROM rare_matches
    )"""


# The rows of ``rare_matches`` the search keeps: all of them, unless the scan overflowed.
_RARE_KEPT = "rare_matches WHERE NOT (SELECT overflow FROM rare_overflow)"


def _bucket_step() -> str:
    """Step ``s.step`` of a bucket walk: the term's matches in the ``s.step``-th bucket back
    from the newest, through the bucket index, no more than what is left of the walk's
    ``BUCKET_READ`` (a walk that reads them all goes on through the rooms)."""
    return f"""(SELECT false AS carrier, {_classified("d")}
            FROM {table(MessageSearchDocument)} AS d
            {observed_join("d")}
            WHERE s.route = {literals([BUCKETS])}
              AND formation_search_bucket(d.workspace_id, d.created_at)
                  = formation_search_bucket_key(%(p_workspace)s,
                                                (SELECT top FROM extent) - s.step)
              AND d.workspace_id = %(p_workspace)s AND d.document @@ s.query
              {filter_conditions("d")}
            LIMIT %(c_bucket_read)s - s.read)"""


# Slice ``s.step`` of a walk through the rooms: ``(newest - first (2^(k+1) - 1),
# newest - first (2^k - 1)]``, the first one ending at the newest eligible moment.
_SLICE_END = "(SELECT newest FROM extent) - %(c_first_slice)s::interval * (2 ^ s.step - 1)"
_SLICE_START = "(SELECT newest FROM extent) - %(c_first_slice)s::interval * (2 ^ (s.step + 1) - 1)"


def _slice_step() -> str:
    """Step ``s.step`` of a walk through the rooms: each of the agent's intervals in the slice,
    read through the timeline index, and the term tested on each row (``ts_match_vq``, the
    operator's function, so that no plan takes the GIN index for it)."""
    return f"""SELECT false AS carrier, {_classified("d")}
            FROM observed_intervals AS d_observed
            JOIN {table(MessageSearchDocument)} AS d
              ON d.workspace_id = %(p_workspace)s
             AND {observed_by("d_observed", "d")}
             AND d.created_at > {_SLICE_START}
             AND d.created_at <= {_SLICE_END}
            WHERE s.route IN ({literals([SLICES, ROOMS])}) AND ts_match_vq(d.document, s.query)
              {filter_conditions("d", by_time=True)}"""


@cache
def walk_cte() -> str:
    """The ``buckets`` and ``slices`` terms, walked step by step (a recursive CTE): each step
    answers the rows it read and one *carrier* row with the state of the walk (its route, step
    and how many eligible matches it has, and matches it read), from which the next step goes
    on, until the term has ``c_read`` of them or its extent ends. The route changes at most
    twice, slices to buckets to rooms, each time from the newest again."""
    nulls = ", ".join(
        f"NULL::{kind}"
        for kind in ("uuid", "uuid", "timestamptz", "uuid", "uuid", "tsvector", "text")
    )
    ended = f"""CASE s.route
        WHEN {literals([BUCKETS])}
            THEN (SELECT top FROM extent) - s.step <= (SELECT bottom FROM extent)
        ELSE {_SLICE_START} <= (SELECT oldest FROM extent) END"""
    switching = f"""(x.carrier AND s.route = {literals([SLICES])} AND NOT ({ended})
                     AND s.step + 1 >= %(c_slices)s AND s.found + x.in_step < %(c_read)s)"""
    flooded = f"""(x.carrier AND s.route = {literals([BUCKETS])}
                   AND s.read + x.read_in_step >= %(c_bucket_read)s)"""
    restarting = f"({switching} OR {flooded})"
    columns = ", ".join(f"x.{column}" for column in MATCH_COLUMNS)
    return f"""walk (iteration, term, query, route, step, found, read, done, carrier,
                   {", ".join(MATCH_COLUMNS)}) AS (
        SELECT 0, t.term, t.query,
               CASE WHEN t.route <> {literals([ALL])} THEN t.route
                    WHEN (SELECT count(*) FILTER (WHERE r.document @@ t.query)
                          FROM rare_matches AS r) >= %(c_overflow_dense)s
                    THEN {literals([SLICES])}
                    ELSE {literals([BUCKETS])} END,
               0, 0::bigint, 0::bigint, false, true, {nulls}
        FROM terms AS t
        WHERE t.route <> {literals([ALL])} OR (SELECT overflow FROM rare_overflow)
        UNION ALL
        SELECT s.iteration + 1, s.term, s.query,
               CASE WHEN {switching} THEN {literals([BUCKETS])}
                    WHEN {flooded} THEN {literals([ROOMS])} ELSE s.route END,
               CASE WHEN {restarting} THEN 0 ELSE s.step + 1 END,
               CASE WHEN {restarting} THEN 0 ELSE s.found + x.in_step END,
               CASE WHEN {restarting} THEN 0 ELSE s.read + x.read_in_step END,
               x.carrier AND NOT {restarting} AND ({ended}),
               x.carrier, {columns}
        FROM walk AS s
        CROSS JOIN LATERAL (
            SELECT r.*, count(*) FILTER (WHERE NOT r.carrier AND r.reason IS NULL) OVER ()
                       AS in_step,
                   count(*) FILTER (WHERE NOT r.carrier) OVER () AS read_in_step
            FROM (
                {_bucket_step()}
                UNION ALL
                {_slice_step()}
                UNION ALL
                SELECT true, {nulls}
            ) AS r
        ) AS x
        WHERE s.carrier AND NOT s.done AND s.found < %(c_read)s
    )"""


@cache
def walked_cte() -> str:
    """Each walked term's rows from the route its walk ended on (a walk that went on from
    slices to buckets read those slices' matches again)."""
    columns = ", ".join(f"w.{column}" for column in MATCH_COLUMNS)
    return f"""walked AS MATERIALIZED (
        SELECT w.term, {columns}
        FROM walk AS w
        JOIN (SELECT DISTINCT ON (term) term, route FROM walk
              WHERE carrier ORDER BY term, iteration DESC) AS ended
          ON ended.term = w.term AND ended.route = w.route
        WHERE NOT w.carrier
    )"""


@cache
def examined_cte() -> str:
    """Every match the search read, once each, with why it is withheld (NULL: eligible)."""
    return f"""examined AS MATERIALIZED (
        SELECT DISTINCT ON (e.id) e.id, e.reason
        FROM (SELECT id, reason FROM {_RARE_KEPT} UNION ALL SELECT id, reason FROM walked) AS e
        ORDER BY e.id
    )"""


@cache
def excluded_cte() -> str:
    """The first ``EXCLUSION_SCAN`` matches read by reason, a drifted projection row told by
    its canonical message (``deleted``), and whether more were read."""
    more = literals([MORE_MATCHES])
    return f"""excluded AS MATERIALIZED (
        SELECT {counted_exclusion_reason("x.reason", "x")} AS reason
        FROM (SELECT * FROM examined LIMIT %(x_scan)s) AS x
        UNION ALL
        SELECT {more} FROM (SELECT 1 FROM examined OFFSET %(x_scan)s LIMIT 1) AS more
    )"""


@cache
def exclusion_counts_cte() -> str:
    """``excluded`` counted by reason, once, for the audit event and the metrics."""
    return """exclusion_counts AS MATERIALIZED (
        SELECT reason, count(*) AS matches FROM excluded
        WHERE reason IS NOT NULL GROUP BY reason
    )"""


@cache
def term_matches_cte() -> str:
    """Each term's eligible matches, newest first (``place``), and how many it has
    (``eligible``: exact when it has no more than it keeps)."""
    return f"""term_matches AS MATERIALIZED (
        SELECT m.term, m.id, m.created_at,
               row_number() OVER (PARTITION BY m.term ORDER BY m.created_at DESC, m.id DESC)
                   AS place,
               count(*) OVER (PARTITION BY m.term) AS eligible
        FROM (
            SELECT t.term, r.id, r.created_at
            FROM terms AS t
            JOIN rare_matches AS r
              ON t.route = {literals([ALL])} AND r.reason IS NULL AND r.document @@ t.query
             AND NOT (SELECT overflow FROM rare_overflow)
            UNION ALL
            SELECT w.term, w.id, w.created_at FROM walked AS w WHERE w.reason IS NULL
        ) AS m
    )"""


@cache
def term_counts_cte() -> str:
    """Per term: its eligible matches (as many as it keeps, plus one, at most, for a walked
    one) and, for one with more than it keeps, the time of the last it keeps (its cut)."""
    return """term_counts AS MATERIALIZED (
        SELECT term, max(eligible) AS eligible,
               max(created_at) FILTER (WHERE place = %(c_keep)s) AS cut
        FROM term_matches GROUP BY term
    )"""


def matches_cte(query: TermQuery) -> str:
    """The candidates: each term's kept matches, once each, with their length and every
    term's saturated frequency ``t<i>`` in their document."""
    columns = ", ".join(f"{column}" for column in MATCH_COLUMNS)
    return f"""matches AS MATERIALIZED (
        SELECT c.id, c.created_at, NULL::text AS reason, c.conversation_id,
               c.sender_account_id, c.sender_agent_id, length(c.document) AS document_length,
               {term_columns(query, "c.document")}
        FROM (
            SELECT DISTINCT ON (f.id) f.*
            FROM (SELECT k.* FROM (SELECT {columns} FROM {_RARE_KEPT} AND reason IS NULL
                                   UNION ALL
                                   SELECT {columns} FROM walked WHERE reason IS NULL) AS k
                  WHERE k.id IN (SELECT id FROM term_matches WHERE place <= %(c_keep)s)
                  UNION ALL
                  SELECT {columns} FROM named_matches) AS f
            ORDER BY f.id
        ) AS c
    )"""
