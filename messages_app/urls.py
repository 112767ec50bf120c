"""``/api/v1/`` routes of the conversations' data: ingestion (service token) and the message
tools (agent or run token). A run's routes are ``search_app``'s, which owns a run's life."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from formation import paths  # noqa: F401  (registers the ``id`` converter)
from messages_app import views

router = SimpleRouter(trailing_slash=False)
router.register("accounts", views.AccountViewSet, basename="account")
router.register("agents", views.AgentViewSet, basename="agent")
router.register("conversations", views.ConversationViewSet, basename="conversation")
router.register("identity-links", views.IdentityLinkViewSet, basename="identity-link")

urlpatterns = [
    path("messages", views.ListMessagesView.as_view(), name="list-messages"),
    path("messages/search", views.SearchMessagesView.as_view(), name="search-messages"),
    path("messages/<id:message_id>", views.MessageView.as_view(), name="message-detail"),
    *router.urls,
]
