"""Every read of the agent tools: list_messages, get_message and search_messages.

Security invariant: each statement here reads only live messages of the caller's workspace in
conversations where the agent is a *current* member, and the membership test is part of the
statement itself (``_CURRENT_MEMBER``); nothing ever widens that or filters rows in Python after
the fetch. A message the agent cannot see and a message that does not exist raise the same
``NotFound``.

These are the hot paths of every agent turn, so each tool is one hand-written statement (the
membership check, the page and the count where one is needed) whose rows become
``MessageRow`` tuples and then JSON directly: no model instances, no ORM compilation.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from django.db import connection
from django.db.models import QuerySet

from formation.errors import NotFound
from formation.sql import table
from formation.tenancy import get_or_not_found
from messages_app.lens import (
    RunLens,
    deliverable_flag,
    lens_ctes,
    lens_params,
    lens_reference,
    lens_visible,
)
from messages_app.models import Conversation, Membership, Message

Direction = Literal["before", "after", "around"]
# search_messages reads this many of the workspace's newest messages before searching them all.
SEARCH_WALK = 300

# A message summary's columns (SPEC §5), in the order every statement answers them.
SUMMARY_COLUMNS = (
    "id",
    "conversation_id",
    "seq",
    "role",
    "status",
    "sender_account_id",
    "sender_agent_id",
    "reply_to_id",
    "thread_id",
    "content",
    "created_at",
    "sources_erased",
)
# The summary's columns that name another message: a run is shown them only where it may receive
# the message they name (``RunLens.reference``, ``perspective.receivable_reference``).
REFERENCE_COLUMNS = ("reply_to_id", "thread_id")


class MessageRow(NamedTuple):
    """A message as a tool answers it: the summary's fields, straight from a row."""

    id: Any
    conversation_id: Any
    seq: int
    role: str
    status: str
    sender_account_id: Any
    sender_agent_id: Any
    reply_to_id: Any
    thread_id: Any
    content: str
    created_at: datetime
    sources_erased: bool
    # Read for a run's token only (``RunLens``): whether a reply citing the message would pass
    # the final delivery check now. None for every other read.
    deliverable: bool | None = None
    # Where an answer's cut text lies in the whole text (``messages_app.text_windows``).
    text_cut: Any = None

    def __eq__(self, other: object) -> bool:
        """A row read of a message equals that message (by id), and rows compare as tuples."""
        if isinstance(other, Message):
            return self.id == other.pk
        return tuple.__eq__(self, other)

    def __hash__(self) -> int:
        return hash(self.id)


def agent_visible_messages(*, workspace_id: uuid.UUID, agent_id: uuid.UUID) -> QuerySet[Message]:
    """Live messages of the conversations the agent is a current member of, as a queryset: the
    set every statement of this module reads from, for the admin and tests to compare against."""
    rooms = Membership.objects.filter(
        workspace_id=workspace_id, agent_id=agent_id, left_at__isnull=True
    ).values("conversation_id")
    return Message.objects.filter(
        workspace_id=workspace_id, deleted_at__isnull=True, conversation_id__in=rooms
    )


def text_search_configurations() -> list[str]:
    """The text search configurations a workspace may take as its language, as PostgreSQL
    spells them (schema-qualified outside the search path)."""
    return [row[0] for row in _rows("SELECT oid::regconfig::text FROM pg_ts_config ORDER BY 1", {})]


def summary_columns(
    alias: str, reference: Callable[[str], str] | None = None, *, named: bool = False
) -> str:
    """Message ``alias``'s summary columns, in ``SUMMARY_COLUMNS``' order: the one list every
    statement that answers message summaries selects.

    With ``reference``, each of ``REFERENCE_COLUMNS`` is shown through it (an SQL expression of
    the column, e.g. NULL where the run may not receive the message it names), and with
    ``named`` given back its own name (for a CTE whose columns are read by name).
    """

    def column_sql(column: str) -> str:
        if reference is None or column not in REFERENCE_COLUMNS:
            return f"{alias}.{column}"
        shown = reference(f"{alias}.{column}")
        return f"{shown} AS {column}" if named else shown

    return ", ".join(column_sql(column) for column in SUMMARY_COLUMNS)


def message_row(row: Any) -> MessageRow:
    """The summary of a row read by name (``formation.sql.named_rows``) that holds its columns."""
    return MessageRow(*(getattr(row, column) for column in SUMMARY_COLUMNS))


def _output_columns(alias: str, lens: RunLens | None) -> str:
    """A message summary's columns of row ``alias`` (of a CTE holding them), and with a lens
    its references as the run may see them and its deliverable flag."""
    if lens is None:
        return summary_columns(alias)
    return f"{summary_columns(alias, lens_reference(lens))}, {deliverable_flag(lens, alias)}"


