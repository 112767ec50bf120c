"""Distribution-ready keys for the messages tables (docs/citus.md): what a table distributed by
``workspace_id`` needs, on plain PostgreSQL too.

Every primary key becomes ``(workspace_id, id)`` (Django still knows ``id`` as the pk), every
unique and exclusion constraint includes ``workspace_id``, and Django's single-column foreign
keys (``db_constraint=False`` on the fields) give way to composite ones that carry the
workspace, so each reference stays inside its workspace and on its shard. A token is unique
per workspace. The search and audit tables dropped their keys to these tables first
(search_app 0006, audit_app 0004) and point at the new ones after (search_app 0007, audit_app
0005).
"""

import django.contrib.postgres.constraints
import django.db.models.deletion
import django.db.models.functions.comparison
from django.db import migrations, models

import messages_app.models

from formation.tenant_keys import (
    composite_foreign_keys,
    drop_constraints,
    workspace_primary_keys,
)

TABLES = [
    "messages_app_account",
    "messages_app_agent",
    "messages_app_conversation",
    "messages_app_membership",
    "messages_app_message",
    "messages_app_messagelineage",
    "messages_app_messagelineageroom",
    "messages_app_identitylink",
    "messages_app_run",
    "messages_app_runevidence",
    "messages_app_apitoken",
    "messages_app_legalhold",
]

# The composite keys of migrations 0002, 0006, 0009, 0011 and 0013: they point at the unique
# keys this migration turns into primary keys or widens by the workspace.
OLD_COMPOSITE_KEYS = {
    "messages_app_membership": [
        "membership_conversation_same_ws", "membership_account_same_ws", "membership_agent_same_ws",
    ],
    "messages_app_message": [
        "message_conversation_same_ws", "message_sender_account_same_ws",
        "message_sender_agent_same_ws", "message_reply_to_same_conversation",
        "message_thread_same_conversation",
    ],
    "messages_app_messagelineage": ["lineage_message_same_ws", "lineage_source_same_ws"],
    "messages_app_messagelineageroom": [
        "lineage_room_message_same_ws", "lineage_room_conversation_same_ws",
    ],
    "messages_app_identitylink": ["identity_link_account_same_ws", "identity_link_linked_same_ws"],
    "messages_app_run": [
        "run_agent_same_ws", "run_conversation_same_ws", "run_requester_same_ws",
        "run_current_message_same_conversation", "run_reply_same_conversation",
    ],
    "messages_app_runevidence": ["run_evidence_run_same_ws", "run_evidence_message_same_ws"],
    "messages_app_apitoken": ["token_agent_same_ws", "token_run_same_ws"],
    "messages_app_legalhold": ["legal_hold_conversation_same_ws"],
}

