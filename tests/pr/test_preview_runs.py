"""Preview runs of a pull request, end to end: a real server (the real runtime, the local
fleet, the built-in proxy) watching a real git config repo, and the recording fake GitHub
(`fakepreviews.py`). A maintainer's `dockyard:preview` label deploys the PR head's service
into `main-pr-7`, reachable through the proxy with a member's token; closing the PR stops
it and removes the project; a fork's PR labeled by someone without write access runs
nothing; a preview over its budget is refused with the rule; the TTL ends it (injected
clock); a restarted server still tears it down.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.adapters.db import Store
from reconciler.adapters.db.previewruns import PreviewRunsStore
from reconciler.domain.previewruns import PreviewState, PullRef
from reconciler.engine.previewruns import PreviewRuns
from reconciler.ports import Controller
from reconciler.settings import Settings
from tests.pr.fakehost import TOKEN
from tests.pr.fakepreviews import FakePreviewHost, fake_preview_host
from tests.pr.gitrepo import make_repo
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.web.serving import WEBHOOK_SECRET, Running, running_server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PULL = PullRef("github", "acme/cfg", 7)
PREVIEW = "main-pr-7"
HEAD = "c" * 40
POLICY = b"""policy:
  previews:
    ttl: 2h
    fleets: [local, cloud]
    budget: {hourly: 1}
"""
BASE = {
    ".dockyard.yml": POLICY,
    "fleets/local.dstack.yml": b"type: fleet\nname: local\nnodes: 1\n",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def service(port: int) -> bytes:
    return f"""type: service
name: web
port: {port}
auth: true
commands:
  - mkdir -p site && echo preview-of-pr-7 > site/index.html
  - python3 -m http.server {port} --bind 127.0.0.1 --directory site
probes:
  - type: http
    url: /
    interval: 1s
""".encode()


TASK = b"type: task\nname: train\ncommands: [echo train]\n"
CLOUD = b"type: fleet\nname: cloud\nbackends: [aws]\nnodes: 1\nresources:\n  gpu: A100\n"
GPU_SERVICE = b"""type: service
name: chat
port: 8000
commands: [python3 -m http.server 8000]
fleets: [cloud]
resources:
  gpu: A100
