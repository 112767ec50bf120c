"""Django's single-column foreign keys go (``db_constraint=False``): they point at the ``id``
primary keys messages_app 0014 turns into ``(workspace_id, id)``; audit_app 0005 adds the
composite keys that replace them (docs/citus.md)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('audit_app', '0003_lifecycle'),
        ('messages_app', '0013_workspace_language_run_scope'),
    ]

    operations = [
        migrations.AlterField(
            model_name='conversationsearchevent',
            name='agent',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.agent'),
        ),
        migrations.AlterField(
            model_name='conversationsearchevent',
            name='destination',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.conversation'),
        ),
        migrations.AlterField(
            model_name='conversationsearchevent',
            name='requester',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.account'),
        ),
        migrations.AlterField(
            model_name='conversationsearchevent',
            name='run',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='search_events', to='messages_app.run'),
        ),
    ]
