"""The admin in a real browser: Debian's ``chromium`` and ``chromium-driver``, driven by
Selenium against pytest-django's ``live_server``, which serves the static files (the admin's
and ours) through the staticfiles finders, as ``runserver`` does.

A trusted administrator (staff, the inspect permission, and view permissions on the
conversation models) logs in through the login form, reads the audit list and an event, finds
the event by typing its query text, and reads a conversation's transcript and the conversation
list. Nowhere is there a control that adds, changes or deletes an audit event, and no list
overflows sideways in a 1280 px window. Set ``ADMIN_SCREENSHOTS`` to a directory to keep a
screenshot of each page.

A missing browser or driver fails the test rather than skipping it; ``make test`` names them
before it starts (``tests/prerequisites.py``), and CI installs both. Both are run as found on
``PATH``, as that check finds them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from audit_app.models import ConversationSearchEvent
from messages_app import services
from tests import factories
from tests.audit_app.helpers import search
from tests.prerequisites import CHROMEDRIVER, CHROMIUM, program

WIDTH = 1280
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    f"--window-size={WIDTH},1000",
)
PASSWORD = "sample-password-for-the-browser-test"
QUERY = "sample migration plan"
DELETED_TEXT = "sample text that was deleted"
VIEWED_MODELS = ("workspace", "account", "agent", "conversation", "membership", "message", "run")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    """Headless Chromium through the system chromedriver. The driver's path is given, so
    Selenium Manager never runs (it would try to download a driver); a fresh profile each
    time."""
    found = {name: program(name) for name in (CHROMIUM, CHROMEDRIVER)}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        pytest.fail(
            f"The admin's browser test needs {' and '.join(missing)}: install Debian's "
            "packages with `apt-get install -y chromium chromium-driver` (.ci/run does)."
        )
    options = webdriver.ChromeOptions()
    options.binary_location = found[CHROMIUM]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=found[CHROMEDRIVER]), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def investigator() -> User:
    user = User.objects.create_user("sample-investigator", password=PASSWORD, is_staff=True)
    user.user_permissions.add(
        Permission.objects.get(codename="inspect_search_audit"),
        *Permission.objects.filter(
            content_type__app_label="messages_app",
            codename__in=[f"view_{model}" for model in VIEWED_MODELS],
        ),
    )
    return user


@pytest.fixture
def searched(world) -> ConversationSearchEvent:
    """A real search_history call over a room where one message was deleted."""
    factories.post(world.public, world.bob, "sample migration plan for the database")
    deleted = factories.post(world.public, world.alice, DELETED_TEXT)
    services.message_delete(message=deleted)
    factories.post(world.public, world.alice, "sample plan: the migration runs tonight")
    _, client = factories.make_run(world.agent, world.public, world.alice)
    assert search(client, {"query": QUERY}).status_code == 200
    return ConversationSearchEvent.objects.get()


def open_page(browser: WebDriver, url: str, name: str) -> None:
    browser.get(url)
    WebDriverWait(browser, 30).until(
        lambda driver: driver.execute_script("return document.readyState") == "complete"
    )
    shots = os.environ.get("ADMIN_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(shots) / f"{name}.png"))


def log_in(browser: WebDriver, base: str) -> None:
    open_page(browser, base + reverse("admin:login"), "login")
    browser.find_element(By.NAME, "username").send_keys("sample-investigator")
    browser.find_element(By.NAME, "password").send_keys(PASSWORD + Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda driver: "/login/" not in driver.current_url)
    assert browser.find_element(By.ID, "user-tools").text.startswith("WELCOME")


def assert_styled_and_fits(browser: WebDriver) -> None:
    """The admin's stylesheets loaded (ours included), and nothing is wider than the window:
    neither the page nor a list's own scrolling box."""
    styled = browser.execute_script(
        """
        const sheets = [...document.styleSheets].filter(sheet => sheet.href);
        const loaded = sheet => {
            try { return sheet.cssRules.length > 0; } catch (error) { return false; }
        };
        return sheets.filter(loaded).map(sheet => new URL(sheet.href).pathname);
        """
    )
    assert "/static/admin/css/base.css" in styled
    assert "/static/messages_app/admin.css" in styled
    header = browser.find_element(By.ID, "header").value_of_css_property("background-color")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent")
    widths = browser.execute_script(
        """
        const results = document.querySelector('#changelist .results');
        return {
            inner: window.innerWidth,
            page: document.documentElement.scrollWidth,
            list: results ? results.scrollWidth : 0,
            listBox: results ? results.clientWidth : 0,
        };
        """
    )
    assert widths["inner"] == WIDTH
    assert widths["page"] <= widths["inner"], widths
    assert widths["list"] <= widths["listBox"], widths


def assert_no_write_controls(browser: WebDriver) -> None:
    """No add link, no action menu or row checkbox, no editable field, no save or delete
    button in the page's content. The search box and the filter pickers only narrow the list."""
    writes = browser.execute_script(
        """
        const content = document.querySelector('#content');
        const narrowing = '#changelist-search, #changelist-filter';
        const controls = [
            'a[href$="/add/"]', 'a.addlink', 'a.deletelink', 'a[href$="/delete/"]',
            'textarea', 'select', 'input:not([type=hidden])', 'button',
            '[name=_save]', '[name=_continue]', '[name=_addanother]', '[name=action]',
            '[name=_selected_action]',
        ].join(', ');
        return [...content.querySelectorAll(controls)]
            .filter(element => !element.closest(narrowing))
            .map(element => element.outerHTML);
        """
    )
    assert writes == []


