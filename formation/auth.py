"""Bearer-token authentication and the permissions built on the token's kind.

Tokens are looked up by the SHA-256 digest of what the client sent: the database never holds a
usable token. The authenticated "user" is a ``Caller``, which carries the workspace every
queryset is scoped by; nothing downstream takes a workspace from the request itself.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from django.db import connection
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from formation.db_timeouts import claim_statement_timeout, on_a_live_connection
from formation.errors import Forbidden, Unauthenticated
from messages_app.models import ApiToken, TokenKind

MAX_TOKEN_LENGTH = 200


@dataclass(frozen=True)
class Caller:
    token_id: uuid.UUID
    workspace_id: uuid.UUID
    kind: str
    agent_id: uuid.UUID | None
    run_id: uuid.UUID | None

    is_authenticated = True
    is_anonymous = False

    @property
    def is_service(self) -> bool:
        return self.kind == TokenKind.SERVICE

    @property
    def is_run(self) -> bool:
        return self.kind == TokenKind.RUN

    @property
    def acts_as_agent(self) -> bool:
        return self.kind in (TokenKind.AGENT, TokenKind.RUN)


def token_digest(raw_token: str) -> str:
    return hashlib.sha256(raw_token.encode("utf-8")).hexdigest()


# One statement per request: the token, and the request's statement timeout if one is pending
# (formation/db_timeouts.py), so bounding the request costs no round trip of its own. The LEFT
# JOIN answers one row even for an unknown token, so set_config runs either way.
_TOKEN = f"""
    SELECT set_config('statement_timeout', %(timeout)s, false), t.id, t.workspace_id, t.kind,
           t.agent_id, t.run_id
    FROM (SELECT 1) AS one
    LEFT JOIN {ApiToken._meta.db_table} AS t ON t.digest = %(digest)s AND t.revoked_at IS NULL
"""
_TOKEN_ALONE = f"""
    SELECT t.id, t.workspace_id, t.kind, t.agent_id, t.run_id
    FROM {ApiToken._meta.db_table} AS t WHERE t.digest = %(digest)s AND t.revoked_at IS NULL
"""


def _token_row(digest: str) -> tuple | None:
    timeout = claim_statement_timeout()
    with connection.cursor() as cursor:
        if timeout is None:
            cursor.execute(_TOKEN_ALONE, {"digest": digest})
            return cursor.fetchone()
        cursor.execute(_TOKEN, {"digest": digest, "timeout": timeout})
        return cursor.fetchone()[1:]


def _caller_of(digest: str) -> Caller | None:
    """The live token with this digest as a ``Caller``, or None.

    The look-up is a request's first statement, so it is the one that meets a connection the
    server closed while it idled in the pool, and retries it on a fresh one.
    """
    row = on_a_live_connection(lambda: _token_row(digest))
    if row is None or row[0] is None:
        return None
    token_id, workspace_id, kind, agent_id, run_id = row
    return Caller(
        token_id=token_id, workspace_id=workspace_id, kind=kind, agent_id=agent_id, run_id=run_id
    )


class BearerTokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request) -> tuple[Caller, Caller] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw_token = header.partition(" ")
        raw_token = raw_token.strip()
        if (
            scheme.lower() != "bearer"
            or not raw_token
            or len(raw_token) > MAX_TOKEN_LENGTH
            or not raw_token.isascii()
            or not raw_token.isprintable()
        ):
            raise Unauthenticated()
        caller = _caller_of(token_digest(raw_token))
        if caller is None:
            raise Unauthenticated()
        return caller, caller

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


class IsServiceToken(BasePermission):
    """The runtime: may write everything in its workspace."""

    def has_permission(self, request, view) -> bool:
        caller = request.user
        if caller is None:
            raise Unauthenticated()
        if not caller.is_service:
            raise Forbidden("This endpoint needs a service token.")
        return True


class IsAgentOrRunToken(BasePermission):
    """The agent tools: an agent token, or a run token acting as its run's agent."""

    def has_permission(self, request, view) -> bool:
        caller = request.user
        if caller is None:
            raise Unauthenticated()
        if not caller.acts_as_agent:
            raise Forbidden("This endpoint needs an agent or run token.")
        return True


class IsRunToken(BasePermission):
    """Tools that need a run: the agent, destination and requester come from it."""

    def has_permission(self, request, view) -> bool:
        caller = request.user
        if caller is None:
            raise Unauthenticated()
        if not caller.is_run:
            raise Forbidden("This endpoint needs a run token.")
        return True


class IsServiceOrRunToken(BasePermission):
    """A run's own records: the runtime, or the run itself (which run is the view's check)."""

    def has_permission(self, request, view) -> bool:
        caller = request.user
        if caller is None:
            raise Unauthenticated()
        if not (caller.is_service or caller.is_run):
            raise Forbidden("This endpoint needs a service token or the run's token.")
        return True
