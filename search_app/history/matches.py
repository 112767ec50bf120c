"""The hits statement's third stage: the candidates scored on their own words.

``match_speakers`` finds the participants the query names among the candidates' senders;
``weights`` turns the candidates' term frequencies into rarities; and ``partial`` scores each
candidate on its own words, speaker and signals. Every CTE that holds a row per candidate, or an
aggregate of them, is ``MATERIALIZED`` (``statement``).

Rarity is BM25's: a term weighs ln(1 + N / df). When every term kept all its eligible matches,
N and df are counted exactly over them, as a search over every match would. A term with more
than it keeps (``candidates``) is estimated from what the search read: all candidates are
complete after the latest cut of such a term (the *window*), so N and its df are counted
there and scaled by how much larger the whole history is than the window for the terms that
kept all theirs (``(1 + their df) / (1 + their df in the window)``; 1 when none did). Only
eligible candidates are counted, so a withheld message moves no rarity.
"""

from __future__ import annotations

from formation.sql import table
from messages_app.models import Account, Agent, Membership
from search_app.history import ranking
from search_app.query.parse import TermQuery

# A sender's name, from its account or agent row (joined as ``account`` and ``agent``).
SPEAKER_NAME = "COALESCE(account.display_name, agent.name)"


def requester_rooms_cte() -> str:
    """The conversations the requester is a current member of (the ``participation`` signal)."""
    return f"""requester_rooms AS MATERIALIZED (
        SELECT conversation_id FROM {table(Membership)}
        WHERE workspace_id = %(p_workspace)s AND account_id = %(p_requester)s
          AND left_at IS NULL AND (SELECT searching FROM state)
    )"""


def speakers_cte(query: TermQuery, name: str, senders: str, known: str = "") -> str:
    """CTE ``name``: the senders that ``senders`` selects (``sender_account_id``,
    ``sender_agent_id``) whose names hold a query term, with the terms they hold, and the rows
    of CTE ``known``, which holds those of other senders already (their names are not read
    again). Every row read is eligible, so these are participants the query names among those
    the agent may see."""
    named = "".join(
        f", name.document @@ %(q_t{i})s::tsquery AS n{i}" for i in range(len(query.terms))
    )
    known_rows = f"SELECT * FROM {known} UNION ALL " if known else ""
    return f"""{name} AS MATERIALIZED (
        {known_rows}SELECT sender.account_id, sender.agent_id {named}
        FROM ({senders}) AS sender(account_id, agent_id)
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
    return speakers_cte(query, "match_speakers", MATCH_SENDERS)


# The distinct senders of the candidates.
MATCH_SENDERS = "SELECT DISTINCT sender_account_id, sender_agent_id FROM matches"


def weights_cte(query: TermQuery) -> str:
    """Each term's rarity over the candidates (exact, or estimated as the module says), and
    their average length.

    A term that names a participant (``match_speakers``) is a wish for that speaker, scored by
    the ``speaker`` component, so its rarity counts nothing for the words; unless every term
    that matched is a name, when the words are all there is to rank by."""
    terms = range(len(query.terms))
    counted = ", ".join(
        f"count(*) FILTER (WHERE t{i} > 0)::float8 AS all{i}, "
        f"count(*) FILTER (WHERE t{i} > 0 AND in_window)::float8 AS win{i}"
        for i in terms
    )
    kept_all = ", ".join(
        f"COALESCE(max(eligible) FILTER (WHERE term = {i}), 0) <= %(c_keep)s AS complete{i}"
        for i in terms
    )
    complete_all = " + ".join(f"CASE WHEN complete{i} THEN all{i} ELSE 0 END" for i in terms)
    complete_window = " + ".join(f"CASE WHEN complete{i} THEN win{i} ELSE 0 END" for i in terms)
    any_complete = " OR ".join(f"complete{i}" for i in terms)
    frequencies = ", ".join(
        f"CASE WHEN complete{i} THEN all{i} ELSE GREATEST(win{i} * scale, %(c_read)s) END AS df{i}"
        for i in terms
    )
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
            FROM (
                SELECT e.average_length,
                       GREATEST(e.in_window * e.scale, e.candidates) AS matches, {frequencies}
                FROM (
                    SELECT c.*, k.*, CASE WHEN {any_complete}
                                     THEN (1 + {complete_all}) / (1 + {complete_window})
                                     ELSE 1 END AS scale
                    FROM (
                        SELECT count(*)::float8 AS candidates,
                               count(*) FILTER (WHERE in_window)::float8 AS in_window,
                               avg(document_length)::float8 AS average_length, {counted}
                        FROM (SELECT m.*, cut.at IS NULL OR m.created_at > cut.at AS in_window
                              FROM matches AS m
                              CROSS JOIN (SELECT max(cut) AS at FROM term_counts) AS cut) AS m
                    ) AS c
                    CROSS JOIN (SELECT {kept_all} FROM term_counts) AS k
                ) AS e
            ) AS f
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
