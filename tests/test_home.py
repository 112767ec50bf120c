"""``/`` (formation/home.py): a small page instead of Django's 404, where the admin's "View site"
link leads."""

from __future__ import annotations

import pytest

from tests.helpers import References


@pytest.mark.parametrize("debug", [False, True])
def test_the_front_page_links_to_the_docs_schema_and_admin(db, client, settings, debug):
    settings.DEBUG = debug
    page = client.get("/")
    parser = References()
    parser.feed(page.content.decode())
    assert page.status_code == 200
    assert page["Content-Type"].startswith("text/html")
    links = [href for href in parser.found if not href.startswith("/static/")]
    assert links == ["/api/docs/", "/api/schema/", "/admin/", "/healthz", "/readyz"]
    for href in links:
        assert client.get(href).status_code in {200, 302}, href


def test_the_admins_view_site_link_opens_the_front_page(admin_client):
    index = admin_client.get("/admin/")
    assert 'href="/"' in index.content.decode()
    assert admin_client.get("/").status_code == 200


def test_the_front_page_only_answers_get_and_head(db, client):
    assert client.head("/").status_code == 200
    assert client.post("/").status_code == 405
