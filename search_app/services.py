"""The run's perspective-bound work: search_history (SPEC §5, §6, audited as §7 says) and the
agent's memories (SPEC §4). The reply, with its final delivery check, is
``runs.services.run_reply``.

Concurrency. The run's row is locked (``runs.services.run_lock``, ``SELECT ... FOR UPDATE``) by
the statement that reads the call's scope, before anything else is read, so searches, replies and
memories of one run take turns (tool calls share-lock it); the locked row carries the budget
counter the previous search committed, and under READ COMMITTED every later statement sees the
evidence it committed, so the count can never pass the ceiling, however many searches run at
once. Calls on different runs never wait for each other. The hits, their texts and their
neighbours are read by one statement that applies every rule, so a message deleted meanwhile is
never returned.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit_app import services as audit
from audit_app.models import SearchOutcome, SearchTool
from formation import metrics
from formation.fields import format_timestamp
from formation.sql import table
from messages_app.models import Conversation, Message, MessageLineage, MessageLineageRoom
from search_app.errors import SearchBudgetExhausted, SearchLimitDetails
from search_app.history.read import history_read
from search_app.history.results import HistoryFilters, HistorySearch, Hit
from search_app.limits import EVIDENCE_BUDGET, Budget
from search_app.models import AgentMemory, MemoryLineage, MemoryRoom, RunMemory
from search_app.queries import memory_hits
from search_app.query.highlights import highlights
from search_app.query.parse import parse_query
from search_app.runs.selectors import run_sources
from search_app.runs.services import run_evidence_record, run_lock
from search_app.scope import Perspective
from search_app.serializers import ranking

SEARCH_TOOL = "search_history"


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
    filters_record = _filters_record(filters, limit=limit)
    with audit.audited_atomic():
        perspective, state = run_lock(workspace_id=workspace_id, run_id=run_id, exclusive=True)
        used = state.history_evidence_count
        remaining = EVIDENCE_BUDGET - used
        if remaining <= 0:
            _audit_search(
                perspective,
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
            _audit_search(
                perspective,
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
    # Counted once committed: a search the audit refused returned nothing.
    if exhausted is not None:
        if settings.METRICS_ENABLED:
            metrics.SEARCH_BUDGET_EXHAUSTED.inc()
        raise SearchBudgetExhausted(details=SearchLimitDetails.render({"budget": exhausted}))
    if settings.METRICS_ENABLED:
        metrics.SEARCH_HITS.observe(len(hits))
        metrics.SEARCH_NEIGHBOURS.observe(neighbour_count(hits))
        metrics.SEARCH_BUDGET_TRIMMED.inc(trimmed)
        metrics.count_exclusions(found.exclusions)
    return HistorySearch(hits=hits, highlights=marked, budget=budget, trimmed=trimmed)


def neighbour_count(hits: list[Hit]) -> int:
    """The neighbours an answer carries (a message beside two hits counts twice)."""
    return sum(len(hit.before) + len(hit.after) for hit in hits)


def _filters_record(filters: HistoryFilters, *, limit: int) -> dict[str, object]:
    """The caller's filters as the audit stores them (RFC 3339 bounds, null when not given)."""
    return {
        "speaker": filters.speaker,
        "after": format_timestamp(filters.after),
        "before": format_timestamp(filters.before),
        "limit": limit,
    }


def _audit_search(
    perspective: Perspective,
    *,
    query_text: str,
    filters: dict[str, object],
    hits: list[Hit],
    exclusions: dict[str, int],
    exclusions_capped: bool,
    budget_used: int,
    outcome: str = SearchOutcome.ANSWERED,
) -> None:
    """The search's audit event (SPEC §7), in the caller's transaction: who searched, for which
    audience, and what came back (each neighbour once, in the order the hits list them; a hit
    is listed only as a hit), with the rankings the answer shows."""
    hit_ids = [hit.message.id for hit in hits]
    neighbour_ids = dict.fromkeys(
        message.id
        for hit in hits
        for message in (*hit.before, *hit.after)
        if message.id not in hit_ids
    )
    audit.search_event_record(
        workspace_id=perspective.workspace_id,
        run_id=perspective.run_id,
        agent_id=perspective.agent_id,
        destination_id=perspective.destination_id,
        requester_id=perspective.requester_id,
        query_text=query_text,
        filters=filters,
        hit_ids=hit_ids,
        neighbour_ids=list(neighbour_ids),
        rankings=[ranking(hit) for hit in hits],
        exclusions=exclusions,
        exclusions_capped=exclusions_capped,
        budget_used=budget_used,
        outcome=outcome,
    )


# --- memories (SPEC §4) ----------------------------------------------------------------------


def _memory_rooms_record(perspective: Perspective, memory: AgentMemory, sources: list) -> None:
    """Every room the memory inherits: its run's room, the rooms of everything the run was
    shown (``sources``, already the closure) and what they inherited, and the rooms of every
    memory the run recalled, so chains of memories keep the first one's restrictions."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {table(MemoryRoom)} (workspace_id, memory_id, conversation_id)
                SELECT DISTINCT workspace_id, %(memory)s::uuid, room FROM (
                    SELECT destination.workspace_id, destination.id AS room
                          FROM {table(Conversation)} AS destination
                          WHERE destination.workspace_id = %(workspace)s
                            AND destination.id = %(destination)s
                    UNION ALL SELECT source.workspace_id, source.conversation_id
                          FROM {table(Message)} AS source
                          WHERE source.workspace_id = %(workspace)s
                            AND source.id = ANY(%(sources)s::uuid[])
                    UNION ALL SELECT inherited.workspace_id, inherited.conversation_id
                          FROM {table(MessageLineageRoom)} AS inherited
                          WHERE inherited.workspace_id = %(workspace)s
                            AND inherited.message_id = ANY(%(sources)s::uuid[])
                    UNION ALL SELECT used.workspace_id, recalled.conversation_id
                          FROM {table(RunMemory)} AS used
                          JOIN {table(MemoryRoom)} AS recalled
                            ON recalled.workspace_id = used.workspace_id
                           AND recalled.memory_id = used.memory_id
                          WHERE used.workspace_id = %(workspace)s AND used.run_id = %(run)s
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
        perspective, _ = run_lock(
            workspace_id=workspace_id, run_id=run_id, exclusive=True, open_only=False
        )
        direct = run_sources(perspective)
        inherited = MessageLineage.objects.filter(
            workspace_id=workspace_id, message_id__in=direct
        ).values_list("source_id", flat=True)
        sources = list(dict.fromkeys([*direct, *inherited]))
        memory = AgentMemory.objects.create(
            workspace_id=workspace_id, agent_id=perspective.agent_id, run_id=run_id, content=content
        )
        MemoryLineage.objects.bulk_create(
            MemoryLineage(workspace_id=workspace_id, memory=memory, source_id=source)
            for source in sources
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
        perspective, _ = run_lock(workspace_id=workspace_id, run_id=run_id, exclusive=True)
        memories = memory_hits(perspective, query, limit=limit)
        RunMemory.objects.bulk_create(
            [
                RunMemory(workspace_id=workspace_id, run_id=run_id, memory=memory)
                for memory in memories
            ],
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
