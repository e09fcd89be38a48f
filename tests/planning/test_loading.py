"""Loading a snapshot's documents: names, duplicates, invalid files, presets, implicit fleet."""

from __future__ import annotations

from reconciler.core.loading import Document, load_desired, parse_document
from reconciler.core.policy import RepoPolicy
from reconciler.domain.desired import IMPLICIT_PATH
from reconciler.domain.kinds import Kind
from schemas import parse_config

POLICY = RepoPolicy()


def doc(path: str, text: str) -> Document:
    return parse_document(text.encode(), path, parse_config)


def test_a_valid_file_becomes_a_resource_with_its_name_line() -> None:
    text = "# train\ntype: task\nname: train\ncommands: [python train.py]\n"
    desired = load_desired(
        [doc("a/train.dstack.yml", text)], commit="c1", policy=POLICY, parse=parse_config
    )
    task = desired.by_key()[next(iter(desired.by_key()))]
    assert (task.kind, task.name, task.path, task.line) == (
        Kind.TASK,
        "train",
        "a/train.dstack.yml",
        3,
    )
    assert task.spec["commands"] == ["python train.py"]
    assert task.spec_hash == parse_config(text.encode(), "x").spec_hash()
    assert desired.ok
    assert desired.config_files == 1


def test_a_repo_without_fleets_gets_the_implicit_local_fleet() -> None:
    desired = load_desired(
        [doc("t.dstack.yml", "type: task\nname: t1\ncommands: [x]\n")],
        commit="c1",
        policy=POLICY,
        parse=parse_config,
    )
    fleets = [r for r in desired.resources if r.kind is Kind.FLEET]
    assert len(fleets) == 1
    assert (fleets[0].name, fleets[0].path, fleets[0].implicit) == ("local", IMPLICIT_PATH, True)
    assert fleets[0].spec["nodes"] == {"min": 1, "target": 1, "max": 1}


def test_no_implicit_fleet_when_the_repo_declares_one_or_names_another_default() -> None:
    fleet = doc("f.dstack.yml", "type: fleet\nname: gpu\nnodes: 1\n")
    task = doc("t.dstack.yml", "type: task\nname: t1\ncommands: [x]\n")
    with_fleet = load_desired([fleet, task], commit="c", policy=POLICY, parse=parse_config)
    assert [r.name for r in with_fleet.resources if r.kind is Kind.FLEET] == ["gpu"]
    other = RepoPolicy(default_fleet="shared")
    named = load_desired([task], commit="c", policy=other, parse=parse_config)
    assert not any(r.implicit for r in named.resources)


def test_unnamed_resources_are_errors_that_explain_why() -> None:
    desired = load_desired(
        [doc("t.dstack.yml", "type: task\ncommands: [x]\n")],
        commit="c",
        policy=POLICY,
        parse=parse_config,
    )
    assert not desired.ok
    (issue,) = desired.issues
    assert (issue.path, issue.field) == ("t.dstack.yml", "name")
    assert "stable name" in issue.message


def test_two_files_with_the_same_kind_and_name_are_an_error_naming_both() -> None:
    a = doc("a.dstack.yml", "type: task\nname: same\ncommands: [x]\n")
    b = doc("b.dstack.yml", "type: task\nname: same\ncommands: [y]\n")
    c = doc("c.dstack.yml", "type: fleet\nname: same\nnodes: 1\n")  # another kind: fine
    desired = load_desired([b, c, a], commit="c", policy=POLICY, parse=parse_config)
    (issue,) = desired.issues
    assert issue.path == "b.dstack.yml"
    assert "a.dstack.yml:2" in issue.message


def test_invalid_files_become_issues_with_line_and_field() -> None:
    bad = doc("bad.dstack.yml", "type: service\nname: web\nimage: nginx\nport: nope\n")
    assert bad.kind is None
    desired = load_desired([bad], commit="c", policy=POLICY, parse=parse_config)
    assert desired.issues
    assert all(i.path == "bad.dstack.yml" and i.line for i in desired.issues)
    assert any(i.field and "port" in i.field for i in desired.issues)


def test_a_cached_document_moved_to_another_path_reports_the_new_path() -> None:
    bad = doc("old.dstack.yml", "type: task\nname: x\n")
    moved = bad.at("new.dstack.yml")
    assert moved.issues and all(i.path == "new.dstack.yml" for i in moved.issues)


def test_presets_are_parsed_but_deploy_nothing() -> None:
    preset = doc("p.dstack.yml", "type: preset\nname: llm\nmodel: meta-llama/Llama-3.1-8B\n")
    assert preset.issues == ()
    assert preset.kind is None
    desired = load_desired([preset], commit="c", policy=POLICY, parse=parse_config)
    assert [r for r in desired.resources if not r.implicit] == []


def test_warnings_of_valid_files_are_collected_and_never_issues() -> None:
    legacy = doc("t.dstack.yml", "type: task\nname: t1\ncommands: [x]\nworking_dir: src\n")
    assert legacy.kind is Kind.TASK and legacy.issues == ()
    (warning,) = legacy.warnings
    assert (warning.path, warning.line, warning.column, warning.field) == (
        "t.dstack.yml",
        4,
        1,
        "working_dir",
    )
    assert "/workflow/src" in warning.message and "(use an absolute path)" in warning.message
    assert legacy.at("moved.dstack.yml").warnings[0].path == "moved.dstack.yml"
    desired = load_desired([legacy], commit="c1", policy=POLICY, parse=parse_config)
    assert desired.ok
    assert desired.warnings == legacy.warnings
