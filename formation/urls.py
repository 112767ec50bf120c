"""Root URLs: a front page, the admin and the versioned JSON API."""

from django.contrib import admin
from django.urls import include, path, re_path

from formation import health, metrics
from formation.errors import not_found_view
from formation.home import home

urlpatterns = [
    path("", home, name="home"),
    path("admin/", admin.site.urls),
    # Probes: plain JSON, no token, outside the versioned API.
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    # Prometheus, behind METRICS_TOKEN (404 without one).
    path("metrics", metrics.metrics_view, name="metrics"),
    path("api/v1/", include("messages_app.urls")),
    path("api/v1/", include("search_app.urls")),
    path("api/v1/", include("formation.tool_urls")),
    # OpenAPI schema and Swagger UI, public; including the module registers its annotations.
    path("api/", include("formation.openapi")),
    # Any other /api/ path is the JSON not_found, also under DEBUG (which bypasses handler404
    # and would list every URL pattern).
    re_path(r"^api/", not_found_view),
]

handler400 = "formation.errors.bad_request_view"
handler403 = "formation.errors.permission_denied_view"
handler404 = "formation.errors.not_found_view"
handler500 = "formation.errors.server_error_view"
