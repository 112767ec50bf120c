"""search_history, the run's reply and the agent's memories: run-token routes."""

from django.urls import path

from search_app import views

urlpatterns = [
    path("history/search", views.SearchHistoryView.as_view(), name="search-history"),
    path("runs/<id:run_id>/reply", views.RunReplyView.as_view(), name="run-reply"),
    path("runs/<id:run_id>/memories", views.RunMemoriesView.as_view(), name="run-memories"),
    path("memories", views.MemoriesView.as_view(), name="memories"),
]
