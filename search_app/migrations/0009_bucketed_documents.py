"""Bounded search: the projection indexed by time bucket and words, online.

search_history finds each query word's newest matches without reading all of them
(docs/search.md, "Bounded work"): a frequent word's through the index below, bucket by bucket
newest first, the most frequent ones by walking the agent's rooms (``search_document_timeline``,
already there). ``formation_search_bucket`` (search_app/sql/search_document.sql) is an
expression of columns every document has, so nothing is rewritten: the index is built
CONCURRENTLY and writes go on throughout. The index it replaces is dropped by the next
migration, once the code that reads this one serves (docs/operations.md, "Moving to bounded
search").
"""

import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

FUNCTIONS = """
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
    SELECT formation_search_bucket_key(workspace, formation_search_bucket_number(at))
$$;
"""

DROP_FUNCTIONS = """
DROP FUNCTION formation_search_bucket(uuid, timestamptz);
DROP FUNCTION formation_search_bucket_key(uuid, bigint);
DROP FUNCTION formation_search_bucket_number(timestamptz);
"""


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("search_app", "0008_triggers_per_workspace"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, reverse_sql=DROP_FUNCTIONS),
        AddIndexConcurrently(
            model_name="messagesearchdocument",
            index=django.contrib.postgres.indexes.GinIndex(
                models.Func(
                    models.F("workspace_id"),
                    models.F("created_at"),
                    function="formation_search_bucket",
                    output_field=models.BigIntegerField(),
                ),
                models.F("document"),
                name="search_document_bucket_gin",
            ),
        ),
    ]
