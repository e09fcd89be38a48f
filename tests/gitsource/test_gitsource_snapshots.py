"""Snapshots from real repositories: commits, branches, deleted and renamed files, the cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.gitsource import UnknownBranchError, UnknownRefError
from reconciler.adapters.gitsource.snapshots import advance_snapshot, list_snapshot
from reconciler.core.planning import plan
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import ActionKind
from reconciler.errors import DockyardError
from tests.gitsource.conftest import SERVICE, TASK, VOLUME, ConfigRepo, make_source


def _seed(repo: ConfigRepo) -> str:
    repo.write("train.dstack.yml", TASK.format(name="train", command="python train.py"))
    repo.write("services/web.dstack.yml", SERVICE.format(image="nginx"))
    repo.write("volumes/data.dstack.yml", VOLUME)
    repo.write("README.md", "not a config")
    return repo.commit("seed")


def test_a_snapshot_lists_config_files_with_their_blobs(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    head = _seed(config_repo)
    source = make_source(config_repo.path, data_dir)
    assert source.fetch() == head
    snap = source.snapshot(head)
    assert snap.commit == head
    assert sorted(snap.files) == [
        "services/web.dstack.yml",
        "train.dstack.yml",
        "volumes/data.dstack.yml",
    ]
    blob = config_repo.repo.git.rev_parse(f"{head}:train.dstack.yml")
    assert snap.files["train.dstack.yml"] == blob
    loaded = source.load(snap)
    assert loaded.desired.ok
    assert {(r.kind, r.name) for r in loaded.desired.resources} == {
        (Kind.TASK, "train"),
        (Kind.SERVICE, "web"),
        (Kind.VOLUME, "data"),
        (Kind.FLEET, "local"),
    }


def test_a_new_commit_parses_only_the_changed_files(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    first = _seed(config_repo)
    source = make_source(config_repo.path, data_dir)
    source.fetch()
    source.load(source.snapshot(first))
    parsed = source.cache.parsed
    assert parsed >= 3
    config_repo.write("services/web.dstack.yml", SERVICE.format(image="nginx:2"))
    second = config_repo.commit("bump web")
    source.fetch()
    loaded = source.load(source.snapshot(second))
    assert source.cache.parsed == parsed + 1
    web = next(r for r in loaded.desired.resources if r.name == "web")
    assert web.spec["image"] == "nginx:2"


def test_deleted_and_renamed_files(config_repo: ConfigRepo, data_dir: Path) -> None:
    first = _seed(config_repo)
    config_repo.remove("train.dstack.yml")
    config_repo.move("services/web.dstack.yml", "apps/web.dstack.yml")
    second = config_repo.commit("delete and rename")
    source = make_source(config_repo.path, data_dir)
    source.fetch()
    base = source.load(source.snapshot(first))
    parsed = source.cache.parsed
    head = source.load(source.snapshot(second))
    assert source.cache.parsed == parsed  # a rename keeps its blob: nothing re-parsed
    assert "train.dstack.yml" not in source.snapshot(second).files
    result = plan(head.desired, ObservedState.from_desired(base.desired), head.policy, base=first)
    by_name = {a.name: a for a in result.actions}
    assert by_name["train"].action is ActionKind.DELETE
    assert by_name["web"].action is ActionKind.UPDATE
    assert [(f.field, f.old, f.new) for f in by_name["web"].fields] == [
        ("configuration_path", "services/web.dstack.yml", "apps/web.dstack.yml")
    ]
    assert by_name["data"].action is ActionKind.NOOP


def test_incremental_snapshots_equal_full_listings(config_repo: ConfigRepo) -> None:
    commits = [_seed(config_repo)]
    config_repo.remove("volumes/data.dstack.yml")
    commits.append(config_repo.commit())
    config_repo.move("train.dstack.yml", "jobs/train.dstack.yaml")
    config_repo.write("jobs/eval.dstack.yml", TASK.format(name="eval", command="eval"))
    commits.append(config_repo.commit())
    config_repo.write("jobs/eval.dstack.yml", TASK.format(name="eval", command="eval2"))
    commits.append(config_repo.commit())
    repo = config_repo.repo
    snap = list_snapshot(repo, commits[0])
    for commit in commits[1:]:
        snap = advance_snapshot(repo, snap, commit)
        assert dict(snap.files) == dict(list_snapshot(repo, commit).files)
    assert "jobs/train.dstack.yaml" in snap.files


def test_branches_and_refs(config_repo: ConfigRepo, data_dir: Path) -> None:
    main = _seed(config_repo)
    config_repo.branch("dev")
    config_repo.write("train.dstack.yml", TASK.format(name="train", command="python dev.py"))
    dev = config_repo.commit("dev work")
    config_repo.checkout("main")
    on_dev = make_source(config_repo.path, data_dir, branch="dev")
    assert on_dev.fetch() == dev
    assert on_dev.resolve("main") == main
    assert on_dev.resolve("HEAD~0") == main  # the checkout is on main again
    assert on_dev.resolve(main[:10]) == main
    with pytest.raises(UnknownRefError, match="'nope' names no commit"):
        on_dev.resolve("nope")
    missing = make_source(config_repo.path, data_dir, branch="release")
    with pytest.raises(UnknownBranchError, match=r"branch 'release' does not exist.*dev, main"):
        missing.fetch()


def test_subdirectory_and_its_policy(config_repo: ConfigRepo, data_dir: Path) -> None:
    config_repo.write("outside.dstack.yml", TASK.format(name="outside", command="x"))
    config_repo.write("deploy/.dockyard.yml", "project: ml\npaths: [prod]\n")
    config_repo.write("deploy/prod/train.dstack.yml", TASK.format(name="train", command="x"))
    config_repo.write("deploy/staging/eval.dstack.yml", TASK.format(name="eval", command="x"))
    head = config_repo.commit()
    source = make_source(config_repo.path, data_dir, subdir="deploy")
    source.fetch()
    snap = source.snapshot(head)
    assert sorted(snap.files) == [
        "deploy/.dockyard.yml",
        "deploy/prod/train.dstack.yml",
        "deploy/staging/eval.dstack.yml",
    ]
    loaded = source.load(snap)
    assert loaded.policy.project == "ml"
    names = sorted(r.name for r in loaded.desired.resources)
    assert names == ["local", "train"]
    assert {r.project for r in loaded.desired.resources} == {"ml"}
    assert next(r for r in loaded.desired.resources if r.name == "train").path == (
        "deploy/prod/train.dstack.yml"
    )


def test_an_invalid_policy_is_an_issue_of_the_commit(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    config_repo.write(".dockyard.yml", "prune:\n  volumes: sometimes\n")
    config_repo.write("train.dstack.yml", TASK.format(name="train", command="x"))
    head = config_repo.commit()
    source = make_source(config_repo.path, data_dir)
    source.fetch()
    desired = source.load(source.snapshot(head)).desired
    assert [(i.path, i.line, i.field) for i in desired.issues] == [
        (".dockyard.yml", 2, "prune.volumes")
    ]


def test_an_invalid_file_makes_a_plan_with_errors_and_no_actions(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    _seed(config_repo)
    config_repo.write("broken.dstack.yml", "type: service\nname: api\nport: [\n")
    head = config_repo.commit()
    source = make_source(config_repo.path, data_dir)
    source.fetch()
    loaded = source.load(source.snapshot(head))
    result = plan(loaded.desired, ObservedState("main"), loaded.policy)
    assert result.actions == ()
    assert result.errors and all(e.path == "broken.dstack.yml" for e in result.errors)
    assert result.errors[0].line is not None


def test_incremental_snapshots_of_a_subdirectory_ignore_changes_outside_it(
    config_repo: ConfigRepo,
) -> None:
    config_repo.write("deploy/a.dstack.yml", TASK.format(name="alpha", command="a"))
    config_repo.write("other/b.dstack.yml", TASK.format(name="beta", command="b"))
    first = config_repo.commit()
    config_repo.write("other/b.dstack.yml", TASK.format(name="beta", command="b2"))
    config_repo.write("deploy/c.dstack.yml", TASK.format(name="gamma", command="c"))
    config_repo.move("deploy/a.dstack.yml", "other/a.dstack.yml")
    second = config_repo.commit()
    repo = config_repo.repo
    advanced = advance_snapshot(repo, list_snapshot(repo, first, "deploy"), second)
    assert dict(advanced.files) == dict(list_snapshot(repo, second, "deploy").files)
    assert list(advanced.files) == ["deploy/c.dstack.yml"]


def test_policy_paths_select_the_config_directories(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    config_repo.write(".dockyard.yml", "paths: [prod]\nprune:\n  volumes: delete\n")
    config_repo.write("prod/train.dstack.yml", TASK.format(name="train", command="x"))
    config_repo.write("examples/demo.dstack.yml", TASK.format(name="demo", command="x"))
    head = config_repo.commit()
    source = make_source(config_repo.path, data_dir)
    source.fetch()
    loaded = source.load(source.snapshot(head))
    assert not loaded.policy.retains_volumes
    assert sorted(r.name for r in loaded.desired.resources) == ["local", "train"]
    assert loaded.desired.config_files == 1


def test_many_new_blobs_are_read_in_one_batch(config_repo: ConfigRepo, data_dir: Path) -> None:
    for n in range(40):
        config_repo.write(f"jobs/j{n:02d}.dstack.yml", TASK.format(name=f"job-{n}", command=n))
    head = config_repo.commit()
    source = make_source(config_repo.path, data_dir)
    source.fetch()
    snap = source.snapshot(head)
    texts = source.mirror.read_blobs(list(snap.files.values()))
    assert texts[snap.files["jobs/j07.dstack.yml"]] == TASK.format(name="job-7", command=7).encode()
    loaded = source.load(snap)
    assert len(loaded.desired.resources) == 41  # 40 tasks and the implicit fleet
    assert source.cache.parsed == 40
    with pytest.raises(DockyardError, match="missing"):
        source.mirror.read_blobs([*snap.files.values(), "0" * 40])
