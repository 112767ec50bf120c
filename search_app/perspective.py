"""The agent's perspective (SPEC §3): which messages a run may receive, as SQL predicates.

SECURITY INVARIANT: everything here only *narrows*. Each rule is a condition on the canonical
tables (memberships, identity links, lineage rooms) or on the projection rows their triggers
keep in step, evaluated by PostgreSQL inside the same statement that reads the messages;
nothing in this module ever adds a message to a result, and nothing filters rows in Python
after a fetch. search_history hits and their neighbours, the audit's exclusion counts, the
final delivery check and memories all embed ``scope_ctes`` and the rule fragments below, so the
rules live here and nowhere else.

A run fixes agent A, destination D and requester R. Message m in conversation S is eligible when

1. A observed m: some membership interval of A in S holds m.created_at (``[joined, left)``),
   and S is in A's workspace;
2. m is not deleted;
3. S's audience permits D (``permitted`` below);
4. every room m inherits permits D: the rooms of its lineage sources, transitively, and of the
   memories its run recalled (``MessageLineageRoom`` holds that closure; the projection a
   sorted copy of it);
5. m is neither the run's current message nor in its recent history.

Each rule is written once, as one fragment per kind of row (``_rules``): ``eligible_condition``
is their conjunction and ``exclusion_reason`` names the first one a row fails, so the two can
never disagree.

Identity links only widen the narrow direct-to-direct continuity of rule 3, and only while live
(verified, not revoked); they never chain. Readerships, links and memberships are read once per
call by one statement (``scope_statement``, which also locks the run), never cached across
calls, so a link revoked or a reader added a moment ago already counts. Who asks, and that
scope as one call's parameters, are ``search_app.scope.Perspective``.

Why hand-written SQL rather than the ORM: these rules nest four levels of correlated subqueries,
and compiling them through the ORM cost several times the query itself (BENCHMARKS.md).
"""

from __future__ import annotations

from formation.sql import literals, table
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
from search_app.models import MemoryLineage, MemoryRoom, MessageSearchDocument

# SQL literals of the values the rules compare with.
LIVE = literals([IdentityLinkStatus.VERIFIED.value])
PUBLIC = literals([ConversationKind.PUBLIC.value])
DIRECT = literals([ConversationKind.DIRECT.value])
PRIVATE = literals([ConversationKind.PRIVATE.value])
UNKNOWN = literals([ConversationKind.UNKNOWN.value])
# Ends a correlated EXISTS so PostgreSQL keeps it a per-row probe of the row's own lineage.
# Without it the planner may hash the subquery instead: read every lineage row of the table
# once per statement (0.7 s on a million messages), to test a few candidates. (An OFFSET stops
# EXISTS from being rewritten into a hashed ANY or a join.)
PER_ROW = "OFFSET 0"


def _same_person(account: str) -> str:
    """``account`` (a column or subquery) and the accounts joined to it by one live link."""
    return f"""
        SELECT {account} AS account_id
        UNION SELECT l.linked_account_id FROM {table(IdentityLink)} AS l
              WHERE l.workspace_id = %(p_workspace)s AND l.account_id = ({account})
                AND l.status = {LIVE}
        UNION SELECT l.account_id FROM {table(IdentityLink)} AS l
              WHERE l.workspace_id = %(p_workspace)s AND l.linked_account_id = ({account})
                AND l.status = {LIVE}
    """


