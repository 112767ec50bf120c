"""Search documents in the workspace's language, with character bigrams for CJK text.

``formation_search_document(config, text)`` is the one definition of a search document: the
configuration's own lexemes, and for each run of Han, kana or Hangul characters (scripts written
without spaces between words) its overlapping two-character bigrams, so any word of two or more
characters inside a sentence can be found (docs/search.md, "Full-text search"). Text without
such characters gets exactly ``to_tsvector(config, text)``, as before. The triggers that keep
``message_search_documents`` in step now use it with the message's workspace's language, so
services, bulk imports, ``COPY`` and hand-written SQL all index the same way; memories use it
with the default configuration.
"""

from importlib import import_module

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models

# The characters indexed as bigrams: Hangul Jamo, CJK radicals, ideographic iteration and
# number marks, Hiragana, Katakana (without the middle dot, which separates words), Hangul
# compatibility Jamo, Katakana extensions, CJK Unified Ideographs and Extension A, Hangul
# syllables and Jamo extensions, CJK compatibility ideographs, half-width Katakana and Hangul,
# the Kana supplements, and the supplementary ideographic planes. search_app/query/cjk.py holds the
# same ranges (CJK_RANGES; a test compares them code point by code point).
CJK_CLASS = (
    r"[\u1100-\u11ff\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b-\u303c"
    r"\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3131-\u318e\u31f0-\u31ff\u3400-\u4dbf"
    r"\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9f\uffa0-\uffdc"
    r"\U0001b000-\U0001b16f\U00020000-\U0003ffff]"
)

# A run of one character is indexed as itself; a longer run as its bigrams, at consecutive
# positions from ``start``. A run that follows another run with no lexeme between them starts
# one position further (``start`` 2), so that no phrase of bigrams can bridge two runs: the
# bigrams of "移行、行動" never spell "移行動".
FUNCTIONS = f"""
CREATE FUNCTION formation_cjk_class() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT '{CJK_CLASS}'::text $$;

CREATE FUNCTION formation_cjk_grams(run text, start integer) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN length(run) = 0 THEN ''::tsvector
        WHEN length(run) = 1 THEN ('''' || run || ''':' || start)::tsvector
        ELSE (SELECT string_agg('''' || substr(run, i, 2) || ''':' || (start + i - 1), ' ')
              FROM generate_series(1, length(run) - 1) AS i)::tsvector
    END
$$;

CREATE AGGREGATE formation_tsvector_agg(tsvector) (
    SFUNC = tsvector_concat, STYPE = tsvector, INITCOND = ''
);

CREATE FUNCTION formation_search_document(config regconfig, body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN body !~ formation_cjk_class() THEN to_tsvector(config, body)
        ELSE (
            SELECT formation_tsvector_agg(
                       plain || formation_cjk_grams(
                           part[2], CASE WHEN n = 1 OR length(plain) > 0 THEN 1 ELSE 2 END)
                       ORDER BY n)
            FROM regexp_matches(
                     body,
                     '([^' || substr(formation_cjk_class(), 2) || '*)('
                         || formation_cjk_class() || '*)',
                     'g') WITH ORDINALITY AS parts(part, n)
            CROSS JOIN LATERAL to_tsvector(config, part[1]) AS plain)
    END
$$;

-- The text ts_headline reads for highlights: CJK characters blanked one for one, so the words
-- around them are the words the document indexed, at the same code point offsets.
CREATE FUNCTION formation_search_masked(body text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN body ~ formation_cjk_class()
                THEN regexp_replace(body, formation_cjk_class(), ' ', 'g') ELSE body END
$$;
"""

DROP_FUNCTIONS = """
DROP FUNCTION formation_search_masked(text);
DROP FUNCTION formation_search_document(regconfig, text);
DROP AGGREGATE formation_tsvector_agg(tsvector);
DROP FUNCTION formation_cjk_grams(text, integer);
DROP FUNCTION formation_cjk_class();
"""

DOCUMENT = "formation_search_document(w.language::regconfig, n.content)"
IN_WORKSPACE = "JOIN messages_app_workspace AS w ON w.id = n.workspace_id"

