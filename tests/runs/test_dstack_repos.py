"""dstack's remote repo of a run as a configuration Dockyard runs (core/dstack_repos.py)."""

from __future__ import annotations

import io
import tarfile

from reconciler.core.dstack_repos import (
    DIFF_NAME,
    diff_archive,
    remote_repo_data,
    with_dstack_repo,
)

DATA = {"repo_type": "remote", "repo_name": "p", "repo_branch": "main", "repo_hash": "abc"}


def test_a_local_path_repo_becomes_the_clone_url_at_dstacks_commit() -> None:
    task = {"type": "task", "repos": [{"local_path": ".", "path": "code"}], "commands": ["ls"]}
    changed = with_dstack_repo(task, DATA, "https://git.example/p.git", has_diff=True)
    assert changed["repos"] == [
        {"url": "https://git.example/p.git", "path": "code", "branch": "main", "hash": "abc"}
    ]
    assert changed["commands"][0].startswith("git -C code apply --whitespace=nowarn")
    assert changed["commands"][1:] == ["ls"]
    dev = with_dstack_repo({"type": "dev-environment"}, DATA, "u", has_diff=True)
    assert dev["repos"][0]["path"] == "." and dev["init"][0].startswith("git -C . apply")
    plain = with_dstack_repo({"type": "task", "commands": ["ls"]}, DATA, "u", has_diff=False)
    assert plain["commands"] == ["ls"]


def test_only_remote_repos_and_the_diff_archive() -> None:
    assert remote_repo_data({"repo_data": DATA}) == DATA
    assert remote_repo_data({"repo_data": {"repo_type": "virtual"}}) is None
    assert remote_repo_data({}) is None
    with tarfile.open(fileobj=io.BytesIO(diff_archive(b"--- a\n+++ b\n")), mode="r:gz") as tar:
        member = tar.getmember(DIFF_NAME)
        assert tar.extractfile(member).read() == b"--- a\n+++ b\n"  # type: ignore[union-attr]
