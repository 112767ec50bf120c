"""``/api/v1/`` routes: ingestion (service token) and the agent tools (agent or run token)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from messages_app import views

router = SimpleRouter(trailing_slash=False)
router.register("accounts", views.AccountViewSet, basename="account")
router.register("agents", views.AgentViewSet, basename="agent")
router.register("conversations", views.ConversationViewSet, basename="conversation")
router.register("identity-links", views.IdentityLinkViewSet, basename="identity-link")

urlpatterns = [
    path("runs", views.RunViewSet.as_view({"post": "create"}), name="run-list"),
    path("runs/<uuid:pk>", views.RunViewSet.as_view({"get": "retrieve"}), name="run-detail"),
    path("messages", views.ListMessagesView.as_view(), name="list-messages"),
    path("messages/search", views.SearchMessagesView.as_view(), name="search-messages"),
    path("messages/<uuid:message_id>", views.MessageView.as_view(), name="message-detail"),
    *router.urls,
]
