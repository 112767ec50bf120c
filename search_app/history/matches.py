"""The hits statement's first stage: the search's matches, read from the projection once.

``matches`` classifies every match within the caller's filters by
``perspective.exclusion_reason`` (no message rows read); ``excluded`` counts the first
``EXCLUSION_SCAN`` of them by reason for the audit; ``match_speakers`` finds the participants
the query names; ``weights`` turns the eligible matches' term frequencies into rarities; and
``partial`` scores each eligible match on its own words, speaker and signals. Every CTE that
holds a row per match, or an aggregate of them, is ``MATERIALIZED`` (``statement``).
"""

from __future__ import annotations

from functools import cache

from formation.sql import literals, table
from messages_app.models import Account, Agent, Membership
from search_app.history import ranking
from search_app.history.results import HistoryFilters
from search_app.models import MessageSearchDocument
from search_app.perspective import counted_exclusion_reason, exclusion_reason, observed_join
from search_app.query.parse import TermQuery

# At most this many of a search's matches are classified for the audit's exclusion counts.
EXCLUSION_SCAN = 2_000
MORE_MATCHES = "more_matches"
# Reasons settled before a match's canonical message is looked up to tell a drifted one. A
# list of constants in the statement's text, not a parameter, so the plan can rely on it.
# A sender's name, from its account or agent row (joined as ``account`` and ``agent``).
SPEAKER_NAME = "COALESCE(account.display_name, agent.name)"


def filter_conditions(filters: HistoryFilters, row: str = "d") -> str:
    """The caller's filters, on row ``row`` (a projection row or a message: both carry the
    sender and time columns)."""
    conditions = []
    if filters.speaker == "requester":
        conditions.append(f"{row}.sender_account_id IN (SELECT account_id FROM requester_accounts)")
    elif filters.speaker == "you":
        conditions.append(f"{row}.sender_agent_id = %(p_agent)s")
    if filters.after is not None:
        conditions.append(f"{row}.created_at > %(f_after)s")
    if filters.before is not None:
        conditions.append(f"{row}.created_at < %(f_before)s")
    return "".join(f" AND {condition}" for condition in conditions)


def filter_params(filters: HistoryFilters) -> dict[str, object]:
    """What ``filter_conditions`` binds (the speaker filter reads the perspective's own)."""
    return {"f_after": filters.after, "f_before": filters.before}


def exclusion_params() -> dict[str, object]:
    """What ``excluded_cte`` binds: the size of the exclusion scan."""
    return {"x_scan": EXCLUSION_SCAN}


@cache
def requester_rooms_cte() -> str:
    """The conversations the requester is a current member of (the ``participation`` signal)."""
    return f"""requester_rooms AS MATERIALIZED (
        SELECT conversation_id FROM {table(Membership)}
        WHERE workspace_id = %(p_workspace)s AND account_id = %(p_requester)s
          AND left_at IS NULL
    )"""


def matches_cte(query: TermQuery, filters: HistoryFilters) -> str:
    """Every match within the caller's filters, classified in one pass over the projection; an
    eligible one carries each term's saturated frequency ``t<i>``, its length, room and sender
    (an excluded one only its reason: the rows are kept for the whole statement, so narrow)."""
    frequencies = "".join(
        f",\n               CASE WHEN classified.reason IS NULL THEN "
        f"{ranking.term_frequency(query, i, 'classified.document')} END AS t{i}"
        for i in range(len(query.terms))
    )
    eligible_only = "".join(
        f",\n               CASE WHEN classified.reason IS NULL THEN {value} END AS {name}"
        for name, value in (
            ("conversation_id", "classified.conversation_id"),
            ("sender_account_id", "classified.sender_account_id"),
            ("sender_agent_id", "classified.sender_agent_id"),
            ("document_length", "length(classified.document)"),
        )
    )
    return f"""matches AS MATERIALIZED (
        SELECT classified.id, classified.created_at, classified.reason {eligible_only}
               {frequencies}
        FROM (
            SELECT d.message_id AS id, d.conversation_id, d.created_at, d.sender_account_id,
                   d.sender_agent_id, d.document,
                   {exclusion_reason("d", projection=True)} AS reason
            FROM {table(MessageSearchDocument)} AS d
            {observed_join("d")}
            WHERE d.workspace_id = %(p_workspace)s AND d.document @@ %(q_any)s::tsquery
                  {filter_conditions(filters)}
        ) AS classified
    )"""


