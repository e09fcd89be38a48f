"""`dockyard pr comment` against a recording fake of GitHub and GitLab (real HTTP, real CLI).

Each test runs the installed `dockyard` console script in a subprocess, as CI would, with
the token in the environment, and checks what the host received and what the user saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pr.fakehost import GITLAB_TOKEN, HEAD_SHA, TOKEN, FakeHost, fake_host
from tests.pr.samples import clean_json, representative_json

DOCKYARD = str(Path(sys.executable).with_name("dockyard"))


@pytest.fixture
def host() -> Iterator[FakeHost]:
    with fake_host() as running:
        yield running


def host_env(host: FakeHost) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "GITLAB_", "CI_"))}
    env.update(
        GITHUB_TOKEN=TOKEN,
        GITHUB_API_URL=host.url,
        GITLAB_TOKEN=GITLAB_TOKEN,
        CI_API_V4_URL=host.gitlab_url,
        COLUMNS="200",
    )
    return env


def run_cli(
    host: FakeHost, plan: Path, *args: str, provider: str = "github", separate: bool = False
) -> subprocess.CompletedProcess[str]:
    """The CLI's entry point (`main.run`): in this process, or as a subprocess (`separate`)."""
    command = [DOCKYARD, "pr", "comment", "--provider", provider, "--repo", "acme/configs"]
    command += ["--pr", "7", "--plan", str(plan), *args]
    if separate:
        return subprocess.run(
            command, env=host_env(host), capture_output=True, text=True, timeout=60
        )
    return run_in_process(command, host_env(host))


