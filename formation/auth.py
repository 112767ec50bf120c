"""Bearer-token authentication and the permissions built on the token's kind.

Tokens are looked up by the SHA-256 digest of what the client sent, in the workspace the token
names (``token_text``): the database never holds a usable token. The authenticated "user" is a
``Caller``, which carries the workspace every queryset is scoped by; nothing downstream takes a
workspace from the request itself.

This module holds the primitives only: the header's rules, the digest, the caller and the
permissions. The token table belongs to ``messages_app``; the function that turns a digest into
a ``Caller`` is named by the ``TOKEN_LOOKUP`` setting (``messages_app.tokens.caller_for_digest``),
so ``formation`` imports no app.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.db import models
from django.utils.module_loading import import_string
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from formation.db_retries import on_a_live_connection
from formation.errors import Forbidden, Unauthenticated
from formation.limits import MAX_TOKEN_LENGTH


class TokenKind(models.TextChoices):
    SERVICE = "service"
    AGENT = "agent"
    RUN = "run"


@dataclass(frozen=True)
class RunFacts:
    """What a run fixes when it is created and never changes (SPEC §2): read with its token,
    so a tool call of the run needs no statement of its own to learn them."""

    destination_id: uuid.UUID
    requester_id: uuid.UUID
    current_message_id: uuid.UUID | None
    recent_message_ids: tuple[uuid.UUID, ...]


@dataclass(frozen=True)
class Caller:
    token_id: uuid.UUID
    workspace_id: uuid.UUID
    kind: str
    agent_id: uuid.UUID | None
    run_id: uuid.UUID | None
    # A run token's run, read by the same statement as the token.
    run: RunFacts | None = None

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


def token_text(kind: str, workspace_id: uuid.UUID, secret: str) -> str:
    """A token as issued: ``fmn_<kind>_<workspace id, 32 hex digits>.<secret>``.

    The workspace in the clear lets the look-up name it, so on Citus it reads one shard (a
    workspace id is no secret: it grants nothing without the secret, whose digest is what is
    stored). Tokens issued before this carry no workspace and are found by digest alone.
    """
    return f"fmn_{kind}_{workspace_id.hex}.{secret}"


def token_workspace(raw_token: str) -> uuid.UUID | None:
    """The workspace a token names, or None for a token of the earlier form (or no token)."""
    named, dot, _ = raw_token.partition(".")
    head = named.rsplit("_", 1)[-1]
    if not dot or len(head) != 32:
        return None
    try:
        return uuid.UUID(hex=head)
    except ValueError:
        return None


@cache
def _caller_lookup() -> Callable[[str, uuid.UUID | None], Caller | None]:
    """The ``TOKEN_LOOKUP`` function: the live token with a digest (in the workspace it names,
    if it names one) as a ``Caller``, or None."""
    return import_string(settings.TOKEN_LOOKUP)


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
        digest, workspace_id = token_digest(raw_token), token_workspace(raw_token)
        # The request's first statement: the one that meets a connection the server closed
        # while it idled in the pool, and runs again on a fresh one.
        caller = on_a_live_connection(lambda: _caller_lookup()(digest, workspace_id))
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
