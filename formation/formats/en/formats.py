"""Dates as the admin's lists show them (``2026-03-10 12:00:05``), on its detail pages too.

Django's English default ("March 10, 2026, noon") wraps in a list, hides the seconds and differs
from the lists' compact times; one format for every page. Input formats stay Django's.
"""

DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i:s"
