"""search_history against a plain-Python oracle of SPEC §3 over random small worlds.

Hypothesis draws a *plan* (plain data: accounts, rooms of every kind, membership intervals,
identity links in every state, messages with lineage, deletions, a run). The plan is built
through the real services, searched, and the result compared with what the oracle below
computes from the plan alone. The oracle is written from the spec, not from the production
predicate, so the two can only agree if the production code follows the contract.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import combinations

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from audit_app.lifecycle import Actor
from messages_app import services
from messages_app.lifecycle import erasure
from messages_app.models import Message, MessageLineage, RunEvidence
from search_app.errors import DeliveryBlocked
from search_app.runs.services import run_reply
from tests import factories
from tests.factories import at

# Room kinds to draw from: every kind, but the ones that can ever be eligible more often.
ROOM_KINDS = ("public", "private", "direct", "unknown", "public", "private", "direct")
# A short timeline makes joins, leaves and messages often fall on the same minute, which is
# where the half-open interval [joined_at, left_at) is easiest to get wrong.
LAST_MINUTE = 40
WORDS = ("alpha", "bravo", "migration", "report", "status", "rollout")
LIMIT = 20
NEIGHBOURS = 2
SPEAKERS = ("anyone", "you", "requester")
# Examples per property: the file stays near a minute on a busy two-core machine.
SEARCH_EXAMPLES = 40
DELIVERY_EXAMPLES = 30
OTHER_RUN_SPEAKERS = ("anyone", "requester")

AGENT = ("agent", 0)  # the run's agent A
OTHER_AGENT = ("agent", 1)
REQUESTER = ("account", 0)  # the run's requester R


@dataclass(frozen=True)
class LinkPlan:
    """One identity link between two accounts: created pending, then maybe verified/revoked."""

    account: int
    linked: int
    verified: bool
    revoked: bool


@dataclass(frozen=True)
class MessagePlan:
    conversation: int
    sender: tuple[str, int]
    minute: int
    words: tuple[str, ...]
    lineage: tuple[int, ...]


@dataclass(frozen=True)
class RunPlan:
    destination: int
    requester: int
    current: int | None = None
    recent: tuple[int, ...] = ()


@dataclass
class Plan:
    accounts: int
    second_agent: bool
    kinds: list[str]
    destination: int
    # (conversation, member) -> [(joined minute, left minute or None)], in time order.
    memberships: dict[tuple[int, tuple[str, int]], list[tuple[int, int | None]]]
    links: list[LinkPlan]
    messages: list[MessagePlan]
    deleted: set[int] = field(default_factory=set)
    current: int | None = None
    recent: list[int] = field(default_factory=list)
    # Per room, an account to ask from there in a second run (see ``runs``).
    other_requesters: list[int] = field(default_factory=list)

    def readers(self, conversation: int) -> set[int]:
        """Current human members (the last interval is open)."""
        return {
            number
            for (room, (kind, number)), intervals in self.memberships.items()
            if room == conversation and kind == "account" and intervals and intervals[-1][1] is None
        }

    def runs(self) -> list[RunPlan]:
        """The planned run, then up to two more runs from other rooms the agent is in now.

        Searching one world from several destinations (and requesters) is much cheaper than
        building more worlds, and is what exercises the direct-room and identity-link rules.
        """
        runs = [RunPlan(self.destination, 0, self.current, tuple(self.recent))]
        for room, kind in enumerate(self.kinds):
            intervals = self.memberships[room, AGENT]
            if room == self.destination or not intervals or intervals[-1][1] is not None:
                continue
            requester = self.other_requesters[room]
            readers = self.readers(room)
            if kind in ("direct", "private") and requester not in readers:
                if not readers:
                    continue
                requester = min(readers)
            runs.append(RunPlan(room, requester))
        return runs[:3]


# Membership histories of one member in one room, listed so that the common case comes first.
SHAPES = ("current", "current", "left then back", "left", "left twice", "never")
AGENT_SHAPES = ("current", "current", "current", "left then back", "left", "left twice", "never")
# A direct room has one human (its owner); anyone else there is a rarer, odd case.
OWNER_SHAPES = ("current", "current", "left then back", "left", "never")
STRANGER_SHAPES = ("never",) * 6 + ("left", "left twice", "current", "left then back")


@st.composite
def spans(draw, shapes: tuple[str, ...]) -> list[tuple[int, int | None]]:
    """Non-overlapping intervals in time order; the last one may be open (current)."""
    shape = draw(st.sampled_from(shapes))
    if shape == "never":
        return []
    count = 2 if shape in ("left then back", "left twice") else 1
    # Strictly increasing minutes: a start, then gaps (small, so boundaries meet messages).
    points = [draw(st.integers(0, LAST_MINUTE // 3))]
    for _ in range(2 * count - 1):
        points.append(points[-1] + draw(st.integers(1, LAST_MINUTE // 3)))
    result: list[tuple[int, int | None]] = [
        (points[2 * i], points[2 * i + 1]) for i in range(count)
    ]
    if shape in ("current", "left then back"):
        result[-1] = (result[-1][0], None)
    return result


@st.composite
def link_histories(draw, accounts: int) -> list[LinkPlan]:
    """Per pair of accounts, 0-2 links; every link but the last is revoked (one open per pair)."""
    links = []
    for first, second in combinations(range(accounts), 2):
        count = draw(st.integers(0, 2))
        for index in range(count):
            a, b = (first, second) if draw(st.booleans()) else (second, first)
            # Mostly live in the end: a live link is what the direct-room rule turns on.
            verified = draw(st.sampled_from((True, True, False)))
            revoked = True if index < count - 1 else draw(st.sampled_from((False, False, True)))
            links.append(LinkPlan(a, b, verified, revoked))
    return links


@st.composite
def worlds(draw) -> Plan:
    accounts = draw(st.integers(2, 4))
    second_agent = draw(st.booleans())
    kinds = draw(st.lists(st.sampled_from(ROOM_KINDS), min_size=2, max_size=5))
    destination = draw(st.integers(0, len(kinds) - 1))
    members = [("account", i) for i in range(accounts)] + [AGENT]
    if second_agent:
        members.append(OTHER_AGENT)

    memberships = {}
    for conversation, kind in enumerate(kinds):
        owner = draw(st.sampled_from([0, *range(accounts)]))  # often the requester
        if conversation == destination and kind == "direct":
            owner = 0
        for member in members:
            shapes = AGENT_SHAPES if member == AGENT else SHAPES
            if kind == "direct" and member[0] == "account":
                shapes = OWNER_SHAPES if member[1] == owner else STRANGER_SHAPES
            if conversation == destination and (
                member == AGENT or (member == REQUESTER and kind in ("direct", "private"))
            ):
                shapes = ("current", "left then back")  # the run needs them there now
            memberships[conversation, member] = draw(spans(shapes))

    links = draw(link_histories(accounts))

    # A sender need not be a member of the room it writes in; the run's agent writes the most.
    senders = [*members, AGENT]
    messages: list[MessagePlan] = []
    # Plain integers(0, 14) draws many empty worlds; the second branch keeps most examples busy.
    for index in range(draw(st.integers(0, 14) | st.integers(6, 14))):
        sender = draw(st.sampled_from(senders))
        lineage: list[int] = []
        if sender[0] == "agent" and index > 0:
            # Often a source that has a lineage of its own, so lineage goes two levels deep.
            derived = [i for i in range(index) if messages[i].lineage]
            for _ in range(draw(st.sampled_from((1, 0, 2)))):
                pool = derived if derived and draw(st.booleans()) else range(index)
                source = draw(st.sampled_from(pool))
                if source not in lineage:
                    lineage.append(source)
        # The destination twice as often as any other room.
        room = draw(st.sampled_from([destination, *range(len(kinds))]))
        # Counted back from the end (Hypothesis favours 0, and late messages are the ones a
        # current member has observed), or exactly when the agent joined or left the room.
        minute = LAST_MINUTE - draw(st.integers(0, LAST_MINUTE))
        edges = [point for span in memberships[room, AGENT] for point in span if point is not None]
        if edges and draw(st.booleans()):
            minute = draw(st.sampled_from(edges))
        messages.append(
            MessagePlan(
                conversation=room,
                sender=sender,
                minute=minute,
                words=tuple(draw(st.lists(st.sampled_from(WORDS), max_size=3))),
                lineage=tuple(lineage),
            )
        )

    indices = range(len(messages))
    deleted = {i for i in indices if draw(st.sampled_from((False, False, False, True)))}
    other_requesters = [draw(st.integers(0, accounts - 1)) for _ in kinds]
    in_destination = [i for i in indices if messages[i].conversation == destination]
    current = None
    recent: list[int] = []
    if in_destination:
        current = draw(st.none() | st.sampled_from(in_destination))
        recent = draw(st.lists(st.sampled_from(in_destination), unique=True, max_size=3))
    return Plan(
        accounts=accounts,
        second_agent=second_agent,
        kinds=kinds,
        destination=destination,
        memberships=memberships,
        links=links,
        messages=messages,
        deleted=deleted,
        current=current,
        recent=recent,
        other_requesters=other_requesters,
    )


# --- The oracle: SPEC §3 over the plan, without the database ----------------------------------


class Oracle:
    """SPEC §3 for one run, computed from the plan alone."""

    def __init__(self, plan: Plan, run: RunPlan):
        self.plan = plan
        self.run = run
        self.destination = run.destination
        self.readers = plan.readers

    def live_link(self, a: int, b: int) -> bool:
        """One verified, unrevoked link directly between a and b (links never chain)."""
        return any(
            {link.account, link.linked} == {a, b} and link.verified and not link.revoked
            for link in self.plan.links
        )

    def audience_permits(self, source: int) -> bool:
        """Rule 3: the audience of conversation ``source`` permits the destination."""
        kinds, d = self.plan.kinds, self.destination
        kind = kinds[source]
        if kind == "public":
            return True
        if kind == "direct":
            if kinds[d] != "direct":
                return False
            d_readers, s_readers = self.readers(d), self.readers(source)
            if len(d_readers) != 1 or len(s_readers) != 1:
                return False
            (d_reader,), (s_reader,) = d_readers, s_readers
            return d_reader == s_reader or self.live_link(d_reader, s_reader)
        if kind == "private":
            if kinds[d] == "unknown":
                return False
            # A public room's readers are every account of the workspace, even one in no room.
            everyone = set(range(self.plan.accounts))
            d_readers = everyone if kinds[d] == "public" else self.readers(d)
            return d_readers <= self.readers(source)
        return False  # unknown: withheld

    def observed(self, index: int) -> bool:
        """Rule 1: some interval of A in the message's conversation holds its created_at."""
        message = self.plan.messages[index]
        intervals = self.plan.memberships[message.conversation, AGENT]
        return any(
            joined <= message.minute and (left is None or message.minute < left)
            for joined, left in intervals
        )

    def sources(self, index: int) -> set[int]:
        """Every message in the lineage, transitively."""
        found: set[int] = set()
        todo = list(self.plan.messages[index].lineage)
        while todo:
            source = todo.pop()
            if source not in found:
                found.add(source)
                todo.extend(self.plan.messages[source].lineage)
        return found

    def eligible(self, index: int) -> bool:
        plan = self.plan
        return (
            self.observed(index)
            and index not in plan.deleted
            and self.audience_permits(plan.messages[index].conversation)
            and all(
                self.audience_permits(plan.messages[s].conversation) for s in self.sources(index)
            )
            and index != self.run.current
            and index not in self.run.recent
        )

    def requester_accounts(self) -> set[int]:
        """R and every account joined to R by a live link (whenever they wrote)."""
        requester = self.run.requester
        return {requester} | {
            a for a in range(self.plan.accounts) if a != requester and self.live_link(requester, a)
        }

    def hits(self, speaker: str = "anyone") -> set[int]:
        result = {i for i in range(len(self.plan.messages)) if self.eligible(i)}
        if speaker == "you":
            result = {i for i in result if self.plan.messages[i].sender == AGENT}
        elif speaker == "requester":
            wanted = self.requester_accounts()
            result = {
                i
                for i in result
                if self.plan.messages[i].sender[0] == "account"
                and self.plan.messages[i].sender[1] in wanted
            }
        return result


