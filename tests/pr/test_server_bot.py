"""The server posting by itself: PR webhooks → comment + `dockyard/plan`; pushes and
reconciles → `dockyard/apply`. A real server on loopback with the real controller (its
previews: the local engine, and Pulumi without its CLI, as on this host), the recording
fake GitHub; for pushes, a config repo the engine reconciles and reports on itself.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.adapters.db import Store
from reconciler.domain.observed import observe_applied
from reconciler.engine.controller import build_controller
from reconciler.ports import Controller
from reconciler.pr.bot import github_repo_of
from reconciler.pr.reviewing import load_files
from reconciler.settings import Settings
from schemas import parse_config
from stacks.engines import UnavailableEngine
from stacks.local import LocalEngine, LocalSettings
from stacks.protocol import PULUMI_NOT_FOUND, Engine, EngineName
from tests.pr.fakehost import TOKEN, FakeHost, fake_host
from tests.pr.samples import BASE_FILES, BASE_SHA, HEAD_FILES
from tests.web.realserver import RealServer, real_server
from tests.web.serving import WEBHOOK_SECRET, Running, running_server, wait_until

PR_HEAD = "e" * 40


@pytest.fixture
def github() -> Iterator[FakeHost]:
    with fake_host() as host:
        host.state.files = dict(HEAD_FILES)
        yield host


def _controller(settings: Settings, store: Store) -> Controller:
    """The real runtime, its engines named: the same previews on any host."""
    engines: dict[EngineName, Engine] = {
        "local": LocalEngine(LocalSettings(data_dir=settings.data_dir / "engines", user="root")),
        "pulumi": UnavailableEngine("pulumi", PULUMI_NOT_FOUND),
    }
    return build_controller(settings, store, engines=engines)


@pytest.fixture
def server(tmp_path: Path, github: FakeHost) -> Iterator[Running]:
    overrides = {"github_token": TOKEN, "github_api_url": github.url, "github_repo": "acme/cfg"}
    with running_server(tmp_path, _controller, **overrides) as running:
        base = load_files(BASE_FILES, commit=BASE_SHA, parse=parse_config)
        for r in base.desired.resources:
            live = observe_applied(r, commit=BASE_SHA)
            running.server.store.record_resource(
                "main", r.kind.value, r.name, origin=live.origin, path=r.path,
                commit=BASE_SHA, spec=r.spec, spec_hash=r.spec_hash, status="running",
            )  # fmt: skip
        yield running


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


def pull_request(action: str, sha: str = PR_HEAD) -> dict[str, Any]:
    return {
        "action": action,
        "number": 7,
        "pull_request": {"number": 7, "head": {"sha": sha, "ref": "f"}, "base": {"ref": "main"}},
        "repository": {"full_name": "acme/cfg"},
    }


def test_a_pull_request_is_planned_and_posted_then_updated(
    server: Running, github: FakeHost
) -> None:
    answer = deliver(server, "pull_request", pull_request("opened"), "d-1")
    assert answer.status_code == 202 and answer.json()["outcome"] == "planning"
    wait_until(lambda: len(github.state.statuses) == 1, what="the plan status")
    (body,) = github.state.bodies()
    assert body.startswith("<!-- dockyard:plan -->")
    assert "notebook.dstack.yml:5:8" in body
    # the runtime previews the cloud fleet: no Pulumi CLI, so it is blocked and costs nothing
    assert "**Cost: +$0/h**" in body and "<b>blocked</b> fleet <code>gpu</code>" in body
    assert PULUMI_NOT_FOUND in body
    sha, status = github.state.statuses[0]
    assert (sha, status["state"], status["context"]) == (PR_HEAD, "failure", "dockyard/plan")

    github.state.files.pop("notebook.dstack.yml")  # the author fixes the PR
    answer = deliver(server, "pull_request", pull_request("synchronize", "d" * 40), "d-2")
    assert answer.json()["outcome"] == "planning"
    wait_until(lambda: len(github.state.statuses) == 2, what="the second plan status")
    assert len(github.state.comments) == 1  # updated in place
    assert "error(s)" not in github.state.bodies()[0]
    assert github.state.statuses[1][1]["state"] == "success"

    again = deliver(server, "pull_request", pull_request("synchronize", "d" * 40), "d-2")
    assert again.json()["outcome"] == "duplicate"
    closed = deliver(server, "pull_request", pull_request("closed"), "d-3")
    assert closed.json()["outcome"] == "ignored"


@pytest.fixture
def watching(tmp_path: Path, github: FakeHost) -> Iterator[RealServer]:
    """A server watching a config repo (the real reconcile of each push)."""
    overrides = {"github_token": TOKEN, "github_api_url": github.url, "github_repo": "acme/cfg"}
    with real_server(tmp_path, **overrides) as real:
        yield real


def test_a_push_sets_apply_pending_and_the_reconcile_sets_the_outcome(
    watching: RealServer, github: FakeHost
) -> None:
    server, repo = watching.running, watching.repo

    def statuses(sha: str) -> list[dict[str, Any]]:
        return [status for commit, status in github.state.statuses if commit == sha]

    def push(sha: str, delivery: str) -> httpx.Response:
        return deliver(server, "push", {"ref": "refs/heads/main", "after": sha}, delivery)

    good = repo.commit({"train.dstack.yml": "type: task\nname: train\ncommands: [echo hi]\n"})
    answer = push(good, "p-1")
    assert answer.json()["outcome"] == "queued"
    wait_until(lambda: statuses(good)[-1:][0]["state"] == "success" if statuses(good) else False,
               60, "the engine's outcome of the push")  # fmt: skip
    pending, done = statuses(good)  # one of each: the outcome is posted once
    assert (pending["state"], pending["context"]) == ("pending", "dockyard/apply")
    page = httpx.get(pending["target_url"])
    assert page.status_code == 200 and good in page.text  # the commit's reconcile page
    assert (done["context"], done["description"]) == (
        "dockyard/apply",
        "applied: 2 create",
    )  # the implicit fleet, the task
    reconcile_id = answer.json()["reconcile_id"]
    url = done["target_url"]
    assert url.startswith(f"{server.url}/pages/reconciles/{reconcile_id}?sig=")
    assert httpx.get(url).status_code == 200
    assert httpx.get(url.split("?")[0]).status_code == 403  # unsigned
    assert httpx.get(url[:-2] + "00").status_code == 403  # forged

    bad = repo.commit({"typo.dstack.yml": "type: task\nname: typo\ncomands: [x]\n"})
    assert push(bad, "p-2").json()["outcome"] == "queued"
    wait_until(lambda: len(statuses(bad)) == 2, 60, "the engine's outcome of the bad push")
    failed = statuses(bad)[1]
    assert failed["state"] == "failure" and "typo.dstack.yml:3:1" in failed["description"]


def test_a_host_failure_is_logged_in_one_line_without_the_token(
    server: Running, github: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    github.state.fail_next(401, {"message": "Bad credentials"})
    with caplog.at_level(logging.WARNING, logger="reconciler.pr.bot"):
        answer = deliver(server, "pull_request", pull_request("opened"), "d-9")
        wait_until(lambda: len(github.state.statuses) == 1, what="the error status")
    assert TOKEN not in answer.text and TOKEN not in caplog.text
    assert "planning pull request acme/cfg#7 failed: GitHub 401" in caplog.text
    assert github.state.statuses[0][1]["state"] == "error"
    assert github.state.comments == {}


def test_settings_keep_the_token_secret() -> None:
    settings = Settings.from_env({"DOCKYARD_GITHUB_TOKEN": TOKEN, "DOCKYARD_GITHUB_REPO": "a/b"})
    assert TOKEN not in repr(settings) and TOKEN not in str(settings.model_dump())
    assert settings.github_token is not None
    assert settings.github_token.get_secret_value() == TOKEN


def test_the_repo_is_found_from_a_url() -> None:
    assert github_repo_of("https://github.com/acme/cfg.git") == "acme/cfg"
    assert github_repo_of("git@github.com:acme/cfg.git") == "acme/cfg"
    assert github_repo_of("https://gitlab.com/acme/cfg") is None