def assert_no_script_errors(browser: WebDriver) -> None:
    errors = [
        entry["message"]
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]
    assert errors == []


def test_an_investigator_reads_the_audit_and_a_transcript_in_a_browser(
    live_server, browser, investigator, searched, world
) -> None:
    base = live_server.url
    log_in(browser, base)

    # The audit list: styled, fitting the window, names instead of ids, nothing to write with.
    changelist = base + reverse("admin:audit_app_conversationsearchevent_changelist")
    open_page(browser, changelist, "audit-list")
    assert_styled_and_fits(browser)
    assert_no_write_controls(browser)
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 1
    assert "Helper agent" in rows[0].text
    assert "general" in rows[0].text
    # The agent picker ran (the autocomplete's jQuery and select2 loaded).
    assert browser.find_elements(By.CSS_SELECTOR, "#changelist-filter .select2-container")
    assert_no_script_errors(browser)

    # An event: read-only text, its hits as links, rankings as a table, API names.
    rows[0].find_element(By.CSS_SELECTOR, "th a").click()
    WebDriverWait(browser, 30).until(lambda driver: "/change/" in driver.current_url)
    open_page(browser, browser.current_url, "audit-event")
    assert browser.find_element(By.CSS_SELECTOR, "#content h2").text.startswith(
        "search_history by Helper agent at "
    )
    assert_styled_and_fits(browser)
    assert_no_write_controls(browser)
    for hit_id in searched.hit_ids:
        link = reverse("admin:messages_app_message_change", args=[hit_id])
        assert browser.find_elements(By.CSS_SELECTOR, f'.field-hits a[href="{link}"]')
    ranking_rows = browser.find_elements(By.CSS_SELECTOR, "table.rankings tbody tr")
    assert len(ranking_rows) == len(searched.hit_ids)
    exclusions = browser.find_element(By.CSS_SELECTOR, "table.exclusions").text
    assert "notObserved" in exclusions
    assert "not_observed" not in exclusions
    assert QUERY not in browser.page_source.lower()
    assert_no_script_errors(browser)

    # The add and delete pages are refused outright.
    for view, args in (("add", ()), ("delete", (searched.pk,))):
        url = reverse(f"admin:audit_app_conversationsearchevent_{view}", args=args)
        open_page(browser, base + url, f"audit-{view}")
        assert "403" in browser.title or "Forbidden" in browser.page_source
    browser.get_log("browser")  # the console's two 403 lines were asked for

    # The search box takes the query text and finds the event through its digest.
    open_page(browser, changelist, "audit-list-again")
    box = browser.find_element(By.ID, "searchbar")
    box.send_keys("Sample  MIGRATION plan" + Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda driver: "q=" in driver.current_url)
    found = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(found) == 1
    assert str(searched.pk) in found[0].find_element(By.CSS_SELECTOR, "th a").get_attribute("href")
    assert "sample" not in found[0].find_element(By.CSS_SELECTOR, "th a").get_attribute("href")
    box = browser.find_element(By.ID, "searchbar")
    box.clear()
    box.send_keys("another text entirely" + Keys.ENTER)
    WebDriverWait(browser, 30).until(lambda driver: "another" in driver.current_url)
    assert browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr") == []

    # The conversation's transcript: in seq order, the deleted message marked, its text gone.
    conversation = base + reverse("admin:messages_app_conversation_change", args=[world.public.pk])
    open_page(browser, conversation, "conversation")
    members = browser.find_element(By.CSS_SELECTOR, ".inline-group")
    assert "Alice Example" in members.text
    assert str(world.alice.pk) not in members.text
    browser.find_element(By.LINK_TEXT, "Transcript").click()
    WebDriverWait(browser, 30).until(lambda driver: "/transcript/" in driver.current_url)
    open_page(browser, browser.current_url, "transcript")
    assert_styled_and_fits(browser)
    lines = browser.find_elements(By.CSS_SELECTOR, "table.transcript-table tbody tr")
    assert [line.get_attribute("id") for line in lines] == ["seq-1", "seq-2", "seq-3"]
    assert "Bob Example" in lines[0].text
    assert lines[1].get_attribute("class") == "deleted"
    assert "deleted" in lines[1].find_element(By.CSS_SELECTOR, "td.text").text
    assert DELETED_TEXT not in browser.page_source
    assert "the migration runs tonight" in lines[2].text
    assert_no_script_errors(browser)

    # The message list, narrowed to the conversation through its filter, fits too.
    open_page(
        browser,
        base
        + reverse("admin:messages_app_message_changelist")
        + f"?conversation__id__exact={world.public.pk}",
        "messages",
    )
    assert_styled_and_fits(browser)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == 3
    assert_no_script_errors(browser)

    # The conversation list: its Transcript and Messages links were cut off at 1280 px, with
    # titles and kinds like the demo's.
    services.conversation_create(
        workspace_id=world.workspace.id, kind="unknown", title="imported-archive-2019"
    )
    open_page(
        browser, base + reverse("admin:messages_app_conversation_changelist"), "conversations"
    )
    assert_styled_and_fits(browser)
    hidden = browser.execute_script(
        """
        const box = document.querySelector('#changelist .results').getBoundingClientRect();
        return [...document.querySelectorAll('#result_list td.field-links a')]
            .filter(link => link.getBoundingClientRect().right > box.right
                || link.getBoundingClientRect().right > window.innerWidth)
            .map(link => link.textContent);
        """
    )
    links = browser.find_elements(By.CSS_SELECTOR, "#result_list td.field-links a")
    assert {link.text for link in links} == {"Transcript", "Messages"}
    assert hidden == []
    assert_no_script_errors(browser)
