"""Workspaces, people, agents, conversations, memberships, messages, identity links, runs, legal
holds and tokens: one module per sub-domain, all importable from ``messages_app.models``.

Invariants that must never break are database constraints, not Python checks: a message's
sender is exactly one of account/agent, ``seq`` is unique per conversation, a deleted message has
no body, membership intervals of one member never overlap, and every reference stays inside its
workspace (and ``reply_to``/``thread`` inside their conversation). Django cannot declare
composite foreign keys, so those are added by ``migrations/0002_same_scope_foreign_keys.py`` on
top of the ``(workspace, id)`` / ``(conversation, id)`` unique keys declared here.
"""

from messages_app.models.conversations import (
    Conversation,
    ConversationKind,
    Membership,
    TsTzRange,
)
from messages_app.models.holds import LegalHold
from messages_app.models.messages import (
    Message,
    MessageLineage,
    MessageLineageRoom,
    MessageRole,
    MessageStatus,
)
from messages_app.models.runs import Run, RunEvidence, ToolScope
from messages_app.models.tokens import ApiToken, TokenKind
from messages_app.models.workspaces import (
    DEFAULT_LANGUAGE,
    Account,
    Agent,
    IdentityLink,
    IdentityLinkStatus,
    Workspace,
)

__all__ = [
    "DEFAULT_LANGUAGE",
    "Account",
    "Agent",
    "ApiToken",
    "Conversation",
    "ConversationKind",
    "IdentityLink",
    "IdentityLinkStatus",
    "LegalHold",
    "Membership",
    "Message",
    "MessageLineage",
    "MessageLineageRoom",
    "MessageRole",
    "MessageStatus",
    "Run",
    "RunEvidence",
    "TokenKind",
    "ToolScope",
    "TsTzRange",
    "Workspace",
]
