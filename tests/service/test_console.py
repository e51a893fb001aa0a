"""The admin console in a real browser (Debian's Chromium driven by Playwright) against the real service: SmolLM2, the
embedded store, one server for the module. Sign in, edit a list and see the check playground change, a conflicting
edit, a bad term, versions and a roll back, tenants and a tenant who cannot see another tenant's list, the live view
drawing a rollback from the API's stream, operations, sign out; every page checked with axe-core (WCAG A/AA) at
desktop and phone width, with no Content-Security-Policy violation.

``GUARDRAIL_CONSOLE_SCREENSHOTS=1`` also writes the screenshots of docs/console.md (docs/console/*.png).
"""

from __future__ import annotations

import re

import httpx
import pytest
from helpers.browser import (
    CHROMIUM,
    LAUNCH_ARGS,
    PHONE,
    axe_violations,
    chromium_missing,
    new_context,
    screenshot,
)
from helpers.service import MODEL, metric, serve_in_thread
from helpers.service_client import unique_name
from helpers.wait import wait_until
from playwright.sync_api import expect

pytestmark = [pytest.mark.slow, pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing()))]

ADMIN = "console-test-admin-token-0123456789abcdef"
#: Generation waits: a deadline for the stream to end, not a speed claim.
STREAM_TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from service.settings import Settings

    settings = Settings(model=MODEL, admin_token=ADMIN, data_dir=tmp_path_factory.mktemp("console-data"),
                        default_max_tokens=32, wordlists=["en"])
    with serve_in_thread(settings) as live:
        yield live


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


class Console:
    """One browser context signed in (or not) to the console, recording console errors (CSP violations among
    them) of every page it opens."""

    def __init__(self, server, browser, viewport=None) -> None:
        self.server = server
        self.context = new_context(browser, viewport)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def _console(self, message) -> None:
        # A page answered 4xx (a conflict, a refused term, the API's 404) is logged as a failed load of the page
        # itself: that is the page's status, not an error of it. Anything else (a script error, a Content-Security-
        # Policy violation, an asset that does not load) is.
        document = message.text.startswith("Failed to load resource") and message.location.get("url") == self.page.url
        if message.type == "error" and not document:
            self.errors.append(message.text)

    def url(self, path: str) -> str:
        return self.server.base_url + path

    def open(self, path: str) -> None:
        self.page.goto(self.url(path))

    def sign_in(self, token: str) -> None:
        self.open("/console/sign-in")
        self.page.get_by_label("Admin token or tenant key").fill(token)
        self.page.get_by_role("button", name="Sign in").click()
        self.page.wait_for_load_state()

    def close(self) -> None:
        self.context.close()

    def accessible(self) -> None:
        """axe-core finds no WCAG A/AA violation on the page, and the page logged no error (a CSP violation is
        one)."""
        assert axe_violations(self.page) == [], self.page.url
        assert self.errors == [], self.errors


@pytest.fixture
def admin(server, browser):
    console = Console(server, browser)
    console.sign_in(ADMIN)
    yield console
    console.close()


def api(server, method: str, path: str, token: str = ADMIN, **kwargs) -> httpx.Response:
    return server.admin(method, path, token=token, **kwargs)


def check_matches(console: Console, text: str, wordlist: str) -> list[tuple[str, str]]:
    """Run the check playground on ``text`` with ``wordlist`` alone: the (form, term) of each match row."""
    page = console.page
    console.open("/console/check")
    page.get_by_label("Text", exact=True).fill(text)
    for box in page.locator("fieldset.lists input[type=checkbox]").all():
        box.set_checked(box.get_attribute("value") == wordlist)
    page.get_by_role("button", name="Check").click()
    page.wait_for_selector("#result-heading")
    rows = page.locator("table tbody tr")
    return [(rows.nth(i).locator("td").nth(0).inner_text(), rows.nth(i).locator("td").nth(1).inner_text())
            for i in range(rows.count())]


# -- sign-in and the session ------------------------------------------------------------------------------------


