# One command to run the demo, one to run every check. Python 3.11+ and PostgreSQL's server
# package are all a new machine needs: with DATABASE_URL unset the project starts its own cluster.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
TEST_SETTINGS := DJANGO_SETTINGS_MODULE=formation.settings_test

.PHONY: install run serve test test-steps test-prerequisites test-locomo lint format db-start db-stop \
	db-status citus-up citus-down citus-status citus-prerequisites test-citus

# Each target's prerequisites are made in the order listed: the checks below run first.
.NOTPARALLEL:

$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed: run make with PYTHON=/path/to/python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

run: install
	DEBUG=1 $(BIN)/python manage.py migrate --noinput
	DEBUG=1 $(BIN)/python manage.py load_demo --base-url http://$(HOST):$(PORT)
	@echo "Serving http://$(HOST):$(PORT)/ (API /api/v1/, Swagger UI /api/docs/, admin /admin/); Ctrl-C stops it, make db-stop stops PostgreSQL"
	@token=$${METRICS_TOKEN:-$$($(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(24))')}; \
	echo "Metrics: curl -H 'Authorization: Bearer $$token' http://$(HOST):$(PORT)/metrics"; \
	DEBUG=1 METRICS_TOKEN=$$token $(BIN)/python manage.py runserver $(HOST):$(PORT)

# Production serving: needs the production environment (SECRET_KEY, SEARCH_AUDIT_KEYS,
# ALLOWED_HOSTS, ...; see docs/operations.md). GUNICORN_BIND defaults to HOST:PORT. DEBUG=0
# unless set: manage.py's development default must not let migrate pass without the secrets.
serve: install
	DEBUG=$${DEBUG:-0} $(BIN)/python manage.py migrate --noinput
	DEBUG=$${DEBUG:-0} $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	GUNICORN_BIND="$${GUNICORN_BIND:-$(HOST):$(PORT)}" $(BIN)/gunicorn --config python:formation.gunicorn_conf

# What make test needs from the machine (PostgreSQL's server, chromium, chromium-driver,
# redis-server), checked before anything is installed or started: one message naming all that
# is missing and the apt-get line that brings it (tests/prerequisites.py).
test-prerequisites:
	@$(PYTHON) -m tests.prerequisites test

# The steps run with the embedded cluster up; it is stopped after them if it was not running.
test: test-prerequisites install
	$(BIN)/python -m formation.embedded_postgres run -- $(MAKE) --no-print-directory test-steps

test-steps:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(TEST_SETTINGS) $(BIN)/python manage.py makemigrations --check --dry-run
	$(TEST_SETTINGS) $(BIN)/python manage.py spectacular --validate --fail-on-warn --file /dev/null
	$(BIN)/pytest

# The LoCoMo recall floor (tests/bench/test_relevance.py): its data is never in the repository,
# so make test leaves it out; this runs it, and fails when ../shared/locomo is missing.
test-locomo: install
	$(BIN)/python -m formation.embedded_postgres run -- $(BIN)/pytest --locomo tests/bench/test_relevance.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

db-start: install
	$(BIN)/python -m formation.embedded_postgres start

db-stop: install
	$(BIN)/python -m formation.embedded_postgres stop

db-status: install
	$(BIN)/python -m formation.embedded_postgres status

# What building Citus needs, unless it is installed (the packages .ci/build-citus builds it
# with, and its source), checked like test-prerequisites.
citus-prerequisites:
	@$(PYTHON) -m tests.prerequisites citus

# A local Citus cluster (a coordinator and two workers, docs/citus.md): built when missing,
# started if stopped; the last line printed is the DATABASE_URL of its application database.
citus-up: citus-prerequisites install
	@.ci/build-citus >&2
	@$(BIN)/python -m formation.citus_cluster up

citus-down: install
	$(BIN)/python -m formation.citus_cluster down

citus-status: install
	$(BIN)/python -m formation.citus_cluster status

# The Citus suite: the API tests, the perspective oracle, the budget, fail-closed and admin tests and
# tests/citus (one shard per tool call), on a fresh test database of the cluster.
CITUS_TESTS := tests/api tests/search_app/test_oracle.py tests/search_app/test_oracle_memories.py \
	tests/search_app/test_oracle_tool_scope.py tests/search_app/test_identifiers.py \
	tests/search_app/test_bounded_candidates.py \
	tests/search_app/test_budget.py tests/security/test_fail_closed.py \
	tests/messages_app/test_admin.py tests/audit_app/test_admin.py tests/test_tenancy.py tests/citus

test-citus: citus-up
	$(BIN)/python -m formation.citus_cluster reset-test-database
	DATABASE_URL="$$($(BIN)/python -m formation.citus_cluster url formation_test)" \
		FORMATION_TEST_DATABASE_PREPARED=1 CITUS_SHARD_COUNT=4 $(TEST_SETTINGS) \
		$(BIN)/pytest $(CITUS_TESTS)