def run_in_process(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import contextlib
    import io
    from unittest import mock

    from reconciler.cli.main import run

    stdout, stderr = io.StringIO(), io.StringIO()
    code = 0
    with (
        mock.patch.dict(os.environ, env, clear=True),
        mock.patch.object(sys, "argv", ["dockyard", *command[1:]]),
        contextlib.redirect_stdout(stdout),
        contextlib.redirect_stderr(stderr),
    ):
        try:
            run()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(command, code, stdout.getvalue(), stderr.getvalue())


def write(tmp_path: Path, data: dict[str, Any], name: str = "plan.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def assert_no_secret(result: subprocess.CompletedProcess[str]) -> None:
    for token in (TOKEN, GITLAB_TOKEN):
        assert token not in result.stdout and token not in result.stderr
    assert "Traceback" not in result.stderr


def test_first_run_creates_the_comment_and_later_runs_update_it(
    host: FakeHost, tmp_path: Path
) -> None:
    first = run_cli(host, write(tmp_path, representative_json()), separate=True)
    assert first.returncode == 0, first.stderr
    assert "created the plan comment" in first.stdout
    assert len(host.state.comments) == 1
    (comment_id,) = host.state.comments
    assert host.state.bodies()[0].startswith("<!-- dockyard:plan -->\n### Dockyard plan")

    second = run_cli(host, write(tmp_path, clean_json(), "clean.json"))
    assert second.returncode == 0, second.stderr
    assert f"updated the plan comment {comment_id}" in second.stdout
    assert list(host.state.comments) == [comment_id]  # still one comment
    body = host.state.bodies()[0]
    assert "error(s)" not in body and "**Cost: +$1.006/h**" in body
    methods = [(r.method, r.path.split("?")[0]) for r in host.state.requests]
    assert ("PATCH", f"/repos/acme/configs/issues/comments/{comment_id}") in methods
    assert sum(1 for m, _ in methods if m == "POST" and "comments" in _) == 1
    for request in host.state.requests:
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        assert request.headers["x-github-api-version"] == "2022-11-28"
    assert_no_secret(first)
    assert_no_secret(second)


def test_statuses_carry_the_state_and_the_description(host: FakeHost, tmp_path: Path) -> None:
    run_cli(host, write(tmp_path, representative_json()), "--plan-url", "https://ci.example/1")
    run_cli(host, write(tmp_path, clean_json(), "clean.json"))
    (sha1, failed), (sha2, passed) = host.state.statuses
    assert sha1 == sha2 == HEAD_SHA  # the PR head, asked of the host
    assert failed == {
        "state": "failure",
        "context": "dockyard/plan",
        "description": "1 to create, 1 to update, 1 to replace, 1 retained, 1 error; +$1.006/h",
        "target_url": "https://ci.example/1",
    }
    assert passed["state"] == "success"
    assert passed["description"] == "1 to create, 1 to update, 1 to replace, 1 retained; +$1.006/h"


def test_a_given_sha_gets_the_status(host: FakeHost, tmp_path: Path) -> None:
    result = run_cli(host, write(tmp_path, clean_json()), "--sha", "a" * 40)
    assert result.returncode == 0, result.stderr
    assert host.state.statuses[0][0] == "a" * 40
    assert not any("/pulls/" in r.path for r in host.state.requests)


def huge_plan() -> dict[str, Any]:
    """A plan whose full markdown is far over 70,000 characters."""
    actions = [
        {
            "action": "replace",
            "kind": "task",
            "name": f"job-{i:03d}",
            "project": "main",
            "path": f"jobs/job-{i:03d}.dstack.yml",
            "reason": "`commands` cannot change in place: stop the task and submit it again",
            "fields": [{"field": "commands", "old": ["x" * 250], "new": ["y" * 250]}],
        }
        for i in range(150)
    ]
    summary = dict.fromkeys(
        ["create", "update", "replace", "delete", "retain", "noop", "blocked"], 0
    )
    summary["replace"] = 150
    return {"commit": "c" * 40, "base": None, "errors": [], "actions": actions, "summary": summary}


def test_a_plan_over_the_limit_is_truncated_with_a_note(host: FakeHost, tmp_path: Path) -> None:
    from reconciler.core.rendering_markdown import render_markdown
    from reconciler.pr.document import read_report

    full = render_markdown(read_report(huge_plan()).plan, limit=10**9)
    assert len(full) > 70_000
    result = run_cli(host, write(tmp_path, huge_plan()), "--plan-url", "https://ci.example/run/9")
    assert result.returncode == 0, result.stderr
    (body,) = host.state.bodies()
    assert len(body) < 65_536
    shown = body.count("<details>")
    assert 0 < shown < 150
    assert f"✂️ Truncated: {150 - shown} more block(s)" in body
    assert f"task `job-{shown:03d}`" in body.split("Truncated")[1]  # names what was left out
    assert "[full plan](https://ci.example/run/9)" in body


@pytest.mark.parametrize(
    ("status", "headers", "said", "expected"),
    [
        (401, {}, "Bad credentials", "check that GITHUB_TOKEN is set and not expired"),
        (403, {}, "Resource not accessible by integration", "lacks a permission"),
        (404, {}, "Not Found", "check the repository (OWNER/NAME) and the PR number"),
        (422, {}, "Validation Failed", "rejected as invalid: Validation Failed"),
        (429, {"Retry-After": "42"}, "slow down", "rate limit reached (429)"),
        (403, {"Retry-After": "30", "X-RateLimit-Remaining": "0"}, "rate", "retry after 30 s"),
    ],
)
def test_api_errors_give_one_clear_line_and_a_non_zero_exit(
    host: FakeHost,
    tmp_path: Path,
    status: int,
    headers: dict[str, str],
    said: str,
    expected: str,
) -> None:
    host.state.fail_next(status, {"message": said}, **headers)
    result = run_cli(host, write(tmp_path, clean_json()))
    assert result.returncode == 1
    assert f"GitHub {status}" in result.stderr or "rate limit" in result.stderr
    assert expected in " ".join(result.stderr.split())
    assert result.stderr.count("\n") <= 4  # one message, no traceback
    assert_no_secret(result)
    assert host.state.comments == {}


def test_rate_limit_says_how_long_to_wait(host: FakeHost, tmp_path: Path) -> None:
    host.state.fail_next(429, {"message": "x"}, **{"Retry-After": "42"})
    result = run_cli(host, write(tmp_path, clean_json()))
    assert "retry after 42 s (Retry-After)" in " ".join(result.stderr.split())


def test_a_missing_token_or_bad_plan_is_a_usage_error(host: FakeHost, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nope": 1}')
    result = run_cli(host, bad)
    assert result.returncode == 2 and "is not a Dockyard plan" in result.stderr
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_TOKEN"}
    command = [DOCKYARD, "pr", "comment", "--provider", "github", "--repo", "a/b", "--pr", "1"]
    missing = run_in_process(
        [*command, "--plan", str(write(tmp_path, clean_json()))],
        {**env, "GITHUB_API_URL": host.url},
    )
    assert missing.returncode == 2 and "GITHUB_TOKEN is not set" in missing.stderr
    assert host.state.requests == []


def test_gitlab_gets_one_note_updated_in_place_and_a_status(host: FakeHost, tmp_path: Path) -> None:
    first = run_cli(host, write(tmp_path, representative_json()), provider="gitlab")
    assert first.returncode == 0, first.stderr
    second = run_cli(host, write(tmp_path, clean_json(), "c.json"), provider="gitlab")
    assert second.returncode == 0, second.stderr
    assert len(host.state.comments) == 1
    paths = [(r.method, r.path.split("?")[0]) for r in host.state.requests]
    assert ("POST", "/api/v4/projects/acme%2Fconfigs/merge_requests/7/notes") in paths
    note_id = next(iter(host.state.comments))
    assert ("PUT", f"/api/v4/projects/acme%2Fconfigs/merge_requests/7/notes/{note_id}") in paths
    states = [(sha, body["state"], body["name"]) for sha, body in host.state.statuses]
    assert states == [
        (HEAD_SHA, "failed", "dockyard/plan"),
        (HEAD_SHA, "success", "dockyard/plan"),
    ]
    assert all(r.headers["private-token"] == GITLAB_TOKEN for r in host.state.requests)
    assert_no_secret(first)
    assert_no_secret(second)


def test_gitlab_errors_name_the_gitlab_token(host: FakeHost, tmp_path: Path) -> None:
    host.state.fail_next(401, {"message": "401 Unauthorized"})
    result = run_cli(host, write(tmp_path, clean_json()), provider="gitlab")
    assert result.returncode == 1
    assert "check that GITLAB_TOKEN is set" in " ".join(result.stderr.split())
    assert_no_secret(result)
