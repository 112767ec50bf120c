"""The corpus's world before its messages: workspaces, people, agents, conversations,
memberships and identity links, as ``COPY`` rows and as the rooms messages are drawn into.

Every step draws from the corpus's one random stream, so the order of the draws is part of the
output: the same seed gives the same world only while each step draws what it did, when it did.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from django.db import models

from messages_app.models import (
    Account,
    Agent,
    Conversation,
    ConversationKind,
    IdentityLink,
    IdentityLinkStatus,
    Membership,
    Workspace,
)
from synthetic.corpus.parameters import (
    BUSY_AGENT_CONVERSATIONS,
    BUSY_AGENT_NAME,
    KIND_CYCLE,
    workspace_slug,
)
from synthetic.corpus.rows import DAY_US, FOREVER, NULL, SPAN_US, Ids, stamp

# The tables the world fills, in the order they are loaded (references point backwards), with
# the columns their rows carry; the name says which count the report gives them under.
_TABLES: tuple[tuple[str, type[models.Model], tuple[str, ...]], ...] = (
    ("workspaces", Workspace, ("id", "slug", "name", "created_at")),
    ("accounts", Account, ("id", "workspace_id", "display_name", "external_id", "created_at")),
    ("agents", Agent, ("id", "workspace_id", "name", "created_at")),
    (
        "conversations",
        Conversation,
        (
            "id",
            "workspace_id",
            "kind",
            "title",
            "external_id",
            "created_at",
            "last_seq",
            "live_message_count",
        ),
    ),
    (
        "memberships",
        Membership,
        ("id", "workspace_id", "conversation_id", "account_id", "agent_id", "joined_at", "left_at"),
    ),
    (
        "identity_links",
        IdentityLink,
        (
            "id",
            "workspace_id",
            "account_id",
            "linked_account_id",
            "status",
            "created_at",
            "verified_at",
            "revoked_at",
        ),
    ),
)


@dataclass
class Interval:
    """One stretch of a member's time in a room, in corpus microseconds (``left`` excluded)."""

    member_id: str
    joined: int
    left: int = FOREVER


@dataclass
class Room:
    """A conversation as the message generator sees it: who may speak when, and its recent
    messages (what replies, threads and lineage point at)."""

    id: str
    workspace: int
    kind: str
    humans: list[Interval] = field(default_factory=list)
    agents: list[Interval] = field(default_factory=list)
    speakers: list[str] = field(default_factory=list)
    agent_share: float = 0.25
    seq: int = 0
    recent: deque = field(default_factory=lambda: deque(maxlen=40))
    roots: deque = field(default_factory=lambda: deque(maxlen=20))


@dataclass
class World:
    """Everything but the messages: rows to COPY first, and the rooms messages go to."""

    workspace_ids: list[str]
    busy_agent_id: str
    rooms: list[Room]
    tables: list[tuple[type[models.Model], tuple[str, ...], list[str]]]
    counts: dict[str, int]


@dataclass
class _Space:
    """One workspace while its conversations are planned."""

    index: int
    id: str
    accounts: list[str]
    # The agents that serve its rooms (in workspace 0, all but the busy agent).
    helpers: list[str]
    # The people of its direct conversations, once per conversation.
    direct_humans: list[str] = field(default_factory=list)


def plan_world(
    rng: random.Random, *, seed: int, workspaces: int, conversations: int, vocabulary: list[str]
) -> World:
    """Workspaces, people, agents, rooms, memberships and links, as COPY rows and as the rooms
    the message generator draws senders from."""
    plan = _WorldPlan(rng, seed=seed, vocabulary=vocabulary)
    base, extra = divmod(conversations, workspaces)
    for w in range(workspaces):
        room_count = base + (1 if w < extra else 0)
        space = plan.workspace(w, room_count)
        for k in range(room_count):
            plan.conversation(space, k)
        plan.identity_links(space)
    return plan.world()


