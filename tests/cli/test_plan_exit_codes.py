"""`dockyard plan` and `dockyard pr plan` exit 3 when the repo policy blocks a run.

A CI job that runs either command must fail a pull request whose runs break a limit of
`.dockyard.yml` (docs/plan.md, "Exit code"), as the server's `dockyard/plan` status does;
a clean plan exits 0, a plan with errors 1 (errors win: nothing is applied then), a usage
error 2. Real config repos in git, planned offline against their base commit, through the
whole CLI (`build_app`, as the console script runs it).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from reconciler.cli.main import build_app
from reconciler.cli.plan import EXIT_BLOCKED, EXIT_ERRORS
from tests.pr.gitrepo import commit_files, make_repo

POLICY = b"policy:\n  runs:\n    privileged: false\n    max_gpus: 8\n"
TASK = b"type: task\nname: train\ncommands: [python train.py]\n"
PRIVILEGED = b"type: task\nname: train\nprivileged: true\ncommands: [python train.py]\n"
TOO_MANY_GPUS = b"type: task\nname: big\nresources:\n  gpu: A100:16\ncommands: [python big.py]\n"


def _repo(tmp_path: Path, head: dict[str, bytes]) -> tuple[Path, str, str]:
    repo, base = make_repo(
        tmp_path / "configs", {".dockyard.yml": POLICY, "train.dstack.yml": TASK}
    )
    return repo, base, commit_files(repo, head, "the PR")


def _invoke(*args: str, data_dir: Path) -> tuple[int, str]:
    result = CliRunner().invoke(build_app(), list(args), env={"DOCKYARD_DATA_DIR": str(data_dir)})
    return result.exit_code, result.stdout


def test_a_run_the_policy_blocks_makes_plan_exit_3(tmp_path: Path) -> None:
    head = {".dockyard.yml": POLICY, "train.dstack.yml": PRIVILEGED}
    repo, base, _ = _repo(tmp_path, head)
    code, out = _invoke(
        "plan", "--repo", str(repo), "--base", base, "--format", "json", data_dir=tmp_path / "d"
    )
    assert code == EXIT_BLOCKED == 3, out
    (action,) = [a for a in json.loads(out)["actions"] if a["name"] == "train"]
    assert action["action"] == "blocked"
    assert "runs.privileged" in action["violations"][0]
    code, table = _invoke("plan", "--repo", str(repo), "--base", base, data_dir=tmp_path / "d")
    assert code == 3 and "blocked" in table  # every format: the code is the plan's


def test_a_new_run_over_a_limit_makes_pr_plan_exit_3(tmp_path: Path) -> None:
    head = {".dockyard.yml": POLICY, "train.dstack.yml": TASK, "big.dstack.yml": TOO_MANY_GPUS}
    repo, base, sha = _repo(tmp_path, head)
    code, out = _invoke(
        "pr", "plan", "--repo", str(repo), "--ref", sha, "--base", base, data_dir=tmp_path / "d"
    )
    assert code == 3, out
    blocked = [a for a in json.loads(out)["actions"] if a["action"] == "blocked"]
    assert [a["name"] for a in blocked] == ["big"]
    assert "runs.max_gpus" in blocked[0]["violations"][0]


def test_a_clean_plan_exits_0(tmp_path: Path) -> None:
    head = {".dockyard.yml": POLICY, "train.dstack.yml": TASK.replace(b"train.py", b"t2.py")}
    repo, base, sha = _repo(tmp_path, head)
    code, out = _invoke("plan", "--repo", str(repo), "--base", base, data_dir=tmp_path / "d")
    assert code == 0, out
    assert "1 replace" in out
    code, out = _invoke(
        "pr", "plan", "--repo", str(repo), "--ref", sha, "--base", base, data_dir=tmp_path / "d"
    )
    assert code == 0, out


def test_errors_win_over_a_blocked_run(tmp_path: Path) -> None:
    head = {
        ".dockyard.yml": POLICY,
        "train.dstack.yml": PRIVILEGED,
        "bad.dstack.yml": b"type: task\nname: bad\ncommands: 3\n",
    }
    repo, base, sha = _repo(tmp_path, head)
    code, _ = _invoke("plan", "--repo", str(repo), "--base", base, data_dir=tmp_path / "d")
    assert code == EXIT_ERRORS
    code, out = _invoke(
        "pr", "plan", "--repo", str(repo), "--ref", sha, "--base", base, data_dir=tmp_path / "d"
    )
    assert code == EXIT_ERRORS
    assert "blocked" in {a["action"] for a in json.loads(out)["actions"]}  # shown, still 1
