"""The messages tables' triggers, written so they run on a distributed table too (docs/citus.md).

On Citus a trigger runs on the shard of the row that fired it, and any statement it runs
against another distributed table is planned by Citus, which cannot see the trigger's
transition table. So each statement-level trigger first copies what it needs from its
transition table into arrays (a local query), then, workspace by workspace, runs statements
that name the workspace (each one shard) and read the arrays. On plain PostgreSQL they do the
same work as before, and the conflict targets name the new workspace keys.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION formation_lineage_needs_agent_message() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A message of another workspace is left to the composite foreign key to refuse.
    IF EXISTS (SELECT 1 FROM messages_app_message
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
        INSERT INTO messages_app_messagelineageroom (workspace_id, message_id, conversation_id)
        SELECT workspace, added.message_id, source.conversation_id
        FROM unnest(messages, sources) AS added(message_id, source_id)
        JOIN messages_app_message AS source
          ON source.workspace_id = workspace AND source.id = added.source_id
        WHERE source.workspace_id = workspace
        UNION
        SELECT workspace, added.message_id, inherited.conversation_id
        FROM unnest(messages, sources) AS added(message_id, source_id)
        JOIN messages_app_messagelineageroom AS inherited
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
        UPDATE messages_app_run AS run
        SET history_evidence_count = history_evidence_count + sign * spent.n
        FROM unnest(runs, counts) AS spent(run_id, n)
        WHERE run.workspace_id = workspace AND run.id = spent.run_id;
    END LOOP;
    RETURN NULL;
END $$;
"""


class Migration(migrations.Migration):
    dependencies = [("messages_app", "0014_distribution_ready_keys")]

    # The previous definitions need the single-column keys 0014 removed: no way back.
    operations = [migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop)]
