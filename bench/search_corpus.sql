-- A synthetic corpus for looking at search_history plans until `generate_corpus` exists:
-- one workspace, 60 people, 300 conversations of every kind, an agent in 200 of them, and
-- :messages messages (default 250,000) of 5-40 words drawn log-uniformly (Zipf-like) from a
-- 20,000-word synthetic vocabulary over two years. Load into a freshly migrated database:
--
--   psql "$DATABASE_URL" -v messages=250000 -f bench/search_corpus.sql
--
-- Messages go in chunks with ANALYZE in between: foreign-key checks are planned from table
-- statistics, and against an "empty" table they scan it, which is quadratic.
\if :{?messages}
\else
  \set messages 250000
\endif
\set ON_ERROR_STOP on
SELECT setseed(0.42);
INSERT INTO messages_app_workspace (id, slug, name, created_at)
VALUES ('00000000-0000-0000-0000-0000000000aa', 'corpus', 'Synthetic corpus', now() - interval '3 years');
INSERT INTO messages_app_agent (id, workspace_id, name, created_at)
VALUES ('00000000-0000-0000-0000-0000000000ab', '00000000-0000-0000-0000-0000000000aa', 'Busy agent', now() - interval '3 years');
INSERT INTO messages_app_account (id, workspace_id, display_name, created_at)
SELECT md5('acct' || i)::uuid, '00000000-0000-0000-0000-0000000000aa', 'Person ' || i, now() - interval '3 years'
FROM generate_series(1, 60) AS i;
-- Conversation i: i % 5 = 0 public, 1 or 2 private, 3 direct, 4 unknown.
INSERT INTO messages_app_conversation
    (id, workspace_id, kind, title, created_at, last_seq, live_message_count)
SELECT md5('conv' || i)::uuid, '00000000-0000-0000-0000-0000000000aa',
       (ARRAY['public', 'private', 'private', 'direct', 'unknown'])[1 + i % 5], 'Room ' || i,
       now() - interval '3 years', 0, 0
FROM generate_series(1, 300) AS i;
INSERT INTO messages_app_membership (id, workspace_id, conversation_id, agent_id, joined_at)
SELECT gen_random_uuid(), '00000000-0000-0000-0000-0000000000aa', md5('conv' || i)::uuid,
       '00000000-0000-0000-0000-0000000000ab', now() - interval '30 months'
FROM generate_series(1, 200) AS i;
-- Direct rooms have one reader (person 1 + c % 60); other rooms 2 to 12 people.
INSERT INTO messages_app_membership (id, workspace_id, conversation_id, account_id, joined_at)
SELECT gen_random_uuid(), '00000000-0000-0000-0000-0000000000aa', md5('conv' || c)::uuid,
       md5('acct' || a)::uuid, now() - interval '30 months'
FROM generate_series(1, 300) AS c, generate_series(1, 60) AS a
WHERE (c % 5 = 3 AND a = 1 + c % 60) OR (c % 5 <> 3 AND (a * 7 + c) % 60 < 2 + c % 11);

-- Word k of the vocabulary is the first 4-9 letters of md5('w' || k), digits mapped to g-p.
-- Conversations are skewed (low numbers are busy); seq follows created_at per conversation.
CREATE TEMP TABLE planned AS
SELECT n, conversation_id, created_at, words,
       row_number() OVER (PARTITION BY conversation_id ORDER BY created_at) AS seq
FROM (
    SELECT n, md5('conv' || (1 + floor(300 * power(random(), 2))::int))::uuid AS conversation_id,
           now() - random() * interval '730 days' AS created_at,
           5 + floor(random() * 36)::int AS words
    FROM generate_series(1, :messages) AS n
) AS drawn;

CREATE TEMP TABLE chunks AS
SELECT lower(bounds) AS low, upper(bounds) AS high
FROM (VALUES (int8range(1, 1001)), (int8range(1001, 10001))) AS first(bounds)
UNION ALL
SELECT low, least(low + 40000, :messages + 1) FROM generate_series(10001, :messages, 40000) AS low;

SELECT format($sql$
    INSERT INTO messages_app_message
        (id, workspace_id, conversation_id, seq, role, status, sender_account_id, content, created_at)
    SELECT gen_random_uuid(), '00000000-0000-0000-0000-0000000000aa', p.conversation_id, p.seq,
           'user', 'sent', md5('acct' || (1 + p.n %% 60))::uuid,
           (SELECT string_agg(translate(substr(md5('w' || w.k), 1, 4 + w.k %% 6),
                                        '0123456789', 'ghijklmnop'), ' ')
            FROM (SELECT greatest(1, floor(exp(random() * ln(20000)))::int) + 0 * g AS k
                  FROM generate_series(1, p.words) AS g) AS w),
           p.created_at
    FROM planned AS p WHERE p.n >= %s AND p.n < %s
$sql$, low, high) || E';\nANALYZE messages_app_message;\nANALYZE message_search_documents;'
FROM chunks ORDER BY low
\gexec

UPDATE messages_app_conversation AS c
SET last_seq = s.messages, live_message_count = s.messages
FROM (SELECT conversation_id, count(*) AS messages FROM messages_app_message GROUP BY 1) AS s
WHERE s.conversation_id = c.id;
ANALYZE;
SELECT (SELECT count(*) FROM messages_app_message) AS messages,
       (SELECT count(*) FROM message_search_documents) AS search_documents;
