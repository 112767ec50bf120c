"""The hits statement's inputs: the query's terms, how each one's newest matches are found,
and the span of time the agent's eligible messages can lie in.

A search ranks a bounded set of candidates: each term's newest ``TERM_CANDIDATES`` eligible
matches (all of them when it has fewer), found without reading the others (docs/search.md,
"Bounded work"). How a term's are found is its *route*, chosen here from how often its lexemes
occur in the whole projection (PostgreSQL's own column statistics, ``pg_stats``):

- ``all``: a word rarer than any of the column's most common lexemes (or any word, while the
  table has no statistics): every match of every such term, in one scan of the GIN index over
  the agent's time buckets;
- ``buckets``: a frequent word, read through the same index bucket by bucket, newest first,
  until it has enough;
- ``slices``: a word in at least ``WALK_SHARE`` of all documents, read by walking the agent's
  rooms newest first through the timeline index, in slices of time that double.

A walk can change route on its way, never what it finds: slices that have not found enough
after ``WALK_SLICES`` go on through the buckets, and a bucket walk that has read
``BUCKET_READ`` matches (a flood, most of it withheld, or statistics that called the word
rarer than it is) reads no more: the term is walked through the rooms instead (``rooms``:
slices that never go back to the buckets), which read only what the agent was in.

A route decides only what the search reads, never what it finds: each one yields exactly the
term's newest eligible matches, so the statistics (which count every message, withheld ones
too) can move the cost of a search but never its hits, their order or their scores.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from functools import cache
from threading import Lock

from django.db import connection

from formation.sql import table
from messages_app.models import Message
from search_app.history import ranking
from search_app.models import MessageSearchDocument
from search_app.perspective import observed_by
from search_app.query.parse import Term, TermQuery

ALL, BUCKETS, SLICES, ROOMS = "all", "buckets", "slices", "rooms"
# Eligible matches a term keeps as candidates; one more is read to know whether it has more.
TERM_CANDIDATES = 128
# The most matches the one scan of the ``all`` terms reads: past that, they are walked, through
# the rooms if at least OVERFLOW_SHARE of what it read holds the term, else through the buckets.
RARE_READ = 2_000
OVERFLOW_SHARE = 0.1
# The most matches a walk through the buckets reads: past that (a flood of matches the agent
# may not see, or a word denser than its statistics say) it goes on through the rooms.
BUCKET_READ = 4_000
# A word in at least this share of all documents is walked through the agent's rooms: its
# matches are dense enough that reading the rooms' newest messages finds them soonest.
WALK_SHARE = 0.03
# A phrase matches where its words stand together: fewer documents than its rarest word.
PHRASE_SHARE = 0.25
# How long the process keeps the column's statistics (they move only when ANALYZE runs).
STATISTICS_SECONDS = 300.0
# The first slice of a walk, back from the newest eligible message; each next one is twice as
# long. After WALK_SLICES slices without enough matches a walk goes on through the buckets.
FIRST_SLICE = "10 minutes"
WALK_SLICES = 20


@dataclass(frozen=True)
class Frequencies:
    """The projection's most common lexemes with the share of documents each is in."""

    shares: dict[str, float]

    def share(self, term: Term) -> float | None:
        """The estimated share of documents ``term`` matches, or None when it is rarer than
        every common lexeme (or the table has no statistics)."""
        found = []
        for lexeme, prefix in zip(term.lexemes, term.prefixes, strict=True):
            if prefix:
                shares = [
                    share for common, share in self.shares.items() if common.startswith(lexeme)
                ]
                found.append(min(sum(shares), 1.0) if shares else None)
            else:
                found.append(self.shares.get(lexeme))
        if any(share is None for share in found):
            return None
        least = min(found)
        return least * PHRASE_SHARE if len(found) > 1 else least


_STATISTICS = f"""
    SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs
    FROM pg_stats AS s
    WHERE s.schemaname = current_schema() AND s.tablename = '{table(MessageSearchDocument)}'
      AND s.attname = 'document'
"""
# On Citus the coordinator's table is an empty shell without statistics: the workspace's shard
# has them, on its worker, where one command asks for them (``master_run_on_worker``, as JSON).
_SHARD_STATISTICS = f"""
    WITH shard AS (
        SELECT n.nodename, n.nodeport,
               '{table(MessageSearchDocument)}_' || s.shardid AS name
        FROM pg_dist_shard AS s
        JOIN pg_dist_placement AS p ON p.shardid = s.shardid
        JOIN pg_dist_node AS n ON n.groupid = p.groupid AND n.isactive
        WHERE s.shardid = get_shard_id_for_distribution_column(
            '{table(MessageSearchDocument)}', %s::uuid)
        LIMIT 1
    )
    SELECT r.result
    FROM shard, master_run_on_worker(
        ARRAY[shard.nodename], ARRAY[shard.nodeport],
        ARRAY[format($$SELECT json_build_array(s.most_common_elems::text::text[],
                                               s.most_common_elem_freqs)
                       FROM pg_stats AS s
                       WHERE s.schemaname = current_schema() AND s.tablename = %%L
                         AND s.attname = 'document'$$, shard.name)],
        false) AS r
    WHERE r.success
"""
_cached: dict[tuple[str, object], tuple[float, Frequencies]] = {}
_cached_lock = Lock()


