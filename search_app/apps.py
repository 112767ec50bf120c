from django.apps import AppConfig


class SearchAppConfig(AppConfig):
    name = "search_app"
    verbose_name = "Search"
    default_auto_field = "django.db.models.BigAutoField"
