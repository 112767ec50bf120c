"""``/api/v1/`` routes: ingestion (service token) and the agent tools (agent or run token)."""

import uuid

from django.urls import path, register_converter
from rest_framework.routers import SimpleRouter

from messages_app import lifecycle_views, views


class AnyCaseUUIDConverter:
    """Like Django's ``uuid`` converter, but also accepts upper-case hex, as the router does."""

    regex = views.UUID_PATTERN

    def to_python(self, value: str) -> uuid.UUID:
        return uuid.UUID(value)

    def to_url(self, value: uuid.UUID) -> str:
        return str(value)


register_converter(AnyCaseUUIDConverter, "id")

router = SimpleRouter(trailing_slash=False)
router.register("accounts", views.AccountViewSet, basename="account")
router.register("agents", views.AgentViewSet, basename="agent")
router.register("conversations", views.ConversationViewSet, basename="conversation")
router.register("identity-links", views.IdentityLinkViewSet, basename="identity-link")
router.register("legal-holds", lifecycle_views.LegalHoldViewSet, basename="legal-hold")

urlpatterns = [
    path("runs", views.RunViewSet.as_view({"post": "create"}), name="run-list"),
    path("runs/<id:pk>", views.RunViewSet.as_view({"get": "retrieve"}), name="run-detail"),
    path("messages", views.ListMessagesView.as_view(), name="list-messages"),
    path("messages/search", views.SearchMessagesView.as_view(), name="search-messages"),
    path("messages/<id:message_id>", views.MessageView.as_view(), name="message-detail"),
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
