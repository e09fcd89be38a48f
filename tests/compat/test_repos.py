"""dstack 0.22.5's `repos:` against `dockyard server`: from a git work tree whose branch
tracks an HTTPS remote (a real git smart-HTTP server on loopback, `gitserver.py`), dstack
registers the repo (`repos/init`: its clone URL) and uploads the uncommitted changes
(`repos/upload_code`); the job clones the remote at the tracked commit and applies the diff
before its commands. The job trusts the server's certificate through `files:` (it runs as
another account that cannot read the test's private temp dir)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.compat.conftest import Dstack
from tests.compat.gitserver import git_https_server, self_signed

pytestmark = pytest.mark.slow

REPO_TASK = """type: task
name: {name}
repos:
  - {repo}
files:
  - {cert}:git-cert.pem
env:
  - GIT_SSL_CAINFO=git-cert.pem
commands:
  - cat hello.txt
  - git log --format=%s -1
"""


def _git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
    ident = ["-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, env=env)


def _work_tree(where: Path, served: Path, base: str, env: dict[str, str]) -> Path:
    """A work tree with one commit pushed to the served bare repo, tracking it."""
    work = where / "repoproject"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "hello.txt").write_text("committed\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "first commit", cwd=work)
    _git("clone", "-q", "--bare", str(work), str(served / "proj.git"), cwd=where)
    _git("remote", "add", "origin", f"{base}/proj.git", cwd=work)
    _git("fetch", "-q", "origin", cwd=work, env=env)
    _git("branch", "-q", "--set-upstream-to=origin/main", cwd=work)
    return work


def test_apply_from_a_git_repo_clones_it_and_applies_the_diff(
    dstack: Dstack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    served = tmp_path / "served"
    served.mkdir()
    monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))  # dstack's own `git ls-remote` check
    with git_https_server(served, cert, key) as base:
        work = _work_tree(dstack.workdir, served, base, {**os.environ})
        (work / "hello.txt").write_text("changed, not committed\n")
        text = REPO_TASK.format(name="withrepo", repo=".", cert=cert)
        dstack.write("repo.dstack.yml", text, where=work)
        dstack.ok("apply", "-f", "repo.dstack.yml", "-y", "-d", cwd=work)
        # `--repo PATH` instead of `repos:`, and a URL repo (no diff: the commit as pushed)
        flagged = text.replace("name: withrepo", "name: flagrepo").replace("repos:\n  - .\n", "")
        dstack.write("flag.dstack.yml", flagged, where=work)
        dstack.ok("apply", "-f", "flag.dstack.yml", "--repo", ".", "-y", "-d", cwd=work)
        repo = "{url: '" + base + "/proj.git'}"  # the shorthand cannot hold a port
        url = REPO_TASK.format(name="urlrepo", repo=repo, cert=cert)
        dstack.write("url.dstack.yml", url, where=work)
        dstack.ok("apply", "-f", "url.dstack.yml", "-y", "-d", cwd=work)
        logs = {}
        for name in ("withrepo", "flagrepo", "urlrepo"):
            dstack.wait_status(name, "done", "failed")
            logs[name] = dstack.ok("logs", name).split("\n")[:2]
            assert dstack.run_status(name) == "done", logs
    assert logs["withrepo"] == ["changed, not committed", "first commit"], logs
    assert logs["flagrepo"] == ["changed, not committed", "first commit"], logs
    assert logs["urlrepo"] == ["committed", "first commit"], logs
