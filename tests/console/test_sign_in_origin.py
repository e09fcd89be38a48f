"""Console sign-in refuses a post from another site, and its cookie is `Secure` behind HTTPS.

A real server on loopback (the fake runtime: no jobs are needed), real HTTP posts carrying
the headers a browser sends: a page elsewhere posting a valid token (login CSRF) gets 403
and no cookie, by `Origin`, by `Sec-Fetch-Site`, or with `Origin: null`; the server's own
page (its origin, or `--external-url`'s) and a script without those headers sign in. And
the attack itself in headless Chromium: a page on another site submits a form with the
attacker's token to the console; the browser is not signed in.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.console.cdp import CHROMIUM, Browser
from tests.services.missing import need
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server

EXTERNAL = "https://dockyard.example.org"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    with running_server(tmp_path, lambda s, store: FakeController(store)) as running:
        yield running


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Running]:
    """The server as it runs behind a TLS proxy: `--external-url https://…`."""
    with running_server(
        tmp_path, lambda s, store: FakeController(store), external_url=EXTERNAL
    ) as running:
        yield running


def _sign_in(server: Running, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        form = {"token": server.admin_token, "next": "/console/"}
        return http.post("/console/login", data=form, headers=headers)


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "cross-site"},  # no Origin, but the browser says where it came from
        {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain is another origin
        {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
        {"Origin": "null"},  # a sandboxed frame or a redirect chain, no Sec-Fetch-Site
        {"Origin": "http://127.0.0.1.evil.example"},
    ],
)
def test_a_sign_in_posted_from_another_site_is_refused(
    server: Running, headers: dict[str, str]
) -> None:
    answer = _sign_in(server, headers)
    assert answer.status_code == 403, answer.text
    assert "set-cookie" not in answer.headers
    assert "is refused" in answer.text and "/console/login" in answer.text


def test_the_servers_own_page_and_a_script_sign_in(server: Running) -> None:
    own = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
    # what a browser sends from the console's own page, whose `Referrer-Policy:
    # no-referrer` makes the Origin of its form post `null`
    browser = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}
    older = {"Origin": server.url}  # a browser without Sec-Fetch-* headers
    for headers in (own, browser, older, {}):  # {}: not a browser but a script
        answer = _sign_in(server, headers)
        assert answer.status_code == 303, answer.text
        cookie = answer.headers["set-cookie"].lower()
        assert "dockyard_console=" in cookie and "secure" not in cookie  # plain HTTP here


def test_behind_https_the_cookie_is_secure_and_the_external_origin_signs_in(
    proxied: Running,
) -> None:
    answer = _sign_in(proxied, {"Origin": EXTERNAL, "Sec-Fetch-Site": "same-origin"})
    assert answer.status_code == 303, answer.text
    flags = [part.strip() for part in answer.headers["set-cookie"].lower().split(";")]
    assert "secure" in flags and "httponly" in flags and "samesite=strict" in flags
    refused = _sign_in(proxied, {"Origin": "https://dockyard.example.org.evil.example"})
    assert refused.status_code == 403 and "set-cookie" not in refused.headers


def test_the_session_lasts_12_hours_and_pages_carry_the_security_headers(
    server: Running,
) -> None:
    """What docs/console.md says of the session and the headers, over HTTP."""
    answer = _sign_in(server, {"Origin": server.url})
    assert answer.status_code == 303
    flags = [part.strip() for part in answer.headers["set-cookie"].lower().split(";")]
    assert "max-age=43200" in flags  # 12 hours; the signed session expires with it
    assert "path=/console" in flags and "httponly" in flags and "samesite=strict" in flags
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for response in (answer, http.get("/console/login"), _sign_in(server, {"Origin": "x"})):
            headers = response.headers
            assert headers["content-security-policy"] == (
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
            )
            assert headers["x-frame-options"] == "DENY"
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["referrer-policy"] == "no-referrer"
            assert headers["cache-control"] == "no-store"


@pytest.fixture
def evil_site(server: Running) -> Iterator[str]:
    """Another site (`localhost`, not the console's `127.0.0.1`) whose page posts a valid
    token of the attacker's to the console's sign-in."""
    with server.client(server.admin_token) as admin:
        made = admin.post("/api/users/create", json={"username": "attacker"})
    token = made.json()["token"]
    page = (
        f'<html><body><form method="post" action="{html.escape(server.url)}/console/login">'
        f'<input name="token" value="{html.escape(token)}"></form></body></html>'
    ).encode()

    class Evil(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.slow
def test_a_page_on_another_site_cannot_sign_the_browser_in(server: Running, evil_site: str) -> None:
    need(Path(CHROMIUM).exists(), "chromium", "scripts/setup.sh --dev installs it")
    browser = Browser()
    try:
        browser.go(evil_site)
        browser.submit("form")  # as the page's own script would, on the victim's visit
        assert "is refused" in browser.run("document.body.innerText")
        browser.go(f"{server.url}/console/")
        assert browser.run("location.pathname") == "/console/login"  # not signed in
        # the console's own page, in the same browser, signs in
        browser.run(f"document.getElementById('token').value = {server.admin_token!r}")
        browser.submit("form[action='/console/login']")
        assert browser.run("location.pathname") == "/console/"
    finally:
        browser.close()
