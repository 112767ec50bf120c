"""Composite foreign keys Django cannot declare: references never leave their workspace.

Each ``(workspace_id, x_id)`` pair must match the ``(workspace_id, id)`` key of the referenced
row, and a reply or thread root must be in the message's own conversation. With the default
MATCH SIMPLE, a null reference is simply not checked.
"""

from django.db import migrations

# (table, constraint name, local columns, referenced table, referenced columns)
SAME_SCOPE_KEYS = [
    ("messages_app_membership", "membership_conversation_same_ws",
     "workspace_id, conversation_id", "messages_app_conversation", "workspace_id, id"),
    ("messages_app_membership", "membership_account_same_ws",
     "workspace_id, account_id", "messages_app_account", "workspace_id, id"),
    ("messages_app_membership", "membership_agent_same_ws",
     "workspace_id, agent_id", "messages_app_agent", "workspace_id, id"),
    ("messages_app_message", "message_conversation_same_ws",
     "workspace_id, conversation_id", "messages_app_conversation", "workspace_id, id"),
    ("messages_app_message", "message_sender_account_same_ws",
     "workspace_id, sender_account_id", "messages_app_account", "workspace_id, id"),
    ("messages_app_message", "message_sender_agent_same_ws",
     "workspace_id, sender_agent_id", "messages_app_agent", "workspace_id, id"),
    ("messages_app_message", "message_reply_to_same_conversation",
     "conversation_id, reply_to_id", "messages_app_message", "conversation_id, id"),
    ("messages_app_message", "message_thread_same_conversation",
     "conversation_id, thread_id", "messages_app_message", "conversation_id, id"),
    ("messages_app_messagelineage", "lineage_message_same_ws",
     "workspace_id, message_id", "messages_app_message", "workspace_id, id"),
    ("messages_app_messagelineage", "lineage_source_same_ws",
     "workspace_id, source_id", "messages_app_message", "workspace_id, id"),
    ("messages_app_identitylink", "identity_link_account_same_ws",
     "workspace_id, account_id", "messages_app_account", "workspace_id, id"),
    ("messages_app_identitylink", "identity_link_linked_same_ws",
     "workspace_id, linked_account_id", "messages_app_account", "workspace_id, id"),
    ("messages_app_run", "run_agent_same_ws",
     "workspace_id, agent_id", "messages_app_agent", "workspace_id, id"),
    ("messages_app_run", "run_conversation_same_ws",
     "workspace_id, conversation_id", "messages_app_conversation", "workspace_id, id"),
    ("messages_app_run", "run_requester_same_ws",
     "workspace_id, requester_id", "messages_app_account", "workspace_id, id"),
    ("messages_app_run", "run_current_message_same_conversation",
     "conversation_id, current_message_id", "messages_app_message", "conversation_id, id"),
    ("messages_app_apitoken", "token_agent_same_ws",
     "workspace_id, agent_id", "messages_app_agent", "workspace_id, id"),
    ("messages_app_apitoken", "token_run_same_ws",
     "workspace_id, run_id", "messages_app_run", "workspace_id, id"),
]


def _add(table, name, columns, target, target_columns):
    return migrations.RunSQL(
        sql=f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY ({columns}) "
        f"REFERENCES {target} ({target_columns}) DEFERRABLE INITIALLY IMMEDIATE",
        reverse_sql=f"ALTER TABLE {table} DROP CONSTRAINT {name}",
    )


class Migration(migrations.Migration):
    dependencies = [("messages_app", "0001_initial")]

    operations = [_add(*key) for key in SAME_SCOPE_KEYS]
