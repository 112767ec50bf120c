from django.apps import AppConfig


class MessagesAppConfig(AppConfig):
    name = "messages_app"
    verbose_name = "Conversations and messages"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers this app's agent tools with formation.tools.
        from messages_app import tools  # noqa: F401