# --- Building the plan through the real services ----------------------------------------------


@dataclass
class Built:
    runs: list  # one per ``plan.runs()``
    index_of: dict  # message id -> plan index
    # The objects, by plan index, for the delivery test's mutations.
    workspace: object = None
    accounts: list = field(default_factory=list)
    agents: list = field(default_factory=list)
    conversations: list = field(default_factory=list)
    links: list = field(default_factory=list)
    messages: list = field(default_factory=list)


def build(plan: Plan) -> Built:
    factories.other_workspace()  # a second tenant with a matching message that must never show
    workspace = factories.make_workspace()
    accounts = [factories.make_account(workspace) for _ in range(plan.accounts)]
    agents = [factories.make_agent(workspace, "Run agent")]
    if plan.second_agent:
        agents.append(factories.make_agent(workspace, "Second agent"))
    members = {"account": accounts, "agent": agents}
    conversations = [factories.make_conversation(workspace, kind) for kind in plan.kinds]

    for (conversation, (kind, number)), intervals in plan.memberships.items():
        room, member = conversations[conversation], members[kind][number]
        for joined, left in intervals:
            factories.join(room, member, joined_at=at(joined))
            if left is not None:
                key = "account_id" if kind == "account" else "agent_id"
                services.membership_leave(conversation=room, left_at=at(left), **{key: member.id})

    links = []
    for link_plan in plan.links:
        link = services.identity_link_create(
            workspace_id=workspace.id,
            account_id=accounts[link_plan.account].id,
            linked_account_id=accounts[link_plan.linked].id,
        )
        if link_plan.verified:
            link = services.identity_link_verify(link=link)
        if link_plan.revoked:
            link = services.identity_link_revoke(link=link)
        links.append(link)

    messages = []
    for message_plan in plan.messages:
        kind, number = message_plan.sender
        messages.append(
            factories.post(
                conversations[message_plan.conversation],
                members[kind][number],
                " ".join(("sample", *message_plan.words)),
                created_at=at(message_plan.minute),
                lineage=[messages[source].id for source in message_plan.lineage],
            )
        )
    for index in sorted(plan.deleted):
        services.message_delete(message=messages[index])

    runs = [
        factories.make_run(
            agents[0],
            conversations[run_plan.destination],
            accounts[run_plan.requester],
            current=messages[run_plan.current] if run_plan.current is not None else None,
            recent=tuple(messages[i] for i in run_plan.recent),
        )[0]
        for run_plan in plan.runs()
    ]
    return Built(
        runs=runs,
        index_of={message.id: i for i, message in enumerate(messages)},
        workspace=workspace,
        accounts=accounts,
        agents=agents,
        conversations=conversations,
        links=links,
        messages=messages,
    )


