"""Keyed query digests: the only trace of a query's text that the service keeps.

A plain hash of a short query could be reversed by trying likely texts; an HMAC cannot be
without the key, which lives only in settings. Texts are normalised first (Unicode NFKC, case
folded, whitespace collapsed) so "Migration  plan" and "migration plan" are the same search
to an investigator. Several keys may be configured at once: the first writes, all are tried
when looking a text up, so keys rotate without losing the past.
"""

from __future__ import annotations

import hashlib
import hmac
import unicodedata

from django.conf import settings


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def digest(text: str, secret: str) -> str:
    return hmac.new(secret.encode(), normalise(text).encode(), hashlib.sha256).hexdigest()


def current_digest(text: str) -> tuple[str, str]:
    """``(key id, digest)`` under the newest key, for writing."""
    key_id, secret = settings.SEARCH_AUDIT_KEYS[0]
    return key_id, digest(text, secret)


def every_digest(text: str) -> list[tuple[str, str]]:
    """``(key id, digest)`` under every configured key, for looking a text up."""
    return [(key_id, digest(text, secret)) for key_id, secret in settings.SEARCH_AUDIT_KEYS]
