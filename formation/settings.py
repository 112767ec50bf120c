"""Settings, all read from the environment with safe production defaults.

DEBUG is off unless DEBUG=1; with DEBUG off the service refuses to start without SECRET_KEY.
With DATABASE_URL unset the project starts its own private PostgreSQL cluster
(formation/embedded_postgres.py), so a new developer needs only Python and PostgreSQL.
"""

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)

SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise SystemExit(
            "SECRET_KEY is not set. Set SECRET_KEY to a long random string "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set DEBUG=1 for local development."
        )
    SECRET_KEY = "insecure-development-key-only-used-with-DEBUG"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "django_filters",
    "messages_app",
    "search_app",
    "audit_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "formation.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "formation.wsgi.application"
ASGI_APPLICATION = "formation.asgi.application"

CONN_MAX_AGE = int(os.environ.get("CONN_MAX_AGE", "60"))

if os.environ.get("DATABASE_URL"):
    DATABASES = {
        "default": dj_database_url.parse(
            os.environ["DATABASE_URL"], conn_max_age=CONN_MAX_AGE, conn_health_checks=True
        )
    }
else:
    from formation import embedded_postgres

    try:
        _cluster = embedded_postgres.ensure_running()
    except embedded_postgres.EmbeddedPostgresError as problem:
        raise SystemExit(str(problem)) from None
    DATABASES = {
        "default": {
            **_cluster.connection_settings(),
            "CONN_MAX_AGE": CONN_MAX_AGE,
            "CONN_HEALTH_CHECKS": True,
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# Bulk import takes up to 5,000 messages in one body; larger bodies are refused before parsing.
MAX_REQUEST_BODY_BYTES = int(os.environ.get("MAX_REQUEST_BODY_BYTES", str(32 * 1024 * 1024)))
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BODY_BYTES

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["formation.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["formation.parsers.StrictJSONParser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "EXCEPTION_HANDLER": "formation.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "UNAUTHENTICATED_TOKEN": None,
    # OPTIONS answers method_not_allowed rather than describing serializers.
    "DEFAULT_METADATA_CLASS": None,
}

# Keys for the search audit's query digests (SPEC §7): "id:secret" pairs, comma-separated, the
# newest first. The first key writes new digests; every key is tried when an investigator looks
# a query up, so an old key stays listed until the events it wrote are pruned.
SEARCH_AUDIT_KEYS = [tuple(item.partition(":")[::2]) for item in env_list("SEARCH_AUDIT_KEYS", "")]
if any(not key_id or len(secret) < 16 for key_id, secret in SEARCH_AUDIT_KEYS) or len(
    {key_id for key_id, _ in SEARCH_AUDIT_KEYS}
) != len(SEARCH_AUDIT_KEYS):
    raise SystemExit(
        "SEARCH_AUDIT_KEYS must be comma-separated 'id:secret' pairs with distinct ids "
        "and secrets of at least 16 characters."
    )
if not SEARCH_AUDIT_KEYS:
    if not DEBUG:
        raise SystemExit(
            "SEARCH_AUDIT_KEYS is not set. Set it to 'k1:<long random secret>' "
            "(put a newer key in front to rotate), or set DEBUG=1 for local development."
        )
    SEARCH_AUDIT_KEYS = [("dev", "insecure-development-audit-key-only-used-with-DEBUG")]

# Production hardening; each can be relaxed from the environment behind a TLS-terminating proxy.
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = int(os.environ.get("SECURE_HSTS_SECONDS", "0"))
if env_bool("USE_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Logs carry no request bodies, message text, query text or member lists (SPEC §9).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "filters": {"strip_query_strings": {"()": "formation.log_filters.StripQueryStrings"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["strip_query_strings"],
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # Django logs the full request on 4xx/5xx; our handler logs a sanitised line instead.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        # runserver's access log; the handler's filter strips query strings (search text).
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
