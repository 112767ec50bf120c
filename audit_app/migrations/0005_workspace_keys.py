"""The search audit's and the lifecycle record's primary keys ``(workspace_id, id)``, and the
search audit's composite foreign keys to the messages tables' new keys (messages_app 0014;
docs/citus.md)."""

from django.db import migrations

from formation.tenant_keys import composite_foreign_keys, workspace_primary_keys

EVENTS = "conversation_search_events"
FOREIGN_KEYS = [
    (EVENTS, "search_event_run_same_ws", "run_id", "messages_app_run", "id"),
    (EVENTS, "search_event_agent_same_ws", "agent_id", "messages_app_agent", "id"),
    (EVENTS, "search_event_destination_same_ws", "destination_id", "messages_app_conversation", "id"),
    (EVENTS, "search_event_requester_same_ws", "requester_id", "messages_app_account", "id"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("audit_app", "0004_composite_foreign_keys"),
        ("messages_app", "0014_distribution_ready_keys"),
    ]

    operations = [
        workspace_primary_keys([EVENTS, "lifecycle_events"]),
        composite_foreign_keys(FOREIGN_KEYS),
    ]
