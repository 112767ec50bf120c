"""Distribution-ready keys for the search tables, step 2 (docs/citus.md): primary keys
``(workspace_id, id)`` and composite foreign keys to the messages tables' new keys
(messages_app 0014)."""

from django.db import migrations

from formation.tenant_keys import composite_foreign_keys, workspace_primary_keys

MEMORIES = "agent_memories"
FOREIGN_KEYS = [
    ("message_search_documents", "search_document_message_same_ws", "message_id", "messages_app_message", "id"),
    (MEMORIES, "memory_agent_same_ws", "agent_id", "messages_app_agent", "id"),
    (MEMORIES, "memory_run_same_ws", "run_id", "messages_app_run", "id"),
    ("agent_memory_lineage", "memory_lineage_memory_same_ws", "memory_id", MEMORIES, "id"),
    ("agent_memory_lineage", "memory_lineage_source_same_ws", "source_id", "messages_app_message", "id"),
    ("agent_memory_rooms", "memory_room_memory_same_ws", "memory_id", MEMORIES, "id"),
    ("agent_memory_rooms", "memory_room_conversation_same_ws", "conversation_id", "messages_app_conversation", "id"),
    ("run_memories", "run_memory_run_same_ws", "run_id", "messages_app_run", "id"),
    ("run_memories", "run_memory_memory_same_ws", "memory_id", MEMORIES, "id"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("search_app", "0006_distribution_ready_keys"),
        ("messages_app", "0014_distribution_ready_keys"),
    ]

    operations = [
        workspace_primary_keys(["message_search_documents"], column="message_id"),
        workspace_primary_keys([MEMORIES, "agent_memory_lineage", "agent_memory_rooms", "run_memories"]),
        composite_foreign_keys(FOREIGN_KEYS),
    ]
