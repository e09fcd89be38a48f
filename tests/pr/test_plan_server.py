"""`dockyard plan --server URL --token T`: a real git checkout, a real server on loopback.

The server's store says the base of the representative PR is deployed; the CLI reads the
head commit's files in its checkout, posts them, and prints the server's plan with prices.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.domain.observed import observe_applied
from reconciler.pr.reviewing import load_files
from schemas import parse_config
from tests.pr.gitrepo import commit_files, git, make_repo
from tests.pr.samples import BASE_FILES, BASE_SHA, HEAD_FILES
from tests.pr.test_comment_cli import run_in_process
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    with running_server(tmp_path, lambda settings, store: FakeController(store)) as running:
        base = load_files(BASE_FILES, commit=BASE_SHA, parse=parse_config)
        for resource in base.desired.resources:
            live = observe_applied(resource, commit=BASE_SHA)
            running.server.store.record_resource(
                "main",
                resource.kind.value,
                resource.name,
                origin=live.origin,
                path=resource.path,
                commit=BASE_SHA,
                spec=resource.spec,
                spec_hash=resource.spec_hash,
                status="running",
            )
        yield running


def plan_cli(server: Running, repo: Path, tmp_path: Path, token: str, *extra: str) -> object:
    command = ["dockyard", "plan", "--repo", str(repo), "--ref", "HEAD"]
    command += ["--data-dir", str(tmp_path / "cli-data"), "--server", server.url, *extra]
    return run_in_process([*command, "--token", token], {"COLUMNS": "200"})


def test_the_server_plans_the_commit_against_live_state_with_prices(
    server: Running, tmp_path: Path
) -> None:
    repo, head = make_repo(tmp_path / "configs", HEAD_FILES)
    result = plan_cli(server, repo, tmp_path, server.admin_token, "--format", "json")
    assert result.returncode == 1, result.stderr  # the invalid file: exit 1, like `plan`
    data = json.loads(result.stdout)
    assert data["commit"] == head
    assert [(e["path"], e["line"]) for e in data["errors"]] == [("notebook.dstack.yml", 5)]
    actions = {(a["action"], a["kind"], a["name"]) for a in data["actions"]}
    assert actions == {
        ("create", "fleet", "gpu"),
        ("update", "service", "llm"),
        ("replace", "task", "train"),
        ("retain", "volume", "data"),
        ("noop", "fleet", "lab"),
    }
    assert data["cost"]["total_delta"] == pytest.approx(1.006)
    train = next(c for c in data["cost"]["actions"] if c["name"] == "train")
    assert train["new"]["offer"].startswith("aws us-east-1 g5.xlarge")
    assert train["old"]["per_hour"] == 0.0  # it ran on the SSH fleet `lab`


def test_markdown_from_the_server_shows_the_cost(server: Running, tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path / "configs", HEAD_FILES)
    result = plan_cli(server, repo, tmp_path, server.admin_token, "--format", "markdown")
    assert "**Cost: +$1.006/h**" in result.stdout
    assert "<!-- dockyard:plan" not in result.stdout


def test_a_wrong_token_is_one_clear_line(server: Running, tmp_path: Path) -> None:
    repo, _ = make_repo(tmp_path / "configs", HEAD_FILES)
    result = plan_cli(server, repo, tmp_path, "not-a-valid-token-123")
    assert result.returncode == 1
    assert "refused the token (401)" in result.stderr
    assert "not-a-valid-token-123" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_pr_plan_works_in_a_detached_checkout_on_the_server_or_offline(
    server: Running, tmp_path: Path
) -> None:
    repo, base = make_repo(tmp_path / "configs", BASE_FILES)
    head = commit_files(repo, HEAD_FILES, "the PR")
    git(repo, "checkout", "-q", "--detach", head)
    git(repo, "branch", "-q", "-D", "main")
    command = ["dockyard", "pr", "plan", "--repo", str(repo), "--ref", head]
    env = {"DOCKYARD_DATA_DIR": str(tmp_path / "data")}
    live = run_in_process([*command, "--server", server.url, "--token", server.admin_token], env)
    offline = run_in_process([*command, "--base", base], env)
    assert live.returncode == offline.returncode == 1, live.stderr + offline.stderr
    live_plan, offline_plan = json.loads(live.stdout), json.loads(offline.stdout)
    assert live_plan["actions"] == offline_plan["actions"]  # the store holds the base
    assert live_plan["cost"] == offline_plan["cost"]
    assert live_plan["base"] is None and offline_plan["base"] == base
    neither = run_in_process(command, env)
    assert neither.returncode == 2 and "either --base REF" in neither.stderr
