-- The messages tables' trigger functions and triggers, as the migrated database holds them.
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
-- The statement-level triggers copy what they need from their transition table into arrays
-- first (a local query), then run one statement per workspace that names it: on Citus each is
-- one shard, co-located with the row that fired the trigger (docs/citus.md).


-- Only agent-authored messages carry lineage (and inherited rooms): the perspective rules rely
-- on it to skip the lineage look-up for a person's message (search_app/perspective.py).
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

CREATE TRIGGER lineage_needs_agent_message
BEFORE INSERT OR UPDATE OF message_id ON messages_app_messagelineage
FOR EACH ROW EXECUTE FUNCTION formation_lineage_needs_agent_message();

CREATE TRIGGER lineage_room_needs_agent_message
BEFORE INSERT OR UPDATE OF message_id ON messages_app_messagelineageroom
FOR EACH ROW EXECUTE FUNCTION formation_lineage_needs_agent_message();


-- A message's sender never changes.
CREATE OR REPLACE FUNCTION formation_message_sender_is_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.sender_agent_id IS DISTINCT FROM OLD.sender_agent_id
       OR NEW.sender_account_id IS DISTINCT FROM OLD.sender_account_id THEN
        RAISE EXCEPTION 'a message''s sender never changes'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER message_sender_is_fixed
BEFORE UPDATE OF sender_agent_id, sender_account_id ON messages_app_message
FOR EACH ROW EXECUTE FUNCTION formation_message_sender_is_fixed();


-- Every lineage row brings its source's room and the rooms that source inherited. Statement
-- level with a transition table: a bulk import's lineage costs one extra INSERT ... SELECT.
-- Sources are stored before the messages that name them, so their rooms are complete already.
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

CREATE TRIGGER lineage_rooms_on_insert
AFTER INSERT ON messages_app_messagelineage
REFERENCING NEW TABLE AS added_lineage
FOR EACH STATEMENT EXECUTE FUNCTION formation_lineage_rooms_on_insert();


-- A run's history_evidence_count follows the evidence rows search_history brings in, whichever
-- code inserts them. Other tools' evidence leaves the run's row alone: they hold it FOR SHARE,
-- and an UPDATE here would have them queue behind each other for a write lock they do not need.
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

CREATE TRIGGER run_history_evidence_added
AFTER INSERT ON messages_app_runevidence
REFERENCING NEW TABLE AS changed_evidence
FOR EACH STATEMENT EXECUTE FUNCTION formation_run_history_evidence_count();

CREATE TRIGGER run_history_evidence_removed
AFTER DELETE ON messages_app_runevidence
REFERENCING OLD TABLE AS changed_evidence
FOR EACH STATEMENT EXECUTE FUNCTION formation_run_history_evidence_count();


-- A workspace's language must name a text search configuration the database has, spelt as
-- PostgreSQL prints it (german, or myschema.myconfig outside the search path): every message
-- insert casts it to regconfig, so an unknown one would refuse the workspace's messages. A
-- CHECK cannot look into pg_ts_config; a trigger can.
CREATE OR REPLACE FUNCTION formation_workspace_language_valid() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_ts_config AS c WHERE c.oid::regconfig::text = NEW.language)
    THEN
        RAISE EXCEPTION 'workspace language is not a text search configuration'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER workspace_language_valid
BEFORE INSERT OR UPDATE OF language ON messages_app_workspace
FOR EACH ROW EXECUTE FUNCTION formation_workspace_language_valid();