def test_sign_in_shows_the_apis_answer_to_a_wrong_token_and_keeps_the_right_one_in_a_strict_cookie(server, browser):
    console = Console(server, browser)
    try:
        console.open("/console/lists")  # not signed in: sent to the sign-in page, and back after it
        assert "/console/sign-in" in console.page.url
        console.accessible()
        screenshot(console.page, "sign-in")
        console.sign_in("not-the-admin-token-at-all-0123456789")
        assert console.page.get_by_role("alert").inner_text() == "Invalid admin token."  # the API's message
        console.sign_in(ADMIN)
        assert console.page.url == console.url("/console/lists")
        (cookie,) = [c for c in console.context.cookies() if c["name"] == "guardrail_console"]
        assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/console")
        assert console.page.evaluate("document.cookie") == ""  # out of the page scripts' reach
        assert ADMIN not in console.page.content()
    finally:
        console.close()


def test_every_console_answer_has_a_strict_csp_and_a_form_without_its_csrf_token_changes_nothing(server, admin):
    page = admin.page
    answer = page.request.get(admin.url("/console/lists"))
    policy = answer.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
    name = unique_name()
    assert api(server, "PUT", f"/admin/wordlists/{name}", json={"terms": ["apricot"]}).status_code == 201
    cookies = {c["name"]: c["value"] for c in admin.context.cookies()}
    forged = httpx.post(admin.url(f"/console/lists/{name}"), cookies=cookies,
                        data={"action": "add", "text": "plum", "etag": '"v1"'})  # a page elsewhere cannot know it
    assert forged.status_code == 403
    other_site = httpx.post(admin.url(f"/console/lists/{name}"), cookies=cookies,
                            headers={"Origin": "https://evil.example"},
                            data={"action": "add", "text": "plum", "etag": '"v1"', "csrf": "0" * 64})
    assert other_site.status_code == 403
    assert [t["text"] for t in api(server, "GET", f"/admin/wordlists/{name}").json()["terms"]] == ["apricot"]


# -- word lists ---------------------------------------------------------------------------------------------------


def test_editing_a_list_changes_what_the_check_playground_finds(server, admin):
    name = unique_name()
    page = admin.page
    admin.open("/console/lists")
    admin.accessible()
    screenshot(page, "word-lists")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Terms, one per line").fill("quince")
    page.get_by_role("button", name="Create list").click()
    page.wait_for_url(f"**/console/lists/{name}")
    assert check_matches(admin, "a medlar and a quince", name) == [("quince", "quince")]
    admin.open(f"/console/lists/{name}")
    page.get_by_label("Term (re:PATTERN for a regular expression)").fill("medlar")
    page.get_by_label("Match mode").select_option("prefix")
    page.get_by_role("button", name="Add term").click()
    assert "Added 'medlar'" in page.get_by_role("status").inner_text()
    assert page.locator("table tbody th code").all_inner_texts() == ["quince", "medlar"]
    admin.accessible()
    screenshot(page, "word-list")
    assert check_matches(admin, "a medlar and a quince", name) == [("medlar", "medlar"), ("quince", "quince")]
    assert page.locator("#highlighted mark").count() == 2
    admin.accessible()
    screenshot(page, "check-playground")
    admin.open(f"/console/lists/{name}")
    page.get_by_role("button", name="Remove quince").click()
    assert page.locator("table tbody th code").all_inner_texts() == ["medlar"]
    assert check_matches(admin, "a medlar and a quince", name) == [("medlar", "medlar")]


def test_a_check_shows_which_obfuscation_levels_catch_each_form(server, admin):
    name = unique_name()
    api(server, "PUT", f"/admin/wordlists/{name}", json={"terms": ["shit"]})
    assert check_matches(admin, "oh sh1t", name) == [("sh1t", "shit")]
    row = admin.page.locator("table tbody tr").first
    cells = row.locator("td.level span").all()
    caught = [cell.get_attribute("aria-label") for cell in cells]
    header = admin.page.locator("table thead th").all_inner_texts()[5:]
    assert dict(zip(header, caught)) == {"off": "not caught", "homoglyphs": "not caught", "leet": "caught",
                                         "spaced": "caught", "masked": "caught", "masked+markup": "caught"}
    assert row.locator("td").nth(3).inner_text() == "leet"  # the lowest level that catches it


