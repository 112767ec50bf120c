-- The one definition of a search document, as the migrated database holds it (created by
-- search_app/migrations/0005_search_documents_cjk_language.py, identifier parts added by
-- 0011_identifier_parts.py, names qualified and parts found in linear time by
-- 0012_search_path_safe_functions.py; the triggers in triggers.sql, the memories and the
-- queries use it).
-- tests/test_triggers.py holds the database to this file.
--
-- @schema@ stands for the schema the migrations run in (formation.sql.in_schema puts it in):
-- every function body names the schema of the tables and functions it uses, because
-- pg_restore, autovacuum's ANALYZE and index maintenance run with an empty search_path, where an
-- unqualified name is not found (docs/operations.md, "Backups").
--
-- formation_search_document(config, text): the configuration's own lexemes; the parts of each
-- identifier (docs/search.md, "Identifiers"); and for each run of Han, kana or Hangul
-- characters (scripts written without spaces between words) its overlapping two-character
-- bigrams, so any word of two or more characters inside a sentence can be found (docs/search.md,
-- "Full-text search"). A query's words are read with formation_search_lexemes(config, text,
-- false): the same, without identifier parts, so an identifier typed whole is matched whole.


-- The characters indexed as bigrams. search_app/query/cjk.py holds the same ranges (CJK_RANGES;
-- tests/search_app/test_cjk.py compares them code point by code point).
CREATE OR REPLACE FUNCTION formation_cjk_class() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT '[\u1100-\u11ff\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b-\u303c\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3131-\u318e\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9f\uffa0-\uffdc\U0001b000-\U0001b16f\U00020000-\U0003ffff]'::text $$;

-- A run of one character is indexed as itself; a longer run as its bigrams, at consecutive
-- positions from start. A run that follows another run with no lexeme between them starts one
-- position further (start 2), so that no phrase of bigrams can bridge two runs: the bigrams of
-- "移行、行動" never spell "移行動".
CREATE OR REPLACE FUNCTION formation_cjk_grams(run text, start integer) RETURNS tsvector
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE
        WHEN length(run) = 0 THEN ''::tsvector
        WHEN length(run) = 1 THEN ('''' || run || ''':' || start)::tsvector
        ELSE (SELECT string_agg('''' || substr(run, i, 2) || ''':' || (start + i - 1), ' ')
              FROM generate_series(1, length(run) - 1) AS i)::tsvector
    END
$$;

CREATE OR REPLACE AGGREGATE formation_tsvector_agg(tsvector) (
    SFUNC = tsvector_concat, STYPE = tsvector, INITCOND = ''
);

-- The parts of the identifiers of one stretch of text without CJK characters, at the position
-- of the identifier they belong to and with weight C (ranking counts a part's occurrence half
-- as much as a whole word's, search_app/history/ranking.py): the segments and words of a path,
-- a host, a URL's path or an e-mail address (app, query, parse.py, parse and py for
-- app/query/parse.py), the number of a signed integer (1234 for PROJ-1234's -1234), and the
-- words of a camelCase or PascalCase word (get, user, id for getUserById). PostgreSQL's parser
-- already splits snake_case and kebab-case. Each part is normalised by the configuration
-- itself, so typing the part gives the lexeme indexed. Version numbers (1.2.3) stay whole.
-- PL/pgSQL, so its statement's plan is kept for the session: a SQL function nested in the
-- triggers' statements would be planned again for every row.
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

-- The text ts_headline reads for highlights: CJK characters and ASCII punctuation blanked one
-- for one, so the words around them are at the same code point offsets and the words inside
-- an identifier are words of their own (search_app/query/highlights.py).
CREATE OR REPLACE FUNCTION formation_search_masked(body text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT regexp_replace(
               CASE WHEN body ~ @schema@.formation_cjk_class()
                    THEN regexp_replace(body, @schema@.formation_cjk_class(), ' ', 'g') ELSE body END,
               '[!-/:-@[-`{-~]', ' ', 'g')
$$;

-- Time buckets of a workspace's documents, for the search's index (search_document_bucket_gin,
-- search_app/migrations/0009_bucketed_documents.py): a search reads a frequent word's newest
-- matches bucket by bucket, newest first, and a rare word's in one scan of all its buckets
-- (docs/search.md, "Bounded work"). A bucket is 2^22 seconds (48.5 days) of one workspace: its
-- number counts buckets since 1970, and its key puts 47 bits of the workspace id above the
-- number's low 16 bits, so the keys of two workspaces never meet (unless their ids share 47
-- bits, when the search's workspace condition still tells them apart). Epoch seconds do not
-- depend on the time zone, so these are immutable although date_part is only stable.
CREATE OR REPLACE FUNCTION formation_search_bucket_number(at timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT floor(extract(epoch FROM at) / 4194304)::bigint
$$;

CREATE OR REPLACE FUNCTION formation_search_bucket_key(workspace uuid, number bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT ((('x' || translate(left(workspace::text, 13), '-', ''))::bit(48)::bigint >> 1) << 16)
           | (number & 65535)
$$;

CREATE OR REPLACE FUNCTION formation_search_bucket(workspace uuid, at timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT @schema@.formation_search_bucket_key(workspace, @schema@.formation_search_bucket_number(at))
$$;