def _permitted_rooms() -> str:
    """Rule 3: the conversations of the workspace whose audience permits the destination of
    the statement's ``run``, as one set built from the memberships of D's readers.

    Written for every kind of destination at once (its kind is a value of ``run``), so the
    run's row and its scope are read by one statement before the kind is known:

    - a public S permits every D of the workspace;
    - a private S needs every reader of D to read it now: the rooms where all of D's readers
      are current members (all private rooms when D has no reader; none for an unknown D,
      whose readership satisfies no subset test);
    - a direct S needs exactly one current human reader, who is D's one reader or an account
      joined to that reader by one live link (``direct_continuity`` is empty unless D is
      direct with exactly one reader, and then no S qualifies);
    - an ``unknown`` S appears in no branch: withheld for every destination.
    """
    return f"""
        SELECT c.id FROM {table(Conversation)} AS c
        WHERE c.workspace_id = %(p_workspace)s AND c.kind = {PUBLIC}
        UNION ALL
        SELECT c.id FROM {table(Conversation)} AS c
        WHERE c.workspace_id = %(p_workspace)s AND c.kind = {PRIVATE}
          AND (SELECT destination_kind FROM run) <> {UNKNOWN}
          AND NOT EXISTS (SELECT 1 FROM destination_readers)
        UNION ALL
        SELECT s.conversation_id FROM {table(Membership)} AS s
        JOIN {table(Conversation)} AS c ON c.workspace_id = %(p_workspace)s
             AND c.id = s.conversation_id AND c.kind = {PRIVATE}
        WHERE s.workspace_id = %(p_workspace)s AND s.left_at IS NULL
          AND s.account_id IN (SELECT account_id FROM destination_readers)
          AND (SELECT destination_kind FROM run) <> {UNKNOWN}
        GROUP BY s.conversation_id
        HAVING count(DISTINCT s.account_id) = (SELECT count(*) FROM destination_readers)
        UNION ALL
        SELECT c.id FROM {table(Conversation)} AS c
        WHERE c.workspace_id = %(p_workspace)s AND c.kind = {DIRECT}
          AND c.id IN (SELECT s.conversation_id FROM {table(Membership)} AS s
                       WHERE s.workspace_id = %(p_workspace)s AND s.left_at IS NULL
                         AND s.account_id IN (SELECT account_id FROM direct_continuity))
          AND (SELECT count(DISTINCT s.account_id) FROM {table(Membership)} AS s
               WHERE s.workspace_id = %(p_workspace)s AND s.conversation_id = c.id
                 AND s.account_id IS NOT NULL
                 AND s.left_at IS NULL) = 1"""


def _run_row(lock: str | None) -> str:
    """The run's row and its destination's kind, locked ``FOR UPDATE`` or ``FOR SHARE`` with
    ``lock``: the ``run`` CTE every statement that reads a run starts from."""
    locking = f"FOR {lock} OF r" if lock else ""
    runs, rooms = table(Run), table(Conversation)
    return f"""run AS MATERIALIZED (
        SELECT r.id, r.agent_id, r.conversation_id AS destination_id, r.requester_id,
               r.current_message_id, r.recent_message_ids, r.finished_at,
               r.history_evidence_count, r.tool_scope, d.kind AS destination_kind
        FROM {runs} AS r
        JOIN {rooms} AS d ON d.workspace_id = %(p_workspace)s AND d.id = r.conversation_id
        WHERE r.workspace_id = %(p_workspace)s AND r.id = %(p_run)s
        {locking}
    )"""


