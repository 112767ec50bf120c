"""``/api/v1/history/...`` routes."""

from django.urls import path

from search_app import views

urlpatterns = [
    path("history/search", views.SearchHistoryView.as_view(), name="search-history"),
]
