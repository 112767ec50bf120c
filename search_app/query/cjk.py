"""Han, kana and Hangul: the scripts written without spaces, which documents and queries
index as character bigrams."""

from __future__ import annotations

import re

# The characters documents index as bigrams (search_app migration 0005, formation_cjk_class;
# tests/search_app/test_cjk.py holds the two to the same code points).
CJK_RANGES = (
    (0x1100, 0x11FF),
    (0x2E80, 0x2FDF),
    (0x3005, 0x3007),
    (0x3021, 0x3029),
    (0x3031, 0x3035),
    (0x303B, 0x303C),
    (0x3041, 0x309F),
    (0x30A1, 0x30FA),
    (0x30FC, 0x30FF),
    (0x3131, 0x318E),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xA960, 0xA97F),
    (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0xFFA0, 0xFFDC),
    (0x1B000, 0x1B16F),
    (0x20000, 0x3FFFF),
)
_CJK_CLASS = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in CJK_RANGES)
CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_CJK_CHARACTER = re.compile(f"[{_CJK_CLASS}]")


def is_cjk(text: str) -> bool:
    return bool(text) and CJK_RUN.fullmatch(text) is not None


# ASCII punctuation, blanked for highlights so that the words inside an identifier are words
# of their own (``formation_search_masked``'s second class).
_ASCII_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")


def masked(text: str) -> str:
    """``text`` with its CJK characters and ASCII punctuation blanked one for one
    (``formation_search_masked``): what highlights are computed on."""
    return _ASCII_PUNCTUATION.sub(" ", _CJK_CHARACTER.sub(" ", text))