def _current_member(conversation: str) -> str:
    """The agent is a current member of ``conversation`` (a column): one index probe."""
    return (
        f"EXISTS (SELECT 1 FROM {table(Membership)} AS member WHERE member.workspace_id = %(ws)s "
        f"AND member.agent_id = %(agent)s AND member.conversation_id = {conversation} "
        "AND member.left_at IS NULL)"
    )


def conversation_memberships(conversation: Conversation) -> QuerySet[Membership]:
    """Every membership interval of ``conversation``, oldest first (in its workspace, so one
    shard on Citus)."""
    return Membership.objects.filter(
        workspace_id=conversation.workspace_id, conversation_id=conversation.pk
    ).order_by("joined_at", "id")


def runtime_message(*, workspace_id: uuid.UUID, message_id: uuid.UUID) -> Message:
    """A live message of the workspace, for the runtime's edit and delete."""
    return get_or_not_found(
        Message.objects.filter(workspace_id=workspace_id, deleted_at__isnull=True), message_id
    )


def _rows(sql: str, params: dict[str, object]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _get_statement(lens: RunLens | None) -> str:
    with_lens = "" if lens is None else f"WITH {lens.ctes}"
    return f"""
    {with_lens}
    SELECT {_output_columns("m", lens)} FROM {table(Message)} AS m
    WHERE m.id = %(id)s AND m.workspace_id = %(ws)s AND m.deleted_at IS NULL
      AND {_current_member("m.conversation_id")} {lens_visible(lens, "m")}
"""


_GET = _get_statement(None)


def message_get(
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    message_id: uuid.UUID,
    lens: RunLens | None = None,
) -> MessageRow:
    """One live message of a conversation the agent is a current member of (and, for a strict
    run, one the run may receive), or ``NotFound``."""
    params = {"id": message_id, "ws": workspace_id, "agent": agent_id}
    rows = _rows(_GET if lens is None else _get_statement(lens), lens_params(lens, params))
    if not rows:
        raise NotFound()
    return MessageRow(*rows[0])


@dataclass(frozen=True)
class MessagePage:
    items: list[MessageRow]
    total: int
    limit: int
    offset: int | None
    has_older: bool
    has_newer: bool


# The conversation if the agent is a current member of it, with its live count; and the page,
# newest first through ``message_live_timeline``. ``total`` with a date bound counts the
# messages before it only when the page does not already show them all (a first page that is
# not full), and CASE evaluates that count only then. A strict run's lens counts only what it
# may receive, so its total is always counted that way.
def _page_statement(lens: RunLens | None) -> str:
    return f"""
    WITH {lens_ctes(lens)} room AS MATERIALIZED (
        SELECT c.id, c.live_message_count FROM {table(Conversation)} AS c
        WHERE c.workspace_id = %(ws)s AND c.id = %(room)s AND {_current_member("c.id")}
    ), page AS MATERIALIZED (
        SELECT {summary_columns("m")} FROM {table(Message)} AS m
        WHERE m.workspace_id = %(ws)s AND m.conversation_id = (SELECT id FROM room)
          AND m.deleted_at IS NULL AND m.created_at < %(before)s {lens_visible(lens, "m")}
        ORDER BY m.created_at DESC, m.seq DESC
        LIMIT %(limit)s OFFSET %(offset)s
    )
    SELECT (SELECT live_message_count FROM room),
           CASE WHEN NOT %(dated)s THEN NULL
                WHEN %(offset)s = 0 AND (SELECT count(*) FROM page) < %(limit)s
                    THEN (SELECT count(*) FROM page)
                ELSE (SELECT count(*) FROM {table(Message)} AS m
                      WHERE m.workspace_id = %(ws)s AND m.conversation_id = (SELECT id FROM room)
                        AND m.deleted_at IS NULL AND m.created_at < %(before)s
                        {lens_visible(lens, "m")})
           END,
           {_output_columns("page", lens)}
    FROM (SELECT 1) AS one LEFT JOIN page ON true
"""


_PAGE = _page_statement(None)


def message_list(
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    conversation_id: uuid.UUID,
    limit: int,
    offset: int = 0,
    before_date: datetime | None = None,
    lens: RunLens | None = None,
) -> MessagePage:
    """Newest first by created_at (seq breaks ties), paged by offset, optionally before a date."""
    strict = lens is not None and lens.strict
    rows = _rows(
        _PAGE if lens is None else _page_statement(lens),
        lens_params(
            lens,
            {
                "ws": workspace_id,
                "agent": agent_id,
                "room": conversation_id,
                "limit": limit,
                "offset": offset,
                "dated": before_date is not None or strict,
                "before": before_date or "infinity",
            },
        ),
    )
    live_count, counted = rows[0][0], rows[0][1]
    if live_count is None:
        raise NotFound()
    items = [MessageRow(*row[2:]) for row in rows if row[2] is not None]
    total = counted if before_date is not None or strict else live_count
    return MessagePage(
        items=items,
        total=total,
        limit=limit,
        offset=offset,
        has_older=offset + len(items) < total,
        has_newer=offset > 0,
    )


# The anchor, if it is a live message of the conversation and the agent a current member, and
# the messages nearest it on each side: newest first older than it, oldest first newer than it.
# Each side is a LATERAL walk of ``message_live_timeline`` starting at the anchor (the redundant
# created_at bound is the index's start); one more than the limit is read on each side, to tell
# whether there is more. A strict run's lens also needs the anchor and every message listed to
# be one it may receive, and counts those (the second column; NULL without it).
def _around_statement(lens: RunLens | None) -> str:
    strict = lens is not None and lens.strict
    visible_total = (
        f"""(SELECT count(*) FROM {table(Message)} AS m
             WHERE m.workspace_id = %(ws)s AND m.conversation_id = (SELECT id FROM room)
               AND m.deleted_at IS NULL {lens_visible(lens, "m")})"""
        if strict
        else "NULL::bigint"
    )
    return f"""
    WITH {lens_ctes(lens)} room AS MATERIALIZED (
        SELECT c.id, c.live_message_count FROM {table(Conversation)} AS c
        WHERE c.workspace_id = %(ws)s AND c.id = %(room)s AND {_current_member("c.id")}
    ), anchor AS MATERIALIZED (
        SELECT {summary_columns("m")} FROM {table(Message)} AS m
        WHERE m.id = %(anchor)s AND m.workspace_id = %(ws)s
          AND m.conversation_id = (SELECT id FROM room) AND m.deleted_at IS NULL
          {lens_visible(lens, "m")}
    )
    SELECT (SELECT live_message_count FROM room), {visible_total}, near.side,
           {_output_columns("near", lens)}
    FROM (SELECT 1) AS one LEFT JOIN (
        SELECT 'anchor' AS side, anchor.* FROM anchor
        UNION ALL
        SELECT 'older', older.* FROM anchor AS a CROSS JOIN LATERAL (
            SELECT {summary_columns("m")} FROM {table(Message)} AS m
            WHERE m.workspace_id = %(ws)s AND m.conversation_id = a.conversation_id
              AND m.deleted_at IS NULL AND m.created_at <= a.created_at
              AND (m.created_at < a.created_at OR m.seq < a.seq) {lens_visible(lens, "m")}
            ORDER BY m.created_at DESC, m.seq DESC LIMIT %(older)s
        ) AS older
        UNION ALL
        SELECT 'newer', newer.* FROM anchor AS a CROSS JOIN LATERAL (
            SELECT {summary_columns("m")} FROM {table(Message)} AS m
            WHERE m.workspace_id = %(ws)s AND m.conversation_id = a.conversation_id
              AND m.deleted_at IS NULL AND m.created_at >= a.created_at
              AND (m.created_at > a.created_at OR m.seq > a.seq) {lens_visible(lens, "m")}
            ORDER BY m.created_at, m.seq LIMIT %(newer)s
        ) AS newer
    ) AS near ON true
"""


_AROUND = _around_statement(None)


def message_list_around(
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    conversation_id: uuid.UUID,
    anchor_id: uuid.UUID,
    direction: Direction,
    limit: int,
    lens: RunLens | None = None,
) -> MessagePage:
    """The ``limit`` messages nearest an anchor on one side (or limit//2 each side and the anchor
    for ``around``), listed newest first like every page. An unseen anchor is ``NotFound``."""
    older_limit = limit if direction == "before" else (0 if direction == "after" else limit // 2)
    newer_limit = limit if direction == "after" else (0 if direction == "before" else limit // 2)
    rows = _rows(
        _AROUND if lens is None else _around_statement(lens),
        lens_params(
            lens,
            {
                "ws": workspace_id,
                "agent": agent_id,
                "room": conversation_id,
                "anchor": anchor_id,
                "older": older_limit + 1 if older_limit else 0,
                "newer": newer_limit + 1 if newer_limit else 0,
            },
        ),
    )
    live_count, visible_count = rows[0][0], rows[0][1]
    sides: dict[str, list[MessageRow]] = {"anchor": [], "older": [], "newer": []}
    for row in rows:
        if row[2] is not None:
            sides[row[2]].append(MessageRow(*row[3:]))
    if live_count is None or not sides["anchor"]:
        raise NotFound()
    older, newer = sides["older"], sides["newer"]
    # Reading after an anchor always leaves the anchor itself older than the page, and so on.
    has_older = direction == "after" or len(older) > older_limit
    has_newer = direction == "before" or len(newer) > newer_limit
    older, newer = older[:older_limit], newer[:newer_limit]
    shown = sides["anchor"] if direction == "around" else []
    return MessagePage(
        items=[*reversed(newer), *shown, *older],
        total=live_count if visible_count is None else visible_count,
        limit=limit,
        offset=None,
        has_older=has_older,
        has_newer=has_newer,
    )


def _named_room(one_room: bool, alias: str = "") -> str:
    """search_messages narrowed to the conversation it names (``%(room)s``), on row ``alias``
    (a bare column without one); nothing when it names none."""
    column = f"{alias}.conversation_id" if alias else "conversation_id"
    return f"AND {column} = %(room)s" if one_room else ""


def _search_statement(*, one_room: bool, lens: RunLens | None = None) -> str:
    """search_messages: the agent's current rooms (or the one named, if it is one of them),
    then two steps with the answer of one ``ORDER BY ... LIMIT``.

    First the newest ``SEARCH_WALK`` messages of the workspace (of the room, when one is named)
    are read newest first, through ``message_live_ws_timeline`` (``message_live_timeline``),
    and the visible ones that match are kept, stopping at ``limit``: a word in one message in
    ten is found there in well under a millisecond. Every visible message newer than the walk's
    end was in it, so ``limit`` matches there are the answer. Only otherwise (a rarer word) is
    the whole history searched, through the ``message_content_trgm`` index; the one-time filter
    on the walk's count keeps PostgreSQL from even starting that step when the walk sufficed.
    The walk reads the workspace's timeline, not the rooms' (for which the planner would have to
    guess how many rooms there are, and a low guess sorts every message of them: BENCHMARKS.md),
    so its cost is bounded whatever the agent's rooms. ``UPPER(content) LIKE UPPER(pattern)``
    with ``%``, ``_`` and ``\\`` escaped is a case-insensitive literal substring match. A strict
    run's lens keeps, in both steps, only what the run may receive (the walk reads whole rows
    then, which its rules need).
    """
    walked = summary_columns("m") if lens is None else "m.*"
    kept = "*" if lens is None else summary_columns("newest")
    found = "found.*" if lens is None else _output_columns("found", lens)
    newest_first = "created_at DESC, seq DESC, id DESC"

    def ordered(alias: str) -> str:
        return ", ".join(f"{alias}.{key}" for key in newest_first.split(", "))

    room = _named_room(one_room)
    return f"""
    WITH {lens_ctes(lens)} rooms AS MATERIALIZED (
        SELECT conversation_id FROM {table(Membership)}
        WHERE workspace_id = %(ws)s AND agent_id = %(agent)s AND left_at IS NULL {room}
    ), walk AS MATERIALIZED (
        SELECT {kept} FROM (
            SELECT {walked} FROM {table(Message)} AS m
            WHERE m.workspace_id = %(ws)s AND m.deleted_at IS NULL {_named_room(one_room, "m")}
            ORDER BY {ordered("m")} LIMIT {SEARCH_WALK}
        ) AS newest
        WHERE newest.conversation_id IN (SELECT conversation_id FROM rooms)
          AND UPPER(newest.content) LIKE UPPER(%(pattern)s) {lens_visible(lens, "newest")}
        ORDER BY {ordered("newest")} LIMIT %(limit)s
    )
    SELECT (SELECT count(*) FROM rooms), {found}
    FROM (SELECT 1) AS one LEFT JOIN (
        SELECT * FROM walk WHERE (SELECT count(*) FROM walk) = %(limit)s
        UNION ALL
        SELECT * FROM (
            SELECT {summary_columns("m")} FROM {table(Message)} AS m
            WHERE m.workspace_id = %(ws)s AND m.deleted_at IS NULL
              AND m.conversation_id IN (SELECT conversation_id FROM rooms)
              AND UPPER(m.content) LIKE UPPER(%(pattern)s) {lens_visible(lens, "m")}
            ORDER BY {ordered("m")} LIMIT %(limit)s
        ) AS everything
        WHERE (SELECT count(*) FROM walk) < %(limit)s
    ) AS found ON true
    ORDER BY {ordered("found")}
    """


def message_search(
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    query: str,
    limit: int,
    conversation_id: uuid.UUID | None = None,
    lens: RunLens | None = None,
) -> list[MessageRow]:
    """Case-insensitive literal substring search, newest first (``_search_statement``).

    Narrowed to one conversation, that conversation must be one the agent is a current member
    of, else ``NotFound`` (as for list_messages), told by the same statement.
    """
    params = {
        "ws": workspace_id,
        "agent": agent_id,
        "room": conversation_id,
        "pattern": f"%{connection.ops.prep_for_like_query(query)}%",
        "limit": limit,
    }
    statement = _search_statement(one_room=conversation_id is not None, lens=lens)
    rows = _rows(statement, lens_params(lens, params))
    if conversation_id is not None and rows[0][0] == 0:
        raise NotFound()
    return [MessageRow(*row[1:]) for row in rows if row[1] is not None]