def scope_from_tables(lock: str | None) -> str:
    """The CTEs of the run's row (locked ``FOR UPDATE`` or ``FOR SHARE`` with ``lock``) and the
    scope its perspective needs, read from the canonical tables, for a ``WITH`` clause (no
    leading comma): the names the rule fragments rely on, as ``scope_ctes`` gives them.

    ``permitted``: conversations of the workspace whose audience permits D (rule 3), and
    ``permitted_array`` the same as one array; ``observed_intervals``: A's membership intervals
    in permitted conversations; ``requester_accounts``: R and the accounts joined to R by a live
    link; ``agent_rooms``: every conversation A was ever a member of, and ``unknown_rooms`` those
    of them whose audience is unknown (for the exclusion reasons).

    ``destination_readers`` are every account of a public D's workspace, else D's current
    humans. A lock waits for whoever holds the run, and the row it then returns is the newest
    one (READ COMMITTED re-reads a locked row), so the budget counter on it is the one the
    previous search committed.
    """
    return f"""{_run_row(lock)}, destination_readers AS MATERIALIZED (
        SELECT a.id AS account_id FROM {table(Account)} AS a
        WHERE a.workspace_id = %(p_workspace)s
          AND (SELECT destination_kind FROM run) = {PUBLIC}
        UNION
        SELECT m.account_id FROM {table(Membership)} AS m
        WHERE m.workspace_id = %(p_workspace)s
          AND m.conversation_id = (SELECT destination_id FROM run)
          AND m.account_id IS NOT NULL AND m.left_at IS NULL
          AND (SELECT destination_kind FROM run) <> {PUBLIC}
    ), direct_reader AS MATERIALIZED (
        SELECT min(account_id::text)::uuid AS account_id FROM destination_readers
        WHERE (SELECT destination_kind FROM run) = {DIRECT}
        HAVING count(DISTINCT account_id) = 1
    ), direct_continuity AS MATERIALIZED (
        SELECT account_id FROM ({_same_person("(SELECT account_id FROM direct_reader)")})
            AS person
        WHERE account_id IS NOT NULL
    ), permitted AS MATERIALIZED ({_permitted_rooms()}
    ), permitted_array AS MATERIALIZED (SELECT ARRAY(SELECT id FROM permitted) AS ids
    ), agent_memberships AS MATERIALIZED (
        SELECT conversation_id, joined_at, left_at FROM {table(Membership)}
        WHERE workspace_id = %(p_workspace)s AND agent_id = (SELECT agent_id FROM run)
    ), agent_rooms AS MATERIALIZED (
        SELECT DISTINCT conversation_id AS id FROM agent_memberships
    ), unknown_rooms AS MATERIALIZED (
        SELECT c.id FROM {table(Conversation)} AS c
        WHERE c.workspace_id = %(p_workspace)s AND c.kind = {UNKNOWN}
          AND c.id IN (SELECT id FROM agent_rooms)
    ), observed_intervals AS MATERIALIZED (
        SELECT * FROM agent_memberships
        WHERE conversation_id IN (SELECT id FROM permitted)
    ), requester_accounts AS MATERIALIZED (
        SELECT account_id FROM ({_same_person("(SELECT requester_id FROM run)")}) AS person
        WHERE account_id IS NOT NULL
    )"""


def scope_statement(lock: str | None) -> str:
    """One statement: the run's row (``scope_from_tables``) and its scope as arrays, for the
    later statements of a call (``scope_ctes`` unpacks them). One scan of the intervals feeds
    their three arrays, so element i of each is the same interval."""
    return f"""
    WITH {scope_from_tables(lock)}
    SELECT run.*,
           (SELECT ids FROM permitted_array)::text,
           intervals.conversations::text, intervals.joined::text, intervals.left_at::text,
           ARRAY(SELECT account_id FROM requester_accounts)::text,
           ARRAY(SELECT id FROM agent_rooms)::text,
           ARRAY(SELECT id FROM unknown_rooms)::text
    FROM run, (
        SELECT coalesce(array_agg(conversation_id), '{{}}') AS conversations,
               coalesce(array_agg(joined_at), '{{}}') AS joined,
               coalesce(array_agg(left_at), '{{}}') AS left_at
        FROM observed_intervals
    ) AS intervals
    """


