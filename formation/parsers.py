"""Strict JSON for every request body: the REST parser and the MCP endpoint read the same way.

A malformed body is refused with one of the fixed sentences below, never with the decoder's own
message (which can quote the offending text).
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from formation.limits import MAX_NESTING


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object naming a key twice is refused: a proxy and the service could read different
    values from it (RFC 8259 leaves duplicates to the parser)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        raise ValueError("duplicate key")
    return data


def _depth_ok(value: Any, depth: int = 0) -> bool:
    if depth > MAX_NESTING:
        return False
    if isinstance(value, dict):
        return all(_depth_ok(item, depth + 1) for item in value.values())
    if isinstance(value, list):
        return all(_depth_ok(item, depth + 1) for item in value)
    return True


def body_too_large(limit: int) -> ParseError:
    return ParseError(f"The request body is larger than {limit} bytes.")


def parse_strict_json(raw: bytes) -> Any:
    """Strict RFC 8259 JSON of any shape: UTF-8 only, no NaN/Infinity, no repeated keys,
    bounded nesting. Raises ``ParseError`` with a fixed sentence."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ParseError("The request body is not valid UTF-8.") from error
    try:
        data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as error:
        raise ParseError("The request body is not valid JSON (or names a key twice).") from error
    if not _depth_ok(data):
        raise ParseError("The request body is nested too deeply.")
    return data


class StrictJSONParser(JSONParser):
    """``parse_strict_json`` for DRF, with a bounded size, and the body must be an object."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.MAX_REQUEST_BODY_BYTES
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise body_too_large(limit)
        data = parse_strict_json(raw)
        if not isinstance(data, dict):
            raise ParseError("The request body must be a JSON object.")
        return data
