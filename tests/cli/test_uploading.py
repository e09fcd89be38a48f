"""`dockyard apply`'s packing of local `repos`/`files`, on real directories and git."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from reconciler.cli.uploading import pack
from reconciler.core.uploads import Upload
from reconciler.errors import UsageError
from tests.pr.gitrepo import git


def _names(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def test_a_work_tree_brings_what_git_would(tmp_path: Path) -> None:
    repo = tmp_path / "proj"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "src" / "app.py").write_text("print('hi')\n")
    (repo / "build.log").write_text("noise\n")
    (repo / "notes.txt").write_text("untracked but not ignored\n")
    git(repo, "add", "src/app.py", ".gitignore")

    target, data = pack(Upload("repo", ".", "."), repo)
    assert target == "."
    files = _names(data)
    assert set(files) == {".gitignore", "src/app.py", "notes.txt"}
    assert files["src/app.py"] == b"print('hi')\n"
    assert pack(Upload("repo", ".", "."), repo)[1] == data, "same tree, same bytes"
    (repo / "notes.txt").write_text("changed\n")
    assert pack(Upload("repo", ".", "."), repo)[1] != data


def test_a_plain_directory_and_single_files(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    (plain / ".git").mkdir(parents=True)  # not a work tree git knows: skipped as a dir
    (plain / "a.txt").write_text("a")
    (tmp_path / "extra.txt").write_text("extra")
    config_dir = tmp_path / "configs"
    config_dir.mkdir()

    _, data = pack(Upload("repo", "../plain", "."), config_dir)
    assert _names(data) == {"a.txt": b"a"}
    target, single = pack(Upload("file", "../extra.txt", "conf/extra.txt"), config_dir)
    assert target == "conf" and _names(single) == {"extra.txt": b"extra"}
    with pytest.raises(UsageError, match="no such file"):
        pack(Upload("file", "missing.txt", "missing.txt"), config_dir)
