"""A run's perspective and scope: who asks, for which audience, and what one call reads of it.

``Perspective`` is everything the rules of ``search_app.perspective`` need, taken from the run;
its ``scope`` is what ``run_scope`` read for this one call, by the one statement that also
locks the run (``perspective.scope_statement``): the permitted rooms, the agent's rooms and
membership intervals, the requester's accounts. Every later statement of the call applies that
same scope through ``perspective.scope_ctes``, and nothing is kept beyond the call, so a link
revoked or a reader added a moment ago already counts.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection

from formation.errors import NotFound
from formation.sql import merge_params
from messages_app.models import Run, ToolScope
from search_app.perspective import scope_statement

# The scope arrays, in the order ``scope_statement`` answers them.
SCOPE_NAMES = (
    "s_permitted",
    "s_observed_conversations",
    "s_observed_joined",
    "s_observed_left",
    "s_requester_accounts",
    "s_agent_rooms",
    "s_unknown_rooms",
)


@dataclass(frozen=True)
class Perspective:
    """Who is asking, for which audience: everything the rules need, taken from the run, and
    the scope read for this one call."""

    workspace_id: uuid.UUID
    agent_id: uuid.UUID
    destination_id: uuid.UUID
    destination_kind: str
    requester_id: uuid.UUID
    current_message_id: uuid.UUID | None = None
    recent_message_ids: tuple[uuid.UUID, ...] = ()
    run_id: uuid.UUID | None = None
    # PostgreSQL array literals, as the scope statement printed them: they only travel back
    # into this call's statements, so they are never parsed into Python values.
    scope: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of_run(cls, run: Run) -> Perspective:
        """The perspective of an already loaded run, its scope read now (without a lock)."""
        (perspective, _) = run_scope(workspace_id=run.workspace_id, run_id=run.id, lock=None)
        return perspective

    @property
    def in_prompt(self) -> list[uuid.UUID]:
        """Rule 5: the current message and the recent history the runtime already loaded."""
        current = [self.current_message_id] if self.current_message_id else []
        return [*current, *self.recent_message_ids]

    def params(self) -> dict[str, object]:
        """The named parameters every fragment of ``perspective`` uses, the scope included."""
        own = {
            "p_workspace": self.workspace_id,
            "p_agent": self.agent_id,
            "p_destination": self.destination_id,
            "p_requester": self.requester_id,
            "p_in_prompt": self.in_prompt,
            "p_current": self.current_message_id,
            "p_recent": list(self.recent_message_ids),
        }
        return merge_params(own, self.scope)


@dataclass(frozen=True)
class RunState:
    """What a run's tools need of its row besides the perspective, read under its lock."""

    finished_at: datetime | None
    history_evidence_count: int
    tool_scope: str = ToolScope.MEMBERSHIP


def run_scope(
    *, workspace_id: uuid.UUID, run_id: uuid.UUID, lock: str | None
) -> tuple[Perspective, RunState]:
    """The run's perspective with its scope, and its state, read by one statement.

    ``lock`` is ``"UPDATE"`` (searches, memories, the reply: one at a time per run),
    ``"SHARE"`` (the other tools) or ``None``. A run of another workspace is ``NotFound``.
    Every later statement of the call applies this same scope, so its hits, neighbours and
    counts agree, and nothing is kept beyond the call.
    """
    with connection.cursor() as cursor:
        cursor.execute(scope_statement(lock), {"p_workspace": workspace_id, "p_run": run_id})
        row = cursor.fetchone()
    if row is None:
        raise NotFound()
    (
        _,
        agent_id,
        destination_id,
        requester_id,
        current_message_id,
        recent_message_ids,
        finished_at,
        history_evidence_count,
        tool_scope,
        destination_kind,
        *arrays,
    ) = row
    perspective = Perspective(
        workspace_id=workspace_id,
        agent_id=agent_id,
        destination_id=destination_id,
        destination_kind=destination_kind,
        requester_id=requester_id,
        current_message_id=current_message_id,
        recent_message_ids=tuple(recent_message_ids),
        run_id=run_id,
        scope=dict(zip(SCOPE_NAMES, arrays, strict=True)),
    )
    return perspective, RunState(
        finished_at=finished_at,
        history_evidence_count=history_evidence_count,
        tool_scope=tool_scope,
    )
