"""Test settings: the production settings with a throwaway key and a fast password hasher."""

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
os.environ.setdefault(
    "SEARCH_AUDIT_KEYS", "test2:test-only-audit-key-two,test1:test-only-audit-key-one"
)

from formation.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
