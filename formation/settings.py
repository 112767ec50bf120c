"""Settings, all read from the environment with safe production defaults.

DEBUG is off unless DEBUG=1; with DEBUG off the service refuses to start without SECRET_KEY and
SEARCH_AUDIT_KEYS. With DATABASE_URL unset the project starts its own private PostgreSQL cluster
(formation/embedded_postgres.py), so a new developer needs only Python and PostgreSQL; manage.py
then turns DEBUG on by default (see its docstring), while formation/wsgi.py never does.

Every value is checked here, and only here: a bad one stops the process with one sentence
(``SystemExit``). gunicorn's master runs this module before it starts a worker
(``formation/gunicorn_conf.py``, ``on_starting``), so a bad value stops gunicorn at once
instead of every worker exiting and being replaced; ``manage.py`` refuses it the same way.
"""

import logging
import os
import re
from pathlib import Path

import dj_database_url

from formation.environment import env_bool, env_choice, env_int, env_list, env_rate

BASE_DIR = Path(__file__).resolve().parent.parent

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
CSRF_FAILURE_VIEW = "formation.errors.csrf_failure_view"

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
    "drf_spectacular",
    # Swagger UI's JavaScript, CSS and favicon, served as our own static files.
    "drf_spectacular_sidecar",
    "messages_app",
    "search_app",
    "audit_app",
    # Not the product: the demo workspace and the benchmark corpus, with their commands.
    "synthetic",
]

MIDDLEWARE = [
    # Outermost, so its JSON line times and names every request, static files and errors too.
    "formation.request_logging.RequestLogMiddleware",
    # Second, so errors answered by the middleware below it are covered too.
    "formation.no_store.NoStoreMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Innermost: bounds the view's SQL (authentication included) on /api/ only.
    "formation.db_timeouts.StatementTimeoutMiddleware",
]

ROOT_URLCONF = "formation.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "formation" / "templates"],
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

# Django's psycopg pool (one per process) lends each request an open connection instead of
# connecting per request. It replaces persistent connections: Django requires CONN_MAX_AGE=0
# with it. It applies to DATABASE_URL and the embedded cluster alike; set DATABASE_POOL=0 behind
# a transaction-mode PgBouncer (which pools already), and CONN_MAX_AGE applies instead.
DATABASE_POOL = env_bool("DATABASE_POOL", True)
if DATABASE_POOL and env_int("CONN_MAX_AGE", 0):
    raise SystemExit(
        "CONN_MAX_AGE keeps connections open, which the connection pool already does: "
        "unset CONN_MAX_AGE, or set DATABASE_POOL=0 to use it instead of the pool."
    )
CONN_MAX_AGE = 0 if DATABASE_POOL else env_int("CONN_MAX_AGE", 60)
# Without the pool, Django checks a reused connection once per request. With it, no check: it
# would be a round trip on every request. A connection the server dropped (a restart) fails
# the request's first statement, the token look-up, which then runs again on a fresh one
# (formation/db_retries.py, ``on_a_live_connection``).
CONN_HEALTH_CHECKS = not DATABASE_POOL

# dj_database_url's schemes of PostgreSQL servers (the engine is ours whichever is used).
DATABASE_URL_SCHEMES = ("postgresql", "postgres", "pgsql", "postgis", "timescale")
if os.environ.get("DATABASE_URL"):
    # The message never repeats the URL: it carries the password.
    _refused_url = SystemExit(
        "DATABASE_URL must be a PostgreSQL URL: postgresql://user:password@host:5432/name."
    )
    if os.environ["DATABASE_URL"].partition("://")[0].lower() not in DATABASE_URL_SCHEMES:
        raise _refused_url
    try:
        _database = dj_database_url.parse(
            os.environ["DATABASE_URL"],
            # Django's PostgreSQL backend, aware of the (workspace_id, id) primary keys.
            engine="formation.postgresql",
            conn_max_age=CONN_MAX_AGE,
            conn_health_checks=CONN_HEALTH_CHECKS,
        )
    except ValueError:
        raise _refused_url from None
    DATABASES = {"default": _database}
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
            "CONN_HEALTH_CHECKS": CONN_HEALTH_CHECKS,
        }
    }

if DATABASE_POOL:
    # Size max_size to the worker's threads (gunicorn: GUNICORN_THREADS), so no request waits
    # for a connection; with the database down a request fails after `timeout` seconds (503).
    _pool = {
        "min_size": env_int("DATABASE_POOL_MIN_SIZE", 2),
        "max_size": env_int("DATABASE_POOL_MAX_SIZE", 4, minimum=1),
        "timeout": env_int("DATABASE_POOL_TIMEOUT", 5, minimum=1),
    }
    if _pool["min_size"] > _pool["max_size"]:
        raise SystemExit("DATABASE_POOL_MIN_SIZE must not exceed DATABASE_POOL_MAX_SIZE.")
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = _pool

