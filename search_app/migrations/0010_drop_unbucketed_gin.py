"""The projection's GIN index on (workspace, document) alone, which search_history read before
it searched by time bucket (0009), dropped CONCURRENTLY: run once the code that reads the
bucket index serves (docs/operations.md, "Moving to bounded search"). ``IF EXISTS``: a database
that ran an earlier 0009, which dropped it itself, has none.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("search_app", "0009_bucketed_documents"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS search_document_gin",
                    reverse_sql=(
                        "CREATE INDEX CONCURRENTLY IF NOT EXISTS search_document_gin "
                        "ON message_search_documents USING gin (workspace_id, document)"
                    ),
                ),
            ],
            state_operations=[
                migrations.RemoveIndex(
                    model_name="messagesearchdocument",
                    name="search_document_gin",
                ),
            ],
        ),
    ]
