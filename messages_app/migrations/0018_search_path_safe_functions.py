"""Trigger functions that name the schema of the tables they use, so they work under any
``search_path`` (search_app 0012 says why; ``formation.sql.in_schema`` fills in ``@schema@``).
"""

from django.db import migrations

from formation.sql import current_schema, in_schema

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION formation_lineage_needs_agent_message() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A message of another workspace is left to the composite foreign key to refuse.
    IF EXISTS (SELECT 1 FROM @schema@.messages_app_message
               WHERE workspace_id = NEW.workspace_id AND id = NEW.message_id
                 AND sender_agent_id IS NULL) THEN
        RAISE EXCEPTION 'only agent-authored messages carry lineage'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION formation_lineage_rooms_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    workspace uuid;
    messages uuid[];
    sources uuid[];
BEGIN
    FOR workspace, messages, sources IN
        SELECT workspace_id, array_agg(message_id), array_agg(source_id)
        FROM added_lineage GROUP BY workspace_id
    LOOP
        INSERT INTO @schema@.messages_app_messagelineageroom
            (workspace_id, message_id, conversation_id)
        SELECT workspace, added.message_id, source.conversation_id
        FROM unnest(messages, sources) AS added(message_id, source_id)
        JOIN @schema@.messages_app_message AS source
          ON source.workspace_id = workspace AND source.id = added.source_id
        WHERE source.workspace_id = workspace
        UNION
        SELECT workspace, added.message_id, inherited.conversation_id
        FROM unnest(messages, sources) AS added(message_id, source_id)
        JOIN @schema@.messages_app_messagelineageroom AS inherited
          ON inherited.workspace_id = workspace AND inherited.message_id = added.source_id
        WHERE inherited.workspace_id = workspace
        ON CONFLICT (workspace_id, message_id, conversation_id) DO NOTHING;
    END LOOP;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION formation_run_history_evidence_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    workspace uuid;
    runs uuid[];
    counts bigint[];
    sign integer := CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    FOR workspace, runs, counts IN
        SELECT workspace_id, array_agg(run_id), array_agg(n)
        FROM (SELECT workspace_id, run_id, count(*) AS n FROM changed_evidence
              WHERE tool = 'search_history' GROUP BY workspace_id, run_id) AS spent
        GROUP BY workspace_id
    LOOP
        UPDATE @schema@.messages_app_run AS run
        SET history_evidence_count = history_evidence_count + sign * spent.n
        FROM unnest(runs, counts) AS spent(run_id, n)
        WHERE run.workspace_id = workspace AND run.id = spent.run_id;
    END LOOP;
    RETURN NULL;
END $$;
"""


def qualify(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(in_schema(FUNCTIONS, current_schema(cursor)))


class Migration(migrations.Migration):
    dependencies = [
        ("messages_app", "0017_evidence_without_redundant_keys"),
    ]

    # Back to 0017: the qualified definitions do what 0017's did, so they stay.
    operations = [migrations.RunPython(qualify, migrations.RunPython.noop)]
