from django.apps import AppConfig


class AuditAppConfig(AppConfig):
    name = "audit_app"
    # Both records: the search audit and the lifecycle record (retention, erasure, holds).
    verbose_name = "Audit records"
    default_auto_field = "django.db.models.BigAutoField"
