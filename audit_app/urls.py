"""``/api/v1/runs/{id}/trace``: the run's audit events."""

from django.urls import path

from audit_app import views

urlpatterns = [
    path("runs/<id:run_id>/trace", views.RunTraceView.as_view(), name="run-trace"),
]
