"""The OpenAPI answers several of the conversations' endpoints share, for their annotations:
the message tools' views and the lifecycle's both document a legal hold's refusal."""

from __future__ import annotations

from formation.openapi import error_response
from messages_app.errors import LegalHoldActive

# The 409 answer every endpoint that a legal hold can refuse documents.
LEGAL_HOLD = error_response(
    "LegalHoldError",
    [LegalHoldActive],
    "a legal hold covers the messages this would erase or edit; nothing was changed.",
)
