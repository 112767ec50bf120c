# One command to run the demo, one to run every check. Python 3.11+ and PostgreSQL's server
# package are all a new machine needs: with DATABASE_URL unset the project starts its own cluster.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
TEST_SETTINGS := DJANGO_SETTINGS_MODULE=formation.settings_test

.PHONY: install run serve test test-steps lint format db-start db-stop db-status

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
	DEBUG=1 $(BIN)/python manage.py runserver $(HOST):$(PORT)

# Production serving: needs the production environment (SECRET_KEY, SEARCH_AUDIT_KEYS,
# ALLOWED_HOSTS, ...; see docs/operations.md). GUNICORN_BIND defaults to HOST:PORT. DEBUG=0
# unless set: manage.py's development default must not let migrate pass without the secrets.
serve: install
	DEBUG=$${DEBUG:-0} $(BIN)/python manage.py migrate --noinput
	DEBUG=$${DEBUG:-0} $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	GUNICORN_BIND="$${GUNICORN_BIND:-$(HOST):$(PORT)}" $(BIN)/gunicorn --config python:formation.gunicorn_conf

# The steps run with the embedded cluster up; it is stopped after them if it was not running.
test: install
	$(BIN)/python -m formation.embedded_postgres run -- $(MAKE) --no-print-directory test-steps

test-steps:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(TEST_SETTINGS) $(BIN)/python manage.py makemigrations --check --dry-run
	$(TEST_SETTINGS) $(BIN)/python manage.py spectacular --validate --fail-on-warn --file /dev/null
	$(BIN)/pytest

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
