"""Checking and repairing the search projection against the canonical messages.

The triggers keep ``message_search_documents`` in step on every write, so on a healthy database
``rebuild_search_documents`` finds nothing to fix. It exists for what triggers cannot cover: a
database restored from a dump taken without them, a change of a workspace's language (its
text search configuration), or a proof after a crash that nothing drifted.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, transaction

from formation.sql import merge_params, table
from messages_app.models import Message, MessageLineageRoom, Workspace
from search_app.models import MessageSearchDocument

DEFAULT_BATCH_SIZE = 5_000

# A batch is locked FOR SHARE by one statement and compared by the next: under READ COMMITTED
# the second statement's snapshot already includes any edit the lock waited for, and no edit
# can slip in between reading a body and writing its document (the edit waits, then its own
# trigger runs). Batches are taken one workspace at a time and every statement names it, so
# on Citus each is a router statement on that workspace's shard.
_LOCK = f"""
    SELECT id FROM {table(Message)}
    WHERE workspace_id = %(workspace)s AND id > %(after)s ORDER BY id LIMIT %(size)s FOR SHARE
"""

_BATCH = f"""
    WITH batch AS MATERIALIZED (
        SELECT id, workspace_id, conversation_id, created_at, sender_account_id,
               sender_agent_id, deleted_at, content
        FROM {table(Message)}
        WHERE workspace_id = %(workspace)s AND id = ANY(%(ids)s::uuid[])
    ), expected AS (
        SELECT id, workspace_id, conversation_id, created_at, sender_account_id,
               sender_agent_id,
               formation_search_document(%(config)s::regconfig, content) AS document,
               (SELECT array_agg(r.conversation_id ORDER BY r.conversation_id)
                FROM {table(MessageLineageRoom)} AS r
                WHERE r.workspace_id = %(workspace)s AND r.message_id = batch.id) AS lineage_rooms
        FROM batch
        WHERE deleted_at IS NULL
    )
"""

_CHECK = (
    _BATCH
    + f"""
    SELECT
        (SELECT count(*) FROM expected AS e
         WHERE NOT EXISTS (SELECT 1 FROM {table(MessageSearchDocument)} AS d
                           WHERE d.workspace_id = %(workspace)s AND d.message_id = e.id)),
        (SELECT count(*) FROM expected AS e JOIN {table(MessageSearchDocument)} AS d
           ON d.workspace_id = %(workspace)s AND d.message_id = e.id
         WHERE (d.workspace_id, d.conversation_id, d.created_at, d.sender_account_id,
                d.sender_agent_id, d.document, d.lineage_rooms)
               IS DISTINCT FROM (e.workspace_id, e.conversation_id, e.created_at,
                                 e.sender_account_id, e.sender_agent_id, e.document,
                                 e.lineage_rooms)),
        (SELECT count(*) FROM batch AS b JOIN {table(MessageSearchDocument)} AS d
           ON d.workspace_id = %(workspace)s AND d.message_id = b.id
         WHERE b.deleted_at IS NOT NULL)
"""
)

_REPAIR = (
    _BATCH
    + f"""
    , upserted AS (
        INSERT INTO {table(MessageSearchDocument)} AS d
            (message_id, workspace_id, conversation_id, created_at, sender_account_id,
             sender_agent_id, document, lineage_rooms)
        SELECT id, workspace_id, conversation_id, created_at, sender_account_id,
               sender_agent_id, document, lineage_rooms
        FROM expected
        ON CONFLICT (workspace_id, message_id) DO UPDATE
            SET workspace_id = EXCLUDED.workspace_id,
                conversation_id = EXCLUDED.conversation_id,
                created_at = EXCLUDED.created_at,
                sender_account_id = EXCLUDED.sender_account_id,
                sender_agent_id = EXCLUDED.sender_agent_id,
                document = EXCLUDED.document,
                lineage_rooms = EXCLUDED.lineage_rooms
            WHERE (d.workspace_id, d.conversation_id, d.created_at, d.sender_account_id,
                   d.sender_agent_id, d.document, d.lineage_rooms)
                  IS DISTINCT FROM (EXCLUDED.workspace_id, EXCLUDED.conversation_id,
                                    EXCLUDED.created_at, EXCLUDED.sender_account_id,
                                    EXCLUDED.sender_agent_id, EXCLUDED.document,
                                    EXCLUDED.lineage_rooms)
        RETURNING (xmax = 0) AS inserted
    ), removed AS (
        DELETE FROM {table(MessageSearchDocument)} AS d
        USING batch AS b
        WHERE d.workspace_id = %(workspace)s AND d.message_id = b.id
          AND b.deleted_at IS NOT NULL
        RETURNING 1
    )
    SELECT
        (SELECT count(*) FROM upserted WHERE inserted),
        (SELECT count(*) FROM upserted WHERE NOT inserted),
        (SELECT count(*) FROM removed)
"""
)


@dataclass
class RebuildReport:
    checked: int = 0
    missing: int = 0
    stale: int = 0
    orphaned: int = 0

    @property
    def fixed(self) -> int:
        return self.missing + self.stale + self.orphaned


def search_documents_rebuild(
    *,
    fix: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Callable[[RebuildReport], None] | None = None,
    workspace_id: uuid.UUID | None = None,
) -> RebuildReport:
    """Compare every message (of one workspace, with ``workspace_id``) with its document,
    batch by batch; repair unless ``fix`` is off.

    ``missing``: a live message without a document; ``stale``: a document that differs from
    what its message's body, its workspace's language and its inherited rooms give now (after
    the language changed, every document with a word in it); ``orphaned``: a document for a
    deleted message.
    """
    report = RebuildReport()
    workspaces = Workspace.objects.order_by("id")
    if workspace_id is not None:
        workspaces = workspaces.filter(id=workspace_id)
    for workspace, language in workspaces.values_list("id", "language"):
        _workspace_rebuild(
            workspace, language, report, fix=fix, batch_size=batch_size, progress=progress
        )
    return report


def _workspace_rebuild(
    workspace_id: uuid.UUID,
    language: str,
    report: RebuildReport,
    *,
    fix: bool,
    batch_size: int,
    progress: Callable[[RebuildReport], None] | None,
) -> None:
    """One workspace's messages, batch by batch, added to ``report``."""
    after = uuid.UUID(int=0)
    while True:
        scope = {"workspace": workspace_id}
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_LOCK, merge_params(scope, {"after": after, "size": batch_size}))
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return
            batch = merge_params(scope, {"ids": ids, "config": language})
            cursor.execute(_REPAIR if fix else _CHECK, batch)
            missing, stale, orphaned = cursor.fetchone()
        report.checked += len(ids)
        report.missing += missing
        report.stale += stale
        report.orphaned += orphaned
        after = ids[-1]
        if progress is not None:
            progress(report)
