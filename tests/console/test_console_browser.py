"""The web console in a real browser (headless Chromium) against a real server on the local
fleet: sign-in, every page at laptop and phone widths (screenshots written to
`build/console-screenshots/` for people to look at), a log followed live and searched, a
run stopped from its page, sign-out — and no console error or failed request on any page.
Also, over plain HTTP: roles as the API's (a non-member gets 403), CSRF on every form,
the cookie's flags, escaping, secrets by name only, pages readable without script.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from reconciler.adapters.db import Store
from reconciler.api.client import Client
from reconciler.api.errors import NotFoundError
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.console.bidi import FIREFOX, Firefox
from tests.console.cdp import CHROMIUM, Browser
from tests.console.cdp import wait_for as wait_for_within
from tests.services.missing import need
from tests.web.serving import Running, running_server

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("DOCKYARD_SCREENSHOTS", ROOT / "build" / "console-screenshots"))
SMALL = "resources:\n  cpu: 1..\n  memory: 0.1GB..\n  disk: 0.1GB..\n"
TICKER = (
    "type: task\nname: ticker\ncommands:\n"
    '  - for i in $(seq 1 600); do echo "line $i"; sleep 0.2; done\n' + SMALL
)
HELLO = "type: task\nname: hello\ncommands:\n  - echo '<script>alert(1)</script> hello'\n" + SMALL
SECRET_VALUE = "s3cr3t-value-never-shown"


def _real(settings: Settings, store: Store) -> Controller:
    from reconciler.engine.controller import build_controller

    return build_controller(settings, store)


def wait_for(probe: Callable[[], object], timeout: float = 60) -> object:
    return wait_for_within(probe, timeout)


def status(client: Client, name: str) -> str:
    try:
        return client.get_run(name).status
    except NotFoundError:
        return ""


def git(repo: Path, *args: str) -> None:
    command = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*command, *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A config repo (the local fleet and `hello`, then a commit changing `hello`), a real
    server on it. Each browser test adds its own CLI task printing a line every 0.2 s."""
    from agent.local import stop_local_agent

    tmp = tmp_path_factory.mktemp("console")
    repo = tmp / "repo"
    repo.mkdir()
    (repo / "fleet.dstack.yml").write_text("type: fleet\nname: local\nnodes: 1\n")
    (repo / "hello.dstack.yml").write_text(HELLO)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "fleet and hello")
    try:
        with running_server(tmp, _real, repo=str(repo), fetch_interval=3600) as running:
            client = Client(running.url, running.admin_token)
            client.set_secret("hf_token", SECRET_VALUE)
            wait_for(lambda: status(client, "hello") == "done")
            (repo / "hello.dstack.yml").write_text(HELLO.replace("hello'", "hello again'"))
            git(repo, "commit", "-q", "-am", "hello again")
            client.trigger_reconcile()
            wait_for(lambda: "again" in json.dumps(client.get_run("hello").run_spec))
            yield running
            for kind in BROWSERS:
                with contextlib.suppress(NotFoundError):
                    client.stop_runs([f"tick-{kind}"], abort=True)
    finally:
        stop_local_agent(tmp / "data")


def signed_in(server: Running, token: str) -> httpx.Client:
    http = httpx.Client(base_url=server.url, timeout=30)
    answer = http.post("/console/login", data={"token": token, "next": "/console/"})
    assert answer.status_code == 303
    return http


BROWSERS = {
    "chromium": (CHROMIUM, lambda: Browser()),
    "firefox": (FIREFOX, lambda: Firefox()),
}