class _WorldPlan:
    """The rows planned so far, and one step per concern, each drawing from ``rng`` in turn."""

    def __init__(self, rng: random.Random, *, seed: int, vocabulary: list[str]) -> None:
        self.rng = rng
        self.seed = seed
        self.new_id = Ids(rng)
        self.name_words = vocabulary[200:5_000]
        self.setup_time = stamp(-60 * DAY_US)
        self.rows: dict[str, list[str]] = {name: [] for name, _, _ in _TABLES}
        self.workspace_ids: list[str] = []
        self.rooms: list[Room] = []
        self.busy_agent_id = ""

    def world(self) -> World:
        return World(
            workspace_ids=self.workspace_ids,
            busy_agent_id=self.busy_agent_id,
            rooms=self.rooms,
            tables=[(model, columns, self.rows[name]) for name, model, columns in _TABLES],
            counts={name: len(self.rows[name]) for name, _, _ in _TABLES},
        )

    def title_word(self) -> str:
        return self.rng.choice(self.name_words)

    # Workspaces, their people and agents.

    def workspace(self, w: int, room_count: int) -> _Space:
        """The ``w``-th workspace with its accounts (half as many as its rooms, at least 6)
        and agents (one per 50 rooms, at least 3; workspace 0's first is the busy agent)."""
        workspace_id = self.new_id()
        self.workspace_ids.append(workspace_id)
        slug = workspace_slug(self.seed, w)
        self.rows["workspaces"].append(
            f"{workspace_id}\t{slug}\tSynthetic corpus {w}\t{self.setup_time}\n"
        )
        accounts = [self._account(workspace_id, a) for a in range(max(6, room_count // 2))]
        agents = [
            self._agent(workspace_id, busy=w == 0 and a == 0)
            for a in range(1 + max(2, room_count // 50))
        ]
        if w == 0:
            self.busy_agent_id = agents[0]
        helpers = agents[1:] if w == 0 else agents
        return _Space(index=w, id=workspace_id, accounts=accounts, helpers=helpers)

    def _account(self, workspace_id: str, a: int) -> str:
        account_id = self.new_id()
        name = f"{self.title_word().title()} {self.title_word().title()}"
        self.rows["accounts"].append(
            f"{account_id}\t{workspace_id}\t{name}\tcorpus-person-{a:06d}\t{self.setup_time}\n"
        )
        return account_id

    def _agent(self, workspace_id: str, *, busy: bool) -> str:
        agent_id = self.new_id()
        name = BUSY_AGENT_NAME if busy else f"Agent {self.title_word().title()}"
        self.rows["agents"].append(f"{agent_id}\t{workspace_id}\t{name}\t{self.setup_time}\n")
        return agent_id

    # Conversations and their members.

    def conversation(self, space: _Space, k: int) -> None:
        """The workspace's ``k``-th room: its people by kind, then its agents."""
        kind = KIND_CYCLE[k % len(KIND_CYCLE)]
        room = Room(id=self.new_id(), workspace=space.index, kind=kind)
        created = -self.rng.randrange(DAY_US, 60 * DAY_US)
        if kind == ConversationKind.DIRECT:
            title = self._direct_person(space, room, created, k)
        elif kind == ConversationKind.UNKNOWN:
            title = self._unrecorded_speakers(space, room, k)
        else:
            title = self._channel_people(space, room, created, k)
        self._agent_members(space, room, created, k)
        self.rows["conversations"].append(
            f"{room.id}\t{space.id}\t{kind}\t{title}\tcorpus-room-{k:06d}\t{stamp(created)}\t0\t0\n"
        )
        self.rooms.append(room)

    def _direct_person(self, space: _Space, room: Room, created: int, k: int) -> str:
        human = self.rng.choice(space.accounts)
        space.direct_humans.append(human)
        self._add_member(room, human, agent=False, intervals=[Interval("", created)])
        room.agent_share = 0.45
        return f"Direct {k}"

    def _unrecorded_speakers(self, space: _Space, room: Room, k: int) -> str:
        # Imported without membership data: people speak, but nobody is on record.
        rng, accounts = self.rng, space.accounts
        room.speakers = rng.sample(accounts, min(len(accounts), rng.randint(2, 8)))
        room.agent_share = 0.2
        return f"Imported {self.title_word()} {k}"

    def _channel_people(self, space: _Space, room: Room, created: int, k: int) -> str:
        """A public (5-40 people) or private (2-12) room's members; its title is drawn after
        them."""
        rng, accounts = self.rng, space.accounts
        low, high = (5, 40) if room.kind == ConversationKind.PUBLIC else (2, 12)
        people = rng.sample(accounts, min(len(accounts), rng.randint(low, high)))
        # The first person founded the room and never leaves: the fallback speaker.
        self._add_member(room, people[0], agent=False, intervals=[Interval("", created)])
        for person in people[1:]:
            intervals = self._intervals(created, may_leave=True)
            self._add_member(room, person, agent=False, intervals=intervals)
        prefix = "#" if room.kind == ConversationKind.PUBLIC else "private "
        return f"{prefix}{self.title_word()}-{self.title_word()} {k}"

    def _agent_members(self, space: _Space, room: Room, created: int, k: int) -> None:
        """The room's home agent (workspace 0's first rooms: the busy agent), and sometimes a
        second one outside direct conversations."""
        busy = space.index == 0 and k < BUSY_AGENT_CONVERSATIONS
        home = self.busy_agent_id if busy else self.rng.choice(space.helpers)
        # The busy agent never leaves its first room, the corpus's busiest (see messages.py).
        intervals = self._intervals(created, may_leave=busy and k > 0)
        self._add_member(room, home, agent=True, intervals=intervals)
        helpers = space.helpers
        if room.kind != ConversationKind.DIRECT and len(helpers) > 1 and self.rng.random() < 0.15:
            second = self.rng.choice([agent for agent in helpers if agent != home])
            intervals = self._intervals(created, may_leave=False)
            self._add_member(room, second, agent=True, intervals=intervals)

    def _intervals(self, room_created: int, *, may_leave: bool) -> list[Interval]:
        """A member's intervals: most join at creation; some later, some leave, a few return."""
        rng = self.rng
        joined = room_created if rng.random() < 0.8 else rng.randrange(0, SPAN_US * 6 // 10)
        if not may_leave or rng.random() >= 0.15:
            return [Interval("", joined)]
        left = rng.randrange(max(joined, 0) + DAY_US, SPAN_US)
        intervals = [Interval("", joined, left)]
        back = left + 3_600_000_000
        if back < SPAN_US and rng.random() < 1 / 3:
            intervals.append(Interval("", rng.randrange(back, SPAN_US)))
        return intervals

    def _add_member(
        self, room: Room, member_id: str, *, agent: bool, intervals: list[Interval]
    ) -> None:
        """One membership row per interval, and the intervals on the room."""
        for interval in intervals:
            interval.member_id = member_id
            left = NULL if interval.left == FOREVER else stamp(interval.left)
            account, agent_id = (NULL, member_id) if agent else (member_id, NULL)
            self.rows["memberships"].append(
                f"{self.new_id()}\t{self.workspace_ids[room.workspace]}\t{room.id}\t{account}\t"
                f"{agent_id}\t{stamp(interval.joined)}\t{left}\n"
            )
        (room.agents if agent else room.humans).extend(intervals)

    # Identity links.

    def identity_links(self, space: _Space) -> None:
        """Identity links in every state (a sixth as many as people, at least 3); half of them
        between people who each have a direct conversation, the case where a live link lets
        history cross between two DMs."""
        rng, accounts, direct_humans = self.rng, space.accounts, space.direct_humans
        pairs: set[tuple[str, str]] = set()
        wanted = max(3, len(accounts) // 6)
        for _ in range(wanted * 10):
            if len(pairs) == wanted:
                break
            pool = direct_humans if len(set(direct_humans)) > 2 and rng.random() < 0.5 else accounts
            first, second = rng.sample(pool, 2)
            pair = (min(first, second), max(first, second))
            if first == second or pair in pairs:
                continue
            n = len(pairs)
            pairs.add(pair)
            self._identity_link(space, first, second, n)

    def _identity_link(self, space: _Space, first: str, second: str, n: int) -> None:
        """The ``n``-th link of the workspace, with the times its status implies."""
        rng, statuses = self.rng, list(IdentityLinkStatus)
        # The first three links take one state each, so every state is present.
        status = statuses[n] if n < 3 else rng.choices(statuses, weights=(3, 5, 2))[0]
        created = rng.randrange(0, SPAN_US // 2)
        verified = revoked = NULL
        if status == IdentityLinkStatus.VERIFIED or (
            status == IdentityLinkStatus.REVOKED and rng.random() < 0.5
        ):
            verified = stamp(created + rng.randrange(60_000_000, 7 * DAY_US))
        if status == IdentityLinkStatus.REVOKED:
            revoked = stamp(created + rng.randrange(8 * DAY_US, 90 * DAY_US))
        self.rows["identity_links"].append(
            f"{self.new_id()}\t{space.id}\t{first}\t{second}\t{status.value}\t"
            f"{stamp(created)}\t{verified}\t{revoked}\n"
        )
