from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _distribute_after_migrate(**kwargs) -> None:
    """On Citus, tables a migration created are distributed at once (formation/distribution.py)."""
    from formation.distribution import distribute

    distribute()


class MessagesAppConfig(AppConfig):
    name = "messages_app"
    verbose_name = "Conversations and messages"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers this app's agent tools with formation.tools.
        from messages_app import tools  # noqa: F401

        # Sent once per app after every migration has run; this app's signal is enough.
        post_migrate.connect(_distribute_after_migrate, sender=self, dispatch_uid="distribute")