def describe(plan: Plan, oracle: Oracle) -> None:
    """Hypothesis events, so ``--hypothesis-show-statistics`` shows which rules were exercised."""
    eligible = oracle.hits()
    destination = oracle.run.destination
    event(f"eligible messages: {min(len(eligible), 5)}{'+' if len(eligible) >= 5 else ''}")
    for index in eligible:
        room = plan.messages[index].conversation
        event(f"eligible from a {plan.kinds[room]} room for a {plan.kinds[destination]} one")
        if plan.kinds[room] == "direct" and plan.readers(room) != plan.readers(destination):
            event("eligible from a direct room through a live identity link")
        if any(plan.messages[s].lineage for s in oracle.sources(index)):
            event("eligible with lineage two levels deep")
    for index, message in enumerate(plan.messages):
        edges = {p for span in plan.memberships[message.conversation, AGENT] for p in span}
        if message.minute in edges:
            event("a message written at the minute the agent joined or left")
        if (
            oracle.observed(index)
            and index not in plan.deleted
            and oracle.audience_permits(message.conversation)
            and not oracle.eligible(index)
            and index not in oracle.run.recent
            and index != oracle.run.current
        ):
            event("withheld only because of its lineage")


class _Rollback(Exception):
    """Raised to undo one example's world."""


