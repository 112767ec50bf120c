"""The agent's perspective (SPEC §3): which messages a run may receive, as SQL predicates.

SECURITY INVARIANT: everything here only *narrows*. Each rule is a condition or an anti-join on
the canonical tables (memberships, identity links, lineage), evaluated by PostgreSQL inside the
same statement that reads the messages; nothing in this module ever adds a message to a result,
and nothing filters rows in Python after a fetch. search_history hits and their neighbours,
the audit's exclusion counts and the final delivery check (``exclusion_reason``) and memories
(``memory_eligible_condition``) all embed ``scope_ctes``, so the rules live here and nowhere
else.

A run fixes agent A, destination D and requester R. Message m in conversation S is eligible when

1. A observed m: some membership interval of A in S holds m.created_at (``[joined, left)``),
   and S is in A's workspace;
2. m is not deleted;
3. S's audience permits D (``permitted`` below);
4. every room m inherits permits D: the rooms of its lineage sources, transitively, and of the
   memories its run recalled (``MessageLineageRoom`` holds that closure);
5. m is neither the run's current message nor in its recent history.

Identity links only widen the narrow direct-to-direct continuity of rule 3, and only while live
(verified, not revoked); they never chain. Readerships, links and memberships are read once per
call, inside its transaction (``resolve_scope``), never cached across calls, so a link revoked or
a reader added a moment ago already counts.

Why hand-written SQL rather than the ORM: these rules nest four levels of correlated subqueries,
and compiling them through the ORM cost 20-50 ms per call, several times the query itself.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cached_property

from django.db import connection

from messages_app.models import (
    Account,
    Conversation,
    ConversationKind,
    IdentityLink,
    IdentityLinkStatus,
    Membership,
    Message,
    MessageLineageRoom,
    Run,
)
from search_app.models import MemoryLineage, MemoryRoom

ACCOUNTS = Account._meta.db_table
CONVERSATIONS = Conversation._meta.db_table
LINKS = IdentityLink._meta.db_table
MEMBERSHIPS = Membership._meta.db_table
MESSAGES = Message._meta.db_table
LINEAGE_ROOMS = MessageLineageRoom._meta.db_table
LIVE = IdentityLinkStatus.VERIFIED.value
MEMORY_LINEAGE = MemoryLineage._meta.db_table
MEMORY_ROOMS = MemoryRoom._meta.db_table
# Ends a correlated EXISTS so PostgreSQL keeps it a per-row probe of the row's own lineage.
# Without it the planner may hash the subquery instead: read every lineage row of the table
# once per statement (0.7 s on a million messages), to test a few candidates. (An OFFSET stops
# EXISTS from being rewritten into a hashed ANY or a join.)
PER_ROW = "OFFSET 0"


@dataclass(frozen=True)
class Perspective:
    """Who is asking, for which audience: everything the rules need, taken from the run."""

    workspace_id: uuid.UUID
    agent_id: uuid.UUID
    destination_id: uuid.UUID
    destination_kind: str
    requester_id: uuid.UUID
    current_message_id: uuid.UUID | None = None
    recent_message_ids: tuple[uuid.UUID, ...] = ()

    @classmethod
    def of_run(cls, run: Run) -> Perspective:
        return cls(
            workspace_id=run.workspace_id,
            agent_id=run.agent_id,
            destination_id=run.conversation_id,
            destination_kind=run.conversation.kind,
            requester_id=run.requester_id,
            current_message_id=run.current_message_id,
            recent_message_ids=tuple(run.recent_message_ids),
        )

    @property
    def in_prompt(self) -> list[uuid.UUID]:
        """Rule 5: the current message and the recent history the runtime already loaded."""
        current = [self.current_message_id] if self.current_message_id else []
        return [*current, *self.recent_message_ids]

    @cached_property
    def scope(self) -> dict[str, object]:
        """The scope arrays, read from the database on first use (``resolve_scope``)."""
        return resolve_scope(self)

    def params(self) -> dict[str, object]:
        """The named parameters every fragment of this module uses, the scope included."""
        return {**self.identity_params(), **self.scope}

    def identity_params(self) -> dict[str, object]:
        """Who asks, for which audience: the parameters ``resolve_scope`` needs."""
        return {
            "p_workspace": self.workspace_id,
            "p_agent": self.agent_id,
            "p_destination": self.destination_id,
            "p_requester": self.requester_id,
            "p_in_prompt": self.in_prompt,
            "p_current": self.current_message_id,
            "p_recent": list(self.recent_message_ids),
        }


def _destination_readers(p: Perspective) -> str:
    """D's readers: its current human members, or every account of a public D's workspace."""
    if p.destination_kind == ConversationKind.PUBLIC:
        return f"SELECT id AS account_id FROM {ACCOUNTS} WHERE workspace_id = %(p_workspace)s"
    return (
        f"SELECT account_id FROM {MEMBERSHIPS} WHERE conversation_id = %(p_destination)s "
        "AND account_id IS NOT NULL AND left_at IS NULL"
    )


def _same_person(account: str) -> str:
    """``account`` (a column or subquery) and the accounts joined to it by one live link."""
    return f"""
        SELECT {account} AS account_id
        UNION SELECT l.linked_account_id FROM {LINKS} AS l
              WHERE l.account_id = ({account}) AND l.status = '{LIVE}'
        UNION SELECT l.account_id FROM {LINKS} AS l
              WHERE l.linked_account_id = ({account}) AND l.status = '{LIVE}'
    """


def _permitted_condition(p: Perspective) -> str:
    """Rule 3 for conversation ``c``."""
    allowed = [f"c.kind = '{ConversationKind.PUBLIC.value}'"]
    current_reader = (
        f"SELECT 1 FROM {MEMBERSHIPS} AS s WHERE s.conversation_id = c.id "
        "AND s.account_id IS NOT NULL AND s.left_at IS NULL"
    )
    if p.destination_kind == ConversationKind.DIRECT:
        # S direct with exactly one current human reader, who is D's one reader or an account
        # joined to that reader by one live link. direct_reader is empty unless D has exactly
        # one reader, and then no S qualifies.
        allowed.append(
            f"""(c.kind = '{ConversationKind.DIRECT.value}'
                AND (SELECT count(DISTINCT s.account_id) FROM {MEMBERSHIPS} AS s
                     WHERE s.conversation_id = c.id AND s.account_id IS NOT NULL
                       AND s.left_at IS NULL) = 1
                AND EXISTS ({current_reader}
                            AND s.account_id IN (SELECT account_id FROM direct_continuity)))"""
        )
    if p.destination_kind != ConversationKind.UNKNOWN:
        # Every reader of D reads S now. An unknown D's readership satisfies no subset test.
        allowed.append(
            f"""(c.kind = '{ConversationKind.PRIVATE.value}'
                AND NOT EXISTS (
                    SELECT 1 FROM destination_readers AS r
                    WHERE NOT EXISTS ({current_reader} AND s.account_id = r.account_id)))"""
        )
    # `unknown` sources appear in no branch: withheld for every destination.
    return " OR ".join(allowed)


def _resolving_ctes(p: Perspective) -> str:
    """The scope computed from the canonical tables (see ``scope_ctes`` for the names)."""
    ctes = [f"destination_readers AS MATERIALIZED ({_destination_readers(p)})"]
    if p.destination_kind == ConversationKind.DIRECT:
        ctes.append(
            """direct_reader AS MATERIALIZED (
                SELECT min(account_id::text)::uuid AS account_id FROM destination_readers
                HAVING count(DISTINCT account_id) = 1
            )"""
        )
        ctes.append(
            "direct_continuity AS MATERIALIZED (SELECT account_id FROM ("
            + _same_person("(SELECT account_id FROM direct_reader)")
            + ") AS person WHERE account_id IS NOT NULL)"
        )
    ctes.append(
        f"""permitted AS MATERIALIZED (
            SELECT c.id FROM {CONVERSATIONS} AS c
            WHERE c.workspace_id = %(p_workspace)s AND ({_permitted_condition(p)})
        )"""
    )
    ctes.append(
        f"""sources AS MATERIALIZED (
            SELECT pc.id FROM permitted AS pc
            WHERE EXISTS (SELECT 1 FROM {MEMBERSHIPS} AS am
                          WHERE am.agent_id = %(p_agent)s AND am.conversation_id = pc.id)
        )"""
    )
    ctes.append(
        f"""observed_intervals AS MATERIALIZED (
            SELECT conversation_id, joined_at, left_at FROM {MEMBERSHIPS}
            WHERE agent_id = %(p_agent)s AND conversation_id IN (SELECT id FROM permitted)
        )"""
    )
    ctes.append(
        "requester_accounts AS MATERIALIZED (" + _same_person("%(p_requester)s::uuid") + ")"
    )
    ctes.append(
        f"""agent_rooms AS MATERIALIZED (
            SELECT DISTINCT conversation_id FROM {MEMBERSHIPS} WHERE agent_id = %(p_agent)s
        )"""
    )
    return ",\n".join(ctes)


SCOPE_QUERY = """
    WITH {ctes}
    SELECT ARRAY(SELECT id FROM permitted), ARRAY(SELECT id FROM sources),
           intervals.conversations, intervals.joined, intervals.left_at,
           ARRAY(SELECT account_id FROM requester_accounts WHERE account_id IS NOT NULL),
           ARRAY(SELECT conversation_id FROM agent_rooms)
    FROM (
        -- One scan feeds the three arrays, so element i of each is the same interval.
        SELECT coalesce(array_agg(conversation_id), '{{}}') AS conversations,
               coalesce(array_agg(joined_at), '{{}}') AS joined,
               coalesce(array_agg(left_at), '{{}}') AS left_at
        FROM observed_intervals
    ) AS intervals
