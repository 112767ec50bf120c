"""``/api/v1/`` routes of the conversations' data: ingestion (service token) and the message
tools (agent or run token). A run's routes are ``search_app``'s, which owns a run's life."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from formation import paths  # noqa: F401  (registers the ``id`` converter)
from messages_app import tool_views, views
from messages_app.lifecycle import views as lifecycle_views

router = SimpleRouter(trailing_slash=False)
router.register("accounts", views.AccountViewSet, basename="account")
router.register("agents", views.AgentViewSet, basename="agent")
router.register("conversations", views.ConversationViewSet, basename="conversation")
router.register("identity-links", views.IdentityLinkViewSet, basename="identity-link")
router.register("legal-holds", lifecycle_views.LegalHoldViewSet, basename="legal-hold")

urlpatterns = [
    path("messages", tool_views.ListMessagesView.as_view(), name="list-messages"),
    path("messages/search", tool_views.SearchMessagesView.as_view(), name="search-messages"),
    path("messages/<id:message_id>", tool_views.MessageView.as_view(), name="message-detail"),
    # The data lifecycle (docs/lifecycle.md).
    path("retention", lifecycle_views.WorkspaceRetentionView.as_view(), name="retention"),
    path(
        "conversations/<id:pk>/retention",
        lifecycle_views.ConversationRetentionView.as_view(),
        name="conversation-retention",
    ),
    path(
        "conversations/<id:pk>/export",
        lifecycle_views.ConversationExportView.as_view(),
        name="conversation-export",
    ),
    path(
        "accounts/<id:pk>/erase", lifecycle_views.AccountEraseView.as_view(), name="account-erase"
    ),
    path(
        "accounts/<id:pk>/export",
        lifecycle_views.AccountExportView.as_view(),
        name="account-export",
    ),
    *router.urls,
]
