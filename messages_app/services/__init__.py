"""Every write to workspaces, people, conversations, messages, links and tokens: one module per
sub-domain, and this package the one place callers import them from (``services.message_create``).

A run's rows are written by ``search_app/runs/``, which owns a run's life.

Services are keyword-only, typed and atomic. They take already-authorised objects (the caller's
workspace comes from its token) and raise ``formation.errors`` exceptions with fixed sentences:
no message text, member list or foreign id is ever put into an error.
"""

from messages_app.services.conversations import (
    conversation_create,
    membership_join,
    membership_leave,
)
from messages_app.services.messages import (
    MessageDraft,
    check_bulk_size,
    lineage_sources,
    message_create,
    message_delete,
    message_edit,
    messages_create,
    seqs_reserve,
)
from messages_app.services.tokens import (
    token_create,
    token_revoke,
    tokens_revoke,
)
from messages_app.services.workspaces import (
    account_create,
    agent_create,
    identity_link_create,
    identity_link_revoke,
    identity_link_verify,
    workspace_create,
)

__all__ = [
    "MessageDraft",
    "account_create",
    "agent_create",
    "check_bulk_size",
    "conversation_create",
    "identity_link_create",
    "identity_link_revoke",
    "identity_link_verify",
    "lineage_sources",
    "membership_join",
    "membership_leave",
    "message_create",
    "message_delete",
    "message_edit",
    "messages_create",
    "seqs_reserve",
    "token_create",
    "token_revoke",
    "tokens_revoke",
    "workspace_create",
]
