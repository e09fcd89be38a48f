"""The composite action's own shell steps, run with bash as a runner would run them.

`.github/actions/plan/action.yml` is read, its `Plan` and `Comment` steps get the
environment GitHub would give them (the `${{ … }}` expressions resolved for a PR of a real
git repo), and run against the recording fake GitHub: the offline plan of the PR head
against its base is posted as the sticky comment and the `dockyard/plan` status.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.pr.fakehost import TOKEN, fake_host
from tests.pr.gitrepo import commit_files, git, make_repo
from tests.pr.samples import BASE_FILES, HEAD_FILES

ACTION = Path(__file__).resolve().parents[2] / ".github" / "actions" / "plan" / "action.yml"
WORKFLOW = ACTION.parents[3] / "examples" / ".github" / "workflows" / "dockyard-plan.yml"


def resolve(value: str, context: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        return context[match.group(1).strip()]

    return re.sub(r"\$\{\{(.*?)\}\}", one, value)


def run_step(step: dict[str, Any], context: dict[str, str], env: dict[str, str], cwd: Path) -> int:
    step_env = {k: resolve(str(v), context) for k, v in (step.get("env") or {}).items()}
    done = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=cwd,
        env={**env, **step_env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert TOKEN not in done.stdout + done.stderr
    return done.returncode


def test_the_action_plans_offline_and_posts_the_comment(tmp_path: Path) -> None:
    repo, base = make_repo(tmp_path / "configs", BASE_FILES)
    head = commit_files(repo, HEAD_FILES, "the PR")
    git(repo, "checkout", "-q", "--detach", head)  # as actions/checkout leaves a PR:
    git(repo, "branch", "-q", "-D", "main")  # detached, without local branches
    steps = {s.get("name"): s for s in yaml.safe_load(ACTION.read_text())["runs"]["steps"]}
    outputs = tmp_path / "github-output"
    with fake_host() as host:
        context = {
            "inputs.server": "",
            "inputs.token": "",
            "inputs.path": "",
            "inputs.key": "",
            "inputs.github-token": TOKEN,
            "github.event.pull_request.head.sha": head,
            "github.event.pull_request.base.sha": base,
            "github.event.pull_request.number": "7",
            "github.server_url": "https://github.com",
            "github.repository": "acme/cfg",
            "github.run_id": "42",
        }
        env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "HOME": str(tmp_path / "home"),
            "RUNNER_TEMP": str(tmp_path),
            "GITHUB_OUTPUT": str(outputs),
            "GITHUB_REPOSITORY": "acme/cfg",
            "GITHUB_API_URL": host.url,
            "DOCKYARD_DATA_DIR": str(tmp_path / "data"),
        }
        assert run_step(steps["Plan"], context, env, repo) == 0
        assert "exit-code=1" in outputs.read_text()  # the invalid file
        assert run_step(steps["Comment"], context, env, repo) == 0
        (body,) = host.state.bodies()
        assert "**1 create, 1 update, 1 replace, 1 retain, 1 noop**" in body
        assert "notebook.dstack.yml:5:8" in body and "**Cost: +$1.006/h**" in body
        assert "<b>replace</b> task <code>train</code>" in body
        assert "(https://github.com/acme/cfg/actions/runs/42)" in body
        ((sha, status),) = host.state.statuses
        assert (sha, status["state"], status["context"]) == (head, "failure", "dockyard/plan")
        assert status["description"] == (
            "1 to create, 1 to update, 1 to replace, 1 retained, 1 error; +$1.006/h"
        )


def step_runs(step: dict[str, Any], context: dict[str, str]) -> bool:
    """Whether a step's `if:` holds: the action's conditions are `a == 'v' && b == 'w'`."""
    condition = step.get("if")
    if condition is None:
        return True
    terms = [term.split("==") for term in str(condition).split("&&")]
    return all(context[name.strip()] == value.strip().strip("'") for name, value in terms)


def test_the_action_fails_the_job_when_the_policy_blocks_a_run(tmp_path: Path) -> None:
    policy = b"policy:\n  runs:\n    max_gpus: 8\n"
    task = b"type: task\nname: train\ncommands: [python train.py]\n"
    big = b"type: task\nname: big\nresources:\n  gpu: A100:16\ncommands: [python big.py]\n"
    base_files = {".dockyard.yml": policy, "train.dstack.yml": task}
    repo, base = make_repo(tmp_path / "configs", base_files)
    head = commit_files(repo, {**base_files, "big.dstack.yml": big}, "a run over the limit")
    git(repo, "checkout", "-q", "--detach", head)
    steps = {s.get("name"): s for s in yaml.safe_load(ACTION.read_text())["runs"]["steps"]}
    outputs = tmp_path / "github-output"
    with fake_host() as host:
        context = {
            "inputs.server": "",
            "inputs.token": "",
            "inputs.path": "",
            "inputs.key": "",
            "inputs.github-token": TOKEN,
            "inputs.fail-on-errors": "true",
            "inputs.fail-on-policy": "true",
            "github.event.pull_request.head.sha": head,
            "github.event.pull_request.base.sha": base,
            "github.event.pull_request.number": "8",
            "github.server_url": "https://github.com",
            "github.repository": "acme/cfg",
            "github.run_id": "43",
        }
        env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "HOME": str(tmp_path / "home"),
            "RUNNER_TEMP": str(tmp_path),
            "GITHUB_OUTPUT": str(outputs),
            "GITHUB_REPOSITORY": "acme/cfg",
            "GITHUB_API_URL": host.url,
            "DOCKYARD_DATA_DIR": str(tmp_path / "data"),
        }
        assert run_step(steps["Plan"], context, env, repo) == 0  # the plan is posted first
        assert "exit-code=3" in outputs.read_text()
        context["steps.plan.outputs.exit-code"] = "3"
        assert run_step(steps["Comment"], context, env, repo) == 0
        ((_, status),) = host.state.statuses
        assert status["state"] == "failure"
        assert status["description"].startswith("1 run(s) break the repo policy")
    failing = [name for name, step in steps.items() if name and name.startswith("Fail on")]
    ran = {name: run_step(steps[name], context, env, repo) for name in failing
           if step_runs(steps[name], context)}  # fmt: skip
    assert ran == {"Fail on a run the policy blocks": 1}  # the job fails
    context["inputs.fail-on-policy"] = "false"
    assert not any(step_runs(steps[name], context) for name in failing)


def test_the_example_workflow_uses_the_action_with_write_permissions() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert workflow[True]["pull_request"]["types"] == ["opened", "synchronize", "reopened"]
    assert workflow["permissions"] == {}  # each job says what it needs
    permissions = workflow["jobs"]["plan"]["permissions"]
    assert permissions["pull-requests"] == "write"
    assert permissions["statuses"] == "write"
    steps = workflow["jobs"]["plan"]["steps"]
    assert steps[0]["with"]["fetch-depth"] == 0
    assert steps[0]["with"]["persist-credentials"] is False
    assert re.search(r"/\.github/actions/plan@[0-9a-f]{40}$", steps[1]["uses"])