@cache
def excluded_cte() -> str:
    """The first ``EXCLUSION_SCAN`` matches by reason, a drifted projection row told by its
    canonical message (``deleted``), and whether more existed."""
    more = literals([MORE_MATCHES])
    return f"""excluded AS (
        SELECT {counted_exclusion_reason("x.reason", "x")} AS reason
        FROM (SELECT * FROM matches LIMIT %(x_scan)s) AS x
        UNION ALL
        SELECT {more} FROM (SELECT 1 FROM matches OFFSET %(x_scan)s LIMIT 1) AS more
    )"""


def speakers_cte(query: TermQuery, name: str, rows: str) -> str:
    """CTE ``name``: the senders of ``rows`` whose names hold a query term, with the terms they
    hold. Every row read is eligible, so these are participants the query names among those
    the agent may see."""
    named = "".join(
        f", name.document @@ %(q_t{i})s::tsquery AS n{i}" for i in range(len(query.terms))
    )
    return f"""{name} AS MATERIALIZED (
        SELECT sender.account_id, sender.agent_id {named}
        FROM (SELECT DISTINCT sender_account_id AS account_id, sender_agent_id AS agent_id
              FROM {rows}) AS sender
        LEFT JOIN {table(Account)} AS account
          ON account.workspace_id = %(p_workspace)s AND account.id = sender.account_id
        LEFT JOIN {table(Agent)} AS agent
          ON agent.workspace_id = %(p_workspace)s AND agent.id = sender.agent_id
        CROSS JOIN LATERAL (
            SELECT formation_search_document(%(config)s::regconfig,
                                             {SPEAKER_NAME})
                AS document
        ) AS name
        WHERE name.document @@ %(q_any)s::tsquery
    )"""


def match_speakers_cte(query: TermQuery) -> str:
    """The participants the query names among the eligible matches' senders."""
    return speakers_cte(query, "match_speakers", "matches WHERE reason IS NULL")


def weights_cte(query: TermQuery) -> str:
    """Each term's rarity over this search's eligible matches, and their average length.

    A term that names a participant (``match_speakers``) is a wish for that speaker, scored by
    the ``speaker`` component, so its rarity counts nothing for the words; unless every term
    that matched is a name, when the words are all there is to rank by."""
    terms = range(len(query.terms))
    frequencies = ", ".join(f"count(*) FILTER (WHERE t{i} > 0)::float8 AS df{i}" for i in terms)
    names = ", ".join(f"COALESCE(bool_or(n{i}), false) AS named{i}" for i in terms)
    plain = ", ".join(f"f.df{i} > 0 AND NOT n.named{i} AS plain{i}" for i in terms)
    any_plain = " OR ".join(f"plain{i}" for i in terms)
    rarities = ", ".join(
        f"CASE WHEN df{i} > 0 AND (plain{i} OR NOT ({any_plain})) "
        f"THEN ln(1 + matches / df{i}) ELSE 0 END AS w{i}"
        for i in terms
    )
    return f"""weights AS MATERIALIZED (
        SELECT average_length, {rarities}
        FROM (
            SELECT f.*, {plain}
            FROM (SELECT count(*)::float8 AS matches,
                         avg(document_length)::float8 AS average_length, {frequencies}
                  FROM matches WHERE reason IS NULL) AS f
            CROSS JOIN (SELECT {names} FROM match_speakers) AS n
        ) AS counted
    )"""


def partial_cte(query: TermQuery) -> str:
    """The eligible matches with their wording, speaker and signals (context comes later)."""
    return f"""partial AS MATERIALIZED (
        SELECT s.*, {ranking.own_score("s")} AS own_score
        FROM (
            SELECT e.id, e.created_at, {ranking.signals("e", "e.conversation_id")},
                   {ranking.wording(query, "e")} AS wording, 0 AS context,
                   ({ranking.matched_terms(query, "e")}) AS matched_terms,
                   {ranking.NAMED_SPEAKER} AS speaker
            FROM matches AS e CROSS JOIN weights AS w
            {ranking.speaker_joins("e", "match_speakers")}
            WHERE e.reason IS NULL
        ) AS s
    )"""
