"""A run's routes (``runs…``: create, read, reply, memories, trace), search_history and the
agent's memories: this app owns a run's life (``search_app/runs/``)."""

from django.urls import path

from formation import paths  # noqa: F401  (registers the ``id`` converter)
from search_app import views

urlpatterns = [
    path("runs", views.RunViewSet.as_view({"post": "create"}), name="run-list"),
    path("runs/<id:pk>", views.RunViewSet.as_view({"get": "retrieve"}), name="run-detail"),
    path("runs/<id:run_id>/reply", views.RunReplyView.as_view(), name="run-reply"),
    path("runs/<id:run_id>/memories", views.RunMemoriesView.as_view(), name="run-memories"),
    path("runs/<id:run_id>/trace", views.RunTraceView.as_view(), name="run-trace"),
    path("history/search", views.SearchHistoryView.as_view(), name="search-history"),
    path("memories", views.MemoriesView.as_view(), name="memories"),
]
