"""Each error class declares the shape of its ``details``, and the schema reads it from there
(``formation.openapi.error_response``)."""

from __future__ import annotations

import uuid

import pytest

from formation.errors import InvalidArguments, InvalidArgumentsDetails, RateLimited, error_body
from formation.openapi import error_response
from messages_app.errors import LegalHoldActive, LegalHoldDetails
from search_app.errors import SearchBudgetExhausted, SearchLimitDetails


def _details(response) -> object:
    return response.response().fields["error"].fields["details"]


def test_an_error_status_documents_its_first_errors_details_shape():
    assert isinstance(
        _details(error_response("A", [InvalidArguments], "a.")), InvalidArgumentsDetails
    )
    limits = error_response("B", [SearchBudgetExhausted, RateLimited], "b.")
    assert isinstance(_details(limits), SearchLimitDetails)


def test_errors_whose_details_the_first_shape_does_not_describe_are_refused():
    with pytest.raises(TypeError, match="RateLimited"):
        error_response("C", [InvalidArguments, RateLimited], "c.")


def test_a_legal_hold_names_itself_in_its_declared_shape():
    hold_id = uuid.uuid4()
    refused = LegalHoldActive(hold_id)
    assert LegalHoldActive.details_shape is LegalHoldDetails
    assert error_body(refused.code, refused.message, refused.details) == {
        "error": {
            "code": "legal_hold_active",
            "message": "A legal hold covers these messages; nothing was erased.",
            "details": {"holdId": str(hold_id)},
        }
    }
