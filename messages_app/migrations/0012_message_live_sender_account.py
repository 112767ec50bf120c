"""An account's erasure and export read what it wrote (see Message.Meta.indexes).

Built CONCURRENTLY, so adding it to a live table does not block ingestion.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models
from django.db.models import F, Q


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("messages_app", "0011_lifecycle"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="message",
            index=models.Index(
                F("sender_account"),
                F("created_at"),
                F("id"),
                condition=Q(deleted_at__isnull=True, sender_account__isnull=False),
                name="message_live_sender_account",
            ),
        ),
    ]
