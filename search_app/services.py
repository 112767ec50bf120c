"""The run's perspective-bound work: search_history (SPEC §5, §6, audited as §7 says) and the
agent's memories (SPEC §4). The reply, with its final delivery check, is
``runs.services.run_reply``.

Concurrency. The run's row is locked (``SELECT ... FOR UPDATE``) by the statement that reads
the call's scope, so searches, replies and memories of one run take turns (tool calls
share-lock it); the locked row carries the budget counter the previous search committed, and
evidence is inserted once per message whatever ran at the same time, so the count can never
pass the ceiling, however many searches run at once (``search_app.history.spend``). Calls on
different runs never wait for each other. search_history's hits, texts and neighbours, its
evidence and its audit are one statement that applies every rule, so a message deleted
meanwhile is never returned, and no evidence is kept without its audit.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, OperationalError, connection, transaction
from django.utils import timezone

from audit_app import services as audit
from audit_app.models import SearchTool
from formation import metrics
from formation.auth import RunFacts
from formation.errors import Forbidden, NotFound
from formation.fields import format_timestamp
from formation.sql import table
from messages_app.models import Conversation, Message, MessageLineage, MessageLineageRoom, Run
from search_app.errors import SearchBudgetExhausted, SearchLimitDetails
from search_app.history import terms
from search_app.history.read import history_read
from search_app.history.results import HistoryFilters, HistorySearch, Hit
from search_app.limits import EVIDENCE_BUDGET, Budget
from search_app.models import AgentMemory, MemoryLineage, MemoryRoom, RunMemory
from search_app.queries import memory_hits
from search_app.query.highlights import highlights
from search_app.query.parse import parse_query
from search_app.runs.selectors import run_sources
from search_app.runs.services import RUN_FINISHED, coordinator_run_lock, run_lock
from search_app.scope import Perspective


def search_history(
    *,
    workspace_id: uuid.UUID,
    run_id: uuid.UUID,
    query_text: str,
    filters: HistoryFilters,
    limit: int,
    now: datetime | None = None,
    run: RunFacts | None = None,
    agent_id: uuid.UUID | None = None,
) -> HistorySearch:
    """Search the run's perspective, record what it returns as evidence, and audit the call.

    Two statements: the query's parse (``parse_query``; a query with no searchable word is
    refused there and not audited: nothing was searched), then the hits statement
    (``search_app.history``), which locks the run, reads its scope, ranks, reads the
    neighbours, records the evidence and writes the audit event (SPEC §7), also for a call
    refused because the budget is spent, so "who searched for X" has a complete answer. It
    travels with its transaction's BEGIN (``formation.prepared``); the COMMIT follows once the
    answer is built, so a failure while building it keeps nothing. If PostgreSQL refuses the
    audit (or anything at that COMMIT), nothing of the call is kept: ``audit_unavailable``.

    ``run`` and ``agent_id`` are what a run token's look-up read of the run (``Caller.run``);
    without them they are read here.
    """
    query = parse_query(query_text, workspace_id=workspace_id)
    perspective = _perspective(workspace_id, run_id, run, agent_id)
    routes = terms.routes(query, terms.frequencies(workspace_id))
    audit_parts = audit.search_event_statement_parts(
        query_text=query_text, filters=_filters_record(filters, limit=limit)
    )
    now = now or timezone.now()
    try:
        with audit.audited_atomic():
            if connection.is_citus:
                coordinator_run_lock(run_id, exclusive=True)
            found = history_read(
                perspective, query, filters, limit=limit, now=now, routes=routes, audit=audit_parts
            )
            # Inside the transaction: if anything fails from here on, no evidence or audit is
            # recorded for results the model never received.
            hits = found.hits
            marked = highlights(
                [hit.message.content for hit in hits], query, [hit.marked for hit in hits]
            )
    except OperationalError:
        raise
    except DatabaseError as error:
        # The statement wrote the evidence and the audit event together: refused, neither is.
        raise audit.search_event_refused(error) from None
    if not found.found:
        raise NotFound()
    if not found.open:
        raise Forbidden(RUN_FINISHED)
    if found.used >= EVIDENCE_BUDGET:
        if settings.METRICS_ENABLED:
            metrics.SEARCH_BUDGET_EXHAUSTED.inc()
        raise SearchBudgetExhausted(
            details=SearchLimitDetails.render({"budget": Budget(used=found.used)})
        )
    if settings.METRICS_ENABLED:
        metrics.SEARCH_HITS.observe(len(hits))
        metrics.SEARCH_NEIGHBOURS.observe(neighbour_count(hits))
        metrics.SEARCH_BUDGET_TRIMMED.inc(found.left_out)
        metrics.count_exclusions(found.exclusions)
    return HistorySearch(
        hits=hits,
        highlights=marked,
        budget=Budget(used=found.used + found.added),
        trimmed=found.left_out,
    )


def _perspective(
    workspace_id: uuid.UUID,
    run_id: uuid.UUID,
    run: RunFacts | None,
    agent_id: uuid.UUID | None,
) -> Perspective:
    """Who asks, for which audience, from the run's facts (read here when not given); the
    statement reads the scope itself."""
    if run is None or agent_id is None:
        row = (
            Run.objects.filter(workspace_id=workspace_id, id=run_id)
            .values_list(
                "agent_id",
                "conversation_id",
                "requester_id",
                "current_message_id",
                "recent_message_ids",
            )
            .first()
        )
        if row is None:
            raise NotFound()
        agent_id, destination, requester, current, recent = row
        run = RunFacts(
            destination_id=destination,
            requester_id=requester,
            current_message_id=current,
            recent_message_ids=tuple(recent),
        )
    return Perspective(
        workspace_id=workspace_id,
        agent_id=agent_id,
        destination_id=run.destination_id,
        destination_kind="",
        requester_id=run.requester_id,
        current_message_id=run.current_message_id,
        recent_message_ids=run.recent_message_ids,
        run_id=run_id,
    )


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
