"""`/dockyard approve` on GitLab: a merge-request note read back from the recording fake
GitLab API (its author is the API's username), the head's tree hashed from GitLab's
listing of a real git repository, a real store (SQLite and PostgreSQL) and a real server
receiving the `Note Hook` with the GitLab token header."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.adapters.db.store import Store
from reconciler.pr.approving import ApprovalRequest, Outcome, approve, is_approve_command
from reconciler.pr.gitlab import GitLab
from stacks.catalog import load_catalog
from tests.pr.fakehost import GITLAB_TOKEN, FakeHost, fake_host
from tests.pr.gitrepo import commit_files, git, make_repo
from tests.pr.test_approvals import BIG, POLICY, VIOLATION, deploy, deployed
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.web.fakes import FakeController
from tests.web.serving import WEBHOOK_SECRET, Running, running_server, wait_until

REFUSED = "`/dockyard approve` from @{} did not count: {}."


@pytest.fixture
def gitlab(tmp_path: Path) -> Iterator[FakeHost]:
    repo, head = make_repo(tmp_path / "cfg", {".dockyard.yml": POLICY, "big.dstack.yml": BIG})
    with fake_host() as host:
        host.state.repo = repo
        host.state.head = head
        yield host


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'dockyard.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        url = server.create_database()
    store = Store.from_url(url, migrate=True)
    yield store
    store.close()


def _tree(gitlab: FakeHost) -> str:
    assert gitlab.state.repo is not None
    return git(gitlab.state.repo, "rev-parse", f"{gitlab.state.head}^{{tree}}")


def _approve(store: Store, gitlab: FakeHost, note: int, seen: str | None = None) -> Outcome:
    host = GitLab("acme/cfg", token=GITLAB_TOKEN, api_url=gitlab.gitlab_url)
    try:
        request = ApprovalRequest("acme/cfg", 7, note, "main", seen_head=seen)
        return asyncio.run(approve(store, host, request, None, load_catalog(), deployed))
    finally:
        host.close()


def test_a_named_approver_turns_the_status_green_for_that_head(
    store: Store, gitlab: FakeHost
) -> None:
    head = gitlab.state.head
    note = gitlab.state.add_comment("/dockyard approve", "alice")

    done = _approve(store, gitlab, note, seen=head)

    assert done == Outcome(True, f"alice approved 1 violation(s) of {head[:12]}")
    (approval,) = store.approvals_for("main", _tree(gitlab))  # git's own tree id
    assert (approval.approver, approval.provider, approval.head) == ("alice", "gitlab", head)
    (sha, status) = gitlab.state.statuses[-1]
    assert (sha, status["name"], status["state"]) == (head, "dockyard/plan", "success")
    assert status["description"].startswith("policy exception approved by alice;")
    plan = next(b for b in gitlab.state.bodies() if b.startswith("<!-- dockyard:plan"))
    assert "**✅ Policy exception approved by @alice for this content" in plan
    assert VIOLATION in plan
    reads = [r.path for r in gitlab.state.requests if r.method == "GET"]
    assert f"/api/v4/projects/acme%2Fcfg/merge_requests/7/notes/{note}" in reads


def test_refused_approvals_are_answered_on_the_merge_request(
    store: Store, gitlab: FakeHost
) -> None:
    head = gitlab.state.head
    mallory = gitlab.state.add_comment("/dockyard approve", "mallory")
    done = _approve(store, gitlab, mallory)
    why = (
        "mallory is not in `policy.approvers` of the deployed `.dockyard.yml` (nothing is "
        "applied yet); a pull request cannot name its own approvers"
    )
    assert done == Outcome(False, why, REFUSED.format("mallory", why))
    assert gitlab.state.bodies()[-1] == REFUSED.format("mallory", why)
    assert not is_approve_command(gitlab.state.bodies()[-1])  # the answer asks nothing

    stale = gitlab.state.add_comment("/dockyard approve", "alice")
    done = _approve(store, gitlab, stale, seen="0" * 40)  # a push came after the note
    why = f"it approves {'0' * 12}, but the head is now {head[:12]}: approve the new head"
    assert gitlab.state.bodies()[-1] == REFUSED.format("alice", why) and not done.counted

    assert gitlab.state.repo is not None
    fixed = BIG.replace(b"gpu: 4", b"gpu: 1")
    gitlab.state.head = commit_files(
        gitlab.state.repo, {".dockyard.yml": POLICY, "big.dstack.yml": fixed}, "fix"
    )
    nothing = gitlab.state.add_comment("/dockyard approve", "alice")
    done = _approve(store, gitlab, nothing)
    why = f"the plan of {gitlab.state.head[:12]} breaks no policy rule, so there is nothing to "
    why += "approve"
    assert gitlab.state.bodies()[-1] == REFUSED.format("alice", why) and not done.counted
    assert gitlab.state.statuses == [] and store.approvals_for("main", _tree(gitlab)) == []


# -- through the server's GitLab webhook ----------------------------------------------------


@pytest.fixture
def server(tmp_path: Path, gitlab: FakeHost) -> Iterator[Running]:
    overrides = {"gitlab_token": GITLAB_TOKEN, "gitlab_api_url": gitlab.gitlab_url}
    with running_server(tmp_path, lambda s, store: FakeController(store), **overrides) as running:
        deploy(running)
        yield running


def _note(note_id: int, claimed: str, head: str) -> dict[str, Any]:
    return {
        "object_kind": "note",
        "user": {"id": 1, "username": claimed},
        "project": {"path_with_namespace": "acme/cfg"},
        "object_attributes": {
            "id": note_id,
            "note": "/dockyard approve",
            "noteable_type": "MergeRequest",
            "action": "create",
        },
        "merge_request": {"iid": 7, "last_commit": {"id": head}},
    }


def _deliver(server: Running, payload: dict[str, Any], delivery: str, token: str) -> httpx.Response:
    headers = {
        "X-Gitlab-Event": "Note Hook",
        "X-Gitlab-Event-UUID": delivery,
        "X-Gitlab-Token": token,
    }
    return httpx.post(f"{server.url}/api/webhooks/gitlab", json=payload, headers=headers)


def test_the_note_hook_reads_the_note_back_and_a_forged_author_does_not_count(
    server: Running, gitlab: FakeHost
) -> None:
    head = gitlab.state.head
    forged = gitlab.state.add_comment("/dockyard approve", "mallory")
    assert _deliver(server, _note(forged, "alice", head), "n-0", "wrong").status_code == 401
    answer = _deliver(server, _note(forged, "alice", head), "n-1", WEBHOOK_SECRET)
    assert answer.status_code == 202 and answer.json()["outcome"] == "planning"
    wait_until(lambda: len(gitlab.state.comments) == 2, what="the answer to mallory")
    assert gitlab.state.bodies()[-1].startswith("`/dockyard approve` from @mallory did not count")
    again = _deliver(server, _note(forged, "alice", head), "n-1", WEBHOOK_SECRET)
    assert again.json()["outcome"] == "duplicate"

    genuine = gitlab.state.add_comment("/dockyard approve", "alice")
    _deliver(server, _note(genuine, "alice", head), "n-2", WEBHOOK_SECRET)
    wait_until(lambda: len(gitlab.state.statuses) == 1, what="the approved plan status")
    assert gitlab.state.statuses[0][0] == head
    assert gitlab.state.statuses[0][1]["state"] == "success"
    approvals = server.server.store.approvals_for("main", _tree(gitlab))
    assert [(a.approver, a.comment_id) for a in approvals] == [("alice", genuine)]
    issue = _note(genuine, "alice", head)
    issue["object_attributes"]["noteable_type"] = "Issue"
    answer = _deliver(server, issue, "n-3", WEBHOOK_SECRET)
    assert answer.json() == {"outcome": "ignored", "reason": "the note is not on a merge request"}
