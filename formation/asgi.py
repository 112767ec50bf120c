"""ASGI entry point: Django, with ``/mcp`` routed to the MCP server (formation/mcp_server.py)."""

import os

from django.core.asgi import get_asgi_application

from formation import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "formation.settings")

# Before the application loads its middleware: tracing's comes first (off unless OTEL_* says).
tracing.configure()

django_application = get_asgi_application()

# Imported once Django is set up (the line above): the MCP server reads models and settings.
from formation.mcp_server import route_mcp_asgi  # noqa: E402

application = route_mcp_asgi(django_application)
