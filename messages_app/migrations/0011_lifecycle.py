"""The data lifecycle (messages_app/lifecycle.py): retention periods, legal holds, erased
accounts and the mark on messages derived from erased sources.

A hold's conversation must be of the hold's workspace (a composite key, as migration 0002 adds
for every other reference), and derived messages whose sources were deleted before this
migration are marked as a delete now marks them.
"""

import django.db.models.deletion
import django.utils.timezone
import uuid
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('messages_app', '0010_run_history_evidence_count'),
    ]

    operations = [
        migrations.CreateModel(
            name='LegalHold',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('reference', models.CharField(blank=True, help_text='The matter or case the hold serves.', max_length=200)),
                ('placed_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('released_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'ordering': ['workspace_id', '-placed_at', 'id'],
            },
        ),
        migrations.AddField(
            model_name='account',
            name='erased_at',
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name='conversation',
            name='retention_days',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='conversation',
            name='retention_override',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name='message',
            name='sources_erased',
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddField(
            model_name='workspace',
            name='retention_days',
            field=models.PositiveIntegerField(blank=True, help_text='Messages older than this many days are erased by apply_retention; empty keeps them. A conversation may override it.', null=True),
        ),
        migrations.AddConstraint(
            model_name='conversation',
            constraint=models.CheckConstraint(condition=models.Q(('retention_days__isnull', True), models.Q(('retention_days__gte', 1), ('retention_days__lte', 36500)), _connector='OR'), name='conversation_retention_in_range'),
        ),
        migrations.AddConstraint(
            model_name='conversation',
            constraint=models.CheckConstraint(condition=models.Q(('retention_override', True), ('retention_days__isnull', True), _connector='OR'), name='conversation_retention_days_only_with_override'),
        ),
        migrations.AddConstraint(
            model_name='workspace',
            constraint=models.CheckConstraint(condition=models.Q(('retention_days__isnull', True), models.Q(('retention_days__gte', 1), ('retention_days__lte', 36500)), _connector='OR'), name='workspace_retention_in_range'),
        ),
        migrations.AddField(
            model_name='legalhold',
            name='conversation',
            field=models.ForeignKey(blank=True, help_text='Empty: every conversation of the workspace.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='legal_holds', to='messages_app.conversation'),
        ),
        migrations.AddField(
            model_name='legalhold',
            name='workspace',
            field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.workspace'),
        ),
        migrations.AddIndex(
            model_name='legalhold',
            index=models.Index(condition=models.Q(('released_at__isnull', True)), fields=['workspace', 'conversation'], name='legal_hold_active'),
        ),
        migrations.AddConstraint(
            model_name='legalhold',
            constraint=models.CheckConstraint(condition=models.Q(('released_at__isnull', True), ('released_at__gte', models.F('placed_at')), _connector='OR'), name='legal_hold_released_after_placed'),
        ),
    ]

# Adding a column with a constant default rewrites nothing; the backfill touches only derived
# messages with a deleted source.
SAME_WORKSPACE_HOLD = """
ALTER TABLE messages_app_legalhold ADD CONSTRAINT legal_hold_conversation_same_ws
    FOREIGN KEY (workspace_id, conversation_id)
    REFERENCES messages_app_conversation (workspace_id, id) DEFERRABLE INITIALLY IMMEDIATE
"""
MARK_DERIVED = """
UPDATE messages_app_message AS derived SET sources_erased = true
WHERE derived.deleted_at IS NULL AND NOT derived.sources_erased
  AND derived.id IN (SELECT lineage.message_id FROM messages_app_messagelineage AS lineage
                     JOIN messages_app_message AS source ON source.id = lineage.source_id
                     WHERE source.deleted_at IS NOT NULL)
"""

Migration.operations += [
    migrations.RunSQL(
        sql=SAME_WORKSPACE_HOLD,
        reverse_sql="ALTER TABLE messages_app_legalhold DROP CONSTRAINT legal_hold_conversation_same_ws",
    ),
    migrations.RunSQL(sql=MARK_DERIVED, reverse_sql=migrations.RunSQL.noop),
]
