"""The run's perspective-bound work: search_history (SPEC §5, §6, audited as §7 says), the
reply with its final delivery check, and the agent's memories (SPEC §4).

Concurrency. The run's row is locked (``SELECT ... FOR UPDATE``) by the statement that reads
the call's scope, before anything else is read, so searches, replies and memories of one run
take turns (tool calls share-lock it); the locked row carries the budget counter the previous
search committed, and under READ COMMITTED every later statement sees the evidence it
committed, so the count can never pass the ceiling, however many searches run at once. Calls on
different runs never wait for each other. The hits, their texts and their neighbours are read
by one statement that applies every rule, so a message deleted meanwhile is never returned.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from audit_app import services as audit
from audit_app.models import SearchOutcome, SearchTool
from formation.errors import (
    DeliveryBlocked,
    Forbidden,
    InvalidArguments,
    SearchBudgetExhausted,
)
from formation.fields import camel_case
from messages_app.models import (
    HISTORY_EVIDENCE_BUDGET,
    Conversation,
    Message,
    MessageLineage,
    MessageLineageRoom,
    Run,
    RunEvidence,
)
from messages_app.services import MessageDraft, message_create, run_evidence_record
from search_app.models import AgentMemory, MemoryLineage, MemoryRoom, RunMemory
from search_app.perspective import Perspective, run_scope
from search_app.queries import HistoryFilters, Hit, delivery_blockers, history_read, memory_hits
from search_app.text import highlights, parse_query

EVIDENCE_BUDGET = HISTORY_EVIDENCE_BUDGET
SEARCH_TOOL = "search_history"


@dataclass(frozen=True)
class Budget:
    used: int
    limit: int = EVIDENCE_BUDGET

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)

    def summary(self) -> dict[str, int]:
        """``{used, limit, remaining}``, as answers and the exhausted error carry it."""
        return {"used": self.used, "limit": self.limit, "remaining": self.remaining}


@dataclass
class HistorySearch:
    hits: list[Hit]
    highlights: list[list[list[int]]]
    budget: Budget
    trimmed: int


def _locked(*, workspace_id: uuid.UUID, run_id: uuid.UUID, open_only: bool = True):
    """The run's perspective and state, its row locked ``FOR UPDATE`` until the transaction
    ends; ``forbidden`` once finished unless ``open_only`` is false."""
    perspective, state = run_scope(workspace_id=workspace_id, run_id=run_id, lock="UPDATE")
    if open_only and state.finished_at is not None:
        raise Forbidden("This run has finished; its tools are closed.")
    return perspective, state


def _spend(hits: list[Hit], seen: set, remaining: int) -> tuple[list[Hit], list, int]:
    """Keep what fits the budget: hits first (best first), then neighbours (nearest first).

    A message already in the run's evidence costs nothing. Returns the kept hits, the newly
    spent message ids in order, and how many distinct messages were left out.
    """
    spent: list = []
    left_out: set = set()

    def take(message_id) -> bool:
        if message_id in seen:
            return True
        if len(spent) < remaining:
            seen.add(message_id)
            spent.append(message_id)
            return True
        left_out.add(message_id)
        return False

    kept = [hit for hit in hits if take(hit.message.id)]
    for hit in kept:
        nearest_first = [*reversed(hit.before), *hit.after]
        allowed = {m.id for m in nearest_first if take(m.id)}
        hit.before = [m for m in hit.before if m.id in allowed]
        hit.after = [m for m in hit.after if m.id in allowed]
    return kept, spent, len(left_out)


def search_history(
    *,
    workspace_id: uuid.UUID,
    run_id: uuid.UUID,
    query_text: str,
    filters: HistoryFilters,
    limit: int,
    now: datetime | None = None,
) -> HistorySearch:
    """Search the run's perspective, record what it returns as evidence, and audit the call.

    Statements: the run's lock with its scope, the hits statement (hits, neighbours,
    highlights, exclusion counts), the evidence (whose trigger moves the budget counter on),
    the audit event, in one transaction. The audit event (SPEC §7) is written in the same
    transaction as the evidence, also for a call refused because the budget is spent, so "who
    searched for X" has a complete answer; if it cannot be written, ``audit_unavailable`` rolls
    the whole call back (a constraint PostgreSQL checks only at COMMIT included). A query with
    no searchable word is refused before any of this and is not audited: nothing was searched.
    """
    query = parse_query(query_text, workspace_id=workspace_id)
    now = now or timezone.now()
    filters_record = audit.filters_record(filters, limit=limit)
    with audit.audited_atomic():
        perspective, state = _locked(workspace_id=workspace_id, run_id=run_id)
        used = state.history_evidence_count
        remaining = EVIDENCE_BUDGET - used
        if remaining <= 0:
            audit.search_event_record(
                perspective=perspective,
                query_text=query_text,
                filters=filters_record,
                hits=[],
                exclusions={},
                exclusions_capped=False,
                budget_used=used,
                outcome=SearchOutcome.BUDGET_EXHAUSTED,
            )
            exhausted = Budget(used=used)
        else:
            exhausted = None
            found = history_read(perspective, query, filters, limit=limit, now=now)
            # Everything already returned to the model is free to return again.
            hits, spent, trimmed = _spend(found.hits, found.seen, remaining)
            run_evidence_record(
                workspace_id=workspace_id, run_id=run_id, message_ids=spent, tool=SEARCH_TOOL
            )
            budget = Budget(used=used + len(spent))
            audit.search_event_record(
                perspective=perspective,
                query_text=query_text,
                filters=filters_record,
                hits=hits,
                exclusions={**found.exclusions, "budget": trimmed},
                exclusions_capped=found.capped,
                budget_used=budget.used,
            )
            # Inside the transaction: if anything fails from here on, no evidence or audit
            # is recorded for results the model never received.
            marked = highlights(
                [hit.message.content for hit in hits], query, [hit.marked for hit in hits]
            )
    if exhausted is not None:
        raise SearchBudgetExhausted(details={"budget": exhausted.summary()})
    return HistorySearch(hits=hits, highlights=marked, budget=budget, trimmed=trimmed)


# --- delivery and memories (SPEC §4) ---------------------------------------------------------


def _run_sources(perspective: Perspective) -> list:
    """What the run's model has seen: its prompt, its evidence, then its memories' sources.

    The prompt (current message and recent history) is in the destination itself, so it never
    blocks delivery, but a message there may carry lineage of its own (an earlier reply), which
    whatever the run writes must inherit. Evidence follows in the order it was returned; each
    message's own sources are added when the lineage is stored (its closure), so chains
    flatten to the originals.
    """
    run_id = perspective.run_id
    evidence = RunEvidence.objects.filter(run_id=run_id).order_by("created_at", "id")
    remembered = MemoryLineage.objects.filter(
        memory__in=RunMemory.objects.filter(run_id=run_id).values("memory")
    ).order_by("memory_id", "source_id")
    return list(
        dict.fromkeys(
            [
                *perspective.in_prompt,
                *evidence.values_list("message_id", flat=True),
                *remembered.values_list("source_id", flat=True),
            ]
        )
    )


def run_reply(*, workspace_id: uuid.UUID, run_id: uuid.UUID, content: str) -> Message:
    """Deliver the agent's reply to the run's destination after the final delivery check.

    The run row is locked first, so no tool call can add evidence between the check and the
    store, and a second reply waits and then finds the run finished. Rules 1-4 are evaluated
    for every evidence message as the workspace stands now: a link revoked, a reader added or
    a source deleted since the search blocks the reply, and nothing is stored. The error says
    how many messages block it and why, nothing about which.
    """
    with transaction.atomic():
        perspective, state = _locked(workspace_id=workspace_id, run_id=run_id, open_only=False)
        if state.finished_at is not None:
            raise InvalidArguments("This run has already replied; a run replies once.")
        blockers = delivery_blockers(perspective, run_id=run_id)
        if blockers:
            raise DeliveryBlocked(
                details={
                    "blocked": sum(blockers.values()),
                    "reasons": {camel_case(reason): count for reason, count in blockers.items()},
                }
            )
        reply = message_create(
            conversation=Conversation(id=perspective.destination_id, workspace_id=workspace_id),
            draft=MessageDraft(
                content=content,
                sender_agent_id=perspective.agent_id,
                reply_to_id=perspective.current_message_id,
                lineage=_run_sources(perspective),
            ),
            # Everything the run read travels with the reply, however much that is.
            lineage_cap=None,
        )
        _inherit_recalled_rooms(perspective, reply)
        Run.objects.filter(workspace_id=workspace_id, pk=run_id).update(
            finished_at=timezone.now(), reply=reply
        )
    return reply


def _inherit_recalled_rooms(perspective: Perspective, reply: Message) -> None:
    """The reply inherits the rooms of every memory the run recalled.

    Its lineage rows already bring the rooms of its message sources (a trigger writes those),
    but a memory also carries the room it was written in, which may hold no message the run
    was shown: without this a reply drawn from a private room's memory would be as visible as
    its own room.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {MessageLineageRoom._meta.db_table}
                    (workspace_id, message_id, conversation_id)
                SELECT DISTINCT %(workspace)s::uuid, %(reply)s::uuid, inherited.conversation_id
                FROM {RunMemory._meta.db_table} AS used
                JOIN {MemoryRoom._meta.db_table} AS inherited
                  ON inherited.memory_id = used.memory_id
                WHERE used.run_id = %(run)s
                ON CONFLICT (message_id, conversation_id) DO NOTHING""",
            {"workspace": perspective.workspace_id, "reply": reply.id, "run": perspective.run_id},
        )


def _memory_rooms_record(perspective: Perspective, memory: AgentMemory, sources: list) -> None:
    """Every room the memory inherits: its run's room, the rooms of everything the run was
    shown (``sources``, already the closure) and what they inherited, and the rooms of every
    memory the run recalled, so chains of memories keep the first one's restrictions."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {MemoryRoom._meta.db_table} (workspace_id, memory_id, conversation_id)
                SELECT %(workspace)s, %(memory)s, room FROM (
                    SELECT %(destination)s::uuid AS room
                    UNION SELECT source.conversation_id FROM {Message._meta.db_table} AS source
                          WHERE source.id = ANY(%(sources)s::uuid[])
                    UNION SELECT inherited.conversation_id
                          FROM {MessageLineageRoom._meta.db_table} AS inherited
                          WHERE inherited.message_id = ANY(%(sources)s::uuid[])
                    UNION SELECT recalled.conversation_id
                          FROM {RunMemory._meta.db_table} AS used
                          JOIN {MemoryRoom._meta.db_table} AS recalled
                            ON recalled.memory_id = used.memory_id
                          WHERE used.run_id = %(run)s
                ) AS rooms""",
            {
                "workspace": perspective.workspace_id,
                "memory": memory.id,
                "destination": perspective.destination_id,
                "sources": sources,
                "run": perspective.run_id,
            },
        )


def memory_create(*, workspace_id: uuid.UUID, run_id: uuid.UUID, content: str) -> AgentMemory:
    """Store a memory of the run's agent with everything the run has seen as its lineage.

    Allowed after the reply too (the evidence is final by then). The lineage is flattened:
    the run's prompt and evidence, each of those messages' own closure, and the lineage of
    memories the run was given, so a memory of a memory is as restricted as the first.
    """
    with transaction.atomic():
        perspective, _ = _locked(workspace_id=workspace_id, run_id=run_id, open_only=False)
        direct = _run_sources(perspective)
        inherited = MessageLineage.objects.filter(message_id__in=direct).values_list(
            "source_id", flat=True
        )
        sources = list(dict.fromkeys([*direct, *inherited]))
        memory = AgentMemory.objects.create(
            workspace_id=workspace_id, agent_id=perspective.agent_id, run_id=run_id, content=content
        )
        MemoryLineage.objects.bulk_create(
            MemoryLineage(memory=memory, source_id=source) for source in sources
        )
        _memory_rooms_record(perspective, memory, sources)
    memory.lineage_count = len(sources)
    return memory


def memory_search(
    *, workspace_id: uuid.UUID, run_id: uuid.UUID, query_text: str, limit: int
) -> list[AgentMemory]:
    """The agent's memories that match and that the run's destination may receive.

    What is returned joins the run's inputs (``RunMemory``), so a reply or memory written
    after it inherits the memories' lineage.
    """
    # Memories are indexed in the default configuration, whatever the workspace's language.
    query = parse_query(query_text)
    with audit.audited_atomic():
        perspective, _ = _locked(workspace_id=workspace_id, run_id=run_id)
        memories = memory_hits(perspective, query, limit=limit)
        RunMemory.objects.bulk_create(
            [RunMemory(run_id=run_id, memory=memory) for memory in memories],
            ignore_conflicts=True,
        )
        audit.lookup_event_record(
            tool=SearchTool.MEMORIES,
            workspace_id=workspace_id,
            agent_id=perspective.agent_id,
            run_id=run_id,
            destination_id=perspective.destination_id,
            requester_id=perspective.requester_id,
            query_text=query_text,
            filters={"limit": limit},
            result_ids=[memory.id for memory in memories],
        )
    return memories
