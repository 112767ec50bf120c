"""The agent's perspective (SPEC §3), table-driven, through the real services.

Every scenario builds its own small tenant with explicit ``joined_at`` / ``created_at`` and
returns a run plus two messages in one source conversation S, posted next to each other:

- the *anchor* ("anchorword"), a message that is eligible whenever S itself passes rule 3;
- the *probe* ("probeword"), the message the scenario is about.

The same table is checked twice: for HITS (query "probeword": the probe is the only hit or
there is none) and for NEIGHBOURS (query "anchorword": the probe is, or is not, among the
anchor hit's ``before``/``after``). Where S as a whole fails rule 3 (or sits in another
workspace) no message of S may be returned at all, so the anchor is not a hit either.

Speaker filters select hits only; neighbours are the eligible context around a hit (SPEC §5:
"up to two eligible neighbours each side"), so a §3-eligible probe written by someone else is
still a neighbour of a ``speaker``-filtered hit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pytest

from messages_app import services
from messages_app.models import Account, Agent, Conversation, Message, Run, Workspace
from tests.factories import (
    at,
    history,
    hit_ids,
    join,
    make_account,
    make_agent,
    make_conversation,
    make_run,
    make_workspace,
    post,
)

ANCHOR = "anchorword"
PROBE = "probeword"
EARLY = at(-600)


# --- building blocks ---------------------------------------------------------------------------


@dataclass
class Case:
    run: Run
    anchor: Message
    probe: Message
    filters: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    name: str
    build: Callable[[], Case]
    hit: bool  # the probe is a hit for "probeword"
    neighbour: bool  # the probe is a neighbour of the anchor hit for "anchorword"
    anchor: bool = True  # the anchor is a hit for "anchorword" (False: S fails rule 3)


def tenant(accounts: int) -> tuple[Workspace, Agent, list[Account]]:
    workspace = make_workspace()
    return workspace, make_agent(workspace), [make_account(workspace) for _ in range(accounts)]


def room(
    workspace: Workspace, kind: str, *members: Account | Agent, since: datetime = EARLY
) -> Conversation:
    conversation = make_conversation(workspace, kind)
    for member in members:
        join(conversation, member, joined_at=since)
    return conversation


def destination(
    workspace: Workspace, kind: str, agent: Agent, requester: Account, *others: Account
) -> Conversation:
    """D with the agent, and the requester (and ``others``) as readers where D has readers."""
    if kind == "unknown":
        return room(workspace, kind, agent)
    return room(workspace, kind, agent, requester, *others)


def pair(
    source: Conversation,
    anchor_sender: Account | Agent,
    probe_sender: Account | Agent | None = None,
    *,
    anchor_at: datetime | None = None,
    probe_at: datetime | None = None,
    probe_first: bool = False,
    **probe_extra,
) -> tuple[Message, Message]:
    """The anchor and the probe, adjacent in S (anchor first unless ``probe_first``)."""
    anchor_at = anchor_at or at(1)
    probe_at = probe_at or at(2)

    def anchor() -> Message:
        return post(source, anchor_sender, f"{ANCHOR} notes", created_at=anchor_at)

    def probe() -> Message:
        sender = probe_sender or anchor_sender
        return post(source, sender, f"{PROBE} notes", created_at=probe_at, **probe_extra)

    if probe_first:
        p = probe()
        return anchor(), p
    a = anchor()
    return a, probe()


def run_for(agent: Agent, dest: Conversation, requester: Account, **kwargs) -> Run:
    run, _ = make_run(agent, dest, requester, **kwargs)
    return run


def link(a: Account, b: Account, state: str = "verified") -> None:
    made = services.identity_link_create(
        workspace_id=a.workspace_id, account_id=a.id, linked_account_id=b.id
    )
    if state in ("verified", "revoked"):
        made = services.identity_link_verify(link=made)
    if state == "revoked":
        services.identity_link_revoke(link=made)


# --- rule 3: source kind x destination kind ----------------------------------------------------


def public_source(dest_kind: str) -> Callable[[], Case]:
    def build() -> Case:
        workspace, agent, (r, b) = tenant(2)
        source = room(workspace, "public", agent, b)  # R never joined nor spoke in S
        anchor, probe = pair(source, b)
        dest = destination(workspace, dest_kind, agent, r)
        return Case(run_for(agent, dest, r), anchor, probe)

    return build


def unknown_source(dest_kind: str) -> Callable[[], Case]:
    def build() -> Case:
        workspace, agent, (r,) = tenant(1)
        source = room(workspace, "unknown", agent, r)
        anchor, probe = pair(source, r)
        dest = destination(workspace, dest_kind, agent, r)
        return Case(run_for(agent, dest, r), anchor, probe)

    return build


def unknown_source_is_destination() -> Case:
    workspace, agent, (r,) = tenant(1)
    dest = room(workspace, "unknown", agent, r)
    anchor, probe = pair(dest, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_private_subset() -> Case:
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, r, b)
    anchor, probe = pair(source, b)
    dest = destination(workspace, "private", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_private_same_readers() -> Case:
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, r, b)
    anchor, probe = pair(source, b)
    dest = destination(workspace, "private", agent, r, b)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_private_not_subset() -> Case:
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, r)
    anchor, probe = pair(source, r)
    dest = destination(workspace, "private", agent, r, b)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_private_disjoint_extra() -> Case:
    workspace, agent, (r, b, c) = tenant(3)
    source = room(workspace, "private", agent, r, b)
    anchor, probe = pair(source, b)
    dest = destination(workspace, "private", agent, r, c)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_source_reader_left() -> Case:
    """R read S once but has left: only *current* readers of S count."""
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, r, b)
    anchor, probe = pair(source, r)
    services.membership_leave(conversation=source, account_id=r.id, left_at=at(30))
    dest = destination(workspace, "private", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_dest_reader_left() -> Case:
    """B has left D, so D's readership is {R}, contained in S's."""
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, r)
    anchor, probe = pair(source, r)
    dest = destination(workspace, "private", agent, r, b)
    services.membership_leave(conversation=dest, account_id=b.id, left_at=at(30))
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_public_everyone_reads() -> Case:
    workspace, agent, (r, b) = tenant(2)  # the workspace's accounts are exactly R and B
    source = room(workspace, "private", agent, r, b)
    anchor, probe = pair(source, b)
    dest = destination(workspace, "public", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_public_not_everyone() -> Case:
    workspace, agent, (r, b, _c) = tenant(3)  # C is in the workspace but not in S
    source = room(workspace, "private", agent, r, b)
    anchor, probe = pair(source, b)
    dest = destination(workspace, "public", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_unknown() -> Case:
    workspace, agent, (r, b) = tenant(2)  # every account reads S, still withheld
    source = room(workspace, "private", agent, r, b)
    anchor, probe = pair(source, b)
    dest = destination(workspace, "unknown", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_direct_reader_reads() -> Case:
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, r, b)
    anchor, probe = pair(source, b)
    dest = destination(workspace, "direct", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_to_direct_reader_absent() -> Case:
    workspace, agent, (r, b) = tenant(2)
    source = room(workspace, "private", agent, b)
    anchor, probe = pair(source, b)
    dest = destination(workspace, "direct", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def private_source_linked_reader() -> Case:
    """S is read by R's verified alias only: links do not widen the private rule."""
    workspace, agent, (r, alias) = tenant(2)
    link(alias, r)
    source = room(workspace, "private", agent, alias)
    anchor, probe = pair(source, alias)
    dest = destination(workspace, "direct", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


# --- rule 3: direct continuity -----------------------------------------------------------------


def direct_source(
    *, reader: str = "same", state: str | None = None, dest_kind: str = "direct"
) -> Callable[[], Case]:
    """S is direct with one reader; D has R as its reader.

    ``reader``: ``same`` (S's reader is R), ``linked`` (S's reader is linked to R in
    ``state``), ``reverse`` (a verified link recorded the other way round), ``chained``
    (S's reader ~ X ~ R, both verified), ``stranger`` (no link at all).
    """

    def build() -> Case:
        workspace, agent, (r, other, middle) = tenant(3)
        source_reader = r if reader == "same" else other
        if reader == "linked":
            link(other, r, state or "verified")
        elif reader == "reverse":
            link(r, other)
        elif reader == "chained":
            link(other, middle)
            link(middle, r)
        source = room(workspace, "direct", agent, source_reader)
        anchor, probe = pair(source, source_reader, agent)
        dest = destination(workspace, dest_kind, agent, r)
        return Case(run_for(agent, dest, r), anchor, probe)

    return build


# --- rule 1: membership intervals (S public, so rule 3 always passes) ---------------------------


def interval(case: str) -> Callable[[], Case]:
    def build() -> Case:
        workspace, agent, (r, b) = tenant(2)
        dest = destination(workspace, "public", agent, r)
        source = room(workspace, "public", b)
        if case == "joined_after":
            join(source, agent, joined_at=at(5))
            anchor, probe = pair(source, b, anchor_at=at(6), probe_at=at(1), probe_first=True)
        elif case == "left_before":
            join(source, agent, joined_at=EARLY)
            anchor, probe = pair(source, b, anchor_at=at(1), probe_at=at(10))
            services.membership_leave(conversation=source, agent_id=agent.id, left_at=at(5))
        elif case == "observed_then_left":
            join(source, agent, joined_at=EARLY)
            anchor, probe = pair(source, b, anchor_at=at(1), probe_at=at(2))
            services.membership_leave(conversation=source, agent_id=agent.id, left_at=at(5))
        elif case == "at_joined":
            join(source, agent, joined_at=at(0))
            anchor, probe = pair(source, b, anchor_at=at(1), probe_at=at(0), probe_first=True)
        elif case == "at_left":
            join(source, agent, joined_at=EARLY)
            anchor, probe = pair(source, b, anchor_at=at(1), probe_at=at(5))
            services.membership_leave(conversation=source, agent_id=agent.id, left_at=at(5))
        elif case in ("rejoin_gap", "after_rejoin"):
            join(source, agent, joined_at=EARLY)
            services.membership_leave(conversation=source, agent_id=agent.id, left_at=at(5))
            join(source, agent, joined_at=at(20))
            probe_at = at(10) if case == "rejoin_gap" else at(25)
            anchor, probe = pair(source, b, anchor_at=at(1), probe_at=probe_at)
        else:  # pragma: no cover - a typo in the table
            raise AssertionError(case)
        return Case(run_for(agent, dest, r), anchor, probe)

    return build


# --- rules 2 and 5, and the workspace boundary --------------------------------------------------


def deleted_probe() -> Case:
    workspace, agent, (r,) = tenant(1)
    source = room(workspace, "public", agent, r)
    anchor, probe = pair(source, r)
    services.message_delete(message=probe)
    dest = destination(workspace, "private", agent, r)
    return Case(run_for(agent, dest, r), anchor, probe)


def in_destination(role: str) -> Callable[[], Case]:
    """Probe in D itself: plain (eligible), the run's current message, or recent history."""

    def build() -> Case:
        workspace, agent, (r,) = tenant(1)
        dest = destination(workspace, "public", agent, r)
        anchor, probe = pair(dest, r)
        kwargs = {"current": probe} if role == "current" else {}
        if role == "recent":
            kwargs = {"recent": (probe,)}
        return Case(run_for(agent, dest, r, **kwargs), anchor, probe)

    return build


def private_destination_itself() -> Case:
    workspace, agent, (r, b) = tenant(2)
    dest = destination(workspace, "private", agent, r, b)
    anchor, probe = pair(dest, b)
    return Case(run_for(agent, dest, r), anchor, probe)


def direct_destination_itself() -> Case:
    workspace, agent, (r,) = tenant(1)
    dest = destination(workspace, "direct", agent, r)
    anchor, probe = pair(dest, r, agent)
    return Case(run_for(agent, dest, r), anchor, probe)


def other_workspace() -> Case:
    workspace, agent, (r,) = tenant(1)
    dest = destination(workspace, "public", agent, r)
    elsewhere, other_agent, (stranger,) = tenant(1)
    source = room(elsewhere, "public", other_agent, stranger)
    anchor, probe = pair(source, stranger)
    return Case(run_for(agent, dest, r), anchor, probe)


# --- rule 4: lineage ---------------------------------------------------------------------------


def lineage(
    *, source_kind: str = "private", depth: int = 1, dest: str = "denies"
) -> Callable[[], Case]:
    """An agent reply in public room P (the probe) based on a message X in a ``source_kind`` room.

    X's room is read by R and B (private / unknown), or is R's direct conversation. ``dest``:
    ``permits`` is a private D read by R only; ``denies`` is a private D read by R and C;
    ``public`` and ``unknown`` are D of that kind (C, who does not read X's room, is in the
    workspace). ``depth`` 2 puts a first reply A (based on X) in another public room and bases
    the probe on A only.
    """

    def build() -> Case:
        workspace, agent, (r, b, c) = tenant(3)
        readers = (r,) if source_kind == "direct" else (r, b)
        origin = room(workspace, source_kind, agent, *readers)
        source_message = post(origin, r, "origin notes", created_at=at(-30))
        based_on = source_message
        if depth == 2:
            relay = room(workspace, "public", agent, r, b, c)
            based_on = post(relay, agent, "relay notes", created_at=at(-20), lineage=[based_on.id])
        public = room(workspace, "public", agent, r, b, c)
        anchor, probe = pair(public, r, agent, lineage=[based_on.id])
        if dest == "permits":
            target = destination(workspace, "private", agent, r)
        elif dest == "denies":
            target = destination(workspace, "private", agent, r, c)
        elif dest == "direct":
            target = destination(workspace, "direct", agent, r)
        else:
            target = destination(workspace, dest, agent, r)
        return Case(run_for(agent, target, r), anchor, probe)

    return build


# --- speaker filters ---------------------------------------------------------------------------


def speaker(filter_value: str, probe_by: str) -> Callable[[], Case]:
    """A public room where the anchor is a hit for ``speaker``; the probe's author varies.

    ``probe_by``: ``requester``, ``verified`` / ``pending`` / ``revoked`` (an account linked to
    R in that state; the message predates the link's verification), ``chained`` (linked to R's
    verified alias only), ``other`` (an unlinked account), ``agent`` (the run's agent),
    ``other_agent`` (another agent of the workspace).
    """

    def build() -> Case:
        workspace, agent, (r, alias, middle, other) = tenant(4)
        second_agent = make_agent(workspace, "Second agent")
        source = room(workspace, "public", agent, second_agent, r, alias, middle, other)
        authors = {
            "requester": r,
            "verified": alias,
            "pending": alias,
            "revoked": alias,
            "chained": other,
            "other": other,
            "agent": agent,
            "other_agent": second_agent,
        }
        anchor_by = agent if filter_value == "you" else r
        anchor, probe = pair(source, anchor_by, authors[probe_by])
        # Links are made (and verified) now, after both messages were written.
        if probe_by in ("verified", "pending", "revoked"):
            link(alias, r, probe_by)
        elif probe_by == "chained":
            link(r, middle)
            link(middle, other)
        dest = destination(workspace, "private", agent, r)
        return Case(run_for(agent, dest, r), anchor, probe, {"speaker": filter_value})

    return build


# --- the table ---------------------------------------------------------------------------------

ROWS = [
    # rule 3, public S: any D of the workspace, even if R never spoke in S
    Row("public S -> public D", public_source("public"), True, True),
    Row("public S -> direct D", public_source("direct"), True, True),
    Row("public S -> private D", public_source("private"), True, True),
    Row("public S -> unknown D", public_source("unknown"), True, True),
    # rule 3, unknown S: withheld from everything
    Row("unknown S -> public D", unknown_source("public"), False, False, anchor=False),
    Row("unknown S -> direct D", unknown_source("direct"), False, False, anchor=False),
    Row("unknown S -> private D", unknown_source("private"), False, False, anchor=False),
    Row("unknown S -> unknown D", unknown_source("unknown"), False, False, anchor=False),
    Row("unknown S is D itself", unknown_source_is_destination, False, False, anchor=False),
    # rule 3, private S: D's complete readership must be current readers of S
    Row("private S -> private D readers subset", private_to_private_subset, True, True),
    Row("private S -> private D same readers", private_to_private_same_readers, True, True),
    Row("private S is D itself", private_destination_itself, True, True),
    Row(
        "private S -> private D not subset",
        private_to_private_not_subset,
        False,
        False,
        anchor=False,
    ),
    Row(
        "private S -> private D with an outsider",
        private_to_private_disjoint_extra,
        False,
        False,
        anchor=False,
    ),
    Row(
        "private S whose reader R left -> private D",
        private_source_reader_left,
        False,
        False,
        anchor=False,
    ),
    Row("private S -> private D whose other reader left", private_dest_reader_left, True, True),
    Row("private S -> public D everyone reads S", private_to_public_everyone_reads, True, True),
    Row(
        "private S -> public D not everyone reads S",
        private_to_public_not_everyone,
        False,
        False,
        anchor=False,
    ),
    Row("private S -> unknown D", private_to_unknown, False, False, anchor=False),
    Row("private S -> direct D reader reads S", private_to_direct_reader_reads, True, True),
    Row(
        "private S -> direct D reader not in S",
        private_to_direct_reader_absent,
        False,
        False,
        anchor=False,
    ),
    Row(
        "private S read by R's verified alias -> direct D",
        private_source_linked_reader,
        False,
        False,
        anchor=False,
    ),
    # rule 3, direct S: direct continuity
    Row("direct S same reader -> direct D", direct_source(), True, True),
    Row("direct S is D itself", direct_destination_itself, True, True),
    Row("direct S verified link -> direct D", direct_source(reader="linked"), True, True),
    Row("direct S verified link reversed -> direct D", direct_source(reader="reverse"), True, True),
    Row(
        "direct S pending link -> direct D",
        direct_source(reader="linked", state="pending"),
        False,
        False,
        anchor=False,
    ),
    Row(
        "direct S revoked link -> direct D",
        direct_source(reader="linked", state="revoked"),
        False,
        False,
        anchor=False,
    ),
    Row(
        "direct S chained links -> direct D",
        direct_source(reader="chained"),
        False,
        False,
        anchor=False,
    ),
    Row(
        "direct S unrelated reader -> direct D",
        direct_source(reader="stranger"),
        False,
        False,
        anchor=False,
    ),
    Row(
        "direct S same reader -> private D",
        direct_source(dest_kind="private"),
        False,
        False,
        anchor=False,
    ),
    Row(
        "direct S same reader -> public D",
        direct_source(dest_kind="public"),
        False,
        False,
        anchor=False,
    ),
    Row(
        "direct S same reader -> unknown D",
        direct_source(dest_kind="unknown"),
        False,
        False,
        anchor=False,
    ),
    # rule 1: membership intervals [joined_at, left_at)
    Row("agent joined after the message", interval("joined_after"), False, False),
    Row("agent left before the message", interval("left_before"), False, False),
    Row("message observed, agent left later", interval("observed_then_left"), True, True),
    Row("message exactly at joined_at", interval("at_joined"), True, True),
    Row("message exactly at left_at", interval("at_left"), False, False),
    Row("message in the gap before a rejoin", interval("rejoin_gap"), False, False),
    Row("message after a rejoin", interval("after_rejoin"), True, True),
    # rules 2 and 5, workspace boundary
    Row("deleted message", deleted_probe, False, False),
    Row("plain message in D", in_destination("plain"), True, True),
    Row("run's current message", in_destination("current"), False, False),
    Row("run's recent history", in_destination("recent"), False, False),
    Row("message in another workspace", other_workspace, False, False, anchor=False),
    # rule 4: lineage (transitive)
    Row("lineage private source, D denied", lineage(dest="denies"), False, False),
    Row("lineage private source, D permitted", lineage(dest="permits"), True, True),
    Row("lineage private source, public D", lineage(dest="public"), False, False),
    Row("lineage private source, unknown D", lineage(dest="unknown"), False, False),
    Row("lineage depth 2, D denied", lineage(depth=2, dest="denies"), False, False),
    Row("lineage depth 2, D permitted", lineage(depth=2, dest="permits"), True, True),
    Row(
        "lineage direct source, direct D", lineage(source_kind="direct", dest="direct"), True, True
    ),
    Row(
        "lineage direct source, private D",
        lineage(source_kind="direct", dest="permits"),
        False,
        False,
    ),
    Row(
        "lineage public source, public D", lineage(source_kind="public", dest="public"), True, True
    ),
    Row(
        "lineage unknown source, private D",
        lineage(source_kind="unknown", dest="permits"),
        False,
        False,
    ),
    # speaker filters (hits only; neighbours stay §3-eligible context)
    Row("speaker=requester: requester", speaker("requester", "requester"), True, True),
    Row("speaker=requester: verified link", speaker("requester", "verified"), True, True),
    Row("speaker=requester: pending link", speaker("requester", "pending"), False, True),
    Row("speaker=requester: revoked link", speaker("requester", "revoked"), False, True),
    Row("speaker=requester: chained link", speaker("requester", "chained"), False, True),
    Row("speaker=requester: unlinked account", speaker("requester", "other"), False, True),
    Row("speaker=requester: the agent", speaker("requester", "agent"), False, True),
    Row("speaker=you: the run's agent", speaker("you", "agent"), True, True),
    Row("speaker=you: the requester", speaker("you", "requester"), False, True),
    Row("speaker=you: another agent", speaker("you", "other_agent"), False, True),
    Row("speaker=anyone: unlinked account", speaker("anyone", "other"), True, True),
]


# --- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_hits_follow_the_perspective(db, row):
    """SPEC §3 rules 1-5 (and §5 ``speaker``): the probe is a hit exactly when eligible."""
    case = row.build()

    assert set(hit_ids(case.run, PROBE, **case.filters)) == ({case.probe.id} if row.hit else set())


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_neighbours_follow_the_perspective(db, row):
    """SPEC §3 "Neighbour messages pass exactly the same checks": the probe, adjacent to the
    anchor in S, is among the anchor hit's neighbours exactly when it is eligible."""
    case = row.build()

    result = history(case.run, ANCHOR, **case.filters)

    assert {hit.message.id for hit in result.hits} == ({case.anchor.id} if row.anchor else set())
    shown = {m.id for hit in result.hits for m in (*hit.before, *hit.after)}
    assert shown == ({case.probe.id} if row.neighbour else set())


def test_neighbours_skip_ineligible_and_keep_seq_order(db, descending_ids):
    """SPEC §5/§3: up to two *eligible* neighbours each side, nearest by seq, in seq order;
    deleted, unobserved and lineage-restricted messages are skipped, never shown."""
    workspace, agent, (r, b, c) = tenant(3)
    origin = room(workspace, "private", agent, r, b)  # does not permit D (C reads D)
    secret = post(origin, b, "origin notes", created_at=at(-30))
    dest = destination(workspace, "private", agent, r, c)
    source = room(workspace, "public", agent, r, b, c)

    def say(minute: float, text: str = "filler notes", sender=r, **extra) -> Message:
        return post(source, sender, text, created_at=at(minute), **extra)

    far_before = say(1)
    before_2 = say(5)  # created after before_1: seq order, not time order, must win
    deleted_before = say(3)
    before_1 = say(4)
    unobserved_before = say(150)  # written while the agent was away (see below)
    anchor = say(6, f"{ANCHOR} notes")
    restricted_after = say(7, sender=agent, lineage=[secret.id])
    after_1 = say(8)
    deleted_after = say(9)
    after_2 = say(10)
    far_after = say(11)
    for message in (deleted_before, deleted_after):
        services.message_delete(message=message)
    services.membership_leave(conversation=source, agent_id=agent.id, left_at=at(100))
    join(source, agent, joined_at=at(200))
    run = run_for(agent, dest, r)

    result = history(run, ANCHOR)

    (hit,) = result.hits
    assert hit.message.id == anchor.id
    assert [m.id for m in hit.before] == [before_2.id, before_1.id]
    assert [m.id for m in hit.after] == [after_1.id, after_2.id]
    assert [m.seq for m in (*hit.before, hit.message, *hit.after)] == sorted(
        m.seq for m in (*hit.before, hit.message, *hit.after)
    )
    hidden = {deleted_before, unobserved_before, restricted_after, deleted_after}
    not_shown = {far_before, far_after} | hidden
    assert not {m.id for m in not_shown} & {m.id for m in (*hit.before, *hit.after)}
