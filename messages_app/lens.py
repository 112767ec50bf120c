"""A run's lens: the perspective of a run token's call, as SQL fragments the membership tools'
statements (``selectors``) apply to the messages they read.

The lens only ever narrows what membership already allows: its fragments are conditions and
columns over a message alias, evaluated by PostgreSQL in the tool's own statement, and nothing
is filtered in Python. Every helper here takes ``None`` for an agent token's call, which has
no lens, and then adds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from formation.sql import merge_params, table
from messages_app.models import Message


@dataclass(frozen=True)
class RunLens:
    """A run's perspective on the membership tools' statements, as SQL over a message alias.

    Built for a run token by ``search_app.deliverability`` from the perspective rules (SPEC
    §3) for the run's destination. It only ever narrows: ``deliverable(m)`` is a column (rules
    1 to 4 as they stand now, the final delivery check's verdict on m), and with ``strict``
    (the run's ``toolScope`` is ``deliverable``) every statement also requires ``visible(m)``
    (rules 1 to 5, what search_history may return) and shows a ``replyToId`` or ``threadId``
    only through ``reference(column)`` (the run may receive what it names). ``ctes`` are the
    WITH entries the fragments need, ``params`` their parameters.
    """

    ctes: str
    params: Mapping[str, object]
    deliverable: Callable[[str], str]
    visible: Callable[[str], str]
    reference: Callable[[str], str]
    strict: bool


def lens_ctes(lens: RunLens | None) -> str:
    """The lens's WITH entries, ready to be followed by more (or by nothing: ``WITH x``)."""
    return "" if lens is None else f"{lens.ctes},"


def lens_visible(lens: RunLens | None, alias: str) -> str:
    """``AND`` the run may receive message ``alias``, for a strict lens; else nothing."""
    return f"AND {lens.visible(alias)}" if lens is not None and lens.strict else ""


def lens_reference(lens: RunLens) -> Callable[[str], str] | None:
    """How a strict lens shows a column naming another message (``RunLens.reference``); None
    when the lens shows such columns as they are."""
    return lens.reference if lens.strict else None


def deliverable_flag(lens: RunLens, alias: str) -> str:
    """Whether a reply citing message ``alias`` would pass the final delivery check now: a
    column read from the message's canonical row, whatever ``alias`` is a copy of."""
    return (
        f"(SELECT {lens.deliverable('flagged')} FROM {table(Message)} AS flagged "
        f"WHERE flagged.workspace_id = %(p_workspace)s AND flagged.id = {alias}.id)"
    )


def lens_params(lens: RunLens | None, params: Mapping[str, object]) -> dict[str, object]:
    """A statement's own parameters and, with a lens, its fragments' (no name bound twice)."""
    return dict(params) if lens is None else merge_params(lens.params, params)
