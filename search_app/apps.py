from django.apps import AppConfig


class SearchAppConfig(AppConfig):
    name = "search_app"
    verbose_name = "Search"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Give the membership tools of run tokens this app's perspective (the rules live here,
        above messages_app, which only knows the opener's shape)."""
        from messages_app.services import run_tools_register
        from search_app.deliverability import run_tools_open

        run_tools_register(run_tools_open)