ACCOUNT, AGENT, CONVERSATION = "messages_app_account", "messages_app_agent", "messages_app_conversation"
MESSAGE, RUN = "messages_app_message", "messages_app_run"
# (table, constraint, columns after workspace_id, referenced table, its columns after workspace_id)
FOREIGN_KEYS = [
    ("messages_app_membership", "membership_conversation_same_ws", "conversation_id", CONVERSATION, "id"),
    ("messages_app_membership", "membership_account_same_ws", "account_id", ACCOUNT, "id"),
    ("messages_app_membership", "membership_agent_same_ws", "agent_id", AGENT, "id"),
    (MESSAGE, "message_conversation_same_ws", "conversation_id", CONVERSATION, "id"),
    (MESSAGE, "message_sender_account_same_ws", "sender_account_id", ACCOUNT, "id"),
    (MESSAGE, "message_sender_agent_same_ws", "sender_agent_id", AGENT, "id"),
    (MESSAGE, "message_reply_to_same_conversation", "conversation_id, reply_to_id", MESSAGE, "conversation_id, id"),
    (MESSAGE, "message_thread_same_conversation", "conversation_id, thread_id", MESSAGE, "conversation_id, id"),
    ("messages_app_messagelineage", "lineage_message_same_ws", "message_id", MESSAGE, "id"),
    ("messages_app_messagelineage", "lineage_source_same_ws", "source_id", MESSAGE, "id"),
    ("messages_app_messagelineageroom", "lineage_room_message_same_ws", "message_id", MESSAGE, "id"),
    ("messages_app_messagelineageroom", "lineage_room_conversation_same_ws", "conversation_id", CONVERSATION, "id"),
    ("messages_app_identitylink", "identity_link_account_same_ws", "account_id", ACCOUNT, "id"),
    ("messages_app_identitylink", "identity_link_linked_same_ws", "linked_account_id", ACCOUNT, "id"),
    (RUN, "run_agent_same_ws", "agent_id", AGENT, "id"),
    (RUN, "run_conversation_same_ws", "conversation_id", CONVERSATION, "id"),
    (RUN, "run_requester_same_ws", "requester_id", ACCOUNT, "id"),
    (RUN, "run_current_message_same_conversation", "conversation_id, current_message_id", MESSAGE, "conversation_id, id"),
    (RUN, "run_reply_same_conversation", "conversation_id, reply_id", MESSAGE, "conversation_id, id"),
    ("messages_app_runevidence", "run_evidence_run_same_ws", "run_id", RUN, "id"),
    ("messages_app_runevidence", "run_evidence_message_same_ws", "message_id", MESSAGE, "id"),
    ("messages_app_apitoken", "token_agent_same_ws", "agent_id", AGENT, "id"),
    ("messages_app_apitoken", "token_run_same_ws", "run_id", RUN, "id"),
    ("messages_app_legalhold", "legal_hold_conversation_same_ws", "conversation_id", CONVERSATION, "id"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("messages_app", "0013_workspace_language_run_scope"),
        ("search_app", "0006_distribution_ready_keys"),
        ("audit_app", "0004_composite_foreign_keys"),
    ]

    operations = [
        drop_constraints(OLD_COMPOSITE_KEYS),
        migrations.RemoveConstraint(
            model_name='account',
            name='account_workspace_id_key',
        ),
        migrations.RemoveConstraint(
            model_name='agent',
            name='agent_workspace_id_key',
        ),
        migrations.RemoveConstraint(
            model_name='conversation',
            name='conversation_workspace_id_key',
        ),
        migrations.RemoveConstraint(
            model_name='identitylink',
            name='identity_link_one_open_per_pair',
        ),
        migrations.RemoveConstraint(
            model_name='membership',
            name='membership_account_no_overlap',
        ),
        migrations.RemoveConstraint(
            model_name='membership',
            name='membership_agent_no_overlap',
        ),
        migrations.RemoveConstraint(
            model_name='message',
            name='message_workspace_id_key',
        ),
        migrations.RemoveConstraint(
            model_name='message',
            name='message_conversation_id_key',
        ),
        migrations.RemoveConstraint(
            model_name='message',
            name='message_seq_unique',
        ),
        migrations.RemoveConstraint(
            model_name='messagelineage',
            name='lineage_unique',
        ),
        migrations.RemoveConstraint(
            model_name='messagelineageroom',
            name='lineage_room_unique',
        ),
        migrations.RemoveConstraint(
            model_name='run',
            name='run_workspace_id_key',
        ),
        migrations.RemoveConstraint(
            model_name='runevidence',
            name='run_evidence_once',
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='agent',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='tokens', to='messages_app.agent'),
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='digest',
            field=models.CharField(editable=False, max_length=64),
        ),
        migrations.AlterField(
            model_name='apitoken',
            name='run',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='tokens', to='messages_app.run'),
        ),
        migrations.AlterField(
            model_name='identitylink',
            name='account',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.account'),
        ),
        migrations.AlterField(
            model_name='identitylink',
            name='linked_account',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.account'),
        ),
        migrations.AlterField(
            model_name='membership',
            name='account',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='memberships', to='messages_app.account'),
        ),
        migrations.AlterField(
            model_name='membership',
            name='agent',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='memberships', to='messages_app.agent'),
        ),
        migrations.AlterField(
            model_name='membership',
            name='conversation',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='messages_app.conversation'),
        ),
        migrations.AlterField(
            model_name='message',
            name='conversation',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='messages', to='messages_app.conversation'),
        ),
        migrations.AlterField(
            model_name='message',
            name='reply_to',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='replies', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='message',
            name='sender_account',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.account'),
        ),
        migrations.AlterField(
            model_name='message',
            name='sender_agent',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.agent'),
        ),
        migrations.AlterField(
            model_name='message',
            name='thread',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='thread_messages', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='messagelineage',
            name='message',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='lineage_links', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='messagelineage',
            name='source',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='derived_links', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='messagelineageroom',
            name='conversation',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.conversation'),
        ),
        migrations.AlterField(
            model_name='messagelineageroom',
            name='message',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='lineage_rooms', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='run',
            name='agent',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='runs', to='messages_app.agent'),
        ),
        migrations.AlterField(
            model_name='run',
            name='conversation',
            field=models.ForeignKey(db_constraint=False, help_text='Destination.', on_delete=django.db.models.deletion.PROTECT, related_name='runs', to='messages_app.conversation'),
        ),
        migrations.AlterField(
            model_name='run',
            name='current_message',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='run',
            name='reply',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='legalhold',
            name='conversation',
            field=models.ForeignKey(blank=True, db_constraint=False, help_text='Empty: every conversation of the workspace.', null=True, on_delete=django.db.models.deletion.PROTECT, related_name='legal_holds', to='messages_app.conversation'),
        ),
        migrations.AlterField(
            model_name='run',
            name='requester',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.account'),
        ),
        migrations.AlterField(
            model_name='runevidence',
            name='message',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.message'),
        ),
        migrations.AlterField(
            model_name='runevidence',
            name='run',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='evidence', to='messages_app.run'),
        ),
        workspace_primary_keys(TABLES),
        migrations.AddIndex(
            model_name='apitoken',
            index=models.Index(fields=['digest'], name='token_digest'),
        ),
        migrations.AddConstraint(
            model_name='apitoken',
            constraint=models.UniqueConstraint(fields=('workspace', 'digest'), name='messages_app_apitoken_digest_key'),
        ),
        migrations.AddConstraint(
            model_name='identitylink',
            constraint=models.UniqueConstraint(models.F('workspace'), django.db.models.functions.comparison.Least('account', 'linked_account'), django.db.models.functions.comparison.Greatest('account', 'linked_account'), condition=models.Q(('status', 'revoked'), _negated=True), name='identity_link_one_open_per_pair'),
        ),
        migrations.AddConstraint(
            model_name='membership',
            constraint=django.contrib.postgres.constraints.ExclusionConstraint(condition=models.Q(('account__isnull', False)), expressions=[('workspace', '='), ('conversation', '='), ('account', '='), (messages_app.models.TsTzRange('joined_at', 'left_at', models.Value('[)')), '&&')], name='membership_account_no_overlap'),
        ),
        migrations.AddConstraint(
            model_name='membership',
            constraint=django.contrib.postgres.constraints.ExclusionConstraint(condition=models.Q(('agent__isnull', False)), expressions=[('workspace', '='), ('conversation', '='), ('agent', '='), (messages_app.models.TsTzRange('joined_at', 'left_at', models.Value('[)')), '&&')], name='membership_agent_no_overlap'),
        ),
        migrations.AddConstraint(
            model_name='message',
            constraint=models.UniqueConstraint(fields=('workspace', 'conversation', 'id'), name='message_conversation_id_key'),
        ),
        migrations.AddConstraint(
            model_name='message',
            constraint=models.UniqueConstraint(fields=('workspace', 'conversation', 'seq'), name='message_seq_unique'),
        ),
        migrations.AddConstraint(
            model_name='messagelineage',
            constraint=models.UniqueConstraint(fields=('workspace', 'message', 'source'), name='lineage_unique'),
        ),
        migrations.AddConstraint(
            model_name='messagelineageroom',
            constraint=models.UniqueConstraint(fields=('workspace', 'message', 'conversation'), name='lineage_room_unique'),
        ),
        migrations.AddConstraint(
            model_name='runevidence',
            constraint=models.UniqueConstraint(fields=('workspace', 'run', 'message'), name='run_evidence_once'),
        ),
        composite_foreign_keys(FOREIGN_KEYS),
    ]