"""


def _real(settings: Settings, store: Store) -> Controller:
    from reconciler.engine.controller import build_controller

    return build_controller(settings, store)


@pytest.fixture
def github() -> Iterator[FakePreviewHost]:
    with fake_preview_host() as host:
        host.state.head = HEAD
        yield host


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path, _ = make_repo(tmp_path / "config-repo", BASE)
    return path


def _start(tmp_path: Path, github: FakePreviewHost, repo: Path, db: str | None = None) -> Any:
    overrides: dict[str, object] = {
        "github_token": TOKEN,
        "github_api_url": github.url,
        "github_repo": "acme/cfg",
        "repo": str(repo),
        "fetch_interval": 3600.0,
    }
    if db is not None:
        overrides["db"] = db
    return running_server(tmp_path, _real, **overrides)


def _applied(server: Running) -> bool:
    store = server.server.store
    project = store.get_project("main")
    return project is not None and store.last_applied_revision(project.id) is not None


def deliver(server: Running, event: str, payload: dict[str, Any], delivery: str) -> httpx.Response:
    body = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": signature,
        "Content-Type": "application/json",
    }
    return httpx.post(f"{server.url}/api/webhooks/github", content=body, headers=headers)


def pull_event(action: str, label: str | None = "dockyard:preview") -> dict[str, Any]:
    payload: dict[str, Any] = {
        "action": action,
        "number": 7,
        "pull_request": {"number": 7, "head": {"sha": HEAD}, "base": {"ref": "main"}},
        "repository": {"full_name": "acme/cfg"},
        "sender": {"login": "maintainer"},
    }
    if label is not None:
        payload["label"] = {"name": label}
    return payload


def _member_token(server: Running) -> tuple[str, str]:
    """A user who is a member of project main, and one who is not: their tokens."""
    admin = server.client(server.admin_token)
    tokens = []
    for name in ("reviewer", "outsider"):
        made = admin.post("/api/users/create", json={"username": name, "global_role": "user"})
        assert made.status_code == 200, made.text
        tokens.append(made.json()["creds"]["token"])
    added = admin.post(
        "/api/projects/main/add_members",
        json={"members": [{"username": "reviewer", "project_role": "user"}]},
    )
    assert added.status_code == 200, added.text
    return tokens[0], tokens[1]


def _preview(server: Running) -> Any:
    return PreviewRunsStore(server.server.store.engine).get_preview(PULL)


def _comment(github: FakePreviewHost) -> str:
    bodies = [b for b in github.state.bodies() if "dockyard:preview-runs" in b]
    return bodies[-1] if bodies else ""


def _proxy_get(server: Running, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{server.url}/proxy/services/{PREVIEW}/web/", headers=headers, timeout=10)


def _answers(server: Running, token: str) -> bool:
    try:
        reply = _proxy_get(server, token)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200 and "preview-of-pr-7" in reply.text


def _wait_answers(server: Running, github: FakePreviewHost, token: str) -> None:
    try:
        wait_until(lambda: _answers(server, token), timeout=120, what="the preview to answer")
    except AssertionError:
        store = server.server.store
        seen = [(r.kind, r.name, r.status) for r in store.load_observed(PREVIEW).resources]
        statuses = PreviewRunsStore(store.engine).preview_statuses(PREVIEW)
        raise AssertionError(
            f"comment: {_comment(github)!r}; resources: {seen}; runs: {statuses}"
        ) from None


def _gone(server: Running) -> bool:
    return server.server.store.get_project(PREVIEW) is None


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None  # the server's default, in its data dir
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


def test_label_deploys_reachable_then_close_tears_down(
    tmp_path: Path, github: FakePreviewHost, repo: Path, db: str | None
) -> None:
    github.state.files = {**BASE, "web.dstack.yml": service(_free_port()), "train.dstack.yml": TASK}
    with _start(tmp_path, github, repo, db) as server:
        wait_until(lambda: _applied(server), timeout=60, what="main's first reconcile")
        member, outsider = _member_token(server)
        github.state.pull.label("maintainer")
        answer = deliver(server, "pull_request", pull_event("labeled"), "l-1")
        assert answer.status_code == 202
        _wait_answers(server, github, member)
        assert _proxy_get(server, None).status_code == 401
        assert _proxy_get(server, outsider).status_code in (401, 403)  # not a member
        preview = _preview(server)
        assert preview.state is PreviewState.ACTIVE and preview.requested_by == "maintainer"
        runs = {r.name: r for r in server.server.store.load_observed(PREVIEW).resources}
        assert set(runs) == {"local", "web"}  # the task is not previewed
        wait_until(
            lambda: "running, ready" in _comment(github), what="the comment's status", timeout=60
        )
        body = _comment(github)
        assert f"{server.url}/proxy/services/{PREVIEW}/web/" in body
        assert "task train: not previewed" in body and "$0.00" in body
        assert member not in body and server.admin_token not in body
        assert github.state.calls("/collaborators/maintainer/permission")
        assert github.state.calls("/issues/7/events")

        github.state.pull.state = "closed"
        deliver(server, "pull_request", pull_event("closed", None), "c-1")
        wait_until(lambda: _gone(server), timeout=120, what="the preview project removed")
        assert not _answers(server, member)
        wait_until(lambda: _preview(server).state is PreviewState.CLOSED, what="closed", timeout=60)
        wait_until(
            lambda: "torn down" in _comment(github), what="the comment saying so", timeout=60
        )
        assert "the pull request was closed" in _comment(github)
        # the events preview.started / preview.torn_down notifications come from
        store = server.server.store
        main = store.project_id_of("main")
        said = [e.message for e in store.list_events(project_id=main, target_type="preview")]
        assert "preview torn down: the pull request was closed (acme/cfg#7)" in said
        assert any(m.startswith("preview deployed at ") and "for maintainer" in m for m in said)


def test_no_preview_for_a_fork_without_a_maintainers_label_nor_over_budget(
    tmp_path: Path, github: FakePreviewHost, repo: Path
) -> None:
    github.state.files = {**BASE, "web.dstack.yml": service(_free_port())}
    github.state.pull.fork = True
    with _start(tmp_path, github, repo) as server:
        wait_until(lambda: _applied(server), timeout=60, what="main's first reconcile")
        bot = server.server.app.state.preview_runs
        # a fork's PR, synchronized and commented by its author: nothing runs
        deliver(server, "pull_request", pull_event("synchronize", None), "f-1")
        comment_id = github.state.add_comment("/dockyard preview", "forker")
        issue_comment = {
            "action": "created",
            "issue": {"number": 7, "pull_request": {}},
            "comment": {"id": comment_id, "body": "/dockyard preview"},
            "repository": {"full_name": "acme/cfg"},
        }
        deliver(server, "issue_comment", issue_comment, "f-2")
        # the label, added by the fork's author (no write access): nothing runs
        github.state.pull.label("forker")
        deliver(server, "pull_request", pull_event("labeled"), "f-3")
        asyncio.run_coroutine_threadsafe(bot.drain(), _loop(server)).result(30)
        assert github.state.calls("/collaborators/forker/permission")
        assert _preview(server) is None and _gone(server)
        assert _comment(github) == ""
        answers = [b for b in github.state.bodies() if "did not count" in b]
        assert answers == [
            "`/dockyard preview` from @forker did not count: forker has no write access to "
            "acme/cfg (a pull request from a fork is previewed when a maintainer asks)."
        ]

        # a maintainer's label on a head over the previews' budget: refused with the rule
        github.state.files = {
            **BASE,
            "fleets/cloud.dstack.yml": CLOUD,
            "chat.dstack.yml": GPU_SERVICE,
        }
        github.state.pull.unlabel("forker")
        github.state.pull.label("maintainer")
        deliver(server, "pull_request", pull_event("labeled"), "f-4")
        wait_until(lambda: "Not deployed" in _comment(github), what="the refusal", timeout=60)
        body = _comment(github)
        assert "policy: previews.budget.hourly: this preview brings the previews of project" in body
        assert "over their $1.00/h budget" in body
        assert _preview(server).state is PreviewState.REFUSED and _gone(server)

        # within the budget, the maintainer's label deploys the fork's reviewed head; the
        # fork's next push is not deployed until a maintainer asks again
        github.state.files = {**BASE, "web.dstack.yml": service(_free_port())}
        deliver(server, "pull_request", pull_event("labeled"), "f-5")
        wait_until(lambda: not _gone(server), what="the preview project", timeout=60)
        wait_until(
            lambda: _preview(server).state is PreviewState.ACTIVE, what="the preview", timeout=60
        )
        github.state.head = "d" * 40
        deliver(server, "pull_request", pull_event("synchronize", None), "f-6")
        wait_until(
            lambda: "new commits of this fork" in _comment(github), what="the note", timeout=60
        )
        assert "(`dddddddddddd`) are not deployed: a maintainer comments" in _comment(github)
        assert _preview(server).head == HEAD


def _loop(server: Running) -> asyncio.AbstractEventLoop:
    loop = server.server.app.state.preview_runs.loop
    assert isinstance(loop, asyncio.AbstractEventLoop)
    return loop


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def now_ts(self) -> float:
        return self.now


def test_the_ttl_ends_it_and_a_restarted_server_still_tears_down(
    tmp_path: Path, github: FakePreviewHost, repo: Path
) -> None:
    github.state.files = {**BASE, "web.dstack.yml": service(_free_port())}
    with _start(tmp_path, github, repo) as server:
        wait_until(lambda: _applied(server), timeout=60, what="main's first reconcile")
        member, _ = _member_token(server)
        github.state.pull.label("maintainer")
        deliver(server, "pull_request", pull_event("labeled"), "t-1")
        _wait_answers(server, github, member)
        preview = _preview(server)
        assert preview.expires_at is not None and preview.deployed_at is not None
        assert (preview.expires_at - preview.deployed_at).total_seconds() == 7200

        # the TTL ends: a sweep with a clock two hours later tears it down
        later = _Clock(preview.expires_at.timestamp() + 1)
        runs = PreviewRuns(server.server.store, clock=later, owner="test")
        swept = runs.sweep_once()
        assert swept is not None
        assert [p.state for p in swept] == [PreviewState.STOPPING] or _gone(server)
        assert "TTL (2h) ended" in (_preview(server).reason)
        server.controller.hint("runs")
        wait_until(lambda: _finished(runs), timeout=120, what="the TTL teardown")

        # a new preview, then the server stops; the PR closes while it is down
        deliver(server, "pull_request", pull_event("labeled"), "t-2")
        _wait_answers(server, github, member)
    github.state.pull.state = "closed"
    with _start(tmp_path, github, repo) as again:
        wait_until(lambda: _gone(again), timeout=120, what="teardown after the restart")
        wait_until(lambda: _preview(again).state is PreviewState.CLOSED, what="closed", timeout=60)
        assert "the pull request was closed" in _preview(again).reason


def _finished(runs: PreviewRuns) -> bool:
    swept = runs.sweep_once()
    return runs.store.get_project(PREVIEW) is None and swept is not None
