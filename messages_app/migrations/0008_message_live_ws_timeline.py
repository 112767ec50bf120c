"""search_messages' newest-first walk across a workspace (see Message.Meta.indexes).

Built CONCURRENTLY, so adding it to a live table does not block ingestion.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.models import F, Q


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("messages_app", "0007_lineage_only_for_agent_messages"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="message",
            index=models.Index(
                F("workspace"),
                F("created_at").desc(),
                F("seq").desc(),
                condition=Q(deleted_at__isnull=True),
                name="message_live_ws_timeline",
            ),
        ),
    ]