def check_search(plan: Plan, oracle: Oracle, run, index_of: dict, speaker: str):
    """One search_history call against the oracle: hits, then each hit's neighbours. Returns
    the search's result."""
    expected = oracle.hits(speaker)
    eligible = oracle.hits("anyone")
    result = factories.history(run, "sample", limit=LIMIT, speaker=speaker)
    hits = [index_of.get(hit.message.id) for hit in result.hits]

    assert len(hits) == len(set(hits)), "a message is returned twice"
    if len(expected) > LIMIT:
        assert set(hits) <= expected
        assert len(hits) == LIMIT
    else:
        assert set(hits) == expected, (speaker, sorted(hits, key=str), sorted(expected))

    for hit, index in zip(result.hits, hits, strict=True):
        conversation = plan.messages[index].conversation
        # Messages are posted in plan order, so within a conversation plan order is seq order.
        same_room = [i for i in sorted(eligible) if plan.messages[i].conversation == conversation]
        position = same_room.index(index)
        want_before = same_room[max(position - NEIGHBOURS, 0) : position]
        want_after = same_room[position + 1 : position + 1 + NEIGHBOURS]
        got_before = [index_of.get(m.id) for m in hit.before]
        got_after = [index_of.get(m.id) for m in hit.after]
        assert got_before == want_before, (speaker, index, got_before, want_before)
        assert got_after == want_after, (speaker, index, got_after, want_after)
    return result


def plan_of(
    kinds: list[str],
    members: dict[tuple[int, tuple[str, int]], list[tuple[int, int | None]]],
    messages: list[MessagePlan],
    *,
    accounts: int = 3,
    links: tuple[LinkPlan, ...] = (),
    **rest,
) -> Plan:
    """A hand-written plan: members not named were never in a room."""
    everyone = [("account", i) for i in range(accounts)] + [AGENT]
    memberships = {(room, m): [] for room in range(len(kinds)) for m in everyone}
    memberships.update(members)
    return Plan(
        accounts=accounts,
        second_agent=False,
        kinds=kinds,
        destination=0,
        memberships=memberships,
        links=list(links),
        messages=messages,
        other_requesters=[0] * len(kinds),
        **rest,
    )


def said(room: int, sender: tuple[str, int], minute: int, *lineage: int) -> MessagePlan:
    return MessagePlan(room, sender, minute, (), lineage)


