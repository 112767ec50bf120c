#!/usr/bin/env python
"""Django's command-line utility for the Formation history service.

With ``DATABASE_URL`` unset, ``manage.py`` runs with the development defaults ``make run`` uses
(``DEBUG=1``, and so the development ``SECRET_KEY`` and audit key): the database is then the
embedded cluster, which only ever listens on a private Unix socket in the project folder: a
development database by construction, which nothing outside the machine can reach. Everything
else keeps the production rules: ``formation/wsgi.py`` (gunicorn) and any command with
``DATABASE_URL`` set refuse to start without ``SECRET_KEY`` and ``SEARCH_AUDIT_KEYS``, and an
explicit ``DEBUG=0`` wins here too.
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")
    if not os.environ.get("DATABASE_URL") and not os.environ.get("DEBUG"):
        # The embedded cluster: development defaults, as the module docstring explains.
        os.environ["DEBUG"] = "1"
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
