"""Root URLs: the admin and the versioned JSON API."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("messages_app.urls")),
]

handler400 = "formation.errors.bad_request_view"
handler403 = "formation.errors.permission_denied_view"
handler404 = "formation.errors.not_found_view"
handler500 = "formation.errors.server_error_view"