NOW = [(0, None)]
# Direct rooms of accounts 0 (the requester), 1, 2 and 3. 0-1 and 1-2 are linked, but links do
# not chain, so 2's room stays closed to 0's; 0-3 is only pending and 0-2 revoked. An agent reply
# inherits its sources' restrictions, two levels deep.
LINKS_DO_NOT_CHAIN = plan_of(
    ["direct", "direct", "direct", "direct", "private"],
    {
        **{(room, AGENT): NOW for room in range(5)},
        (0, ("account", 0)): NOW,
        (1, ("account", 1)): NOW,
        (2, ("account", 2)): NOW,
        (3, ("account", 3)): NOW,
        (4, ("account", 0)): NOW,
        (4, ("account", 1)): NOW,
    },
    [
        said(0, ("account", 0), 5),  # 0: the run's current message
        said(1, ("account", 1), 5),  # 1: 1's room, live link to 0: allowed
        said(2, ("account", 2), 5),  # 2: 2's room, 2-0 only through 1: withheld
        said(3, ("account", 3), 5),  # 3: 3's room, pending link: withheld
        said(0, AGENT, 6, 1),  # 4: based on 1: allowed
        said(0, AGENT, 7, 4),  # 5: based on 4, itself based on 1: allowed
        said(0, AGENT, 8, 2),  # 6: based on 2: withheld
        said(1, AGENT, 9, 5),  # 7: in 1's room, based on 5, 4 and 1: allowed
        said(1, AGENT, 10, 6),  # 8: inherits 2 through 6: withheld
        said(4, AGENT, 11, 3),  # 9: private room {0, 1}, but based on 3: withheld
        said(4, ("account", 1), 12),  # 10: private room {0, 1}: allowed
    ],
    accounts=4,
    links=(
        LinkPlan(0, 1, verified=True, revoked=False),
        LinkPlan(2, 1, verified=True, revoked=False),
        LinkPlan(0, 3, verified=False, revoked=False),
        LinkPlan(2, 0, verified=True, revoked=True),
    ),
    current=0,
)
# The agent's interval is half-open: a message at the minute it joined is observed, one at the
# minute it left is not. A public destination's readers are every account, so a private room
# that one account has left is closed to it; an unknown room is always closed.
INTERVAL_EDGES = plan_of(
    ["public", "private", "private", "unknown"],
    {
        (0, AGENT): NOW,
        (1, AGENT): [(5, 10), (20, None)],
        (2, AGENT): NOW,
        (3, AGENT): NOW,
        **{(room, ("account", i)): NOW for room in (1, 3) for i in range(3)},
        (2, ("account", 0)): NOW,
        (2, ("account", 1)): NOW,
        (2, ("account", 2)): [(0, 3)],
    },
    [
        said(1, ("account", 1), 4),  # 0: before the agent joined
        said(1, ("account", 1), 5),  # 1: the minute it joined: observed
        said(1, ("account", 2), 9),  # 2: observed
        said(1, ("account", 2), 10),  # 3: the minute it left: not observed
        said(1, ("account", 0), 15),  # 4: while it was away
        said(1, ("account", 0), 20),  # 5: the minute it came back: observed
        said(2, ("account", 0), 21),  # 6: account 2 left this room: withheld
        said(3, ("account", 0), 22),  # 7: unknown audience: withheld
        said(0, AGENT, 23, 5),  # 8: based on 5: allowed
        said(0, AGENT, 24, 6),  # 9: based on 6: withheld
        said(0, AGENT, 25, 7),  # 10: based on 7: withheld
        said(0, ("account", 0), 26),  # 11: already in the prompt (recent history)
    ],
    recent=[11],
)


@settings(
    max_examples=SEARCH_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=worlds())
@example(plan=LINKS_DO_NOT_CHAIN)
@example(plan=INTERVAL_EDGES)
def test_search_history_returns_exactly_what_the_spec_allows(db, plan):
    """Every eligible message and nothing else, with exactly the eligible neighbours."""
    run_plans = plan.runs()
    for run_plan in run_plans:
        describe(plan, Oracle(plan, run_plan))
    try:
        with transaction.atomic():
            built = build(plan)
            for number, (run_plan, run) in enumerate(zip(run_plans, built.runs, strict=True)):
                oracle = Oracle(plan, run_plan)
                # Every speaker for the planned run; the extra runs vary destination and requester.
                speakers = SPEAKERS if number == 0 else OTHER_RUN_SPEAKERS
                for speaker in speakers:
                    check_search(plan, oracle, run, built.index_of, speaker)
            raise _Rollback
    except _Rollback:
        pass


def erase_account(plan: Plan, built: Built, pick: int, after: Plan) -> Plan:
    """Erase an account (right to erasure), preferring one whose messages are lineage sources:
    its messages are deleted and its identity links removed (for the oracle: never live again),
    and every lineage row stays."""
    sources = {source for message in plan.messages for source in message.lineage}
    writers = sorted(
        {plan.messages[s].sender[1] for s in sources if plan.messages[s].sender[0] == "account"}
    )
    pool = writers or list(range(plan.accounts))
    account = pool[pick % len(pool)]
    lineage = sorted(MessageLineage.objects.values_list("message_id", "source_id", "direct"))
    erasure.account_erase(
        workspace_id=built.workspace.id,
        account_id=built.accounts[account].id,
        actor=Actor(label="oracle"),
    )
    assert sorted(MessageLineage.objects.values_list("message_id", "source_id", "direct")) == (
        lineage
    )
    erased = {
        i for i, message in enumerate(plan.messages) if message.sender == ("account", account)
    }
    after.deleted |= erased
    after.links = [
        replace(link, revoked=True) if account in (link.account, link.linked) else link
        for link in after.links
    ]
    event(f"erasure of a {'source writer' if writers else 'plain account'}")
    if erased & sources:
        event("erasure of messages other messages are based on")
    return after


