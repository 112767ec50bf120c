"""The errors only the messages' lifecycle raises, each with the shape of its ``details`` and
the answer the OpenAPI document describes for it (``formation.errors`` holds the shared ones
and renders them all)."""

from __future__ import annotations

from rest_framework import serializers

from formation.errors import ApiError
from formation.openapi import error_response
from formation.shapes import Shape


class LegalHoldDetails(Shape):
    holdId = serializers.UUIDField(help_text="The legal hold that refused it.")


class LegalHoldActive(ApiError):
    """A legal hold covers what a delete or erasure would remove (messages_app/lifecycle/holds.py);
    ``details.holdId`` names it. Nothing was changed."""

    code = "legal_hold_active"
    status = 409
    default_message = "A legal hold covers these messages; nothing was erased."
    details_shape = LegalHoldDetails

    def __init__(self, hold_id: object) -> None:
        super().__init__(details=LegalHoldDetails.render(holdId=str(hold_id)))


# The 409 answer every endpoint that a legal hold can refuse documents.
LEGAL_HOLD = error_response(
    "LegalHoldError",
    [LegalHoldActive],
    "a legal hold covers the messages this would erase or edit; nothing was changed.",
)
