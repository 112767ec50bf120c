"""``/``: a small page that says what this server is and links to its pages.

Without it ``/`` would be Django's 404 (under DEBUG, a list of every URL pattern), and the
admin's "View site" link leads there.
"""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "formation/home.html")