ERASURE_EXAMPLES = 20


@settings(
    max_examples=ERASURE_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=worlds(), pick=st.integers(0, 1000))
@example(plan=LINKS_DO_NOT_CHAIN, pick=1)
@example(plan=INTERVAL_EDGES, pick=0)
def test_after_an_erasure_search_returns_exactly_what_the_spec_allows(db, plan, pick):
    """Erase an account (preferably one whose messages others are based on), then search from
    every run: the erased messages are gone, and everything derived from them is returned
    exactly where its inherited restrictions allow, no more."""
    try:
        with transaction.atomic():
            built = build(plan)
            after = erase_account(
                plan, built, pick, replace(plan, links=list(plan.links), deleted=set(plan.deleted))
            )
            for run_plan, run in zip(plan.runs(), built.runs, strict=True):
                oracle = Oracle(after, run_plan)
                if any(plan.messages[i].lineage for i in oracle.hits()):
                    event("erasure: a derived message is still returned")
                check_search(after, oracle, run, built.index_of, "anyone")
            raise _Rollback
    except _Rollback:
        pass


# --- Delivery (SPEC §4): the final check and the lineage later searches inherit ---------------

# What may change between the run's search and its reply.
MUTATIONS = ("none", "revoke", "reader", "delete", "erase")
# The reply is written "now", after every planned minute.
REPLY_MINUTE = 10**6
REPLY_WORD = "replyword"


@st.composite
def delivery_worlds(draw) -> Plan:
    """Worlds whose agent has been in every room from the start.

    Rule 1 cannot change between a search and its reply, and a world where the agent observed
    everything returns far more evidence, which is what the delivery check is about.
    """
    plan = draw(worlds())
    memberships = dict(plan.memberships)
    for room in range(len(plan.kinds)):
        memberships[room, AGENT] = [(0, None)]
    return replace(plan, memberships=memberships)


# D is 0's direct room; 1's and 2's direct rooms both reach it through a live link, but links
# do not chain: a reply in D based on both reaches neither 1's room nor 2's (lineage).
LINKED_ROOMS = plan_of(
    ["direct", "direct", "direct"],
    {
        **{(room, AGENT): NOW for room in range(3)},
        **{(room, ("account", room)): NOW for room in range(3)},
    },
    [said(1, ("account", 1), 5), said(2, ("account", 2), 6)],
    links=(
        LinkPlan(0, 1, verified=True, revoked=False),
        LinkPlan(2, 0, verified=True, revoked=True),
        LinkPlan(0, 2, verified=True, revoked=False),
    ),
)
# D is private {0}; a public room holds an agent message based on a private room {0, 1}. A new
# account in D blocks the reply twice (the source: audience; the message based on it: lineage);
# account 1, a reader of the source, does not.
LINEAGE_AT_DELIVERY = plan_of(
    ["private", "public", "private"],
    {
        **{(room, AGENT): NOW for room in range(3)},
        (0, ("account", 0)): NOW,
        (1, ("account", 0)): NOW,
        (1, ("account", 1)): NOW,
        (2, ("account", 0)): NOW,
        (2, ("account", 1)): NOW,
    },
    [said(2, ("account", 1), 5), said(1, AGENT, 6, 0), said(1, ("account", 0), 7)],
    accounts=2,
)


def delivery_reason(oracle: Oracle, index: int) -> str | None:
    """The first of rules 1-4 that evidence message ``index`` fails now (SPEC §4), as the
    error's ``reasons`` key, or None. Rule 5 is not re-evaluated at delivery."""
    plan = oracle.plan
    room = plan.messages[index].conversation
    if not oracle.observed(index):
        return "notObserved"
    if index in plan.deleted:
        return "deleted"
    if plan.kinds[room] == "unknown":
        return "unknownAudience"
    if not oracle.audience_permits(room):
        return "audience"
    lineage_rooms = {plan.messages[source].conversation for source in oracle.sources(index)}
    if not all(oracle.audience_permits(source_room) for source_room in lineage_rooms):
        return "lineage"
    return None


