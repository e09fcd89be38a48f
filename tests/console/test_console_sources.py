"""The console's sources page over real HTTP on a real server (no browser).

The real controller with a sources file declaring four sources: `alpha-src` follows a real
config repo, `beta-src`'s repo does not exist (and its path holds `<script>`), `gamma-src`
is suspended, `delta-src`'s HTTPS URL carries a token. A global admin sees them all with
their state (following / failing with git's reason / suspended) and a link to each project's
reconciles; the attack: a member of project alpha asks for the page and finds no trace of
beta's source (name, repo) in the HTML; hostile text stays text; a token in a repo URL is
never shown. The page and `POST /api/sources/list` list the same sources.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.fixtures import ConfigRepo
from tests.sources.test_source_api import member
from tests.sources.test_source_loops import post, reconciles, sources_file
from tests.web.serving import Running, running_server, wait_until

HELLO = "type: task\nname: hello\ncommands:\n  - echo hi\n"
HOSTILE = "<script>alert(1)</script>"
TOKEN = "tok-SECRET-1234"


def _states(server: Running) -> dict[str, dict[str, Any]]:
    listed = post(server, "/api/sources/list").json()
    return {s["name"]: s for s in listed}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    repo = ConfigRepo(tmp_path / "alpha-repo")
    repo.commit({"hello.dstack.yml": HELLO}, "a task")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "alpha-src", "repo": str(repo.path), "project": "alpha"},
        {
            "name": "beta-src",
            "repo": json.dumps(str(tmp_path / f"beta-{HOSTILE}")),
            "project": "beta",
            "paths": json.dumps([f"teams/{HOSTILE}"]),
        },
        {"name": "gamma-src", "repo": str(repo.path), "project": "gamma", "suspended": "true"},
        {
            "name": "delta-src",
            "repo": f"https://deploy:{TOKEN}@127.0.0.1:9/d.git",
            "project": "delta",
        },
    )
    with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as running:
        wait_until(
            lambda: any(r["status"] == "succeeded" for r in reconciles(running, "alpha")),
            60,
            "alpha's first reconcile",
        )
        wait_until(lambda: _states(running)["beta-src"]["state"] == "failing", 60, "beta to fail")
        wait_until(
            lambda: _states(running)["gamma-src"]["last_reconcile"] is not None,
            60,
            "gamma's suspended pass",
        )
        yield running


@contextmanager
def signed_in(server: Running, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        answer = http.post("/console/login", data={"token": token, "next": "/console/"})
        assert answer.status_code == 303, answer.text
        yield http


def _row(page: str, name: str) -> str:
    start = page.index(f'id="source-{name}"')
    return page[start : page.index("</tr>", start)]


def test_an_admin_sees_every_source_with_its_state(server: Running) -> None:
    with signed_in(server, server.admin_token) as http:
        assert 'href="/console/sources"' in http.get("/console/").text  # in the navigation
        answer = http.get("/console/sources")
    assert answer.status_code == 200
    page = answer.text
    states = _states(server)
    assert sorted(states) == ["alpha-src", "beta-src", "delta-src", "gamma-src"]

    alpha = _row(page, "alpha-src")
    assert "following" in alpha and "succeeded" in alpha and ">alpha<" in alpha
    last = states["alpha-src"]["last_reconcile"]["id"]
    assert 'href="/console/p/alpha"' in alpha
    assert f'href="/console/p/alpha/reconciles/{last}"' in alpha

    beta = _row(page, "beta-src")
    assert "failing" in beta and 'href="/console/p/beta"' in beta
    error = states["beta-src"]["last_reconcile"]["error"]
    assert error and "beta-" in error
    # git's reason, as the API gives it, escaped on the page
    reason = error.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert reason.replace("'", "&#39;").replace('"', "&#34;") in beta

    assert "suspended" in _row(page, "gamma-src")
    delta = _row(page, "delta-src")
    assert "https://127.0.0.1:9/d.git" in delta

    # hostile text stays text; a token in a repo URL is never shown (page nor API)
    assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "teams/&lt;script&gt;" in beta
    assert TOKEN not in page and TOKEN not in json.dumps(states)


def test_a_member_sees_only_their_projects_sources(server: Running) -> None:
    with member(server, "mallory", "alpha") as api:
        listed = [s["name"] for s in api.post("/api/sources/list", json={}).json()]
        token = api.headers["Authorization"].removeprefix("Bearer ")
    assert listed == ["alpha-src"]
    with signed_in(server, token) as http:
        page = http.get("/console/sources").text
    assert 'id="source-alpha-src"' in page
    shown = page.count('class="source"')
    assert shown == len(listed) == 1  # the page and `dockyard source list` agree
    # the attack: nothing of another project's source is anywhere in the HTML
    for other in ("beta", "gamma", "delta", "&lt;script", "127.0.0.1:9"):
        assert other not in page, other
