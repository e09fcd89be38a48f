"""Console sign-in refuses a post from another site, and its cookie is `Secure` behind HTTPS.

A real server on loopback (the fake runtime: no jobs are needed), real HTTP posts carrying
the headers a browser sends: a page elsewhere posting a valid token (login CSRF) gets 403
and no cookie, by `Origin`, by `Sec-Fetch-Site`, or with `Origin: null`; the server's own
page (its origin, or `--external-url`'s) and a script without those headers sign in.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

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
        {"Origin": "null"},  # a sandboxed frame or a redirect chain
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
    for headers in (own, {}):  # {}: no browser sends a POST without Origin; a script does
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
