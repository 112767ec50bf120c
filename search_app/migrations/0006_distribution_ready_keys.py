"""Distribution-ready keys, step 1 of 3 for the search tables (docs/citus.md).

Django's single-column foreign keys go (``db_constraint=False``: the composite ones of search_app
0006 replace them), memory lineage and run memories gain the workspace they belong to, and every
unique key includes ``workspace_id``, as a table distributed by it requires.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('messages_app', '0013_workspace_language_run_scope'),
        ('search_app', '0005_search_documents_cjk_language'),
    ]

    operations = [
        # Composite keys point at the (workspace_id, id) keys messages_app 0014 turns into
        # primary keys; search_app 0007 adds them back.
        migrations.RunSQL(
            "ALTER TABLE agent_memory_rooms DROP CONSTRAINT memory_room_conversation_same_ws",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.RemoveConstraint(
            model_name='memorylineage',
            name='memory_lineage_unique',
        ),
        migrations.RemoveConstraint(
            model_name='memoryroom',
            name='memory_room_unique',
        ),
        migrations.RemoveConstraint(
            model_name='runmemory',
            name='run_memory_once',
        ),
        migrations.AddField(
            model_name='memorylineage',
            name='workspace',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.workspace'),
        ),
        migrations.AddField(
            model_name='runmemory',
            name='workspace',
            field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.workspace'),
        ),
        migrations.RunSQL(
            """
            UPDATE agent_memory_lineage AS l SET workspace_id = m.workspace_id
            FROM agent_memories AS m WHERE m.id = l.memory_id;
            UPDATE run_memories AS u SET workspace_id = r.workspace_id
            FROM messages_app_run AS r WHERE r.id = u.run_id;
            """,
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name='memorylineage',
            name='workspace',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.workspace'),
        ),
        migrations.AlterField(
            model_name='runmemory',
            name='workspace',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.workspace'),
        ),
        migrations.AlterField(
            model_name='agentmemory',
            name='agent',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='memories', to='messages_app.agent'),
        ),
        migrations.AlterField(
            model_name='agentmemory',
            name='run',
            field=models.ForeignKey(db_constraint=False, help_text='The run that wrote it.', on_delete=django.db.models.deletion.PROTECT, related_name='memories', to='messages_app.run'),
        ),
        migrations.AlterField(
            model_name='memorylineage',
            name='memory',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='lineage', to='search_app.agentmemory'),
        ),
        migrations.AlterField(
            model_name='memorylineage',
            name='source',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='memoryroom',
            name='conversation',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.conversation'),
        ),
        migrations.AlterField(
            model_name='memoryroom',
            name='memory',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='rooms', to='search_app.agentmemory'),
        ),
        migrations.AlterField(
            model_name='messagesearchdocument',
            name='message',
            field=models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.DO_NOTHING, primary_key=True, related_name='search_document', serialize=False, to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='runmemory',
            name='memory',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='search_app.agentmemory'),
        ),
        migrations.AlterField(
            model_name='runmemory',
            name='run',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='memories_used', to='messages_app.run'),
        ),
        migrations.AddConstraint(
            model_name='memorylineage',
            constraint=models.UniqueConstraint(fields=('workspace', 'memory', 'source'), name='memory_lineage_unique'),
        ),
        migrations.AddConstraint(
            model_name='memoryroom',
            constraint=models.UniqueConstraint(fields=('workspace', 'memory', 'conversation'), name='memory_room_unique'),
        ),
        migrations.AddConstraint(
            model_name='runmemory',
            constraint=models.UniqueConstraint(fields=('workspace', 'run', 'memory'), name='run_memory_once'),
        ),
    ]
