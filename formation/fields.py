"""Strict DRF fields: JSON types are checked, never coerced (SPEC §5: wrong types are errors)."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_to_bytes

from rest_framework import serializers

from formation.limits import MAX_REPORTED_KEYS

RFC3339 = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<time>\d{2}:\d{2}:\d{2})(?P<fraction>\.\d{1,9})?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})$"
)


def parse_rfc3339(value: Any) -> datetime | None:
    """An aware UTC datetime for an RFC 3339 timestamp with a zone, else None."""
    if not isinstance(value, str):
        return None
    match = RFC3339.match(value)
    if not match:
        return None
    fraction = (match["fraction"] or "")[:7]  # Python keeps microseconds: 6 digits.
    zone = "+00:00" if match["zone"] in ("Z", "z") else match["zone"]
    try:
        parsed = datetime.fromisoformat(f"{match['date']}T{match['time']}{fraction}{zone}")
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def camel_case(name: str) -> str:
    """``not_observed`` → ``notObserved``: JSON field names are camelCase on the wire."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def format_timestamp(value: datetime | None) -> str | None:
    """RFC 3339 in UTC with a ``Z``: the one timestamp format on the wire."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Text(serializers.CharField):
    """A JSON string, UTF-8 encodable (no lone surrogates) and without NUL bytes."""

    default_error_messages = {
        "invalid": "Must be a string.",
        "surrogate": "Must be valid Unicode text.",
    }

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            self.fail("surrogate")
        return super().to_internal_value(data)


class Timestamp(serializers.Field):
    """An RFC 3339 timestamp with a zone, e.g. ``2026-01-02T03:04:05Z``."""

    default_error_messages = {"invalid": "Must be an RFC 3339 timestamp with a time zone."}

    def to_internal_value(self, data: Any) -> datetime:
        parsed = parse_rfc3339(data)
        if parsed is None:
            self.fail("invalid")
        return parsed

    def to_representation(self, value: datetime) -> str | None:
        return format_timestamp(value)


class JsonInteger(serializers.IntegerField):
    """A JSON number without a fraction: ``"5"``, ``5.5`` and ``true`` are wrong types."""

    default_error_messages = {"invalid": "Must be a whole number."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        if isinstance(data, float) and not data.is_integer():
            self.fail("invalid")
        return super().to_internal_value(data)


# Serializer context flag: the data is a query string, whose values are all text.
FROM_QUERY_STRING = "from_query_string"


class ArgumentInteger(JsonInteger):
    """An integer argument of a tool that REST reads from the query string.

    There every value is text, so ``limit=5`` is parsed as DRF does (``query_params`` sets the
    context flag). Anywhere else the arguments are JSON (MCP's ``tools/call``), and a JSON body's
    rule holds: ``"5"``, ``5.5`` and ``true`` are wrong types. Either way a bad value gets the
    same sentence.
    """

    def to_internal_value(self, data: Any) -> int:
        if self.context.get(FROM_QUERY_STRING):
            return serializers.IntegerField.to_internal_value(self, data)
        return super().to_internal_value(data)


class Id(serializers.UUIDField):
    """A UUID given as a JSON string (any spelling Python's ``uuid.UUID`` accepts)."""

    default_error_messages = {"invalid": "Must be a UUID."}

    def to_internal_value(self, data: Any):
        if not isinstance(data, str) or len(data) > 64:
            self.fail("invalid")
        return super().to_internal_value(data)


def printable_key(key: Any) -> str:
    """A client-sent key made safe to echo in an error: short and always encodable."""
    return str(key)[:64].encode("utf-8", "backslashreplace").decode("utf-8")


def reject_keys(keys: list[Any], problem: str) -> None:
    if keys:
        shown = sorted(printable_key(key) for key in keys)[:MAX_REPORTED_KEYS]
        raise serializers.ValidationError({key: [problem] for key in shown})


class StrictSerializer(serializers.Serializer):
    """Rejects unknown fields and non-object input instead of silently ignoring them."""

    def get_fields(self) -> dict[str, serializers.Field]:
        """The declared fields, each a fresh copy to bind to this serializer.

        DRF deep-copies every field by building it again from its arguments, about a tenth of
        a millisecond per serializer on every tool call. A plain field holds nothing a request
        changes but what ``bind`` sets on the copy, so a shallow copy is enough; a field with
        fields of its own (a list's child, a nested serializer) is still deep-copied.
        """
        return {
            name: copy.deepcopy(field)
            if isinstance(field, serializers.ListField | serializers.BaseSerializer)
            else copy.copy(field)
            for name, field in self._declared_fields.items()
        }

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        writable = {name for name, f in self.fields.items() if not f.read_only}
        reject_keys([key for key in data if key not in writable], "Unknown field.")
        return super().to_internal_value(data)


def check_query_keys(request: Any, allowed: set[str]) -> None:
    """Every query-string key must be known and given once, in valid UTF-8.

    An unknown key (``conversation_id`` for ``conversationId``) or a repeated one is an error,
    so a typo can never silently widen a search or a listing.
    """
    try:
        unquote_to_bytes(request.META.get("QUERY_STRING", "")).decode("utf-8")
    except UnicodeDecodeError:
        # Django would quietly turn the bad bytes into U+FFFD and search for text never sent.
        raise serializers.ValidationError("The query string is not valid UTF-8.") from None
    raw = request.query_params
    reject_keys([key for key in raw if key not in allowed], "Unknown parameter.")
    reject_keys([key for key, values in raw.lists() if len(values) > 1], "Given more than once.")


def query_params(request: Any, serializer_class: type[serializers.Serializer]) -> dict[str, Any]:
    """Validate a GET request's query string with a serializer (see ``check_query_keys``)."""
    check_query_keys(request, set(serializer_class._declared_fields))
    serializer = serializer_class(
        data={key: request.query_params[key] for key in request.query_params},
        context={FROM_QUERY_STRING: True},
    )
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class Choice(serializers.ChoiceField):
    """A choice whose error lists the allowed values instead of echoing what was sent."""

    def __init__(self, choices, **kwargs: Any):
        super().__init__(choices, **kwargs)
        allowed = ", ".join(str(choice) for choice in self.choices)
        self.error_messages["invalid_choice"] = f"Must be one of: {allowed}."
