from django.apps import AppConfig


class SyntheticConfig(AppConfig):
    """Synthetic data, never anyone's: the demo workspace ``make run`` loads (``load_demo``)
    and the benchmark corpus (``generate_corpus``). It sits on top of the product apps and
    writes through their services; nothing in the product imports it."""

    name = "synthetic"
    verbose_name = "Synthetic data"
