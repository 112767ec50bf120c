"""The token table's side of authentication: a digest to the ``Caller`` it authenticates.

``formation.auth`` parses the header and hashes the token; this look-up is what the
``TOKEN_LOOKUP`` setting names, so the primitives need no import of this app.
"""

from __future__ import annotations

import uuid

from django.db import connection

from formation.auth import Caller, RunFacts
from formation.db_timeouts import claim_statement_timeout
from formation.sql import table
from messages_app.models import ApiToken, Run

# The columns of a run token's run that never change (``formation.auth.RunFacts``).
_RUN = """, r.conversation_id, r.requester_id, r.current_message_id, r.recent_message_ids"""
_RUN_JOIN = f"""
    LEFT JOIN {table(Run)} AS r ON r.workspace_id = t.workspace_id AND r.id = t.run_id"""

# One statement per request: the token (with a run token's run), and the request's statement
# timeout if one is pending (formation/db_timeouts.py), so bounding the request costs no round
# trip of its own. The LEFT JOIN answers one row even for an unknown token, so set_config runs
# either way. A token that names its workspace is looked up in it (one shard on Citus); one of
# the earlier form, by its digest alone. On Citus the look-up runs on a worker, and so would a
# set_config inside it: there the timeout is left pending, for formation/db_timeouts.py to set
# on the coordinator's own session just before the look-up.
_IN_WORKSPACE = "t.workspace_id = %(workspace)s AND "
_TOKEN = f"""
    SELECT set_config('statement_timeout', %(timeout)s, false), t.id, t.workspace_id, t.kind,
           t.agent_id, t.run_id {_RUN}
    FROM (SELECT 1) AS one
    LEFT JOIN {table(ApiToken)} AS t
      ON {{workspace}}t.digest = %(digest)s AND t.revoked_at IS NULL {_RUN_JOIN}
"""
_TOKEN_ALONE = f"""
    SELECT t.id, t.workspace_id, t.kind, t.agent_id, t.run_id {_RUN}
    FROM {table(ApiToken)} AS t {_RUN_JOIN}
    WHERE {{workspace}}t.digest = %(digest)s AND t.revoked_at IS NULL
"""


def caller_for_digest(digest: str, workspace_id: uuid.UUID | None) -> Caller | None:
    """The live token with this digest (in ``workspace_id`` when the token names one) as a
    ``Caller``, or None."""
    timeout = None if connection.is_citus else claim_statement_timeout()
    scope = _IN_WORKSPACE if workspace_id is not None else ""
    params = {"digest": digest, "workspace": workspace_id, "timeout": timeout}
    with connection.cursor() as cursor:
        if timeout is None:
            cursor.execute(_TOKEN_ALONE.format(workspace=scope), params)
            row = cursor.fetchone()
        else:
            cursor.execute(_TOKEN.format(workspace=scope), params)
            row = cursor.fetchone()[1:]
    if row is None or row[0] is None:
        return None
    token_id, found_workspace, kind, agent_id, run_id, destination, requester, current, recent = row
    facts = None
    if run_id is not None and destination is not None:
        facts = RunFacts(
            destination_id=destination,
            requester_id=requester,
            current_message_id=current,
            recent_message_ids=tuple(recent),
        )
    return Caller(
        token_id=token_id,
        workspace_id=found_workspace,
        kind=kind,
        agent_id=agent_id,
        run_id=run_id,
        run=facts,
    )
