from django.apps import AppConfig


class SearchAppConfig(AppConfig):
    name = "search_app"
    verbose_name = "Search"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers search_history with formation.tools, and how a run token's call holds
        # its run (search_app/runs/services.py).
        from search_app import tools  # noqa: F401