@pytest.mark.parametrize("kind", sorted(BROWSERS))
def test_sign_in_every_page_live_logs_stop_and_sign_out(server: Running, kind: str) -> None:
    binary, start = BROWSERS[kind]
    need(Path(binary).exists(), kind, "scripts/setup.sh --dev installs it")
    SHOTS.mkdir(parents=True, exist_ok=True)
    prefix = "" if kind == "chromium" else f"{kind}-"
    ticker = f"tick-{kind}"
    client = Client(server.url, server.admin_token)
    client.apply(TICKER.replace("name: ticker", f"name: {ticker}"), path=f"{ticker}.dstack.yml")
    wait_for(lambda: status(client, ticker) == "running")
    browser = start()
    try:
        browser.go(f"{server.url}/console/p/main/runs")
        assert browser.run("location.pathname") == "/console/login"
        browser.run(f"document.getElementById('token').value = {server.admin_token!r}")
        browser.submit("form[action='/console/login']")
        assert browser.run("location.pathname") == "/console/p/main/runs"  # back where it went
        pages = {
            "projects": "/console/",
            "timeline": "/console/p/main",
            "runs": "/console/p/main/runs",
            "run": "/console/p/main/runs/hello",
            "fleets": "/console/p/main/fleets",
            "instance": "/console/p/main/instances/local-0",
            "volumes": "/console/p/main/volumes",
            "secrets": "/console/p/main/secrets",
            "deliveries": "/console/deliveries",
        }
        for name, path in pages.items():
            browser.go(server.url + path)
            assert browser.run("document.querySelector('h1') !== null"), name
            for width in (1280, 390):
                browser.screenshot(SHOTS / f"{prefix}{name}-{width}.png", width)
        browser.go(f"{server.url}/console/p/main/reconciles/" + _a_reconcile(server))
        browser.screenshot(SHOTS / f"{prefix}plan-1280.png", 1280)

        browser.go(f"{server.url}/console/p/main/instances/local-0")
        browser.wait_until(  # the live charts of the instance's jobs: ticker's CPU at least
            "document.querySelectorAll('#charts polyline').length >= 2"
        )
        browser.go(f"{server.url}/console/p/main/runs/{ticker}")
        first = browser.run("document.getElementById('log').textContent")
        last = int(re.findall(r"line (\d+)", first)[-1])
        browser.wait_until(  # followed live: later lines arrive without a reload
            f"(document.getElementById('log').textContent.match(/line (\\d+)/g) || [])"
            f".some(l => Number(l.slice(5)) > {last + 5})"
        )
        browser.run(
            "const s = document.getElementById('log-search'); s.value = 'line 1';"
            "s.dispatchEvent(new Event('input'))"
        )
        shown = browser.run("document.getElementById('log').textContent").split("\n")
        assert shown and all("line 1" in line for line in shown)
        browser.screenshot(SHOTS / f"{prefix}run-live-1280.png", 1280)

        browser.submit(f"form[action='/console/p/main/runs/{ticker}/stop']")
        wait_for(lambda: status(client, ticker) in ("terminating", "terminated"))

        browser.submit("form[action='/console/logout']")
        assert browser.run("location.pathname") == "/console/login"
        browser.go(f"{server.url}/console/")
        assert browser.run("location.pathname") == "/console/login"  # the session is gone
        problems = browser.problems()
        assert problems == [], "\n".join(problems)
    finally:
        browser.close()


def _a_reconcile(server: Running) -> str:
    answer = httpx.post(
        f"{server.url}/api/project/main/reconciles/list",
        json={"limit": 1},
        headers={"Authorization": f"Bearer {server.admin_token}"},
    )
    found = answer.json()
    return str(found[0]["id"]) if found else "none"


def test_a_non_member_gets_403_and_a_member_sees_only_their_projects(server: Running) -> None:
    client = Client(server.url, server.admin_token)
    eve = client.create_user("eve-console")
    client.create_project("other-console")
    http = signed_in(server, eve.token)
    assert http.get("/console/p/main").status_code == 403
    assert http.get("/console/p/main/runs/hello").status_code == 403
    assert http.get("/console/p/main/runs/hello/logs").status_code == 403
    assert http.get("/console/deliveries").status_code == 403
    assert "/console/p/main" not in http.get("/console/").text


def test_forms_need_the_sessions_csrf_token(server: Running) -> None:
    http = signed_in(server, server.admin_token)
    page = http.get("/console/p/main").text
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None
    assert http.post("/console/p/main/reconcile", data={}).status_code == 403
    assert http.post("/console/p/main/reconcile", data={"csrf": "forged"}).status_code == 403
    assert http.post("/console/p/main/reconcile", data={"csrf": token.group(1)}).status_code == 303
    other = signed_in(server, server.admin_token)  # another session's token is no good
    assert other.post("/console/p/main/reconcile", data={"csrf": token.group(1)}).status_code == 403


def test_the_cookie_is_httponly_strict_and_scoped_and_pages_forbid_framing(server: Running) -> None:
    http = httpx.Client(base_url=server.url, timeout=30)
    answer = http.post("/console/login", data={"token": server.admin_token})
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie
    page = http.get("/console/")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert http.post("/console/login", data={"token": "wrong"}).status_code == 401
    bad = httpx.get(f"{server.url}/console/", cookies={"dockyard_console": "forged.value"})
    assert bad.status_code == 303 and bad.headers["location"].startswith("/console/login")


def test_pages_escape_values_hide_secrets_and_read_without_script(server: Running) -> None:
    http = signed_in(server, server.admin_token)
    run = http.get("/console/p/main/runs/hello").text
    assert "<script>alert(1)</script>" not in run
    assert "&lt;script&gt;alert(1)&lt;/script&gt; hello" in run  # the log, served in the page
    secrets = http.get("/console/p/main/secrets").text
    assert "hf_token" in secrets and SECRET_VALUE not in secrets
    assert server.admin_token not in run + secrets
    runs = http.get("/console/p/main/runs?status=done").text
    assert ">hello<" in runs and ">tick-" not in runs  # filters work server-side


def test_refreshing_or_deleting_the_token_ends_its_sessions(server: Running) -> None:
    client = Client(server.url, server.admin_token)
    made = client.create_user("rotating-console")
    http = signed_in(server, made.token)
    assert http.get("/console/").status_code == 200
    client.refresh_token("rotating-console")
    gone = http.get("/console/")
    assert gone.status_code == 303 and gone.headers["location"].startswith("/console/login")
    fresh = client.refresh_token("rotating-console")
    again = signed_in(server, fresh.token)
    client.delete_user("rotating-console")
    assert again.get("/console/").status_code == 303
