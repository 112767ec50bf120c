"""Every write of a run's life: create, lock, evidence, reply and finish.

Concurrency. Every call that acts for a run takes the run's row lock first, through
``run_lock``: the agent tools other than search_history share-lock it (``tool_call``), while
searches, memories and the reply lock it exclusively, so they take turns. A tool call's evidence
is recorded in the transaction that holds the lock, so it is either seen by the reply's delivery
check or the call finds the run finished and returns nothing (``forbidden``). Calls on different
runs never wait for each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from formation import metrics
from formation.bulk_insert import insert_rows
from formation.errors import Forbidden, InvalidArguments
from formation.fields import camel_case
from formation.sql import table, transaction_advisory_lock
from formation.tools import ToolCall
from messages_app.limits import MAX_RECENT_MESSAGES
from messages_app.models import (
    Account,
    Agent,
    Conversation,
    ConversationKind,
    Membership,
    Message,
    MessageLineageRoom,
    Run,
    RunEvidence,
    TokenKind,
    ToolScope,
)
from messages_app.services import MessageDraft, message_create, token_create
from search_app.deliverability import run_lens
from search_app.errors import DeliveryBlocked, DeliveryBlockedDetails
from search_app.models import MemoryRoom, RunMemory
from search_app.queries import delivery_blockers
from search_app.runs.selectors import run_sources
from search_app.scope import Perspective, RunState, run_scope

RUN_FINISHED = "This run has finished; its tools are closed."


def _is_current_member(conversation: Conversation, **member: uuid.UUID) -> bool:
    return Membership.objects.filter(
        workspace_id=conversation.workspace_id,
        conversation_id=conversation.pk,
        left_at__isnull=True,
        **member,
    ).exists()


def run_create(
    *,
    workspace_id: uuid.UUID,
    agent_id: uuid.UUID,
    conversation_id: uuid.UUID,
    requester_id: uuid.UUID,
    current_message_id: uuid.UUID | None = None,
    recent_message_ids: Iterable[uuid.UUID] = (),
    tool_scope: str = ToolScope.MEMBERSHIP,
) -> tuple[Run, str]:
    """Open a turn: the agent must be in the destination, the requester able to read it.
    ``tool_scope`` says what its token's membership tools show (``Run.tool_scope``)."""
    agent = Agent.objects.filter(workspace_id=workspace_id, pk=agent_id).first()
    if agent is None:
        raise InvalidArguments.for_field("agentId", "Unknown agentId.")
    conversation = Conversation.objects.filter(
        workspace_id=workspace_id, pk=conversation_id
    ).first()
    if conversation is None:
        raise InvalidArguments.for_field("conversationId", "Unknown conversationId.")
    if not Account.objects.filter(workspace_id=workspace_id, pk=requester_id).exists():
        raise InvalidArguments.for_field("requesterId", "Unknown requesterId.")
    if not _is_current_member(conversation, agent_id=agent_id):
        raise InvalidArguments.for_field(
            "agentId", "The agent is not a current member of the conversation."
        )
    if conversation.kind in (
        ConversationKind.DIRECT,
        ConversationKind.PRIVATE,
    ) and not _is_current_member(conversation, account_id=requester_id):
        raise InvalidArguments.for_field(
            "requesterId", "The requester is not a current member of the conversation."
        )
    recent = list(dict.fromkeys(recent_message_ids))
    if len(recent) > MAX_RECENT_MESSAGES:
        raise InvalidArguments.for_field(
            "recentMessageIds", f"recentMessageIds holds at most {MAX_RECENT_MESSAGES} ids."
        )
    named = set(recent) | ({current_message_id} if current_message_id else set())
    found = Message.objects.filter(
        workspace_id=workspace_id, conversation_id=conversation.pk, pk__in=named
    ).count()
    if found != len(named):
        raise InvalidArguments.for_field(
            "recentMessageIds" if recent else "currentMessageId",
            "currentMessageId and recentMessageIds must be messages of the conversation.",
        )
    with transaction.atomic():
        run = Run.objects.create(
            workspace_id=workspace_id,
            agent=agent,
            conversation=conversation,
            requester_id=requester_id,
            current_message_id=current_message_id,
            recent_message_ids=recent,
            tool_scope=tool_scope,
        )
        _, raw_token = token_create(
            workspace_id=workspace_id, kind=TokenKind.RUN, agent=agent, run=run
        )
    return run, raw_token


def run_lock(
    *, workspace_id: uuid.UUID, run_id: uuid.UUID, exclusive: bool, open_only: bool = True
) -> tuple[Perspective, RunState]:
    """Lock the run's row until the caller's transaction ends; ``forbidden`` once finished
    unless ``open_only`` is false, ``not_found`` for a run of another workspace.

    ``exclusive`` (searches, memories, the reply) takes the row ``FOR UPDATE``; otherwise it is
    share-locked (the other tools). Either way the perspective's scope is read in the same
    statement: the other tools apply it through the run's lens (``deliverability``). A lock
    waits for whoever holds the run, and under READ COMMITTED the row it then returns is the
    newest one, so its budget counter is the one the previous search committed.

    On Citus the run is first locked on the coordinator too (an advisory lock on the run's id,
    in the same mode): a row lock is held on the shard placement it was taken on, and a
    transaction that began before a shard move's switch-over keeps its lock on the old
    placement while the next one locks the new one, so two searches of one run could spend
    the same budget. The coordinator's lock does not move with the shards.
    """
    if connection.is_citus:
        coordinator_run_lock(run_id, exclusive=exclusive)
    perspective, state = run_scope(
        workspace_id=workspace_id, run_id=run_id, lock="UPDATE" if exclusive else "SHARE"
    )
    if open_only and state.finished_at is not None:
        raise Forbidden(RUN_FINISHED)
    return perspective, state


