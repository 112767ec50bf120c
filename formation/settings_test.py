"""Test settings: the production settings with a throwaway key and a fast password hasher."""

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
os.environ.setdefault(
    "SEARCH_AUDIT_KEYS", "test2:test-only-audit-key-two,test1:test-only-audit-key-one"
)
# The pool stays on in tests; concurrency tests run 8 threads at once, each holding its own
# connection while the test's own is open, so the pool must lend more than production's 4.
os.environ.setdefault("DATABASE_POOL_MAX_SIZE", "16")
# The timeout is exercised in every API test, with room for a slow shared CI machine; the
# tests of the timeout itself lower it.
os.environ.setdefault("API_STATEMENT_TIMEOUT_MS", "60000")

from formation.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
# No collectstatic before tests: plain storage needs no manifest, and WhiteNoise looks files up
# per request instead of warning that STATIC_ROOT does not exist.
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_AUTOREFRESH = True
