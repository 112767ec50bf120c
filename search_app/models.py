"""The search projection: one ``message_search_documents`` row per live message.

Rows are written only by database triggers on the messages table (migration 0001), in the same
statement as the insert, edit or delete they mirror, so no code path — services, bulk import,
``COPY``, a hand-written ``UPDATE`` — can leave the projection behind the canonical messages.
``rebuild_search_documents`` proves it (and repairs a database restored from elsewhere).

Only ids, times and the ``tsvector`` live here: search results always load their text from the
canonical message and recheck the perspective rules there.
"""

from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models

from messages_app.models import Message

# The one text-search configuration, used to index and to query (README: "Full-text search").
# It is PostgreSQL's ``english`` (Snowball stemming, English stop words) with ``unaccent`` in
# front of the stemmer, so "cafe" finds "café".
SEARCH_CONFIG = "formation_english"


class MessageSearchDocument(models.Model):
    """The ``tsvector`` of one live message, with copies of the columns the rules filter on.

    The copies (workspace, conversation, time, sender) never change after a message is stored
    and come from the same trigger, so a search can rank from this table alone; the few rows it
    returns are then rechecked against the canonical messages. They carry no foreign keys of
    their own (the message's are enough): every import pays for each constraint checked.
    """

    message = models.OneToOneField(
        Message, on_delete=models.DO_NOTHING, primary_key=True, related_name="search_document"
    )
    workspace_id = models.UUIDField()
    conversation_id = models.UUIDField()
    created_at = models.DateTimeField()
    sender_account_id = models.UUIDField(null=True)
    sender_agent_id = models.UUIDField(null=True)
    document = SearchVectorField()

    class Meta:
        db_table = "message_search_documents"
        indexes = [
            # btree_gin lets one GIN index serve "this workspace AND these words".
            GinIndex(fields=["workspace_id", "document"], name="search_document_gin"),
            # Common words match most documents; then reading an agent's conversations through
            # this index beats scanning the whole table.
            models.Index(fields=["conversation_id", "created_at"], name="search_document_timeline"),
        ]

    def __str__(self) -> str:
        return f"search document of {self.message_id}"