def coordinator_run_lock(run_id: uuid.UUID, *, exclusive: bool) -> None:
    """A transaction-level advisory lock on the coordinator, keyed by the run's id (the first
    64 bits of the UUID: collisions only make two runs wait for each other)."""
    key = int.from_bytes(uuid.UUID(str(run_id)).bytes[:8], "big", signed=True)
    transaction_advisory_lock("%s", [key], exclusive=exclusive)


def run_evidence_record(
    *, workspace_id: uuid.UUID, run_id: uuid.UUID, message_ids: Iterable[uuid.UUID], tool: str
) -> None:
    """Record messages a tool returned to the run's model, once per message (SPEC §4).

    One statement whatever the page size; a message already in the evidence keeps the tool
    that first returned it.
    """
    ids = list(dict.fromkeys(message_ids))
    if not ids:
        return
    insert_rows(
        table(RunEvidence),
        (("workspace_id", "uuid"), ("run_id", "uuid"), ("message_id", "uuid"), ("tool", "text")),
        [(workspace_id, run_id, message_id, tool) for message_id in ids],
        fixed={"created_at": "now()"},
        suffix="ON CONFLICT (workspace_id, run_id, message_id) DO NOTHING",
    )


@contextmanager
def tool_call(call: ToolCall, tool: str) -> Iterator[None]:
    """Hold a run token's run for one agent tool call (``formation.tools.hold_runs_with``).

    The read and the record share one transaction under the run's share lock, so a failed
    call records nothing and a finished run's tools answer ``forbidden``; what the body
    reported with ``call.returned`` is recorded as the run's evidence, with the tool that
    first returned it. The statement that takes the lock also reads the run's perspective,
    which the body's statement applies through ``call.lens`` (``deliverability.run_lens``:
    every message flagged deliverable, and for a ``toolScope`` of deliverable only what the
    destination may receive). With an agent token the registry holds nothing: no run, no
    lock, no transaction, and the tool's one statement is its own.
    """
    workspace_id, run_id = call.caller.workspace_id, call.caller.run_id
    with transaction.atomic():
        perspective, state = run_lock(workspace_id=workspace_id, run_id=run_id, exclusive=False)
        call.destination_id = perspective.destination_id
        call.requester_id = perspective.requester_id
        call.lens = run_lens(perspective, strict=state.tool_scope == ToolScope.DELIVERABLE)
        yield
        run_evidence_record(
            workspace_id=workspace_id, run_id=run_id, message_ids=call.returned_ids, tool=tool
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
        perspective, state = run_lock(
            workspace_id=workspace_id, run_id=run_id, exclusive=True, open_only=False
        )
        if state.finished_at is not None:
            raise InvalidArguments("This run has already replied; a run replies once.")
        blockers = delivery_blockers(perspective, run_id=run_id)
        if blockers:
            if settings.METRICS_ENABLED:
                for reason in blockers:
                    metrics.DELIVERY_BLOCKED.labels(metrics.exclusion_reason(reason)).inc()
            raise DeliveryBlocked(
                details=DeliveryBlockedDetails.render(
                    blocked=sum(blockers.values()),
                    reasons={camel_case(reason): count for reason, count in blockers.items()},
                )
            )
        reply = message_create(
            conversation=Conversation(id=perspective.destination_id, workspace_id=workspace_id),
            draft=MessageDraft(
                content=content,
                sender_agent_id=perspective.agent_id,
                reply_to_id=perspective.current_message_id,
                lineage=run_sources(perspective),
            ),
            # Everything the run read travels with the reply, however much that is.
            lineage_cap=None,
        )
        _inherit_recalled_rooms(perspective, reply)
        _run_finish(workspace_id=workspace_id, run_id=run_id, reply=reply)
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
            f"""INSERT INTO {table(MessageLineageRoom)}
                    (workspace_id, message_id, conversation_id)
                SELECT DISTINCT used.workspace_id, %(reply)s::uuid, inherited.conversation_id
                FROM {table(RunMemory)} AS used
                JOIN {table(MemoryRoom)} AS inherited
                  ON inherited.workspace_id = used.workspace_id
                 AND inherited.memory_id = used.memory_id
                WHERE used.workspace_id = %(workspace)s AND used.run_id = %(run)s
                ON CONFLICT (workspace_id, message_id, conversation_id) DO NOTHING""",
            {"workspace": perspective.workspace_id, "reply": reply.id, "run": perspective.run_id},
        )


def _run_finish(*, workspace_id: uuid.UUID, run_id: uuid.UUID, reply: Message) -> None:
    """The run has replied with ``reply``: from now on its tools answer ``forbidden``
    (``run_lock``)."""
    Run.objects.filter(workspace_id=workspace_id, pk=run_id).update(
        finished_at=timezone.now(), reply=reply
    )