# search_history's statement runs prepared with a generic plan (formation/prepared.py): planned
# once per pooled connection, not per call. 0 turns that off (PgBouncer in transaction mode
# before 1.21). Django turns psycopg's preparing off; a threshold no statement reaches turns it
# on for the statements that ask (Django's own cursors bind on the client and are never
# prepared).
DATABASE_PREPARED_STATEMENTS = env_bool("DATABASE_PREPARED_STATEMENTS", True)
DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = 2**31 - 1

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
# One date format on every admin page, lists and detail alike (formation/formats/en).
FORMAT_MODULE_PATH = ["formation.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# WhiteNoise serves the admin's files from STATIC_ROOT (fill it with collectstatic): hashed
# names cached for a year, gzip copies made once at collectstatic time.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

# Every SQL statement of an /api/ request is cancelled after this long (503 unavailable); 0 is
# off. Management commands and the admin are not bound (formation/db_timeouts.py).
API_STATEMENT_TIMEOUT_MS = env_int("API_STATEMENT_TIMEOUT_MS", 10_000)

# Per-token request rates (formation/throttling.py), generous: they stop a runaway client, not
# normal use. Counted in the "throttle" cache: Redis at REDIS_URL, shared by every worker and
# host, or else per worker process (a token then gets workers times the rate).
RATE_LIMIT_SERVICE = env_rate("RATE_LIMIT_SERVICE", "6000/min")
RATE_LIMIT_AGENT = env_rate("RATE_LIMIT_AGENT", "1200/min")
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
if REDIS_URL:
    # redis-py's own parser, which would otherwise fail every count and leave the rates off
    # (the throttle fails open). The message never repeats the URL: it may carry a password.
    from redis.connection import parse_url

    try:
        # Django's RedisCache takes several URLs, comma- or semicolon-separated (primary first).
        for _url in re.split("[;,]", REDIS_URL):
            parse_url(_url)
    except ValueError:
        raise SystemExit(
            "REDIS_URL must be a redis://host:6379/0, rediss://… or unix:///path URL."
        ) from None
# Milliseconds a throttle count may wait for Redis; past it the request is let through (fail open).
REDIS_TIMEOUT_MS = env_int("REDIS_TIMEOUT_MS", 250, minimum=1)
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # Room for a counter per active token; the default 300 entries would cull live counters.
    "throttle": {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "throttle",
        "OPTIONS": {"MAX_ENTRIES": 100_000},
    },
}
if REDIS_URL:
    CACHES["throttle"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "formation",
        # Passed to redis-py's connection pool: a down or slow Redis costs a request this
        # much at most, and the throttle then fails open (formation/throttling.py).
        "OPTIONS": {
            "socket_connect_timeout": REDIS_TIMEOUT_MS / 1000,
            "socket_timeout": REDIS_TIMEOUT_MS / 1000,
        },
    }

# Prometheus metrics (formation/metrics.py): recorded unless METRICS=0, served at /metrics only
# to "Authorization: Bearer $METRICS_TOKEN"; with no token /metrics answers 404.
METRICS_ENABLED = env_bool("METRICS", True)
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "").strip()
if METRICS_TOKEN and len(METRICS_TOKEN) < 16:
    raise SystemExit("METRICS_TOKEN must be at least 16 characters (or unset: no /metrics).")

# Bulk import takes up to 5,000 messages in one body; larger bodies are refused before parsing.
MAX_REQUEST_BODY_BYTES = env_int("MAX_REQUEST_BODY_BYTES", 32 * 1024 * 1024, minimum=1)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BODY_BYTES

