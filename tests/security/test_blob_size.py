"""A config blob over the size limit is refused by its size, never read (finding 12).

The attack form: a 20 MB `big.dstack.yml` committed to the config repo (also as
`.dockyard.yml`). The reconcile's snapshot loading asks git for the blobs' sizes first
(`GitMirror.blob_sizes`: object headers, `cat-file --batch-check`) and reads only the
blobs within `--config-max-bytes`: the big file becomes an issue with its path and size,
the rest of the commit loads, and the big blob is never read (the reader is watched, and
the memory traced while loading stays far below the blob's size).
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from reconciler.adapters.gitsource import GitSource
from reconciler.adapters.gitsource.remotes import RepoLocation
from schemas import parse_config
from schemas.limits import ConfigLimits
from tests.gitsource.conftest import TASK, ConfigRepo, config_repo, data_dir

__all__ = ["config_repo", "data_dir"]  # fixtures

BIG = 20 * 1024 * 1024


def _big_yaml() -> str:
    line = "# " + "x" * 1021 + "\n"  # 1 KiB a line
    return TASK.format(name="big", command="a") + line * (BIG // len(line))


def _watched(source: GitSource) -> list[str]:
    """The SHAs the source's blob reader is asked for, from now on."""
    asked: list[str] = []
    read = source.mirror.read_blobs

    def reading(shas: Sequence[str]) -> Mapping[str, bytes]:
        asked.extend(shas)
        return read(shas)

    source.mirror.read_blobs = reading  # type: ignore[method-assign,assignment]
    return asked


@pytest.mark.parametrize("path", ["big.dstack.yml", ".dockyard.yml"])
def test_a_20_mb_config_is_refused_by_size_unread(
    config_repo: ConfigRepo, data_dir: Path, path: str
) -> None:
    config_repo.write("ok.dstack.yml", TASK.format(name="ok", command="a"))
    config_repo.write(path, _big_yaml())
    head = config_repo.commit("a 20 MB config")
    limits = ConfigLimits()
    source = GitSource(
        RepoLocation(url=str(config_repo.path)),
        data_dir=data_dir,
        parse=lambda text, name: parse_config(text, name, limits),
        limits=limits,
    )
    source.fetch()
    snapshot = source.snapshot(head)
    big_blob = config_repo.repo.git.rev_parse(f"{head}:{path}")
    asked = _watched(source)
    tracemalloc.start()
    try:
        loaded = source.load(snapshot)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert big_blob not in asked, "the big blob was read"
    assert peak < 2 * 1024 * 1024, f"loading took {peak} bytes: the blob was read"
    [issue] = [issue for issue in loaded.desired.issues if issue.path == path]
    assert f"the file is {len(_big_yaml())} bytes" in issue.message
    assert "config-max-bytes" in issue.message and "DOCKYARD_CONFIG_MAX_BYTES" in issue.message


def test_many_blobs_are_sized_in_one_batch(config_repo: ConfigRepo, data_dir: Path) -> None:
    for index in range(20):  # more than the few read through the persistent cat-file
        config_repo.write(f"t{index}.dstack.yml", TASK.format(name=f"t{index}", command="a"))
    config_repo.write("huge.dstack.yml", _big_yaml())
    head = config_repo.commit("many")
    source = GitSource(
        RepoLocation(url=str(config_repo.path)), data_dir=data_dir, parse=parse_config
    )
    source.fetch()
    snapshot = source.snapshot(head)
    big_blob = snapshot.files["huge.dstack.yml"]
    asked = _watched(source)
    loaded = source.load(snapshot)
    assert big_blob not in asked and len(asked) == 20
    assert [issue.path for issue in loaded.desired.issues] == ["huge.dstack.yml"]
    assert len([r for r in loaded.desired.resources if r.name.startswith("t")]) == 20
