"""`dockyard plan --server` sends the commit's git tree, so the plan a CI job asks for (the
GitLab CI job of docs/pull-requests.md) shows an approval recorded for that content, as the
server's own PR plans do: a real git checkout, a real server on loopback, the CLI run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.domain.approvals import Approval
from tests.pr.gitrepo import git, make_repo
from tests.pr.test_approvals import BIG, POLICY, VIOLATION, deploy
from tests.pr.test_plan_server import plan_cli
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    with running_server(tmp_path, lambda settings, store: FakeController(store)) as running:
        deploy(running)  # the deployed `.dockyard.yml` names alice
        yield running


def _big(server: Running, repo: Path, tmp_path: Path) -> dict[str, object]:
    result = plan_cli(server, repo, tmp_path, server.admin_token, "--format", "json")
    data = json.loads(result.stdout)
    return next(a for a in data["actions"] if a["name"] == "big")


def test_the_cli_plan_counts_an_approval_of_its_tree(server: Running, tmp_path: Path) -> None:
    repo, head = make_repo(tmp_path / "cfg", {".dockyard.yml": POLICY, "big.dstack.yml": BIG})
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    assert _big(server, repo, tmp_path)["action"] == "blocked"

    approval = Approval("main", tree, head, "alice", "gitlab", "acme/cfg", 7, 99, (VIOLATION,))
    assert server.server.store.record_approval(approval)
    approved = _big(server, repo, tmp_path)

    assert approved["action"] == "create" and approved["approved_by"] == ["alice"]
    assert approved["violations"] == [f"policy: {VIOLATION}"]
    other = Approval("main", "0" * 40, head, "alice", "gitlab", "acme/cfg", 7, 98, ())
    server.server.store.record_approval(other)  # another tree's approval: no change
    assert _big(server, repo, tmp_path)["approved_by"] == ["alice"]
