"""The errors only searches and replies raise, each with the shape of its ``details``
(``formation.errors`` holds the shared ones and renders them all)."""

from __future__ import annotations

from rest_framework import serializers

from formation.errors import ApiError
from formation.shapes import Shape
from search_app.serializers import BudgetShape


# A search's 429: the run's budget, or (rate_limited) the delay. (No docstring: it would become
# the schema's description.)
class SearchLimitDetails(Shape):
    budget = BudgetShape(required=False, help_text="search_budget_exhausted: the run's budget.")
    retryAfter = serializers.IntegerField(
        required=False, help_text="rate_limited: seconds; also sent as Retry-After."
    )


class DeliveryBlockedDetails(Shape):
    blocked = serializers.IntegerField(help_text="How many evidence messages block the reply.")
    reasons = serializers.DictField(
        child=serializers.IntegerField(), help_text="How many, by reason; never which."
    )


class DeliveryBlocked(ApiError):
    code = "delivery_blocked"
    status = 409
    default_message = "The reply may not be delivered to this conversation."
    details_shape = DeliveryBlockedDetails


class SearchBudgetExhausted(ApiError):
    code = "search_budget_exhausted"
    status = 429
    default_message = "This run has used its search evidence budget."
    details_shape = SearchLimitDetails
