"""search_app's admin pages: the runs, whose logic this app owns (``search_app/runs/``).

Django's autodiscovery imports this module; the run pages live beside the run's logic, and are
registered by importing them here. The audit records' pages are ``audit_app/admin.py``.
"""

from search_app.runs import admin as runs_admin  # noqa: F401  (registers Run)
