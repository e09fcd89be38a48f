"""A commit's tree id hashed from GitLab's root listing (`reconciler.pr.gittrees`) is the
id git itself gives (`git rev-parse SHA^{tree}`): real repositories, served through the
recording fake GitLab API from `git ls-tree`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.pr.gitlab import GitLab
from reconciler.pr.gittrees import TreeEntry, TreeListingError, entry_of, tree_id
from reconciler.pr.requesting import HostError
from tests.pr.fakehost import GITLAB_TOKEN, FakeHost, fake_host
from tests.pr.gitrepo import git


@pytest.fixture
def gitlab() -> Iterator[FakeHost]:
    with fake_host() as host:
        yield host


def _repo(path: Path, object_format: str = "sha1") -> Path:
    path.mkdir()
    git(path, "init", "-q", "-b", "main", f"--object-format={object_format}")
    git(path, "config", "user.email", "test@example.com")
    git(path, "config", "user.name", "Test")
    # names git orders with a subtree's name as if it ended in `/`: a.b < a/ < a0 < a~
    for name in ("a.b", "a/x.dstack.yml", "a/deeper/y.yml", "a0", "a~", "Z", ".dockyard.yml"):
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(f"{name}\n")
    (path / "run.sh").write_text("#!/bin/sh\n")
    (path / "run.sh").chmod(0o755)
    (path / "link").symlink_to("a0")
    git(path, "add", "-A")
    sub = "1" * (64 if object_format == "sha256" else 40)
    git(path, "update-index", "--add", "--cacheinfo", f"160000,{sub},vendor")  # a submodule
    git(path, "commit", "-q", "-m", "c1")
    return path


@pytest.mark.parametrize("object_format", ["sha1", "sha256"])
def test_the_hashed_tree_is_the_one_git_gives(
    gitlab: FakeHost, tmp_path: Path, object_format: str
) -> None:
    repo = _repo(tmp_path / "cfg", object_format)
    gitlab.state.repo = repo
    host = GitLab("acme/cfg", token=GITLAB_TOKEN, api_url=gitlab.gitlab_url)
    try:
        head = git(repo, "rev-parse", "HEAD")
        assert host.commit_tree(head) == git(repo, "rev-parse", "HEAD^{tree}")
        (repo / "a" / "x.dstack.yml").write_text("changed\n")
        git(repo, "commit", "-q", "-am", "c2")
        second = git(repo, "rev-parse", "HEAD")
        assert host.commit_tree(second) == git(repo, "rev-parse", "HEAD^{tree}")
        assert host.commit_tree(second) != host.commit_tree(head)
    finally:
        host.close()
    listed = [r.path for r in gitlab.state.requests if "/repository/tree" in r.path]
    assert listed and all("recursive" not in p for p in listed)  # the root listing only


def test_a_listing_that_is_no_tree_is_refused(gitlab: FakeHost, tmp_path: Path) -> None:
    assert tree_id([]) == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree
    with pytest.raises(TreeListingError, match="mode"):
        entry_of({"mode": "100666", "name": "x", "id": "a" * 40})
    with pytest.raises(TreeListingError, match="not a file name"):
        entry_of({"mode": "100644", "name": "a/b", "id": "a" * 40})
    with pytest.raises(TreeListingError, match="same name"):
        tree_id([TreeEntry("100644", "x", "a" * 40)] * 2)
    gitlab.state.repo = _repo(tmp_path / "cfg")
    gitlab.state.fail_next(200, {"message": "not a list"})
    host = GitLab("acme/cfg", token=GITLAB_TOKEN, api_url=gitlab.gitlab_url)
    try:
        with pytest.raises(HostError, match="did not list the tree"):
            host.commit_tree("f" * 40)
    finally:
        host.close()