def frequencies(workspace_id: object = None) -> Frequencies:
    """The column's statistics, read again every ``STATISTICS_SECONDS`` (one small statement
    per process then, none in between); on Citus those of ``workspace_id``'s shard (none
    without it: every term then takes the ``all`` route, which hands over to the walks when
    it overflows)."""
    citus = connection.is_citus
    key = (connection.settings_dict["NAME"], workspace_id if citus else None)
    now = time.monotonic()
    with _cached_lock:
        found = _cached.get(key)
    if found is not None and now - found[0] < STATISTICS_SECONDS:
        return found[1]
    row = None
    if not citus:
        with connection.cursor() as cursor:
            cursor.execute(_STATISTICS)
            row = cursor.fetchone()
    elif workspace_id is not None:
        with connection.cursor() as cursor:
            cursor.execute(_SHARD_STATISTICS, [workspace_id])
            answered = cursor.fetchone()
        row = json.loads(answered[0]) if answered and answered[0] else None
    shares: dict[str, float] = {}
    if row is not None and row[0] is not None:
        # The last three frequencies are the least, the greatest and the null share.
        shares = dict(zip(row[0], row[1][: len(row[0])], strict=True))
    result = Frequencies(shares)
    with _cached_lock:
        # On Citus a key is a workspace: what has expired goes, so the cache holds the
        # workspaces searched in the last STATISTICS_SECONDS, not every one ever searched.
        for stale in [k for k, (at, _) in _cached.items() if now - at >= STATISTICS_SECONDS]:
            del _cached[stale]
        _cached[key] = (now, result)
    return result


def forget_frequencies() -> None:
    """Read the statistics again on the next search (tests, after ANALYZE)."""
    with _cached_lock:
        _cached.clear()


def routes(query: TermQuery, known: Frequencies) -> tuple[str, ...]:
    """Each term's route (see the module docstring)."""
    found = []
    for term in query.terms:
        share = known.share(term)
        if share is None:
            found.append(ALL)
        elif share < WALK_SHARE:
            found.append(BUCKETS)
        else:
            found.append(SLICES)
    return tuple(found)


def term_params(query: TermQuery, chosen: tuple[str, ...]) -> dict[str, object]:
    """The terms, their routes, the OR of the ``all`` terms (NULL without one) and the bounds."""
    rare = [term.operand for term, route in zip(query.terms, chosen, strict=True) if route == ALL]
    return {
        **{f"q_route{i}": route for i, route in enumerate(chosen)},
        "q_rare": " | ".join(rare) if rare else None,
        "c_keep": TERM_CANDIDATES,
        "c_rare_read": RARE_READ,
        "c_bucket_read": BUCKET_READ,
        "c_overflow_dense": max(1, round(RARE_READ * OVERFLOW_SHARE)),
        "c_read": TERM_CANDIDATES + 1,
        "c_first_slice": FIRST_SLICE,
        "c_slices": WALK_SLICES,
    }


def terms_cte(query: TermQuery) -> str:
    """Each term, its tsquery and its route, one row per term."""
    rows = ", ".join(
        f"({i}, %(q_t{i})s::tsquery, %(q_route{i})s::text)" for i in range(len(query.terms))
    )
    return f"""terms AS MATERIALIZED (
        SELECT * FROM (VALUES {rows}) AS t(term, query, route)
        WHERE (SELECT searching FROM state)
    )"""


@cache
def extent_cte() -> str:
    """Where the agent's eligible messages within the caller's time filters can lie: after the
    earliest moment the agent joined a permitted room and ``after``, and before ``before``.
    ``oldest``/``newest`` bound the walks through the rooms, ``bottom``/``top`` the buckets.

    A walk through the rooms starts at the newest live message of the agent's own intervals
    (one step back through each room's timeline index), so messages it may not see never widen
    its slices, however many and however new (a flood in a room it never joined). The buckets
    end at the workspace's newest live message while the agent is still in a room (the last
    time it left one otherwise): a rare word's one scan reads, and counts for the audit, the
    withheld matches newer than anything the agent may see too, within its bound."""
    newest_seen = f"""(SELECT max(seen.created_at)
                       FROM observed_intervals AS o
                       CROSS JOIN LATERAL (
                           SELECT m.created_at FROM {table(Message)} AS m
                           WHERE m.workspace_id = %(p_workspace)s
                             AND {observed_by("o", "m")}
                             AND m.deleted_at IS NULL
                           ORDER BY m.created_at DESC, m.seq DESC LIMIT 1
                       ) AS seen)"""
    newest_kept = f"""CASE WHEN EXISTS (SELECT 1 FROM observed_intervals WHERE left_at IS NULL)
                           THEN (SELECT max(newest.created_at)
                                 FROM {table(Message)} AS newest
                                 WHERE newest.workspace_id = %(p_workspace)s
                                   AND newest.deleted_at IS NULL)
                           ELSE (SELECT max(left_at) FROM observed_intervals) END"""
    return f"""extent AS MATERIALIZED (
        SELECT e.oldest, e.newest, formation_search_bucket_number(e.oldest) AS bottom,
               formation_search_bucket_number(e.last) AS top
        FROM (
            SELECT GREATEST((SELECT min(joined_at) FROM observed_intervals),
                            %(f_after)s::timestamptz) AS oldest,
                   LEAST({newest_seen}, %(f_before)s::timestamptz) AS newest,
                   LEAST({newest_kept}, %(f_before)s::timestamptz) AS last
            WHERE (SELECT searching FROM state)
        ) AS e
    )"""


@cache
def bucket_keys_cte() -> str:
    """The index keys of every bucket of the extent, for the ``all`` route's one scan."""
    return """bucket_keys AS MATERIALIZED (
        SELECT ARRAY(
            SELECT formation_search_bucket_key(%(p_workspace)s, number)
            FROM extent CROSS JOIN generate_series(extent.bottom, extent.top) AS number
        ) AS keys
    )"""


def term_columns(query: TermQuery, document: str) -> str:
    """Each term's saturated frequency in ``document``, as columns ``t0`` … ``tN``."""
    return ", ".join(
        f"{ranking.term_frequency(query, i, document)} AS t{i}" for i in range(len(query.terms))
    )
