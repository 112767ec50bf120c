"""The projection's triggers, written so they run on a distributed table too (docs/citus.md).

As in messages_app 0015: each trigger copies what it needs from its transition table into
arrays first (a local query), then runs one statement per workspace that names it (one shard
on Citus) and reads the arrays. Same rows as before on plain PostgreSQL; the conflict target
is the document's new key ``(workspace_id, message_id)``. A document is built in its
workspace's language (search_app 0005), read once per workspace from the reference table.
"""

from django.db import migrations

# The rooms a message inherits, as the projection holds them: sorted, null when there are none.
ROOMS_OF = """(SELECT array_agg(inherited.conversation_id ORDER BY inherited.conversation_id)
               FROM messages_app_messagelineageroom AS inherited
               WHERE inherited.workspace_id = workspace AND inherited.message_id = {message})"""

# The workspace's text search configuration, from the reference table (a copy on every node).
LANGUAGE_OF = """SELECT w.language::regconfig INTO config
        FROM messages_app_workspace AS w WHERE w.id = workspace;"""

FORWARD = f"""
CREATE OR REPLACE FUNCTION message_search_documents_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    workspace uuid;
    config regconfig;
    ids uuid[];
    conversations uuid[];
    created timestamptz[];
    accounts uuid[];
    agents uuid[];
    contents text[];
BEGIN
    FOR workspace, ids, conversations, created, accounts, agents, contents IN
        SELECT n.workspace_id, array_agg(n.id), array_agg(n.conversation_id),
               array_agg(n.created_at), array_agg(n.sender_account_id),
               array_agg(n.sender_agent_id), array_agg(n.content)
        FROM inserted_messages AS n
        WHERE n.deleted_at IS NULL
        GROUP BY n.workspace_id
    LOOP
        {LANGUAGE_OF}
        INSERT INTO message_search_documents
            (message_id, workspace_id, conversation_id, created_at,
             sender_account_id, sender_agent_id, document)
        SELECT n.id, workspace, n.conversation_id, n.created_at,
               n.sender_account_id, n.sender_agent_id,
               formation_search_document(config, n.content)
        FROM unnest(ids, conversations, created, accounts, agents, contents)
            AS n(id, conversation_id, created_at, sender_account_id, sender_agent_id, content);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION message_search_documents_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    workspace uuid;
    config regconfig;
    deleted uuid[];
    changed uuid[];
BEGIN
    FOR workspace, deleted, changed IN
        SELECT n.workspace_id,
               array_agg(n.id) FILTER (WHERE n.deleted_at IS NOT NULL),
               array_agg(n.id) FILTER (
                   WHERE n.deleted_at IS NULL
                     AND (o.content IS DISTINCT FROM n.content
                          OR o.deleted_at IS NOT NULL
                          OR o.created_at IS DISTINCT FROM n.created_at
                          OR o.conversation_id IS DISTINCT FROM n.conversation_id
                          OR o.sender_account_id IS DISTINCT FROM n.sender_account_id
                          OR o.sender_agent_id IS DISTINCT FROM n.sender_agent_id))
        FROM updated_messages AS n
        JOIN previous_messages AS o ON o.id = n.id
        GROUP BY n.workspace_id
    LOOP
        IF deleted IS NOT NULL THEN
            DELETE FROM message_search_documents
            WHERE workspace_id = workspace AND message_id = ANY (deleted);
        END IF;
        IF changed IS NOT NULL THEN
            {LANGUAGE_OF}
            INSERT INTO message_search_documents
                (message_id, workspace_id, conversation_id, created_at,
                 sender_account_id, sender_agent_id, document, lineage_rooms)
            SELECT m.id, m.workspace_id, m.conversation_id, m.created_at,
                   m.sender_account_id, m.sender_agent_id,
                   formation_search_document(config, m.content),
                   {ROOMS_OF.format(message="m.id")}
            FROM messages_app_message AS m
            WHERE m.workspace_id = workspace AND m.id = ANY (changed)
            ON CONFLICT (workspace_id, message_id) DO UPDATE
                SET conversation_id = EXCLUDED.conversation_id,
                    created_at = EXCLUDED.created_at,
                    sender_account_id = EXCLUDED.sender_account_id,
                    sender_agent_id = EXCLUDED.sender_agent_id,
                    document = EXCLUDED.document,
                    lineage_rooms = EXCLUDED.lineage_rooms;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION message_search_documents_on_rooms() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    workspace uuid;
    messages uuid[];
BEGIN
    FOR workspace, messages IN
        SELECT workspace_id, array_agg(DISTINCT message_id) FROM added_rooms GROUP BY workspace_id
    LOOP
        UPDATE message_search_documents AS d
        SET lineage_rooms = {ROOMS_OF.format(message="d.message_id")}
        WHERE d.workspace_id = workspace AND d.message_id = ANY (messages);
    END LOOP;
    RETURN NULL;
END
$$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("search_app", "0007_workspace_keys"),
        ("messages_app", "0015_triggers_per_workspace"),
    ]

    # The previous definitions need the single-column keys that are gone: no way back.
    operations = [migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop)]