"""


def resolve_scope(p: Perspective) -> dict[str, object]:
    """Read the perspective's scope from the canonical tables: one statement, per search.

    Memberships, links and readerships are read here, when a search (or a delivery check)
    first needs them, inside its transaction; every later statement of that call applies this
    same scope, so its hits, neighbours and counts agree, and nothing is cached beyond it.
    """
    with connection.cursor() as cursor:
        cursor.execute(SCOPE_QUERY.format(ctes=_resolving_ctes(p)), p.identity_params())
        row = cursor.fetchone()
    names = (
        "s_permitted",
        "s_sources",
        "s_observed_conversations",
        "s_observed_joined",
        "s_observed_left",
        "s_requester_accounts",
        "s_agent_rooms",
    )
    return dict(zip(names, (list(value) for value in row), strict=True))


def scope_ctes(p: Perspective) -> str:
    """The CTEs ``eligible_condition`` relies on, for a ``WITH`` clause (no leading comma).

    ``permitted``: conversations of the workspace whose audience permits D (rule 3).
    ``sources``: those A was ever a member of, the only ones that can hold observed messages.
    ``observed_intervals``: A's membership intervals in permitted conversations.
    ``requester_accounts``: R and the accounts joined to R by a live link.
    ``agent_rooms``: every conversation A was ever a member of.

    They unpack the scope ``resolve_scope`` read once for this perspective (``p.params()``
    carries it), so a statement plans in a fraction of the time the full rules took and a
    search pays for them once, not in every statement.
    """
    return """
        permitted AS (SELECT unnest(%(s_permitted)s::uuid[]) AS id),
        sources AS (SELECT unnest(%(s_sources)s::uuid[]) AS id),
        observed_intervals AS (
            SELECT * FROM unnest(%(s_observed_conversations)s::uuid[],
                                 %(s_observed_joined)s::timestamptz[],
                                 %(s_observed_left)s::timestamptz[])
                AS interval(conversation_id, joined_at, left_at)
        ),
        requester_accounts AS (SELECT unnest(%(s_requester_accounts)s::uuid[]) AS account_id),
        agent_rooms AS (SELECT unnest(%(s_agent_rooms)s::uuid[]) AS conversation_id)"""


def _inherits_withheld_room(message_id: str) -> str:
    """Rule 4 fails: some room the message inherits does not permit D."""
    return f"""EXISTS (
            SELECT 1 FROM {LINEAGE_ROOMS} AS inherited
            WHERE inherited.message_id = {message_id}
              AND inherited.conversation_id NOT IN (SELECT id FROM permitted)
            {PER_ROW})"""


def eligible_condition(alias: str, *, projection: bool = False, prompt_rule: bool = True) -> str:
    """Rules 1 to 5 for row ``alias``, given ``scope_ctes`` in the same statement.

    ``alias`` is a message, or with ``projection`` a ``message_search_documents`` row, whose
    copies of the workspace, conversation and time carry the same names. A projection row
    exists only while its message is live, and whatever a search takes from the projection is
    checked again here, on the canonical message, before it is returned. Without
    ``prompt_rule`` rule 5 is left out: what the run may *receive*, prompt or not.
    """
    m = alias
    message_id = f"{m}.message_id" if projection else f"{m}.id"
    if projection:
        # A search reads thousands of projection rows: a hashed semi-join with the agent's few
        # intervals in permitted conversations, instead of an index probe per row.
        live = ""
        observed = f"""EXISTS (
            SELECT 1 FROM observed_intervals AS observer
            WHERE observer.conversation_id = {m}.conversation_id
              AND observer.joined_at <= {m}.created_at
              AND (observer.left_at IS NULL OR observer.left_at > {m}.created_at))"""
    else:
        live = f"AND {m}.deleted_at IS NULL"
        # A filter, not a join: neighbour walks stay in index order and stop early.
        observed = f"""{m}.conversation_id = ANY(%(s_sources)s::uuid[])
        AND EXISTS (
            SELECT 1 FROM {MEMBERSHIPS} AS observer
            WHERE observer.agent_id = %(p_agent)s
              AND observer.conversation_id = {m}.conversation_id
              AND observer.joined_at <= {m}.created_at
              AND (observer.left_at IS NULL OR observer.left_at > {m}.created_at))"""
    not_in_prompt = f"AND {message_id} <> ALL (%(p_in_prompt)s::uuid[])" if prompt_rule else ""
    # Only agent-authored messages inherit rooms (a trigger on the rooms table guarantees it),
    # so a person's message needs no look-up, and an agent's message one index probe.
    return f"""(
        {m}.workspace_id = %(p_workspace)s
        {live}
        AND {observed}
        AND ({m}.sender_agent_id IS NULL OR NOT {_inherits_withheld_room(message_id)})
        {not_in_prompt}
    )"""


def receivable_reference(column: str) -> str:
    """``column`` (a ``reply_to_id`` or ``thread_id``) if the run may receive the message it
    names, else NULL: no id of a withheld message reaches the agent.

    Receivable means rules 1 to 4 hold for it, or it is in the run's prompt (the runtime gave
    it to the model already); given ``scope_ctes`` in the same statement.
    """
    return f"""CASE WHEN {column} = ANY(%(p_in_prompt)s::uuid[]) OR EXISTS (
            SELECT 1 FROM {MESSAGES} AS referenced
            WHERE referenced.id = {column}
              AND {eligible_condition("referenced", prompt_rule=False)})
        THEN {column} END"""


def exclusion_reason(alias: str, *, projection: bool = False, prompt_rule: bool = True) -> str:
    """The first of rules 1 to 5 that message ``alias`` fails, or NULL when it is eligible.

    For the audit's exclusion counts and, without rule 5 (``prompt_rule=False``), the final
    delivery check; given ``scope_ctes`` and ``alias``'s conversation as ``c``. Each branch is
    the negation of one clause of ``eligible_condition``; rule 3 is split so a withheld
    ``unknown`` audience is told apart from one that does not fit the destination. With
    ``projection``, ``alias`` is a ``message_search_documents`` row and "deleted" means its
    canonical message is no longer live.

    Order: the checks that depend only on the conversation come first (never a member: not
    observed; unknown audience; audience), each one hashed look-up, then the per-message ones
    (membership interval: not observed; deleted; lineage; rule 5). On a large corpus most
    matches are settled by the first group, so a message failing several rules is counted
    under the first in this order.
    """
    m = alias
    message_id = f"{m}.message_id" if projection else f"{m}.id"
    deleted = (
        f"NOT EXISTS (SELECT 1 FROM {MESSAGES} AS live WHERE live.id = {m}.message_id "
        "AND live.deleted_at IS NULL)"
        if projection
        else f"{m}.deleted_at IS NOT NULL"
    )
    in_prompt = (
        f"""
        WHEN {message_id} = %(p_current)s THEN 'current_message'
        WHEN {message_id} = ANY(%(p_recent)s::uuid[]) THEN 'recent_history'"""
        if prompt_rule
        else ""
    )
    return f"""CASE
        WHEN {m}.workspace_id <> %(p_workspace)s
          OR {m}.conversation_id NOT IN (SELECT conversation_id FROM agent_rooms)
            THEN 'not_observed'
        WHEN c.kind = '{ConversationKind.UNKNOWN.value}' THEN 'unknown_audience'
        WHEN {m}.conversation_id NOT IN (SELECT id FROM permitted) THEN 'audience'
        WHEN NOT EXISTS (
            SELECT 1 FROM {MEMBERSHIPS} AS observer
            WHERE observer.agent_id = %(p_agent)s
              AND observer.conversation_id = {m}.conversation_id
              AND observer.joined_at <= {m}.created_at
              AND (observer.left_at IS NULL OR observer.left_at > {m}.created_at))
            THEN 'not_observed'
        WHEN {deleted} THEN 'deleted'
        WHEN {m}.sender_agent_id IS NOT NULL AND {_inherits_withheld_room(message_id)}
            THEN 'lineage'{in_prompt}
    END"""


def _memory_deleted_source(alias: str) -> str:
    """A source in memory ``alias``'s lineage has been deleted since."""
    return f"""EXISTS (
        SELECT 1 FROM {MEMORY_LINEAGE} AS lineage
        JOIN {MESSAGES} AS source ON source.id = lineage.source_id
        WHERE lineage.memory_id = {alias}.id AND source.deleted_at IS NOT NULL)"""