def scope_ctes() -> str:
    """The CTEs the rule fragments rely on, for a ``WITH`` clause (no leading comma).

    They unpack the scope ``scope.run_scope`` read once for this call (``Perspective.params()``
    carries it), so a statement plans in a fraction of the time the full rules took and a
    search pays for them once, not in every statement. Each array appears once in the
    statement: the fragments test membership with ``IN (SELECT ...)`` (a hashed look-up at
    run time), where an array literal repeated in every fragment had the planner estimate the
    selectivity of each of its hundreds of elements at every use.
    """
    return """
        permitted AS MATERIALIZED (SELECT unnest(%(s_permitted)s::uuid[]) AS id),
        permitted_array AS MATERIALIZED (SELECT %(s_permitted)s::uuid[] AS ids),
        agent_rooms AS MATERIALIZED (SELECT unnest(%(s_agent_rooms)s::uuid[]) AS id),
        unknown_rooms AS MATERIALIZED (SELECT unnest(%(s_unknown_rooms)s::uuid[]) AS id),
        observed_intervals AS MATERIALIZED (
            SELECT * FROM unnest(%(s_observed_conversations)s::uuid[],
                                 %(s_observed_joined)s::timestamptz[],
                                 %(s_observed_left)s::timestamptz[])
                AS interval(conversation_id, joined_at, left_at)
        ),
        requester_accounts AS MATERIALIZED (
            SELECT unnest(%(s_requester_accounts)s::uuid[]) AS account_id
        )"""


def observed_by(interval: str, row: str) -> str:
    """The agent's interval ``interval`` holds row ``row``: the row's room, and its time in
    ``[joined_at, left_at)`` (rule 1). The one spelling of that test: every statement that
    asks whether an interval holds a row (a join, a slice of the walk, the extent) uses it."""
    return f"""{interval}.conversation_id = {row}.conversation_id
       AND {interval}.joined_at <= {row}.created_at
       AND ({interval}.left_at IS NULL OR {interval}.left_at > {row}.created_at)"""


def observed_join(alias: str) -> str:
    """``LEFT JOIN`` of projection row ``alias`` to the agent's interval that holds it (rule 1).

    A search classifies thousands of projection rows: one hashed join with the agent's few
    intervals, instead of a subquery per row. Intervals of one member in one room never
    overlap (an exclusion constraint), so at most one matches and no row is repeated.
    """
    return f"""LEFT JOIN observed_intervals AS {alias}_observed
        ON {observed_by(f"{alias}_observed", alias)}"""


def _inherits_permitted_rooms(rooms: str, owner: str, *, per_row: bool = True) -> str:
    """Rule 4 on canonical rows: no room that ``owner`` inherits (a ``rooms`` row whose owner
    column and value ``owner`` names, e.g. ``"message_id = m.id"``) withholds it from D."""
    return f"""NOT EXISTS (
                    SELECT 1 FROM {rooms} AS inherited
                    WHERE inherited.workspace_id = %(p_workspace)s AND inherited.{owner}
                      AND inherited.conversation_id NOT IN (SELECT id FROM permitted)
                    {PER_ROW if per_row else ""})"""


def _rooms_copy_permitted(row: str) -> str:
    """Rule 4 on a projection row's sorted copy of the rooms its message inherits: a person's
    message inherits nothing (null); an agent's rooms are tested against the permitted ones
    without reading another table."""
    return (
        f"{row}.lineage_rooms IS NULL OR {row}.lineage_rooms <@ (SELECT ids FROM permitted_array)"
    )


def _all_pass(checks: list[tuple[str, str]]) -> str:
    """The conjunction of ``(passes, reason)`` checks: what eligibility is."""
    return "(" + "\n        AND ".join(passes for passes, _ in checks) + ")"


def _first_failed(checks: list[tuple[str, str]], otherwise: str = "") -> str:
    """The reason of the first ``(passes, reason)`` check a row fails, or ``otherwise`` (SQL
    NULL when not given) when it passes them all: built from the very tests of ``_all_pass``,
    so a count by reason can never disagree with what is eligible."""
    branches = "".join(f"\n        WHEN NOT {passes} THEN {reason}" for passes, reason in checks)
    return f"CASE{branches}{f' ELSE {otherwise}' if otherwise else ''}\n    END"


def _unobserved_reason(m: str) -> str:
    """Why row ``m`` falls in none of ``observed_intervals`` (the agent's intervals in the
    permitted rooms): the first of the tests that one probe stands for (a room the agent was
    ever in, of a known audience, permitting D), and past them, outside the agent's
    intervals."""
    return _first_failed(
        [
            (
                f"({m}.workspace_id = %(p_workspace)s "
                f"AND {m}.conversation_id IN (SELECT id FROM agent_rooms))",
                "'not_observed'",
            ),
            (f"{m}.conversation_id NOT IN (SELECT id FROM unknown_rooms)", "'unknown_audience'"),
            (f"{m}.conversation_id IN (SELECT id FROM permitted)", "'audience'"),
        ],
        otherwise="'not_observed'",
    )


