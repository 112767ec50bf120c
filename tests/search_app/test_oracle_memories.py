"""Chains of runs, memories and replies against the plain-Python oracle of SPEC §3 and §4.

A random world (``test_oracle.delivery_worlds``) is built through the real services; then a
drawn sequence of runs, each in one of the agent's rooms, searches (or not), recalls memories
(or not) and writes a memory, replies, or does neither. Every search and every recall is compared
with the oracle, which knows only the plan and the spec's rule: whatever a run was given (its
destination's context, the messages it was shown, the memories it recalled) restricts every
reply and memory it produces, transitively. So memories of memories, replies built on a recalled
memory and memories written with no message evidence are all drawn, and a restriction lost
anywhere along a chain shows up as a message or memory returned where the oracle withholds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.db import transaction
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from search_app import services as search_services
from search_app.runs.services import run_reply
from tests import factories
from tests.search_app.test_oracle import (
    AGENT,
    NOW,
    REPLY_MINUTE,
    LinkPlan,
    MessagePlan,
    Oracle,
    Plan,
    RunPlan,
    build,
    check_search,
    delivery_worlds,
    plan_of,
)

CHAIN_EXAMPLES = 50
MEMORY_WORD = "memoword"
ACTIONS = ("memory", "memory", "reply", "none")


@dataclass(frozen=True)
class Step:
    """One run: where, what it reads, and what it writes."""

    room: int
    requester: int
    search: bool
    recall: bool
    action: str


@dataclass
class Remembered:
    """A memory as the oracle sees it: the rooms it inherits and the messages it came from."""

    rooms: frozenset[int]
    sources: frozenset[int]


@dataclass
class History:
    """What earlier runs wrote: memories, and the rooms replies inherit from recalled memories."""

    memories: list[Remembered] = field(default_factory=list)
    # Reply plan index -> rooms inherited from the memories its run recalled.
    recalled_rooms: dict[int, frozenset[int]] = field(default_factory=dict)


class ChainOracle(Oracle):
    """SPEC §3 with the rooms a reply inherits from the memories its run recalled."""

    def __init__(self, plan: Plan, run: RunPlan, history: History):
        super().__init__(plan, run)
        self.history = history

    def inherited_rooms(self, index: int) -> set[int]:
        """Every room message ``index`` inherits: its sources' rooms and what they recalled."""
        chain = {index, *self.sources(index)}
        rooms = {self.plan.messages[source].conversation for source in chain - {index}}
        for message in chain:
            rooms |= self.history.recalled_rooms.get(message, frozenset())
        return rooms

    def eligible(self, index: int) -> bool:
        plan = self.plan
        return (
            self.observed(index)
            and index not in plan.deleted
            and self.audience_permits(plan.messages[index].conversation)
            and all(self.audience_permits(room) for room in self.inherited_rooms(index))
            and index != self.run.current
            and index not in self.run.recent
        )

    def recallable(self, memory: Remembered) -> bool:
        return all(self.audience_permits(room) for room in memory.rooms) and not (
            memory.sources & self.plan.deleted
        )


@st.composite
def chains(draw) -> tuple[Plan, list[Step]]:
    plan = draw(delivery_worlds())
    steps = []
    for _ in range(draw(st.integers(3, 7))):
        room = draw(st.integers(0, len(plan.kinds) - 1))
        readers = sorted(plan.readers(room))
        if plan.kinds[room] in ("direct", "private"):
            if not readers:
                continue
            requester = draw(st.sampled_from(readers))
        else:
            requester = draw(st.integers(0, plan.accounts - 1))
        steps.append(
            Step(
                room=room,
                requester=requester,
                search=draw(st.sampled_from((True, True, False))),
                recall=draw(st.sampled_from((True, True, False))),
                action=draw(st.sampled_from(ACTIONS)),
            )
        )
    return plan, steps


class _Rollback(Exception):
    """Raised to undo one example's world."""


