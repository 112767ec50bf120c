"""The errors only the messages' lifecycle raises, each with the shape of its ``details``
(``formation.errors`` holds the shared ones and renders them all; ``messages_app/schema.py``
the answers the OpenAPI document describes for them)."""

from __future__ import annotations

from rest_framework import serializers

from formation.errors import ApiError
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