def _rules(
    alias: str, *, projection: bool, prompt_rule: bool, lineage: str
) -> list[tuple[str, str]]:
    """Rules 1 to 5 for row ``alias``, in the order they are checked: ``(passes, reason)``,
    ``reason`` an SQL expression naming why a row that fails is withheld.

    Rules 1 and 3 are one test: ``observed_intervals`` holds A's membership intervals in the
    permitted conversations only, so a message falls in one of them exactly when A observed it
    and its room permits D; the reason then tells which of the two failed (and how). One
    probe per row, where four separate tests made every statement that embeds them plan
    several milliseconds longer.

    ``alias`` is a message, or with ``projection`` a ``message_search_documents`` row (whose
    copies of the workspace, conversation, time, sender and inherited rooms carry the same
    names) joined by ``observed_join``. A projection row exists only while its message is
    live, so rule 2 is left to the canonical recheck of whatever a search returns. Without
    ``prompt_rule`` rule 5 is left out: what the run may *receive*.

    ``lineage`` says where a message's rule 4 is read: ``"rooms"``, the canonical
    ``MessageLineageRoom`` rows (the delivery check), or ``"document"``, the copy its
    projection row carries (searches, which then read no lineage at all); a live agent message
    whose projection row is missing fails it, so a drifted projection withholds, never leaks.
    """
    m = alias
    message_id = f"{m}.message_id" if projection else f"{m}.id"
    unobserved = _unobserved_reason(m)
    if projection:
        rules = [
            (
                f"({m}.workspace_id = %(p_workspace)s "
                f"AND {m}_observed.conversation_id IS NOT NULL)",
                unobserved,
            ),
            (f"({_rooms_copy_permitted(m)})", "'lineage'"),
        ]
    else:
        # A filter, not a join (IS TRUE keeps PostgreSQL from turning it into a semi-join):
        # a neighbour walk tests each message as it reads it and stops at the second one.
        observed = f"""({m}.workspace_id = %(p_workspace)s AND (EXISTS (
                SELECT 1 FROM observed_intervals AS observer
                WHERE {observed_by("observer", m)}
            )) IS TRUE)"""
        # Only agent-authored messages inherit rooms (a trigger on the rooms table guarantees
        # it), so a person's message needs no look-up, and an agent's message one index probe.
        if lineage == "document":
            inherited = f"""COALESCE((
                    SELECT {_rooms_copy_permitted("own_document")}
                    FROM {table(MessageSearchDocument)} AS own_document
                    WHERE own_document.workspace_id = %(p_workspace)s
                      AND own_document.message_id = {m}.id
                ), false)"""
        else:
            inherited = _inherits_permitted_rooms(table(MessageLineageRoom), f"message_id = {m}.id")
        rules = [
            (observed, unobserved),
            (f"{m}.deleted_at IS NULL", "'deleted'"),
            (f"({m}.sender_agent_id IS NULL OR {inherited})", "'lineage'"),
        ]
    if prompt_rule:
        rules.append((f"{message_id} IS DISTINCT FROM %(p_current)s", "'current_message'"))
        rules.append((f"{message_id} <> ALL(%(p_recent)s::uuid[])", "'recent_history'"))
    return rules


def eligible_condition(
    alias: str, *, projection: bool = False, prompt_rule: bool = True, lineage: str = "rooms"
) -> str:
    """Rules 1 to 5 for row ``alias`` (see ``_rules``), given ``scope_ctes`` in the statement."""
    return _all_pass(_rules(alias, projection=projection, prompt_rule=prompt_rule, lineage=lineage))


