"""Functions that work under any ``search_path``, and identifier parts found in linear time.

pg_restore, autovacuum's ANALYZE and the maintenance of an expression index run with an empty
``search_path``, where the functions' unqualified calls of each other were not found: a backup
restored without ``agent_memories`` (its generated column) or the projection's bucket index, and
autovacuum never analyzed ``message_search_documents`` (its index expression), so search_history
chose every term's route without statistics. Every body now names the schema of the functions
and tables it uses (``@schema@``, the schema this migration runs in; ``formation.sql.in_schema``).
Qualified names keep the SQL functions inlinable, which a ``SET search_path`` clause would not.

``formation_word_document`` finds identifier parts in time linear in the text: each camelCase
word's parts are looked up by lexeme in a jsonb object instead of joining the text's camelCase
words to the document's lexemes (quadratic: 17 s for 40,000 characters of camelCase code), and
each word is normalised together with its parts in one call. The documents it builds are the
same, byte for byte, so nothing is rebuilt.

Then the projection is analyzed, so search_history has its statistics at once.
"""

from django.db import migrations

from formation.sql import current_schema, in_schema

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION formation_word_document(config regconfig, body text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    words tsvector := to_tsvector(config, body);
    camel jsonb;
    parts text;
BEGIN
    IF body !~ @schema@.formation_identifier_class() THEN
        RETURN words;
    END IF;
    -- Each distinct camelCase word (a run of letters and digits with a case change inside) and
    -- its words are normalised together, in one to_tsvector call: the word itself at position 1
    -- (the lexeme the document holds for it), its words after it (its parts). Its parts are kept
    -- as tsvector text with @ for their positions ('get':@ 'user':@), by that lexeme, in a jsonb
    -- object, which answers each look-up below by a binary search: the cost stays linear in the
    -- text (joining the words' lexemes to the document's was quadratic, 17 s for 40,000
    -- characters of camelCase code).
    SELECT jsonb_object_agg(camel_part.own, camel_part.parts)
    INTO camel
    FROM (SELECT own, string_agg(split.parts, ' ') AS parts
          FROM (SELECT DISTINCT hit[1] AS run
                FROM regexp_matches(
                         body, '([[:alnum:]]*(?:[a-z0-9][A-Z]|[A-Z][A-Z][a-z])[[:alnum:]]*)', 'g')
                     AS hit) AS camel_word
          CROSS JOIN LATERAL (
              SELECT array_agg(found.lexeme) FILTER (WHERE found.positions[1] = 1) AS owns,
                     string_agg('''' || replace(replace(found.lexeme, '\', '\\'), '''', '''''')
                                || ''':@', ' ') FILTER (WHERE found.positions[1] > 1) AS parts
              FROM unnest(to_tsvector(
                       config,
                       camel_word.run || ' ' || regexp_replace(
                           camel_word.run,
                           '(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])', ' ', 'g')))
                   AS found
          ) AS split
          CROSS JOIN LATERAL unnest(split.owns) AS own
          WHERE split.parts IS NOT NULL
          GROUP BY own) AS camel_part;
    -- Every identifier's parts at each of its positions, as tsvector text ('user':3C,17C): a
    -- path's, host's or address's segments and words (its punctuation blanked two ways, the
    -- second keeping dots), and a camelCase word's words looked up above.
    SELECT string_agg(identifier.parts, ' ')
    INTO parts
    FROM (
        SELECT (SELECT string_agg(
                           '''' || replace(replace(part, '\', '\\'), '''', '''''') || ''':'
                           || array_to_string(whole.positions, 'C,') || 'C', ' ')
                FROM unnest(tsvector_to_array(to_tsvector(
                         config,
                         translate(whole.lexeme, '/\@', '   ') || ' '
                         || translate(whole.lexeme, '!"#$%&''()*+,-./:;<=>?@[\]^_`{|}~',
                                      repeat(' ', 32))))) AS part
                WHERE part <> whole.lexeme) AS parts
        FROM unnest(words) AS whole
        WHERE whole.lexeme ~ '[./\\@]|^[-+][0-9]'
          AND whole.lexeme !~ '^[-+]?[vV]?[0-9]+([.][0-9]+)+$'
        UNION ALL
        SELECT replace(camel ->> whole.lexeme, ':@',
                       ':' || array_to_string(whole.positions, 'C,') || 'C')
        FROM unnest(words) AS whole
        WHERE camel IS NOT NULL AND camel ? whole.lexeme
    ) AS identifier;
    IF parts IS NULL THEN
        RETURN words;
    END IF;
    RETURN (words::text || ' ' || parts)::tsvector;
END
$$;

CREATE OR REPLACE FUNCTION formation_search_lexemes(
    config regconfig, body text, identifier_parts boolean
) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN body !~ @schema@.formation_cjk_class() THEN
            CASE WHEN identifier_parts AND body ~ @schema@.formation_identifier_class()
                 THEN @schema@.formation_word_document(config, body)
                 ELSE to_tsvector(config, body) END
        ELSE (
            SELECT @schema@.formation_tsvector_agg(
                       plain || @schema@.formation_cjk_grams(
                           part[2], CASE WHEN n = 1 OR length(plain) > 0 THEN 1 ELSE 2 END)
                       ORDER BY n)
            FROM regexp_matches(
                     body,
                     '([^' || substr(@schema@.formation_cjk_class(), 2) || '*)('
                         || @schema@.formation_cjk_class() || '*)',
                     'g') WITH ORDINALITY AS parts(part, n)
            CROSS JOIN LATERAL (
                SELECT CASE WHEN identifier_parts AND part[1] ~ @schema@.formation_identifier_class()
                            THEN @schema@.formation_word_document(config, part[1])
                            ELSE to_tsvector(config, part[1]) END AS plain
            ) AS words)
    END
$$;

CREATE OR REPLACE FUNCTION formation_search_document(config regconfig, body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT @schema@.formation_search_lexemes(config, body, true)
$$;

CREATE OR REPLACE FUNCTION formation_search_masked(body text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT regexp_replace(
               CASE WHEN body ~ @schema@.formation_cjk_class()
                    THEN regexp_replace(body, @schema@.formation_cjk_class(), ' ', 'g') ELSE body END,
               '[!-/:-@[-`{-~]', ' ', 'g')
$$;

CREATE OR REPLACE FUNCTION formation_search_bucket(workspace uuid, at timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT @schema@.formation_search_bucket_key(workspace, @schema@.formation_search_bucket_number(at))
$$;

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
"""


def qualify(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(in_schema(FUNCTIONS, current_schema(cursor)))
        cursor.execute("ANALYZE message_search_documents")


class Migration(migrations.Migration):
    dependencies = [
        ("search_app", "0011_identifier_parts"),
    ]

    # Back to 0011: the qualified definitions compute what 0011's did, so they stay.
    operations = [migrations.RunPython(qualify, migrations.RunPython.noop)]