# What a client may take of a gunicorn worker (formation/serving.py): seconds to send a new
# connection's request headers, the whole request body and to take the whole answer (or each
# piece of a streamed one), and the bytes of request bodies one worker holds at once (by
# default what its four threads could hold).
REQUEST_HEADER_TIMEOUT = env_int("REQUEST_HEADER_TIMEOUT", 10, minimum=1)
REQUEST_BODY_TIMEOUT = env_int("REQUEST_BODY_TIMEOUT", 30, minimum=1)
RESPONSE_SEND_TIMEOUT = env_int("RESPONSE_SEND_TIMEOUT", 30, minimum=1)
REQUEST_BODY_BUFFER_BYTES = env_int(
    "REQUEST_BODY_BUFFER_BYTES", 4 * MAX_REQUEST_BODY_BYTES, minimum=MAX_REQUEST_BODY_BYTES + 1
)
# Answers produced piece by piece with no declared length (exports): collected up to this many
# bytes like any answer, then streamed, each piece within RESPONSE_SEND_TIMEOUT and the whole
# within RESPONSE_STREAM_TIMEOUT seconds; a worker streams at most RESPONSE_STREAMS_PER_WORKER
# at once (and never on its last thread), 503 past that.
RESPONSE_STREAM_THRESHOLD_BYTES = env_int("RESPONSE_STREAM_THRESHOLD_BYTES", 1024 * 1024)
RESPONSE_STREAM_TIMEOUT = env_int("RESPONSE_STREAM_TIMEOUT", 600, minimum=1)
RESPONSE_STREAMS_PER_WORKER = env_int("RESPONSE_STREAMS_PER_WORKER", 1)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["formation.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["formation.parsers.StrictJSONParser"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_THROTTLE_CLASSES": ["formation.throttling.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"service": RATE_LIMIT_SERVICE, "agent": RATE_LIMIT_AGENT},
    "EXCEPTION_HANDLER": "formation.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "UNAUTHENTICATED_TOKEN": None,
    # OPTIONS answers method_not_allowed rather than describing serializers.
    "DEFAULT_METADATA_CLASS": None,
    # ?format= is an unknown parameter like any other, not DRF's renderer switch.
    "URL_FORMAT_OVERRIDE": None,
    "DEFAULT_SCHEMA_CLASS": "formation.schema_names.ComponentNames",
}

# Turns a token's digest into the ``formation.auth.Caller`` it authenticates: the token table is
# the messages app's, and formation/auth.py holds only the primitives.
TOKEN_LOOKUP = "messages_app.tokens.caller_for_digest"

# OpenAPI 3 at /api/schema/ and Swagger UI at /api/docs/; each view carries its annotation and
# formation/openapi.py the shared envelope. Both pages are public and ignore any Authorization
# header.
SPECTACULAR_SETTINGS = {
    "TITLE": "Formation history API",
    "DESCRIPTION": (
        "Conversations between people and AI agents: ingestion for the runtime (service token) "
        "and the agent tools list_messages, get_message, search_messages and search_history "
        '(agent or run token). Every error is {"error": {"code", "message", "details"}}; '
        "any endpoint also answers invalid_arguments (400) to an Accept header that excludes "
        "application/json. The same four tools are served over MCP at /mcp."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "formation.openapi.add_links",
    ],
    # A run's status is not a message's (both fields are named "status").
    "ENUM_NAME_OVERRIDES": {
        "StatusEnum": ["sent", "pending", "failed"],
        "RunStatusEnum": ["open", "replied"],
    },
    # PATCH /messages/{id} requires its one field: no "Patched" all-optional component.
    "COMPONENT_SPLIT_PATCH": False,
    # Swagger UI is served from our static files (drf-spectacular-sidecar), so /api/docs/ works
    # offline and names no other host; validatorUrl None keeps Swagger UI from sending the
    # schema's address to validator.swagger.io for its badge.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
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
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Probes come over plain HTTP from inside the network; a redirect would read as a failure.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
if env_bool("USE_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Logs carry no request bodies, message text, query text or member lists (SPEC §9).
# Python's level names (any case here; logging itself takes them in capitals only).
LOG_LEVEL = env_choice("LOG_LEVEL", "INFO", tuple(logging.getLevelNamesMapping()))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # One JSON object per line (formation/json_logging.py): a fixed set of fields, never a
    # record's other attributes or an exception's message.
    "formatters": {"json": {"()": "formation.json_logging.JsonFormatter"}},
    "filters": {
        "request_context": {"()": "formation.json_logging.RequestContext"},
        "route_not_path": {"()": "formation.json_logging.RouteNotPath"},
        "strip_query_strings": {"()": "formation.log_filters.StripQueryStrings"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            # In this order: route_not_path reads the request that strip_query_strings drops.
            "filters": ["request_context", "route_not_path", "strip_query_strings"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's default config gives this logger a plain-text console handler under DEBUG,
        # so runserver printed its lines twice ("Watching for file changes"): root's JSON only.
        "django": {"handlers": [], "level": LOG_LEVEL, "propagate": True},
        # Django logs the full request on 4xx/5xx; our handler logs a sanitised line instead.
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
        # runserver's access log; the handler's filter strips query strings (search text).
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # SQL with its parameters (message text) is logged at DEBUG when DEBUG is on: never.
        "django.db.backends": {"level": "INFO"},
        # The pool logs every checkout and return at INFO.
        "psycopg.pool": {"level": "WARNING"},
        # The SDK's session manager logs its start and stop at INFO: three lines per /mcp POST,
        # which runs one stateless manager per request (formation/mcp_server.py).
        "mcp": {"level": "WARNING"},
    },
}
