-- The search projection's trigger functions and triggers, as the migrated database holds them
-- (the functions they build documents with are in search_document.sql).
--
-- The migrations are history; this file is the current definition. A change is made twice:
-- here, and in a new migration that runs the changed statements (copied into it, so that it
-- keeps applying what it applied when it was written). tests/test_triggers.py creates this
-- file in a scratch schema and fails until the migrated database holds exactly what it declares
-- (docs/design.md, "Invariants in the database").
--
-- @schema@ stands for the schema the migrations run in (formation.sql.in_schema puts it in):
-- every function body names the schema of the tables and functions it uses, because
-- pg_restore, autovacuum's ANALYZE and index maintenance run with an empty search_path, where an
-- unqualified name is not found (docs/operations.md, "Backups").
--
-- Statement-level triggers with transition tables: a bulk import of 5,000 messages costs one
-- extra INSERT ... SELECT, not 5,000 trigger calls. Each copies what it needs from its
-- transition table into arrays first (a local query), then runs one statement per workspace
-- that names it (one shard on Citus, docs/citus.md). A document exists exactly while its
-- message is live, in its workspace's language; an edit rewrites it; a delete (which erases the
-- body) removes it.


-- A live message's document, built in its workspace's language.
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
        SELECT w.language::regconfig INTO config
        FROM @schema@.messages_app_workspace AS w WHERE w.id = workspace;
        INSERT INTO @schema@.message_search_documents
            (message_id, workspace_id, conversation_id, created_at,
             sender_account_id, sender_agent_id, document)
        SELECT n.id, workspace, n.conversation_id, n.created_at,
               n.sender_account_id, n.sender_agent_id,
               @schema@.formation_search_document(config, n.content)
        FROM unnest(ids, conversations, created, accounts, agents, contents)
            AS n(id, conversation_id, created_at, sender_account_id, sender_agent_id, content);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER message_search_documents_insert
AFTER INSERT ON messages_app_message
REFERENCING NEW TABLE AS inserted_messages
FOR EACH STATEMENT EXECUTE FUNCTION message_search_documents_on_insert();


-- A deleted message's document is removed; one whose body, time, room or sender changed (or
-- whose message was restored) is written again, with the rooms the message inherits.
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
            DELETE FROM @schema@.message_search_documents
            WHERE workspace_id = workspace AND message_id = ANY (deleted);
        END IF;
        IF changed IS NOT NULL THEN
            SELECT w.language::regconfig INTO config
        FROM @schema@.messages_app_workspace AS w WHERE w.id = workspace;
            INSERT INTO @schema@.message_search_documents
                (message_id, workspace_id, conversation_id, created_at,
                 sender_account_id, sender_agent_id, document, lineage_rooms)
            SELECT m.id, m.workspace_id, m.conversation_id, m.created_at,
                   m.sender_account_id, m.sender_agent_id,
                   @schema@.formation_search_document(config, m.content),
                   (SELECT array_agg(inherited.conversation_id ORDER BY inherited.conversation_id)
               FROM @schema@.messages_app_messagelineageroom AS inherited
               WHERE inherited.workspace_id = workspace AND inherited.message_id = m.id)
            FROM @schema@.messages_app_message AS m
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

CREATE TRIGGER message_search_documents_update
AFTER UPDATE ON messages_app_message
REFERENCING OLD TABLE AS previous_messages NEW TABLE AS updated_messages
FOR EACH STATEMENT EXECUTE FUNCTION message_search_documents_on_update();


-- The projection's copy of a message's inherited rooms (sorted, null when there are none)
-- follows the rooms table.
CREATE OR REPLACE FUNCTION message_search_documents_on_rooms() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    workspace uuid;
    messages uuid[];
BEGIN
    FOR workspace, messages IN
        SELECT workspace_id, array_agg(DISTINCT message_id) FROM added_rooms GROUP BY workspace_id
    LOOP
        UPDATE @schema@.message_search_documents AS d
        SET lineage_rooms = (SELECT array_agg(inherited.conversation_id ORDER BY inherited.conversation_id)
               FROM @schema@.messages_app_messagelineageroom AS inherited
               WHERE inherited.workspace_id = workspace AND inherited.message_id = d.message_id)
        WHERE d.workspace_id = workspace AND d.message_id = ANY (messages);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER message_search_documents_rooms
AFTER INSERT ON messages_app_messagelineageroom
REFERENCING NEW TABLE AS added_rooms
FOR EACH STATEMENT EXECUTE FUNCTION message_search_documents_on_rooms();
