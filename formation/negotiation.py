"""The ``Accept`` header read as RFC 9110 §12.5.1 says: media ranges with quality values.

DRF's own negotiation ignores ``q``, so ``application/x-ndjson;q=0`` ("not this") selects the
renderer it refuses. Here the most specific range matching a type gives its quality, ``q=0``
means "not acceptable", and a type that no range matches is not acceptable either.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MediaRange:
    type: str
    subtype: str
    quality: float

    def specificity(self, media_type: str) -> int:
        """How closely this range names ``media_type``: 2 exactly, 1 by ``type/*``, 0 by
        ``*/*``; -1 when it does not match."""
        kind, _, sub = media_type.partition("/")
        if self.type == "*":
            return 0 if self.subtype == "*" else -1
        if self.type != kind:
            return -1
        if self.subtype == "*":
            return 1
        return 2 if self.subtype == sub else -1


def _quality(parameters: list[str]) -> float | None:
    """The ``q`` parameter: 0 to 1 with at most three decimals (1 when absent); None when it
    is malformed, which drops its range."""
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip().lower() != "q":
            continue
        value = value.strip()
        whole, _, decimals = value.partition(".")
        if not (whole in ("0", "1") and len(decimals) <= 3 and (decimals or "0").isdigit()):
            return None
        quality = float(value)
        return quality if quality <= 1 else None
    return 1.0


def media_ranges(header: str) -> list[MediaRange]:
    """The well-formed ranges of an ``Accept`` header, in order; malformed ones are dropped."""
    ranges = []
    for element in header.split(","):
        media_type, *parameters = element.split(";")
        kind, slash, sub = media_type.strip().lower().partition("/")
        if not (slash and kind and sub) or (kind == "*" and sub != "*"):
            continue
        quality = _quality(parameters)
        if quality is not None:
            ranges.append(MediaRange(kind, sub, quality))
    return ranges


def quality(ranges: list[MediaRange], media_type: str, *, explicit: bool = False) -> float:
    """How acceptable ``media_type`` is: the quality of the most specific matching range (the
    first of equally specific ones), 0 when none matches. ``explicit`` counts only a range
    naming the type exactly."""
    best, found = -1, 0.0
    for media_range in ranges:
        specificity = media_range.specificity(media_type.lower())
        if specificity > best and (specificity == 2 or not explicit):
            best, found = specificity, media_range.quality
    return found