def test_a_bad_term_is_shown_with_the_apis_message_next_to_the_field(server, admin):
    name = unique_name()
    api(server, "PUT", f"/admin/wordlists/{name}", json={"terms": ["fig"]})
    admin.open(f"/console/lists/{name}")
    field = admin.page.get_by_label("Term (re:PATTERN for a regular expression)")
    field.fill("re:so+rry")
    admin.page.get_by_role("button", name="Add term").click()
    message = admin.page.locator("#add-error").inner_text()
    assert "unbounded repetition" in message and "(add.0)" in message  # the API's message and field
    assert field.get_attribute("aria-invalid") == "true" and field.get_attribute("aria-describedby") == "add-error"
    assert field.input_value() == "re:so+rry"  # kept, to correct it
    admin.accessible()


def test_a_conflicting_edit_is_shown_as_a_conflict_and_can_be_applied_to_the_current_version(server, admin):
    name = unique_name()
    api(server, "PUT", f"/admin/wordlists/{name}", json={"terms": ["fig"]})
    page = admin.page
    admin.open(f"/console/lists/{name}")  # shows version 1
    assert api(server, "PATCH", f"/admin/wordlists/{name}", json={"add": ["date"]}).status_code == 200  # elsewhere
    page.get_by_label("Term (re:PATTERN for a regular expression)").fill("lime")
    page.get_by_role("button", name="Add term").click()
    conflict = page.locator("section.conflict")
    assert "You saw version 1; it is now at version 2" in conflict.inner_text()
    assert conflict.locator("li").all_inner_texts() == ["added date"]
    assert [t["text"] for t in api(server, "GET", f"/admin/wordlists/{name}").json()["terms"]] == ["fig", "date"]
    admin.accessible()
    screenshot(page, "conflict")
    page.get_by_role("button", name="Apply my change to version 2").click()
    assert page.get_by_role("status").inner_text() == "Added 'lime'. The list is now at version 3."
    assert [t["text"] for t in api(server, "GET", f"/admin/wordlists/{name}").json()["terms"]] == ["fig", "date", "lime"]


def test_versions_are_compared_and_an_older_one_rolled_back_to(server, admin):
    name = unique_name()
    api(server, "PUT", f"/admin/wordlists/{name}", json={"terms": ["fig", "kiwi"]})
    api(server, "PATCH", f"/admin/wordlists/{name}", json={"add": ["lime"], "remove": ["kiwi"]})
    page = admin.page
    admin.open(f"/console/lists/{name}/versions")
    page.get_by_role("button", name="Compare").click()  # from the previous version to the current one
    assert page.locator("ul.added code").all_inner_texts() == ["lime"]
    assert page.locator("ul.removed code").all_inner_texts() == ["kiwi"]
    admin.accessible()
    screenshot(page, "diff")
    admin.open(f"/console/lists/{name}/versions")
    admin.accessible()
    screenshot(page, "versions")
    page.get_by_role("button", name="Roll back to 1").click()
    assert "version 3 holds the terms of version 1" in page.get_by_role("status").inner_text()
    assert [t["text"] for t in api(server, "GET", f"/admin/wordlists/{name}").json()["terms"]] == ["fig", "kiwi"]


# -- tenants ------------------------------------------------------------------------------------------------------


def create_tenant(admin: Console, own: str) -> tuple[str, str]:
    """A tenant created in the console's tenants page, owning the list ``own``: its name, and its key as shown
    once."""
    page = admin.page
    name = unique_name()
    admin.open("/console/tenants")
    page.get_by_label("Name", exact=True).fill(name)
    page.locator("#new-own_wordlists").fill(own)
    page.get_by_role("button", name="Create tenant and key").click()
    return name, page.get_by_label("API key", exact=True).input_value()