def exclusion_reason(
    alias: str, *, projection: bool = False, prompt_rule: bool = True, lineage: str = "rooms"
) -> str:
    """The first of rules 1 to 5 that row ``alias`` fails, or NULL when it is eligible.

    For the audit's exclusion counts and, without rule 5 (``prompt_rule=False``), the final
    delivery check: ``eligible_condition``'s own checks, so a message failing several rules is
    counted under the first in ``_rules``' order.
    """
    return _first_failed(
        _rules(alias, projection=projection, prompt_rule=prompt_rule, lineage=lineage)
    )


# The reasons ``_unobserved_reason`` gives: the row's conversation decides them (rules 1 and 3).
CONVERSATION_REASONS = ("not_observed", "unknown_audience", "audience")


def counted_exclusion_reason(reason: str, row: str) -> str:
    """``reason`` (``exclusion_reason`` of projection row ``row``, which leaves rule 2 to the
    projection's own deletion) as the audit counts it: past the conversation's reasons, a row
    whose canonical message is deleted (a projection that drifted) counts as ``deleted``."""
    return f"""CASE WHEN {reason} IN ({literals(CONVERSATION_REASONS)}) THEN {reason}
                WHEN NOT EXISTS (SELECT 1 FROM {table(Message)} AS live
                                 WHERE live.workspace_id = %(p_workspace)s
                                   AND live.id = {row}.id AND live.deleted_at IS NULL)
                    THEN 'deleted'
                ELSE {reason} END"""


def receivable_reference(column: str) -> str:
    """``column`` (a ``reply_to_id`` or ``thread_id``) if the run may receive the message it
    names, else NULL: no id of a withheld message reaches the agent.

    Receivable means rules 1 to 4 hold for it, or it is in the run's prompt (the runtime gave
    it to the model already); given ``scope_ctes`` in the same statement.
    """
    return f"""CASE WHEN {column} = ANY(%(p_in_prompt)s::uuid[]) OR EXISTS (
            SELECT 1 FROM {table(Message)} AS referenced
            WHERE referenced.workspace_id = %(p_workspace)s AND referenced.id = {column}
              AND {eligible_condition("referenced", prompt_rule=False, lineage="document")})
        THEN {column} END"""


def _memory_rules(alias: str) -> list[tuple[str, str]]:
    """Rules 2 and 4 for memory ``alias``, as ``(passes, reason)`` checks: no source in its
    lineage deleted since, and every room it inherits permits D."""
    no_deleted_source = f"""NOT EXISTS (
        SELECT 1 FROM {table(MemoryLineage)} AS lineage
        JOIN {table(Message)} AS source
          ON source.workspace_id = %(p_workspace)s AND source.id = lineage.source_id
        WHERE lineage.workspace_id = %(p_workspace)s AND lineage.memory_id = {alias}.id
          AND source.deleted_at IS NOT NULL)"""
    return [
        (no_deleted_source, "'deleted'"),
        (
            _inherits_permitted_rooms(table(MemoryRoom), f"memory_id = {alias}.id", per_row=False),
            "'lineage'",
        ),
    ]


def memory_eligible_condition(alias: str) -> str:
    """Rules 2 and 4 for memory ``alias`` (``_memory_rules``): what it was drawn from may reach
    the destination (rule 3 is part of rule 4 here: the rooms a memory inherits include the
    room of the run that wrote it).

    A memory is the agent's own and lives in no conversation, so it is exactly as visible as
    the strictest thing it was drawn from: every room it inherits (``MemoryRoom``: the room of
    the run that wrote it, whose context that run was given, the rooms of what that run was
    shown and of the memories it recalled) must permit D. A source deleted since hides the
    memory, so deletion stays final.
    """
    return _all_pass(_memory_rules(alias))


def memory_exclusion_reason(alias: str) -> str:
    """Why memory ``alias`` may not reach the destination: ``deleted`` when a source is gone,
    else ``lineage``; NULL when ``memory_eligible_condition`` holds."""
    return _first_failed(_memory_rules(alias))
