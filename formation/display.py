"""How counts and times read on pages and in command output: "1 message", "2 messages", never
"1 messages"; times in the one format the admin uses everywhere (formation/formats)."""

from __future__ import annotations

from datetime import datetime

from django.utils import formats, timezone
from django.utils.translation import ngettext


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` and the noun in the number it takes (``plural`` defaults to singular + s)."""
    return f"{count} {ngettext(singular, plural or singular + 's', count)}"


def local_time(value: datetime | None) -> str:
    """``2026-03-10 12:00:05`` in the current time zone, as detail pages show it; ``-`` if unset."""
    if value is None:
        return "-"
    return formats.date_format(timezone.localtime(value), "DATETIME_FORMAT")