TRIGGERS = f"""
CREATE OR REPLACE FUNCTION message_search_documents_on_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO message_search_documents
        (message_id, workspace_id, conversation_id, created_at,
         sender_account_id, sender_agent_id, document)
    SELECT n.id, n.workspace_id, n.conversation_id, n.created_at,
           n.sender_account_id, n.sender_agent_id, {DOCUMENT}
    FROM inserted_messages AS n
    {IN_WORKSPACE}
    WHERE n.deleted_at IS NULL;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION message_search_documents_on_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM message_search_documents AS d
    USING updated_messages AS n
    WHERE d.message_id = n.id AND n.deleted_at IS NOT NULL;

    INSERT INTO message_search_documents
        (message_id, workspace_id, conversation_id, created_at,
         sender_account_id, sender_agent_id, document, lineage_rooms)
    SELECT n.id, n.workspace_id, n.conversation_id, n.created_at,
           n.sender_account_id, n.sender_agent_id, {DOCUMENT},
           (SELECT array_agg(inherited.conversation_id ORDER BY inherited.conversation_id)
            FROM messages_app_messagelineageroom AS inherited
            WHERE inherited.message_id = n.id)
    FROM updated_messages AS n
    JOIN previous_messages AS o ON o.id = n.id
    {IN_WORKSPACE}
    WHERE n.deleted_at IS NULL
      AND (o.content IS DISTINCT FROM n.content
           OR o.deleted_at IS NOT NULL
           OR o.created_at IS DISTINCT FROM n.created_at
           OR o.conversation_id IS DISTINCT FROM n.conversation_id
           OR o.sender_account_id IS DISTINCT FROM n.sender_account_id
           OR o.sender_agent_id IS DISTINCT FROM n.sender_agent_id)
    ON CONFLICT (message_id) DO UPDATE
        SET workspace_id = EXCLUDED.workspace_id,
            conversation_id = EXCLUDED.conversation_id,
            created_at = EXCLUDED.created_at,
            sender_account_id = EXCLUDED.sender_account_id,
            sender_agent_id = EXCLUDED.sender_agent_id,
            document = EXCLUDED.document,
            lineage_rooms = EXCLUDED.lineage_rooms;
    RETURN NULL;
END
$$;
"""


def _function(module: str, name: str) -> str:
    """Trigger function ``name`` as migration ``module`` wrote it, to restore on the way back."""
    source = "\n".join(
        value for value in vars(import_module(f"search_app.migrations.{module}")).values()
        if isinstance(value, str)
    )
    start = source.rindex("CREATE", 0, source.index(f"FUNCTION {name}()"))
    end = source.index("$$;", start) + len("$$;")
    body = source[start:end].removeprefix("CREATE ").removeprefix("OR REPLACE ")
    return f"CREATE OR REPLACE {body}\n"


RESTORE_TRIGGERS = _function("0001_initial", "message_search_documents_on_insert") + _function(
    "0004_document_lineage_rooms", "message_search_documents_on_update"
)

# Only documents of messages holding CJK characters change; every other document is already
# exactly what the new definition gives (the default language is the one they were built with).
BACKFILL = """
UPDATE message_search_documents AS d
SET document = formation_search_document(w.language::regconfig, m.content)
FROM messages_app_message AS m
JOIN messages_app_workspace AS w ON w.id = m.workspace_id
WHERE m.id = d.message_id AND m.content ~ formation_cjk_class()
"""

UNFILL = """
UPDATE message_search_documents AS d
SET document = to_tsvector('formation_english'::regconfig, m.content)
FROM messages_app_message AS m
WHERE m.id = d.message_id AND m.content ~ formation_cjk_class()
"""


def _memory_document(expression):
    return models.GeneratedField(
        db_persist=True,
        expression=expression,
        output_field=django.contrib.postgres.search.SearchVectorField(),
    )


MEMORY_INDEX = django.contrib.postgres.indexes.GinIndex(
    fields=["agent_id", "document"], name="agent_memory_gin"
)


class Migration(migrations.Migration):

    dependencies = [
        ("messages_app", "0013_workspace_language_run_scope"),
        ("search_app", "0004_document_lineage_rooms"),
    ]

    operations = [
        migrations.RunSQL(sql=FUNCTIONS, reverse_sql=DROP_FUNCTIONS),
        migrations.RunSQL(sql=TRIGGERS, reverse_sql=RESTORE_TRIGGERS),
        migrations.RunSQL(sql=BACKFILL, reverse_sql=UNFILL),
        # A generated column cannot be altered in place: memories' document is written again.
        migrations.RemoveIndex(model_name="agentmemory", name="agent_memory_gin"),
        migrations.RemoveField(model_name="agentmemory", name="document"),
        migrations.AddField(
            model_name="agentmemory",
            name="document",
            field=_memory_document(
                models.Func(
                    models.Value("formation_english"),
                    models.F("content"),
                    function="formation_search_document",
                    output_field=django.contrib.postgres.search.SearchVectorField(),
                )
            ),
        ),
        migrations.AddIndex(model_name="agentmemory", index=MEMORY_INDEX),
    ]
