"""Counts in sentences: "1 message", "2 messages", never "1 messages"."""

from __future__ import annotations

from django.utils.translation import ngettext


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """``count`` and the noun in the number it takes (``plural`` defaults to singular + s)."""
    return f"{count} {ngettext(singular, plural or singular + 's', count)}"