def test_a_tenant_sees_and_edits_its_own_list_and_not_another_tenants(server, browser, admin):
    mine, theirs = unique_name(), unique_name()
    _, key = create_tenant(admin, mine)
    assert key.startswith("grk_")
    admin.accessible()
    screenshot(admin.page, "tenants")
    create_tenant(admin, theirs)
    api(server, "PUT", f"/admin/wordlists/{theirs}", json={"terms": ["secretword"]})
    tenant = Console(server, browser)
    try:
        tenant.sign_in(key)
        page = tenant.page
        assert page.url == tenant.url("/console/lists")
        names = page.locator("table tbody th a").all_inner_texts()
        assert "en" in names and theirs not in names  # bundled lists are readable, other tenants' are not
        page.get_by_label("Name", exact=True).fill(mine)  # the tenant creates its own list with its own key
        page.get_by_label("Terms, one per line").fill("pomelo")
        page.get_by_role("button", name="Create list").click()
        page.wait_for_url(f"**/console/lists/{mine}")
        tenant.open(f"/console/lists/{theirs}")  # the API says 404: as if it did not exist
        assert "does not exist" in page.get_by_role("alert").inner_text()
        tenant.open(f"/console/lists/{theirs}/versions")
        assert "does not exist" in page.get_by_role("alert").inner_text()
        tenant.open("/console/tenants")  # the admin's pages are refused
        assert "needs the admin token" in page.get_by_role("alert").inner_text()
        assert "Tenants" not in page.get_by_role("navigation", name="Console sections").inner_text()
        tenant.open("/console/check")
        assert theirs not in page.locator("fieldset.lists").inner_text()
        tenant.open("/console/lists")
        tenant.accessible()
    finally:
        tenant.close()


def test_a_tenants_policy_is_saved_and_its_key_rotated_once_shown_and_revoked(server, admin):
    tenant, old_key = create_tenant(admin, unique_name())
    page = admin.page
    page.get_by_role("link", name=tenant).click()
    page.locator("#max_tokens").fill("64")
    page.get_by_label("Evasion guard (floor)").select_option("edit")
    page.get_by_role("button", name="Save policy").click()
    assert page.get_by_role("status").inner_text() == "Policy saved."
    policy = api(server, "GET", f"/admin/tenants/{tenant}").json()["policy"]
    assert (policy["max_tokens"], policy["evasion_guard"]) == (64, "edit")
    page.get_by_role("button", name="Rotate: issue a new key").click()
    new_key = page.get_by_label("API key", exact=True).input_value()
    assert new_key.startswith("grk_") and new_key != old_key
    assert api(server, "GET", "/admin/wordlists", token=new_key).status_code == 200
    # refused from the new key's first use on (a rotate whose answer is lost never locks out: docs/service.md)
    assert api(server, "GET", "/admin/wordlists", token=old_key).status_code == 401
    admin.open(f"/console/tenants/{tenant}")
    assert new_key not in page.content()  # shown once, never again
    page.get_by_role("button", name="Revoke the key").click()
    assert page.get_by_role("status").inner_text() == "Key revoked."
    assert api(server, "GET", "/admin/wordlists", token=new_key).status_code == 401
    admin.accessible()


# -- the live view and operations ---------------------------------------------------------------------------------


def test_the_live_view_draws_each_rollback_where_it_happened_from_the_apis_stream(server, admin):
    page = admin.page
    admin.open("/console/live")
    page.get_by_label("Prompt").fill("What is the capital of France?")
    page.get_by_label("Request terms, one per line (banned_terms)").fill("Paris")
    page.get_by_role("button", name="Send").click()
    page.wait_for_selector("#live-answer[data-finish-reason]", timeout=STREAM_TIMEOUT_MS)
    rollback = page.locator("#live-answer .rollback").first
    assert "Paris" in rollback.locator("del.fragment").inner_text()
    assert rollback.locator(".why").inner_text().startswith("⟲ Paris · request")
    kept = page.evaluate("""() => Array.from(document.querySelector('#live-answer').childNodes)
                            .filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.textContent).join('')""")
    assert kept and "paris" not in kept.lower()  # the kept text: what the API streamed as content
    events = page.locator("#live-events li").all_inner_texts()
    assert any(e.startswith("Rollback at token") and "“Paris” of list request" in e for e in events)
    assert any(e.startswith("Finished: ") for e in events)
    assert page.locator("#live-status").inner_text().startswith("Finished:")
    admin.accessible()
    screenshot(page, "live-view")


