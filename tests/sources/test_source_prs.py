"""Each source's pull requests: its own comment, status, token, project and approvers.

A real server (real controller, no `--repo`, no server GitHub token) following sources of
real git repos from a sources file, each with its own webhook secret and its own API
token (`credentials: env:…`); the recording fake GitHub/GitLab API (tests/pr/fakehost.py)
accepts each source's token and records which one posted where. Deliveries over
loopback HTTP, in the attack's own form: a PR of repo B signed with repo A's secret is
refused and posts nothing; a PR head naming its author as approver changes nothing, the
approvers are those of the source's deployed branch.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engine.fixtures import ConfigRepo
from tests.pr.fakehost import FakeHost, fake_host
from tests.pr.gitrepo import make_repo
from tests.pr.test_approvals import BIG, POLICY
from tests.sources.test_source_loops import reconciles, sources_file
from tests.web.serving import Running, running_server, wait_until

SECRET_A, SECRET_B = "team-a-hook-secret", "team-b-hook-secret"
TOKEN_A, TOKEN_B = (
    "ghp_teamAtokenAAAAAAAAAAAAAAAAAAAAAAAAA",
    "ghp_teamBtokenBBBBBBBBBBBBBBBBBBBBBBBBB",
)
PR_HEAD = "e" * 40
DEPLOYED = POLICY + b"prune:\n  allow_empty: true\n"
TRAIN = b"type: task\nname: train\ncommands: [echo hi]\n"


@dataclass
class Two:
    server: Running
    host: FakeHost
    a: ConfigRepo
    b: ConfigRepo


def _settled(server: Running, *projects: str) -> bool:
    rows = [r for p in projects for r in reconciles(server, p)]
    return len(rows) >= len(projects) and all(
        r["status"] not in ("queued", "running") for r in rows
    )


@pytest.fixture
def two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Two]:
    for name, value in [("TEAM_A_HOOK", SECRET_A), ("TEAM_B_HOOK", SECRET_B),
                        ("TEAM_A_TOKEN", TOKEN_A), ("TEAM_B_TOKEN", TOKEN_B)]:  # fmt: skip
        monkeypatch.setenv(name, value)
    a, b = ConfigRepo(tmp_path / "team-a"), ConfigRepo(tmp_path / "team-b")
    a.commit({"README.md": "a\n"}, "a")
    # team-b's deployed branch: alice approves, one GPU per run (no configs yet: allowed)
    b.commit({"README.md": "b\n", ".dockyard.yml": DEPLOYED.decode()}, "b")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "team-a", "repo": str(a.path), "project": "alpha",
         "webhook_secret": "env:TEAM_A_HOOK", "credentials": "env:TEAM_A_TOKEN"},
        {"name": "team-b", "repo": str(b.path), "project": "beta",
         "webhook_secret": "env:TEAM_B_HOOK", "credentials": "env:TEAM_B_TOKEN"},
    )  # fmt: skip
    with fake_host() as host:
        host.state.tokens = {TOKEN_A, TOKEN_B}
        host.state.head = PR_HEAD
        overrides: dict[str, Any] = {
            "sources_config": config,
            "fetch_interval": 3600,
            "github_api_url": host.url,
            "gitlab_api_url": host.gitlab_url,
        }
        with running_server(tmp_path, None, **overrides) as server:
            wait_until(lambda: _settled(server, "alpha", "beta"), 60, "the first reconciles")
            yield Two(server, host, a, b)


def github(
    server: Running, event: str, payload: dict[str, Any], secret: str, delivery: str = ""
) -> httpx.Response:
    body = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": signature,
        "Content-Type": "application/json",
    }
    return httpx.post(f"{server.url}/api/webhooks/github", content=body, headers=headers)


def pull_request(full_name: str, clone_url: str, action: str = "opened") -> dict[str, Any]:
    return {
        "action": action,
        "number": 7,
        "pull_request": {"number": 7, "head": {"sha": PR_HEAD, "ref": "f"}},
        "repository": {"full_name": full_name, "clone_url": clone_url},
    }


def comment(full_name: str, clone_url: str, comment_id: int) -> dict[str, Any]:
    return {
        "action": "created",
        "issue": {"number": 7, "pull_request": {}},
        "comment": {"id": comment_id, "body": "/dockyard approve"},
        "repository": {"full_name": full_name, "clone_url": clone_url},
    }


def test_a_sources_pull_request_gets_its_own_comment_and_status(two: Two) -> None:
    state = two.host.state
    state.files = {"train.dstack.yml": TRAIN}
    answer = github(two.server, "pull_request", pull_request("acme/team-b", str(two.b.path)),
                    SECRET_B)  # fmt: skip
    assert answer.status_code == 202 and answer.json()["outcome"] == "planning", answer.text
    wait_until(lambda: len(state.statuses) == 1, 30, "team-b's plan status")
    sha, status = state.statuses[0]
    assert (sha, status["context"], status["state"]) == (PR_HEAD, "dockyard/team-b/plan", "success")
    (body,) = state.bodies()
    assert body.startswith("<!-- dockyard:plan team-b -->") and "train" in body
    # every request went to team-b's repository, with team-b's own token
    assert {r.path.split("/")[2:4] == ["acme", "team-b"] for r in state.requests} == {True}
    assert {r.headers["authorization"] for r in state.requests} == {f"Bearer {TOKEN_B}"}


def test_a_pull_request_signed_with_the_other_sources_secret_is_refused(two: Two) -> None:
    state = two.host.state
    state.files = {"train.dstack.yml": TRAIN}
    payload = pull_request("acme/team-b", str(two.b.path))
    answer = github(two.server, "pull_request", payload, SECRET_A, "pr-1")
    assert answer.status_code == 401, answer.text
    assert "team-b" in answer.json()["reason"]
    assert state.requests == []
    # the refused delivery was recorded nowhere: the same delivery id, rightly signed, plans
    answer = github(two.server, "pull_request", payload, SECRET_B, "pr-1")
    assert answer.status_code == 202 and answer.json()["outcome"] == "planning", answer.text
    wait_until(lambda: len(state.statuses) == 1, 30, "the rightly signed plan")
    assert len(state.comments) == 1 and state.statuses[0][1]["context"] == "dockyard/team-b/plan"


def test_a_pr_head_naming_its_author_as_approver_changes_nothing(two: Two) -> None:
    """team-b's PR adds mallory to `policy.approvers` beside a run over the limit: the
    approvers are those of team-b's deployed branch (alice), read from team-b's mirror."""
    state = two.host.state
    state.files = {".dockyard.yml": POLICY.replace(b"[alice]", b"[alice, mallory]"),
                   "big.dstack.yml": BIG}  # fmt: skip
    repo = ("acme/team-b", str(two.b.path))
    assert github(two.server, "pull_request", pull_request(*repo), SECRET_B).status_code == 202
    wait_until(lambda: len(state.statuses) == 1, 30, "the plan status")
    assert state.statuses[0][1]["state"] == "failure"  # the run breaks the deployed policy

    mallory = state.add_comment("/dockyard approve", "mallory")
    assert (
        github(two.server, "issue_comment", comment(*repo, mallory), SECRET_B).json()["outcome"]
        == "planning"
    )
    wait_until(lambda: len(state.comments) == 3, 30, "the answer to mallory")
    reply = state.bodies()[-1]
    assert "mallory is not in `policy.approvers` of the deployed `.dockyard.yml` at " in reply
    assert len(state.statuses) == 1  # nothing re-posted

    alice = state.add_comment("/dockyard approve", "alice")
    assert github(two.server, "issue_comment", comment(*repo, alice), SECRET_B).status_code == 202
    wait_until(lambda: len(state.statuses) == 2, 30, "the plan re-posted with alice's approval")
    status = state.statuses[1][1]
    assert (status["context"], status["state"]) == ("dockyard/team-b/plan", "success")
    assert "approved by alice" in status["description"]
    plans = [b for b in state.bodies() if b.startswith("<!-- dockyard:plan team-b -->")]
    assert len(plans) == 1  # the one plan comment, updated in place


def test_a_gitlab_merge_request_gets_its_sources_note_and_status(two: Two, tmp_path: Path) -> None:
    state = two.host.state
    state.repo, state.head = make_repo(tmp_path / "mr", {"train.dstack.yml": TRAIN})
    payload = {
        "object_kind": "merge_request",
        "project": {"path_with_namespace": "acme/team-a", "git_http_url": str(two.a.path)},
        "object_attributes": {"iid": 7, "action": "open", "target_branch": "main",
                              "last_commit": {"id": state.head}},
    }  # fmt: skip

    def deliver(token: str) -> httpx.Response:
        headers = {
            "X-Gitlab-Event": "Merge Request Hook",
            "X-Gitlab-Event-UUID": str(uuid.uuid4()),
            "X-Gitlab-Token": token,
        }
        return httpx.post(f"{two.server.url}/api/webhooks/gitlab", json=payload, headers=headers)

    assert deliver(SECRET_B).status_code == 401  # team-a's repository, team-b's token
    assert state.requests == []
    answer = deliver(SECRET_A)
    assert answer.status_code == 202 and answer.json()["outcome"] == "planning", answer.text
    wait_until(lambda: len(state.statuses) == 1, 30, "team-a's plan status")
    sha, status = state.statuses[0]
    assert (sha, status["name"], status["state"]) == (state.head, "dockyard/team-a/plan", "success")
    (body,) = state.bodies()
    assert body.startswith("<!-- dockyard:plan team-a -->") and "train" in body
    assert {r.path.startswith("/api/v4/projects/acme%2Fteam-a/") for r in state.requests} == {True}
    assert {r.headers["private-token"] for r in state.requests} == {TOKEN_A}


def test_a_monorepos_sources_each_post_their_own_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONO_HOOK", SECRET_A)
    monkeypatch.setenv("MONO_TOKEN", TOKEN_A)
    mono = ConfigRepo(tmp_path / "mono")
    mono.commit({"README.md": "mono\n"}, "mono")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "nlp", "repo": str(mono.path), "paths": "[teams/nlp]", "project": "nlp",
         "webhook_secret": "env:MONO_HOOK", "credentials": "env:MONO_TOKEN"},
        {"name": "speech", "repo": str(mono.path), "paths": "[teams/speech]",
         "project": "speech", "webhook_secret": "env:MONO_HOOK",
         "credentials": "env:MONO_TOKEN"},
    )  # fmt: skip
    with fake_host() as host:
        host.state.tokens = {TOKEN_A}
        host.state.files = {
            "teams/nlp/train.dstack.yml": b"type: task\nname: nlp-train\ncommands: [echo n]\n",
            "teams/speech/asr.dstack.yml": b"type: task\nname: asr-train\ncommands: [echo s]\n",
        }
        overrides = {"sources_config": config, "fetch_interval": 3600, "github_api_url": host.url}
        with running_server(tmp_path, None, **overrides) as server:
            payload = pull_request("acme/mono", str(mono.path))
            answer = github(server, "pull_request", payload, SECRET_A)
            assert answer.status_code == 202 and answer.json()["outcome"] == "planning"
            wait_until(lambda: len(host.state.statuses) == 2, 30, "both sources' statuses")
    contexts = sorted(status["context"] for _, status in host.state.statuses)
    assert contexts == ["dockyard/nlp/plan", "dockyard/speech/plan"]
    bodies = {b.split("\n", 1)[0]: b for b in host.state.bodies()}
    nlp, speech = bodies["<!-- dockyard:plan nlp -->"], bodies["<!-- dockyard:plan speech -->"]
    assert "nlp-train" in nlp and "asr-train" not in nlp
    assert "asr-train" in speech and "nlp-train" not in speech


def test_a_source_without_a_token_plans_nothing_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TEAM_A_HOOK", SECRET_A)
    a = ConfigRepo(tmp_path / "team-a")
    a.commit({"README.md": "a\n"}, "a")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "team-a", "repo": str(a.path), "project": "alpha",
         "webhook_secret": "env:TEAM_A_HOOK"},
    )  # fmt: skip
    with fake_host() as host, caplog.at_level(logging.WARNING, "reconciler.pr.sourcebots"):
        overrides = {"sources_config": config, "fetch_interval": 3600, "github_api_url": host.url}
        with running_server(tmp_path, None, **overrides) as server:
            for _ in range(2):
                payload = pull_request("acme/team-a", str(a.path))
                answer = github(server, "pull_request", payload, SECRET_A)
                assert answer.status_code == 202 and answer.json()["outcome"] == "ignored"
                assert "team-a has no API token" in answer.json()["reason"]
        assert host.state.requests == []
    told = [r for r in caplog.records if r.name == "reconciler.pr.sourcebots"]
    assert len(told) == 1 and "team-a has no API token" in told[0].getMessage()


def test_a_delivery_naming_another_repository_makes_the_source_post_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack: whoever holds team-c's webhook secret sends a pull request routed to
    team-c (its URL fields are team-c's) that names another repository the token
    reaches; team-c's token must post nowhere. The same delivery naming team-c posts."""
    secret, token = "team-c-hook-secret", "ghp_teamCtokenCCCCCCCCCCCCCCCCCCCCCCCCC"
    monkeypatch.setenv("TEAM_C_HOOK", secret)
    monkeypatch.setenv("TEAM_C_TOKEN", token)
    url = "https://git.invalid/acme/team-c.git"  # never fetched here: the PR is read by API
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "team-c", "repo": url, "project": "gamma",
         "webhook_secret": "env:TEAM_C_HOOK", "credentials": "env:TEAM_C_TOKEN"},
    )  # fmt: skip
    with fake_host() as host:
        host.state.tokens = {token}
        host.state.head = PR_HEAD
        host.state.files = {"train.dstack.yml": TRAIN}
        overrides: dict[str, Any] = {
            "sources_config": config,
            "fetch_interval": 3600,
            "github_api_url": host.url,
        }
        with running_server(tmp_path, None, **overrides) as server:
            answer = github(server, "pull_request", pull_request("acme/victim", url), secret)
            assert answer.status_code == 202, answer.text
            assert "names 'acme/victim', source team-c follows 'acme/team-c'" in answer.text
            assert host.state.requests == []
            answer = github(server, "pull_request", pull_request("Acme/Team-C", url), secret)
            assert answer.status_code == 202 and answer.json()["outcome"] == "planning"
            wait_until(lambda: len(host.state.statuses) == 1, 30, "team-c's plan status")
            paths = {tuple(r.path.split("/")[2:4]) for r in host.state.requests}
            assert paths == {("Acme", "Team-C")}, paths
