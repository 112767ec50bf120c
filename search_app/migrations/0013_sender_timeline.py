"""The sender index: one person's search documents, room by room, newest first.

search_history reads the messages of the participants a query names through it, one probe per
person and interval of the agent (``search_app.history.candidates.named_matches_cte``).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("search_app", "0012_search_path_safe_functions")]

    operations = [
        migrations.AddIndex(
            model_name="messagesearchdocument",
            index=models.Index(
                fields=["workspace_id", "sender_account_id", "conversation_id", "created_at"],
                name="search_document_sender",
            ),
        ),
    ]