def test_stopping_the_live_view_cancels_the_generation(server, admin):
    cancelled = metric(server.metrics(), "guardrail_generations_cancelled_total")
    page = admin.page
    admin.open("/console/live")
    page.get_by_label("Prompt").fill("Write a long story about a lighthouse keeper.")
    page.get_by_label("Max tokens").fill("400")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#live-status")).to_have_text("Streaming…", timeout=STREAM_TIMEOUT_MS)
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("#live-status")).to_have_text("Stopped.")
    # The page's request ends, the console closes the API's stream, the service cancels the generation.
    wait_until(lambda: metric(server.metrics(), "guardrail_generations_cancelled_total") > cancelled, 60,
               "the generation cancelled")


def test_operations_show_readiness_the_model_the_lists_and_the_guard_counters(server, admin):
    page = admin.page
    admin.open("/console/ops")
    assert page.locator("#ops-ready").inner_text().startswith("ready")
    assert MODEL in page.locator("section[aria-labelledby=model-heading]").inner_text()
    assert "en" in page.locator("section[aria-labelledby=loaded-heading]").inner_text()
    line = page.locator("[data-counter=requests] polyline")
    expect(line).not_to_have_attribute("points", "", timeout=30_000)  # two samples: one rate (polls every 5 s)
    for _ in range(3):  # traffic between the samples
        assert api(server, "POST", "/v1/check", json={"text": "a fig"}).status_code == 200
    expect(line).to_have_attribute("points", re.compile(r"^\S+ \S+"), timeout=30_000)  # a line of two rates or more
    assert "per minute now" in page.locator("#chart-requests-rate").inner_text()
    totals = page.request.get(admin.url("/console/ops/counters")).json()
    assert totals["requests"] >= 1 and set(totals) >= {"rollbacks", "content_filters", "requests", "time"}
    admin.accessible()
    screenshot(page, "operations")


# -- every page: phone width and accessibility ----------------------------------------------------------------------


def test_every_page_reads_at_phone_width_and_passes_axe(server, browser):
    name = unique_name()
    api(server, "PUT", f"/admin/wordlists/{name}", json={"terms": ["fig"]})
    api(server, "PATCH", f"/admin/wordlists/{name}", json={"add": ["lime"]})
    phone = Console(server, browser, PHONE)
    try:
        phone.sign_in(ADMIN)
        for path in ("/console/lists", f"/console/lists/{name}", f"/console/lists/{name}/versions",
                     f"/console/lists/{name}/diff?from=1&to=2", "/console/tenants", "/console/audit",
                     "/console/check", "/console/live", "/console/ops"):
            phone.open(path)
            overflow = phone.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, (path, overflow)  # wide tables scroll inside their own region
            phone.accessible()
        phone.open("/console/lists")
        screenshot(phone.page, "phone-word-lists")
    finally:
        phone.close()


def test_the_audit_page_lists_changes_with_the_token_id(server, admin):
    name = unique_name()
    api(server, "PUT", f"/admin/wordlists/{name}", json={"terms": ["fig"]})
    admin.open("/console/audit")
    rows = admin.page.locator("table").first.locator("tbody tr").all_inner_texts()
    assert any(name in row and re.search(r"\b[0-9a-f]{12}\b", row) for row in rows)
    admin.accessible()
    screenshot(admin.page, "audit")


def test_sign_out_ends_the_session(server, admin):
    page = admin.page
    admin.open("/console/lists")
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/console/sign-in?signed_out=1")
    assert [c for c in admin.context.cookies() if c["name"] == "guardrail_console"] == []
    admin.open("/console/lists")
    assert "/console/sign-in" in page.url