def _memory_withheld_room(alias: str) -> str:
    """Some room memory ``alias`` inherits does not permit D."""
    return f"""EXISTS (
        SELECT 1 FROM {MEMORY_ROOMS} AS inherited
        WHERE inherited.memory_id = {alias}.id
          AND inherited.conversation_id NOT IN (SELECT id FROM permitted))"""


def memory_eligible_condition(alias: str) -> str:
    """Rules 3 and 4 for memory ``alias``: what it was drawn from may reach the destination.

    A memory is the agent's own and lives in no conversation, so it is exactly as visible as
    the strictest thing it was drawn from: every room it inherits (``MemoryRoom``: the room of
    the run that wrote it, whose context that run was given, the rooms of what that run was
    shown and of the memories it recalled) must permit D. A source deleted since hides the
    memory, so deletion stays final.
    """
    return f"(NOT {_memory_withheld_room(alias)} AND NOT {_memory_deleted_source(alias)})"


def memory_exclusion_reason(alias: str) -> str:
    """Why memory ``alias`` may not reach the destination: ``deleted`` when a source is gone,
    else ``lineage``; NULL when ``memory_eligible_condition`` holds."""
    return f"""CASE
        WHEN {_memory_deleted_source(alias)} THEN 'deleted'
        WHEN {_memory_withheld_room(alias)} THEN 'lineage'
    END"""
