"""Django for a benchmark script: bench-only secrets unless the caller set them, the production
settings with DEBUG off (DEBUG would record every query), and a database the caller named."""

from __future__ import annotations

import os
import sys


def setup_django(missing_database: str) -> None:
    """Set the environment up and ``django.setup()``; exit with ``missing_database`` when
    ``DATABASE_URL`` is unset (the scripts write to what they measure)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-production")
    os.environ.setdefault("SEARCH_AUDIT_KEYS", "k1:bench-only-audit-key-0123456789")
    os.environ["DEBUG"] = "0"
    if not os.environ.get("DATABASE_URL"):
        sys.exit(missing_database)

    import django

    django.setup()
