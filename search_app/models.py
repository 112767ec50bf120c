"""The search projection: one ``message_search_documents`` row per live message.

Rows are written only by database triggers on the messages table (migration 0001), in the same
statement as the insert, edit or delete they mirror, so no code path — services, bulk import,
``COPY``, a hand-written ``UPDATE`` — can leave the projection behind the canonical messages.
``rebuild_search_documents`` proves it (and repairs a database restored from elsewhere).

Only ids, times and the ``tsvector`` live here: search results always load their text from the
canonical message and recheck the perspective rules there.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import F, Func, Value
from django.utils import timezone

from formation.tenancy import TenantForeignKey, TenantModel, TenantOneToOneField
from messages_app.models import DEFAULT_LANGUAGE, Agent, Conversation, Message, Run, Workspace

# The text search configuration of memories, and of workspaces that name no other
# (``Workspace.language``; docs/search.md, "Full-text search"). It is PostgreSQL's ``english``
# (Snowball stemming, English stop words) with ``unaccent`` in front of the stemmer, so "cafe"
# finds "café".
SEARCH_CONFIG = DEFAULT_LANGUAGE


def search_bucket() -> Func:
    """``formation_search_bucket(workspace_id, created_at)`` (search_app migration 0009): the
    time bucket of a document's workspace its index is keyed by."""
    return Func(
        F("workspace_id"),
        F("created_at"),
        function="formation_search_bucket",
        output_field=models.BigIntegerField(),
    )


def search_document(config: str, text: str) -> Func:
    """``formation_search_document(config, text)`` (migration 0005): the configuration's
    lexemes, and overlapping character bigrams for Han, kana and Hangul, which have no spaces
    between words. The one definition of a document, for the projection's triggers, the
    rebuild, memories and every query's parts alike."""
    return Func(
        Value(config),
        F(text),
        function="formation_search_document",
        output_field=SearchVectorField(),
    )


class MessageSearchDocument(TenantModel):
    """The ``tsvector`` of one live message, with copies of the columns the rules filter on.

    The copies (workspace, conversation, time, sender, inherited rooms) come from the triggers
    that keep the row in step, so a search can rank and apply every rule from this table alone;
    the few rows it returns are then rechecked against the canonical messages. One foreign key,
    to the message's ``(workspace_id, id)`` (search_app 0006), and none for the copies: every
    import pays for each constraint checked.
    """

    message = TenantOneToOneField(
        Message,
        db_constraint=False,
        on_delete=models.DO_NOTHING,
        primary_key=True,
        related_name="search_document",
    )
    workspace_id = models.UUIDField()
    conversation_id = models.UUIDField()
    created_at = models.DateTimeField()
    sender_account_id = models.UUIDField(null=True)
    sender_agent_id = models.UUIDField(null=True)
    document = SearchVectorField()
    # Rule 4 on the row: the rooms the message inherits (``MessageLineageRoom``), sorted, or
    # null when it inherits none (every person's message), kept by the rooms table's trigger, so
    # a search tests each match against the permitted rooms without probing another table.
    lineage_rooms = ArrayField(models.UUIDField(), null=True)

    class Meta:
        db_table = "message_search_documents"
        indexes = [
            # "These words in this bucket of this workspace" (btree_gin keys the bucket): a
            # search reads a frequent word's matches bucket by bucket, newest first, and a rare
            # word's in one scan of every bucket (docs/search.md, "Bounded work").
            GinIndex(search_bucket(), F("document"), name="search_document_bucket_gin"),
            # The agent's rooms read newest first, slice by slice, for the words most
            # documents hold.
            models.Index(fields=["conversation_id", "created_at"], name="search_document_timeline"),
            # One person's documents, room by room, newest first: the candidates of the
            # participants a query names.
            models.Index(
                fields=["workspace_id", "sender_account_id", "conversation_id", "created_at"],
                name="search_document_sender",
            ),
        ]

    def __str__(self) -> str:
        return f"search document of {self.message_id}"


class AgentMemory(TenantModel):
    """Something an agent chose to remember from a run, never more visible than its sources.

    Its lineage (``MemoryLineage``) is the run's evidence when it was written, flattened to
    every original source message, so a memory is only returned to a later run whose
    destination every source's audience permits (SPEC §3 rule 4, applied to memories).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workspace = models.ForeignKey(Workspace, on_delete=models.PROTECT, related_name="+")
    agent = TenantForeignKey(
        Agent, db_constraint=False, on_delete=models.PROTECT, related_name="memories"
    )
    run = TenantForeignKey(
        Run,
        db_constraint=False,
        on_delete=models.PROTECT,
        related_name="memories",
        help_text="The run that wrote it.",
    )
    content = models.TextField()
    document = models.GeneratedField(
        expression=search_document(SEARCH_CONFIG, "content"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "agent_memories"
        ordering = ["-created_at", "id"]
        verbose_name_plural = "agent memories"
        indexes = [GinIndex(fields=["agent_id", "document"], name="agent_memory_gin")]

    def __str__(self) -> str:
        return f"memory {self.id}"


class MemoryLineage(TenantModel):
    """One source message of a memory: the closure, like ``MessageLineage``."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    memory = TenantForeignKey(
        AgentMemory, db_constraint=False, on_delete=models.CASCADE, related_name="lineage"
    )
    source = TenantForeignKey(
        Message, db_constraint=False, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        db_table = "agent_memory_lineage"
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "memory", "source"], name="memory_lineage_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} <- {self.source_id}"


class MemoryRoom(TenantModel):
    """A conversation whose audience a memory inherits: the closure of rooms, like
    ``MessageLineageRoom``.

    The room of the run that wrote it (whose context that run was given, even with no message
    evidence), the rooms of every message the run was shown and the rooms those inherited, and
    the rooms of every memory the run recalled, so a memory of a memory is as restricted as the
    first, however long the chain.
    """

    workspace = models.ForeignKey(
        Workspace, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    memory = TenantForeignKey(
        AgentMemory,
        db_constraint=False,
        on_delete=models.CASCADE,
        related_name="rooms",
        db_index=False,
    )
    conversation = TenantForeignKey(
        Conversation,
        db_constraint=False,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )

    class Meta:
        db_table = "agent_memory_rooms"
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "memory", "conversation"], name="memory_room_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} inherits {self.conversation_id}"


class RunMemory(TenantModel):
    """A memory returned to a run: its lineage travels with the run's reply and memories."""

    workspace = models.ForeignKey(
        Workspace, on_delete=models.PROTECT, related_name="+", db_index=False
    )
    run = TenantForeignKey(
        Run, db_constraint=False, on_delete=models.CASCADE, related_name="memories_used"
    )
    memory = TenantForeignKey(
        AgentMemory, db_constraint=False, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "run_memories"
        constraints = [
            models.UniqueConstraint(fields=["workspace", "run", "memory"], name="run_memory_once")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} used {self.memory_id}"