def run_chain(plan: Plan, steps: list[Step]) -> None:
    built = build(plan)
    history = History()
    memory_index: dict = {}  # memory id -> index in history.memories
    for number, step in enumerate(steps):
        run_plan = RunPlan(step.room, step.requester)
        oracle = ChainOracle(plan, run_plan, history)
        run, _ = factories.make_run(
            built.agents[0], built.conversations[step.room], built.accounts[step.requester]
        )
        shown: set[int] = set()
        if step.search:
            result = check_search(plan, oracle, run, built.index_of, "anyone")
            shown = {
                built.index_of[m.id]
                for hit in result.hits
                for m in (hit.message, *hit.before, *hit.after)
            }
        recalled: list[Remembered] = []
        if step.recall:
            found = search_services.memory_search(
                workspace_id=run.workspace_id, run_id=run.id, query_text=MEMORY_WORD, limit=50
            )
            got = {memory_index[memory.id] for memory in found}
            want = {i for i, memory in enumerate(history.memories) if oracle.recallable(memory)}
            assert got == want, (step, sorted(got), sorted(want))
            recalled = [history.memories[i] for i in sorted(got)]
            event(f"recalled {min(len(got), 2)}{'+' if len(got) >= 2 else ''} memories")
            if len(want) < len(history.memories):
                event("a memory withheld from a run")
        recalled_rooms = frozenset().union(*(memory.rooms for memory in recalled))
        recalled_sources = frozenset().union(*(memory.sources for memory in recalled))
        if step.action == "memory":
            memory = search_services.memory_create(
                workspace_id=run.workspace_id, run_id=run.id, content=f"{MEMORY_WORD} {number}"
            )
            message_rooms = set().union(
                *({plan.messages[i].conversation} | oracle.inherited_rooms(i) for i in shown)
            )
            sources = set(shown).union(*(oracle.sources(i) for i in shown))
            memory_index[memory.id] = len(history.memories)
            history.memories.append(
                Remembered(
                    rooms=frozenset({step.room} | message_rooms | recalled_rooms),
                    sources=frozenset(sources | recalled_sources),
                )
            )
            if not shown:
                event("a memory written with no message evidence")
            if recalled:
                event("a memory of a memory")
        elif step.action == "reply":
            reply = run_reply(
                workspace_id=run.workspace_id, run_id=run.id, content="sample replyword"
            )
            index = len(plan.messages)
            lineage = tuple(sorted(shown | recalled_sources))
            plan = replace(
                plan,
                messages=[
                    *plan.messages,
                    MessagePlan(step.room, AGENT, REPLY_MINUTE + number, ("replyword",), lineage),
                ],
            )
            built.index_of[reply.id] = index
            if recalled_rooms:
                history.recalled_rooms[index] = recalled_rooms
                event("a reply built on a recalled memory")


# The reproduction: D1 private {R, X, A}, D2 direct (R, A), D3 direct (R2, A), R and R2
# linked. A memory written in D1 with no evidence is recalled in D2, which writes a second memory
# and later replies from it; D3 may receive neither the second memory nor the reply.
REPRODUCTION = (
    plan_of(
        ["private", "direct", "direct"],
        {
            **{(room, AGENT): NOW for room in range(3)},
            (0, ("account", 0)): NOW,
            (0, ("account", 2)): NOW,
            (1, ("account", 0)): NOW,
            (2, ("account", 1)): NOW,
        },
        [],
        links=(LinkPlan(0, 1, verified=True, revoked=False),),
    ),
    [
        Step(room=0, requester=0, search=False, recall=False, action="memory"),
        Step(room=2, requester=1, search=False, recall=True, action="none"),
        Step(room=1, requester=0, search=False, recall=True, action="memory"),
        Step(room=2, requester=1, search=False, recall=True, action="none"),
        Step(room=1, requester=0, search=False, recall=True, action="reply"),
        Step(room=2, requester=1, search=True, recall=False, action="none"),
        Step(room=1, requester=0, search=True, recall=False, action="none"),
    ],
)


@settings(
    max_examples=CHAIN_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chain=chains())
@example(chain=REPRODUCTION)
def test_chains_of_memories_and_replies_keep_every_restriction(db, chain):
    """Each search returns exactly the eligible messages (replies included) with their
    neighbours, and each recall exactly the memories whose every inherited room permits the
    run's destination, after any sequence of runs that search, recall, remember and reply."""
    plan, steps = chain
    try:
        with transaction.atomic():
            run_chain(plan, steps)
            raise _Rollback
    except _Rollback:
        pass