def mutate(plan: Plan, built: Built, mutation: str, pick: int, evidence: set[int]) -> Plan:
    """Apply ``mutation`` to the database and return the plan as it stands afterwards."""
    after = replace(
        plan,
        memberships={key: list(spans) for key, spans in plan.memberships.items()},
        links=list(plan.links),
        deleted=set(plan.deleted),
    )
    destination = plan.destination
    if mutation == "revoke":
        live = [i for i, link in enumerate(plan.links) if link.verified and not link.revoked]
        # Links of the destination's reader are the ones direct-room continuity rests on.
        readers = plan.readers(destination)
        touching = [i for i in live if {plan.links[i].account, plan.links[i].linked} & readers]
        pool = touching or live
        if pool:
            chosen = pool[pick % len(pool)]
            services.identity_link_revoke(link=built.links[chosen])
            after.links[chosen] = replace(plan.links[chosen], revoked=True)
            event("delivery: a live link revoked")
    elif mutation == "reader":
        readers = plan.readers(destination)
        outsiders = [a for a in range(plan.accounts) if a not in readers]
        if plan.kinds[destination] != "public" and outsiders and pick % 2 == 0:
            account = outsiders[pick // 2 % len(outsiders)]
            member = built.accounts[account]
            event("delivery: an existing account joins the destination")
        else:
            # A public room is read by every account: only a new account widens it.
            account = plan.accounts
            member = factories.make_account(built.workspace)
            after.accounts += 1
            event("delivery: a new account joins the destination")
        factories.join(built.conversations[destination], member)
        key = (destination, ("account", account))
        after.memberships[key] = [*after.memberships.get(key, []), (REPLY_MINUTE - 1, None)]
    elif mutation == "delete" and evidence:
        chosen = sorted(evidence)[pick % len(evidence)]
        services.message_delete(message=built.messages[chosen])
        after.deleted.add(chosen)
        event("delivery: an evidence message deleted")
    elif mutation == "erase":
        after = erase_account(plan, built, pick, after)
    return after


def check_delivery(plan: Plan, built: Built, mutation: str, pick: int) -> None:
    """Search for the planned run, mutate, reply; compare with the oracle, then search for the
    reply from every other run and from a new run in the destination."""
    run_plan, *other_plans = plan.runs()
    run, *other_runs = built.runs
    messages = built.messages
    destination = built.conversations[plan.destination]

    result = factories.history(run, "sample", limit=LIMIT)
    returned = [m for hit in result.hits for m in (hit.message, *hit.before, *hit.after)]
    evidence = {built.index_of[m.id] for m in returned}
    recorded = set(RunEvidence.objects.filter(run=run).values_list("message_id", flat=True))
    assert recorded == {messages[i].id for i in evidence}
    before = Oracle(plan, run_plan)
    assert all(before.eligible(i) for i in evidence)

    after = mutate(plan, built, mutation, pick, evidence)
    oracle = Oracle(after, run_plan)
    if mutation == "erase":
        # What was derived from the erased messages is withheld exactly where the spec withholds
        # it, from every other destination: erasure deletes, it never lifts a restriction.
        for check_plan, check_run in zip(other_plans, other_runs, strict=True):
            check_search(after, Oracle(after, check_plan), check_run, built.index_of, "anyone")
    reasons = Counter(delivery_reason(oracle, i) for i in evidence)
    reasons.pop(None, None)
    stored_before = Message.objects.filter(conversation=destination).count()

    def deliver():
        return run_reply(
            workspace_id=run.workspace_id, run_id=run.id, content=f"{REPLY_WORD} answer"
        )

    if reasons:
        with pytest.raises(DeliveryBlocked) as blocked:
            deliver()
        assert blocked.value.details == {
            "blocked": sum(reasons.values()),
            "reasons": dict(reasons),
        }
        assert Message.objects.filter(conversation=destination).count() == stored_before
        run.refresh_from_db()
        assert run.finished_at is None
        for reason in reasons:
            event(f"delivery blocked: {reason}")
        return
    reply = deliver()
    event(f"delivered with {min(len(evidence), 3)}{'+' if len(evidence) >= 3 else ''} evidence")

    # The reply's lineage: what the run saw, its prompt and its evidence (direct), and what
    # those inherited (the closure).
    prompt = {run_plan.current, *run_plan.recent} - {None}
    seen = evidence | prompt
    inherited = set().union(*(oracle.sources(i) for i in seen)) - seen
    rows = set(MessageLineage.objects.filter(message=reply).values_list("source_id", "direct"))
    assert rows == {(messages[i].id, True) for i in seen} | {
        (messages[i].id, False) for i in inherited
    }
    run.refresh_from_db()
    assert run.finished_at is not None

    final = replace(
        after,
        messages=[
            *after.messages,
            MessagePlan(plan.destination, AGENT, REPLY_MINUTE, (), tuple(sorted(seen))),
        ],
    )
    reply_index = len(after.messages)
    fresh, _ = factories.make_run(built.agents[0], destination, built.accounts[0])
    checks = [*zip(other_plans, other_runs, strict=True), (RunPlan(plan.destination, 0), fresh)]
    for check_plan, check_run in checks:
        allowed = Oracle(final, check_plan).eligible(reply_index)
        found = factories.hit_ids(check_run, REPLY_WORD, limit=LIMIT)
        assert found == ([reply.id] if allowed else []), (check_plan, found)
        if check_plan.destination != plan.destination:
            event(f"reply {'returned' if allowed else 'withheld'} in another room")
            if not allowed and Oracle(final, check_plan).audience_permits(plan.destination):
                event("reply withheld only because of its lineage")


@settings(
    max_examples=DELIVERY_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=delivery_worlds(), mutation=st.sampled_from(MUTATIONS), pick=st.integers(0, 1000))
# Revoke 0-1: room 1's message and what is based on it stop reaching 0's room.
@example(plan=LINKS_DO_NOT_CHAIN, mutation="revoke", pick=0)
@example(plan=LINKS_DO_NOT_CHAIN, mutation="reader", pick=0)
@example(plan=LINKED_ROOMS, mutation="none", pick=0)
@example(plan=LINKED_ROOMS, mutation="revoke", pick=1)
@example(plan=LINEAGE_AT_DELIVERY, mutation="reader", pick=0)
@example(plan=LINEAGE_AT_DELIVERY, mutation="reader", pick=1)
# A new account in the public destination: the private room it does not read closes.
@example(plan=INTERVAL_EDGES, mutation="reader", pick=1)
@example(plan=INTERVAL_EDGES, mutation="delete", pick=3)
# Erase account 2: messages 6 and 8, based on its message 2, stay withheld from 0's room.
@example(plan=LINKS_DO_NOT_CHAIN, mutation="erase", pick=1)
# Erase account 1, the writer of the private source of the public room's agent message.
@example(plan=LINEAGE_AT_DELIVERY, mutation="erase", pick=0)
def test_the_reply_is_delivered_exactly_when_the_spec_allows(db, plan, mutation, pick):
    """The final delivery check blocks the reply exactly when some evidence message fails
    rules 1-4 after the drawn change, with the right counts by reason; a delivered reply is
    found from another destination exactly when its lineage permits it; after an account's
    erasure every other destination's search is exactly what the spec allows."""
    try:
        with transaction.atomic():
            built = build(plan)
            check_delivery(plan, built, mutation, pick)
            raise _Rollback
    except _Rollback:
        pass


# --- withheld messages never move a score -------------------------------------------------------

RANKING_EXAMPLES = 25
# Words the messages carry besides "sample": some match, some are only context.
RANKING_QUERY = "migration report"


def without_withheld(plan: Plan, oracle: Oracle) -> tuple[Plan, dict[int, int]]:
    """The plan with every message the run may not receive removed, except those the rest
    still needs (lineage sources, the run's current message and recent history), and the map
    from the old indices to the new."""
    needed = {source for message in plan.messages for source in message.lineage}
    needed |= set(plan.recent) | ({plan.current} if plan.current is not None else set())
    kept = [
        index for index in range(len(plan.messages)) if oracle.eligible(index) or index in needed
    ]
    new_index = {old: new for new, old in enumerate(kept)}
    messages = [
        replace(
            plan.messages[old],
            lineage=tuple(new_index[source] for source in plan.messages[old].lineage),
        )
        for old in kept
    ]
    return (
        replace(
            plan,
            messages=messages,
            deleted={new_index[old] for old in plan.deleted if old in new_index},
            current=new_index[plan.current] if plan.current is not None else None,
            recent=[new_index[old] for old in plan.recent],
        ),
        new_index,
    )


def ranked_scores(plan: Plan) -> dict[int, tuple]:
    """Build the plan, search it from its planned run, and roll it back: each hit's plan index,
    with its score and components (rounded past float noise) and its neighbours' indices."""
    try:
        with transaction.atomic():
            built = build(plan)
            result = factories.history(
                built.runs[0], RANKING_QUERY, limit=LIMIT, now=at(LAST_MINUTE)
            )
            index_of = built.index_of
            raise _Rollback(
                {
                    index_of[hit.message.id]: (
                        round(hit.score, 9),
                        tuple(sorted((k, round(v, 9)) for k, v in hit.components.items())),
                        tuple(index_of[m.id] for m in (*hit.before, *hit.after)),
                    )
                    for hit in result.hits
                }
            )
    except _Rollback as rolled_back:
        return rolled_back.args[0]


@settings(
    max_examples=RANKING_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=worlds())
@example(plan=LINKS_DO_NOT_CHAIN)
@example(plan=INTERVAL_EDGES)
def test_withheld_messages_never_change_a_score_or_the_ranked_list(db, plan):
    """SPEC §6: a message the run may not receive (unobserved, deleted, in a room whose audience
    or lineage withholds it) changes no score and no order, whether it would be a match, a
    neighbour whose words give context, or the writer naming a speaker: the same world without
    them ranks every hit the same. (Its current message and recent history stay: the run names
    them.)"""
    oracle = Oracle(plan, plan.runs()[0])
    smaller, new_index = without_withheld(plan, oracle)
    if len(smaller.messages) == len(plan.messages):
        event("nothing withheld to remove")
    full = ranked_scores(plan)
    reduced = ranked_scores(smaller)
    renamed = {
        new_index[index]: (score, components, tuple(new_index[m] for m in neighbours))
        for index, (score, components, neighbours) in full.items()
    }
    assert renamed == reduced
