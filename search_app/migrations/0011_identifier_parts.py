"""Identifiers as people type them: the parts of paths, hosts, e-mail addresses, signed
numbers and camelCase words are indexed too (docs/search.md, "Identifiers").

``formation_word_document`` adds each identifier's parts, with weight C, at the position of the
identifier they belong to; ``formation_search_document`` (the projection's triggers, memories,
the rebuild) now uses it, and a query's own words are read without parts
(``formation_search_lexemes(config, text, false)``), so an identifier typed whole is matched
whole. Highlights read text with ASCII punctuation blanked one for one
(``formation_search_masked``), so a part inside an identifier can be marked.

The projection is then rebuilt (``search_documents_rebuild``, what ``rebuild_search_documents``
runs): batch by batch, each its own short transaction that locks only its own messages, so
writes and searches go on throughout; a document without identifiers is left as it is. Memories
hold their document in a generated column, recomputed by rewriting the rows that have
identifier characters.
"""

from django.db import migrations

FUNCTIONS = r"""
-- What a text holds where it may hold an identifier: a dot, slash, backslash or @ between
-- letters or digits, a sign before a digit, or a case change inside a word. Text without any
-- is indexed by to_tsvector alone, with no call of formation_word_document.
CREATE OR REPLACE FUNCTION formation_identifier_class() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '[[:alnum:]][./\\@][[:alnum:]]|[-+][0-9]|[a-z0-9][A-Z]|[A-Z][A-Z][a-z]'::text
$$;

CREATE OR REPLACE FUNCTION formation_word_document(config regconfig, body text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    words tsvector := to_tsvector(config, body);
    parts text;
BEGIN
    IF body !~ formation_identifier_class() THEN
        RETURN words;
    END IF;
    SELECT string_agg(DISTINCT
               '''' || replace(replace(part.lexeme, '\', '\\'), '''', '''''') || ''':'
               || position || 'C', ' ')
    INTO parts
    FROM (
        SELECT whole.lexeme, whole.positions,
               regexp_replace(whole.lexeme, '[/\\@]+', ' ', 'g') || ' '
               || regexp_replace(whole.lexeme, '[!-/:-@[-`{-~]+', ' ', 'g') AS pieces
        FROM unnest(words) AS whole
        WHERE whole.lexeme ~ '[./\\@]|^[-+][0-9]'
          AND whole.lexeme !~ '^[-+]?[vV]?[0-9]+([.][0-9]+)+$'
        UNION ALL
        SELECT whole.lexeme, whole.positions,
               regexp_replace(regexp_replace(camel.word, '([a-z0-9])([A-Z])', '\1 \2', 'g'),
                              '([A-Z])([A-Z][a-z])', '\1 \2', 'g')
        FROM (SELECT named.word, tsvector_to_array(to_tsvector(config, named.word)) AS lexemes
              FROM (SELECT DISTINCT matched[1] AS word
                    FROM regexp_matches(
                             body, '([[:alnum:]]*(?:[a-z0-9][A-Z]|[A-Z][A-Z][a-z])[[:alnum:]]*)',
                             'g') AS matched) AS named) AS camel
        JOIN unnest(words) AS whole ON whole.lexeme = ANY (camel.lexemes)
    ) AS identifier
    CROSS JOIN LATERAL unnest(identifier.positions) AS position
    CROSS JOIN LATERAL unnest(to_tsvector(config, identifier.pieces)) AS part
    WHERE part.lexeme <> identifier.lexeme;
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
        WHEN body !~ formation_cjk_class() THEN
            CASE WHEN identifier_parts AND body ~ formation_identifier_class()
                 THEN formation_word_document(config, body)
                 ELSE to_tsvector(config, body) END
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
            CROSS JOIN LATERAL (
                SELECT CASE WHEN identifier_parts AND part[1] ~ formation_identifier_class()
                            THEN formation_word_document(config, part[1])
                            ELSE to_tsvector(config, part[1]) END AS plain
            ) AS words)
    END
$$;

CREATE OR REPLACE FUNCTION formation_search_document(config regconfig, body text) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT formation_search_lexemes(config, body, true)
$$;

CREATE OR REPLACE FUNCTION formation_search_masked(body text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT regexp_replace(
               CASE WHEN body ~ formation_cjk_class()
                    THEN regexp_replace(body, formation_cjk_class(), ' ', 'g') ELSE body END,
               '[!-/:-@[-`{-~]', ' ', 'g')
$$;
"""

# The definitions of migration 0005, restored on the way back.
RESTORE_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION formation_search_document(config regconfig, body text) RETURNS tsvector
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

CREATE OR REPLACE FUNCTION formation_search_masked(body text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN body ~ formation_cjk_class()
                THEN regexp_replace(body, formation_cjk_class(), ' ', 'g') ELSE body END
$$;

DROP FUNCTION formation_search_lexemes(regconfig, text, boolean);
DROP FUNCTION formation_word_document(regconfig, text);
DROP FUNCTION formation_identifier_class();
"""

# Memories whose text may hold an identifier: rewriting a row recomputes its generated document.
# The class is spelled out (formation_identifier_class()'s pattern), not called: on the way back
# this runs after RESTORE_FUNCTIONS has dropped that function.
MEMORIES = r"""
UPDATE agent_memories SET content = content
WHERE content ~ '[[:alnum:]][./\\@][[:alnum:]]|[-+][0-9]|[a-z0-9][A-Z]|[A-Z][A-Z][a-z]'
"""


def rebuild_documents(apps, schema_editor) -> None:
    """Every message's document against the definition now in place, repaired batch by batch;
    then the memories'. Uses the rebuild's own code (search_app.documents), which reads only
    columns every later schema keeps."""
    from search_app.documents import search_documents_rebuild

    search_documents_rebuild(fix=True)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(MEMORIES)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("search_app", "0010_drop_unbucketed_gin"),
    ]

    operations = [
        migrations.RunPython(migrations.RunPython.noop, rebuild_documents),
        migrations.RunSQL(FUNCTIONS, reverse_sql=RESTORE_FUNCTIONS),
        migrations.RunPython(rebuild_documents, migrations.RunPython.noop),
    ]
