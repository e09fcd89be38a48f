"""Create, noop, delete, retain, blocked; workload semantics; errors; empty snapshots."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.core.planning import plan
from reconciler.domain.desired import IMPLICIT_PATH, DesiredResource
from reconciler.domain.issues import ConfigIssue
from reconciler.domain.kinds import Kind
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import ActionKind, Rollout
from tests.planning.factories import POLICY, deployed, live, one, policy, resource, state

TASK = resource("type: task\nname: train\ncommands: [python train.py]\n")
TASK2 = resource("type: task\nname: train\ncommands: [python train.py --epochs 2]\n")
SERVICE = resource("type: service\nname: web\nimage: nginx\nport: 80\n")
DEV = resource("type: dev-environment\nname: dev\nide: vscode\n")
VOLUME = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 10GB\n")
FLEET = resource("type: fleet\nname: gpu\nnodes: 1\nbackends: [aws]\n")
GATEWAY = resource("type: gateway\nname: gw\nbackend: aws\nregion: us-east-1\ndomain: a.io\n")


def test_new_resources_are_created_with_their_spec() -> None:
    result = plan(state(SERVICE, FLEET), ObservedState("main"), POLICY)
    action = one(result, "web")
    assert action.action is ActionKind.CREATE
    assert action.reason == "new service declared in web.dstack.yml"
    assert action.spec_hash == SERVICE.spec_hash
    assert result.summary["create"] == 2


def test_unchanged_resources_are_noop() -> None:
    result = plan(state(SERVICE, FLEET), live(deployed(SERVICE), deployed(FLEET)), POLICY)
    assert [a.action for a in result.actions] == [ActionKind.NOOP, ActionKind.NOOP]
    assert result.changes == ()


def test_a_finished_task_at_the_same_spec_is_not_run_again() -> None:
    result = plan(state(TASK), live(deployed(TASK, status="done")), POLICY)
    action = one(result, "train")
    assert action.action is ActionKind.NOOP
    assert "runs once per spec" in action.reason


def test_a_finished_task_with_a_changed_spec_is_run_again() -> None:
    result = plan(state(TASK2), live(deployed(TASK, status="failed")), POLICY)
    action = one(result, "train")
    assert action.action is ActionKind.REPLACE
    assert "run it again" in action.reason
    assert [c.field for c in action.fields] == ["commands"]


def test_a_running_task_with_a_changed_command_is_replaced() -> None:
    action = one(plan(state(TASK2), live(deployed(TASK)), POLICY), "train")
    assert action.action is ActionKind.REPLACE
    assert action.forced_by == ("commands",)


def test_a_running_task_priority_change_is_in_place() -> None:
    higher = resource("type: task\nname: train\ncommands: [python train.py]\npriority: 9\n")
    action = one(plan(state(higher), live(deployed(TASK)), POLICY), "train")
    assert (action.action, action.rollout) == (ActionKind.UPDATE, Rollout.IMMEDIATE)


@pytest.mark.parametrize("desired", [SERVICE, DEV], ids=["service", "dev-environment"])
def test_finished_services_and_dev_environments_are_resubmitted(desired: DesiredResource) -> None:
    result = plan(state(desired), live(deployed(desired, status="failed")), POLICY)
    action = one(result, desired.name)
    assert action.action is ActionKind.CREATE
    assert "kept running" in action.reason
    assert "failed" in action.reason
    assert action.drift and action.reason.startswith("drift: ")
    assert action.reason.endswith("will restore: resubmit it")


def test_a_moved_file_with_the_same_spec_updates_only_its_path() -> None:
    moved = replace(SERVICE, path="services/web.dstack.yml")
    action = one(plan(state(moved), live(deployed(SERVICE)), POLICY), "web")
    assert action.action is ActionKind.UPDATE
    assert [(c.field, c.old, c.new) for c in action.fields] == [
        ("configuration_path", "web.dstack.yml", "services/web.dstack.yml")
    ]


@pytest.mark.parametrize(
    ("gone", "reason"),
    [
        (SERVICE, "web.dstack.yml was removed: stop and delete the service"),
        (FLEET, "gpu.dstack.yml was removed: delete the fleet"),
        (GATEWAY, "gw.dstack.yml was removed: delete the gateway"),
    ],
)
def test_removed_files_delete_what_git_deployed(gone: DesiredResource, reason: str) -> None:
    result = plan(state(TASK), live(deployed(TASK), deployed(gone)), POLICY)
    action = one(result, gone.name)
    assert action.action is ActionKind.DELETE
    assert action.reason == reason
    assert not action.destroys_data


def test_a_removed_finished_task_deletes_its_record() -> None:
    result = plan(state(SERVICE), live(deployed(SERVICE), deployed(TASK, status="done")), POLICY)
    assert one(result, "train").reason.endswith("delete the finished task's record")


def test_removed_volumes_are_retained_by_default() -> None:
    result = plan(state(TASK), live(deployed(TASK), deployed(VOLUME)), POLICY)
    action = one(result, "data")
    assert action.action is ActionKind.RETAIN
    assert not action.destroys_data
    assert "prune.volumes: retain" in action.reason


def test_removed_volumes_are_deleted_when_the_policy_opts_in() -> None:
    result = plan(state(TASK), live(deployed(TASK), deployed(VOLUME)), policy(volumes="delete"))
    action = one(result, "data")
    assert action.action is ActionKind.DELETE
    assert action.destroys_data


def test_unmanaged_resources_are_never_pruned() -> None:
    manual = deployed(SERVICE, origin="cli:alice")
    result = plan(state(TASK), live(deployed(TASK), manual), POLICY)
    action = one(result, "web")
    assert action.action is ActionKind.NOOP
    assert "cli:alice" in action.reason
    assert "never prunes" in action.reason


def test_a_declared_name_taken_by_an_unmanaged_resource_is_blocked() -> None:
    manual = deployed(SERVICE, origin="cli:bob")
    result = plan(state(SERVICE), live(manual), POLICY)
    action = one(result, "web")
    assert action.action is ActionKind.BLOCKED
    assert "cli:bob" in action.reason
    assert result.summary["blocked"] == 1


def test_other_projects_are_ignored() -> None:
    elsewhere = replace(deployed(FLEET), project="other")
    result = plan(state(TASK), ObservedState("main", (deployed(TASK), elsewhere)), POLICY)
    assert [a.name for a in result.actions] == ["train"]


def test_any_issue_yields_errors_and_no_actions() -> None:
    issue = ConfigIssue("bad.dstack.yml", 3, 5, "port", "port is required")
    desired = replace(state(SERVICE), issues=(issue,))
    result = plan(desired, live(deployed(TASK)), POLICY)
    assert result.errors == (issue,)
    assert result.actions == ()
    assert not result.ok


def test_errors_are_sorted_by_file_and_line_and_deduplicated() -> None:
    issues = (
        ConfigIssue("b.dstack.yml", 4, 1, "port", "bad port"),
        ConfigIssue("a.dstack.yml", None, None, None, "invalid YAML"),
        ConfigIssue("b.dstack.yml", 2, None, "name", "no name"),
        ConfigIssue("b.dstack.yml", 4, 1, "port", "bad port"),
    )
    result = plan(replace(state(), issues=issues), ObservedState("main"), POLICY)
    assert [(e.path, e.line) for e in result.errors] == [
        ("a.dstack.yml", None),
        ("b.dstack.yml", 2),
        ("b.dstack.yml", 4),
    ]


def test_an_empty_snapshot_is_an_error_not_a_mass_delete() -> None:
    result = plan(state(files=0), live(deployed(TASK), deployed(FLEET)), POLICY)
    assert result.actions == ()
    assert len(result.errors) == 1
    assert result.errors[0].field == "prune.allow_empty"
    assert "delete everything" in result.errors[0].message


def test_an_empty_snapshot_prunes_when_the_policy_allows_it() -> None:
    result = plan(state(files=0), live(deployed(TASK), deployed(FLEET)), policy(allow_empty=True))
    assert result.ok
    assert {a.action for a in result.actions} == {ActionKind.DELETE}


def test_the_implicit_fleet_is_flagged_and_removed_once_the_repo_declares_fleets() -> None:
    implicit = replace(FLEET, name="local", path=IMPLICIT_PATH, implicit=True)
    created = one(plan(state(TASK, implicit), ObservedState("main"), POLICY), "local")
    assert created.implicit
    assert "implicit default fleet" in created.reason
    gone = one(plan(state(TASK, FLEET), live(deployed(implicit)), POLICY), "local", Kind.FLEET)
    assert gone.action is ActionKind.DELETE
    assert "implicit default fleet" in gone.reason
