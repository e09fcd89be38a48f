"""One reconcile pass against a real git repo and a real SQLite store (no workers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.adapters.db.models import Reconcile, Run
from stacks.engines import UnavailableEngine
from stacks.local import LocalEngine, LocalSettings
from stacks.protocol import PULUMI_NOT_FOUND, StackFailed, StackPlan, StackResource
from tests.engine.cloud_double import CloudDouble
from tests.engine.fixtures import Rig, make_rig, service_yaml, task_yaml


@pytest.fixture
def rig(tmp_path: Path, db_url: str) -> Rig:
    return make_rig(tmp_path, db_url=db_url)


def _runs(rig: Rig) -> list[Run]:
    project = rig.store.get_or_create_project("main")
    return sorted(rig.store.list_runs(project.id), key=lambda r: (r.run_name, r.submitted_at))


async def _reconcile(rig: Rig, revision: str | None = None) -> Reconcile:
    reconcile_id = rig.request(revision=revision)
    assert await rig.worker.process_once() == 1
    row = rig.store.get_reconcile(reconcile_id)
    assert row is not None
    return row


async def test_a_commit_creates_runs_and_the_implicit_local_fleet(rig: Rig) -> None:
    commit = rig.repo.commit(
        {"a.dstack.yml": task_yaml("alpha"), "web.dstack.yml": service_yaml("web", 8000)}
    )

    row = await _reconcile(rig)

    assert (row.status, row.error) == ("succeeded", None)
    assert (row.attempted_revision, row.applied_revision) == (commit, commit)
    assert [t["stage"] for t in row.stage_timings] == [
        "fetch",
        "parse",
        "plan",
        "preview",
        "apply",
        "record",
    ]
    assert all(t["seconds"] is not None for t in row.stage_timings)
    assert [(r.run_name, r.run_type, r.status) for r in _runs(rig)] == [
        ("alpha", "task", "submitted"),
        ("web", "service", "submitted"),
    ]
    project = rig.store.get_or_create_project("main")
    fleets = rig.store.list_fleets(project.id)
    assert [(f.name, f.status) for f in fleets] == [("local", "submitted")]
    assert {"runs", "fleets"} <= set(rig.hints)
    resources = {(r.kind, r.name): r for r in rig.store.list_resources("main")}
    assert resources[("task", "alpha")].origin == f"git:a.dstack.yml@{commit}"
    assert row.plan["summary"]["create"] == 3
    recorded = {(a["key"], a["result"]) for a in row.outcome["actions"]}
    assert recorded == {
        ("main/fleet/local", "applied"),
        ("main/task/alpha", "applied"),
        ("main/service/web", "applied"),
    }, "each applied action is recorded with its result"


async def test_the_same_commit_again_changes_nothing(rig: Rig) -> None:
    rig.repo.commit({"a.dstack.yml": task_yaml("alpha")})
    await _reconcile(rig)
    first = [(r.id, r.status) for r in _runs(rig)]

    again = await _reconcile(rig)

    assert again.status == "succeeded"
    assert [(r.id, r.status) for r in _runs(rig)] == first
    assert again.plan["summary"]["create"] == 0


async def test_an_edited_task_is_replaced_by_a_new_run(rig: Rig) -> None:
    rig.repo.commit({"a.dstack.yml": task_yaml("alpha", "echo one")})
    await _reconcile(rig)
    rig.repo.commit({"a.dstack.yml": task_yaml("alpha", "echo two")})

    row = await _reconcile(rig)

    assert row.status == "succeeded"
    runs = _runs(rig)
    assert [(r.status, r.spec["commands"]) for r in runs] == [
        ("terminating", ["echo one"]),
        ("submitted", ["echo two"]),
    ]
    assert runs[0].termination_reason == "stopped_by_user"


async def test_an_invalid_commit_applies_nothing_and_keeps_the_last_good_revision(
    rig: Rig,
) -> None:
    good = rig.repo.commit({"a.dstack.yml": task_yaml("alpha")})
    await _reconcile(rig)
    bad = rig.repo.commit(
        {
            "b.dstack.yml": task_yaml("beta"),
            "a.dstack.yml": "type: task\nname: alpha\ncomands: [x]\n",
        }
    )

    row = await _reconcile(rig)

    assert row.status == "failed"
    assert row.attempted_revision == bad
    assert "a.dstack.yml:3" in (row.error or "")
    assert [r.run_name for r in _runs(rig)] == ["alpha"]
    project = rig.store.get_or_create_project("main")
    assert rig.store.last_applied_revision(project.id) == good
    assert rig.retries == []  # an invalid commit is not retried; a new commit is needed


async def test_a_removed_file_stops_its_run_and_an_empty_repo_deletes_nothing(rig: Rig) -> None:
    rig.repo.commit({"a.dstack.yml": task_yaml("alpha"), "b.dstack.yml": task_yaml("beta")})
    await _reconcile(rig)
    rig.repo.commit({"b.dstack.yml": None})

    row = await _reconcile(rig)

    assert row.status == "succeeded"
    assert [(r.run_name, r.status) for r in _runs(rig)] == [
        ("alpha", "submitted"),
        ("beta", "terminating"),
    ]
    rig.repo.commit({"a.dstack.yml": None})
    empty = await _reconcile(rig)
    assert empty.status == "failed"
    assert "empty snapshot" in (empty.error or "")
    assert [(r.run_name, r.status) for r in _runs(rig)] == [
        ("alpha", "submitted"),
        ("beta", "terminating"),
    ]


async def test_an_older_reconcile_does_not_apply_after_a_newer_one_did(rig: Rig) -> None:
    old = rig.repo.commit({"a.dstack.yml": task_yaml("alpha", "echo old")})
    older_id = rig.request(revision=old)
    newer_id = rig.request()
    rig.store.set_reconcile_stage(newer_id, "apply")
    rig.store.finish_reconcile(newer_id, status="succeeded")

    assert await rig.worker.process_once() == 1

    older = rig.store.get_reconcile(older_id)
    assert older is not None and older.status == "aborted"
    assert (older.error or "").startswith("superseded")
    assert _runs(rig) == []


async def test_an_unconfigured_engine_blocks_its_fleet_and_the_runs_that_wait_for_it(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, engines={})
    rig.repo.commit({"a.dstack.yml": task_yaml("alpha")})

    row = await _reconcile(rig)

    assert (row.status, row.error) == ("succeeded", None)
    blocked = {a["name"]: a["reason"] for a in row.plan["actions"] if a["action"] == "blocked"}
    assert "not configured on this server" in blocked["local"]
    assert blocked["alpha"].startswith("blocked: waits for fleet `local`, which is blocked: ")
    assert row.outcome["summary"].startswith("applied 0, blocked 2: ")
    assert _runs(rig) == []
    project = rig.store.get_or_create_project("main")
    assert rig.store.list_fleets(project.id) == []


CLOUD_FLEET = "type: fleet\nname: cloud\nbackends: [aws]\nnodes: 1\nresources:\n  gpu: A10G\n"
CLOUD_VOLUME = "type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 100GB\n"
LOCAL_FLEET = "type: fleet\nname: here\nnodes: 1\n"


async def test_cloud_resources_without_pulumi_are_blocked_and_the_rest_is_applied(
    tmp_path: Path,
) -> None:
    local = LocalEngine(LocalSettings(data_dir=tmp_path / "data", user="root"))
    rig = make_rig(
        tmp_path, engines={"local": local, "pulumi": UnavailableEngine("pulumi", PULUMI_NOT_FOUND)}
    )
    on_cloud = task_yaml("gpu-job").replace("type: task\n", "type: task\nfleets: [cloud]\n")
    commit = rig.repo.commit(
        {
            "cloud.dstack.yml": CLOUD_FLEET,
            "data.dstack.yml": CLOUD_VOLUME,
            "here.dstack.yml": LOCAL_FLEET,
            "hello.dstack.yml": task_yaml("hello"),
            "gpu.dstack.yml": on_cloud,
        }
    )

    row = await _reconcile(rig)

    assert (row.status, row.error, row.applied_revision) == ("succeeded", None, commit)
    actions = {a["name"]: (a["action"], a["reason"]) for a in row.plan["actions"]}
    assert actions["cloud"] == ("blocked", f"blocked: {PULUMI_NOT_FOUND}")
    assert actions["data"] == ("blocked", f"blocked: {PULUMI_NOT_FOUND}")
    assert actions["gpu-job"] == (
        "blocked",
        f"blocked: waits for fleet `cloud`, which is blocked: {PULUMI_NOT_FOUND}",
    )
    assert actions["hello"][0] == "create" and actions["here"][0] == "create"
    summary = row.outcome["summary"]
    assert summary.startswith("applied 2, blocked 3: ") and "main/fleet/cloud: " in summary
    assert len(row.outcome["blocked"]) == 3
    assert [(r.run_name, r.status) for r in _runs(rig)] == [("hello", "submitted")]
    project = rig.store.get_or_create_project("main")
    assert [f.name for f in rig.store.list_fleets(project.id)] == ["here"]


class _FailingPreview(CloudDouble):
    async def preview(self, resource: StackResource) -> StackPlan:
        raise StackFailed(f"{resource.label}: pulumi preview failed: quota exceeded")


async def test_a_failed_preview_of_an_available_engine_still_stops_the_whole_pass(
    tmp_path: Path,
) -> None:
    local = LocalEngine(LocalSettings(data_dir=tmp_path / "data", user="root"))
    rig = make_rig(tmp_path, engines={"local": local, "pulumi": _FailingPreview()})
    rig.repo.commit(
        {"cloud.dstack.yml": CLOUD_FLEET, "here.dstack.yml": LOCAL_FLEET,
         "hello.dstack.yml": task_yaml("hello")}
    )  # fmt: skip

    row = await _reconcile(rig)

    assert row.status == "aborted"
    assert "preview failed, nothing applied" in (row.error or "") and "quota" in (row.error or "")
    cloud = next(a for a in row.plan["actions"] if a["name"] == "cloud")
    assert cloud["action"] == "create" and "quota exceeded" in cloud["preview"]["error"]
    assert _runs(rig) == []


async def test_the_repo_policy_is_handed_to_the_controller(rig: Rig) -> None:
    rig.repo.commit({"a.dstack.yml": task_yaml("alpha"), ".dockyard.yml": "fetch_interval: 30s\n"})
    await _reconcile(rig)
    ((project, policy),) = rig.policies
    assert (project, policy.fetch_interval) == ("main", 30)
    assert "fetch_interval" in policy.model_fields_set


async def test_a_service_change_allowed_in_place_bumps_the_deployment(rig: Rig) -> None:
    rig.repo.commit({"web.dstack.yml": service_yaml("web", 8000)})
    await _reconcile(rig)
    edited = service_yaml("web", 8000).replace("commands:", "env:\n  - MODE=two\ncommands:")
    rig.repo.commit({"web.dstack.yml": edited})

    row = await _reconcile(rig)

    assert row.status == "succeeded", row.error
    (run,) = _runs(rig)
    assert (run.status, run.deployment_num, run.spec["env"]) == ("submitted", 1, {"MODE": "two"})
    assert [a["action"] for a in row.plan["actions"] if a["name"] == "web"] == ["update"]


async def test_a_pruned_run_leaves_the_inventory_once_it_has_stopped(rig: Rig) -> None:
    rig.repo.commit({"a.dstack.yml": task_yaml("alpha"), "b.dstack.yml": task_yaml("beta")})
    await _reconcile(rig)
    rig.repo.commit({"b.dstack.yml": None})
    await _reconcile(rig)
    resource = rig.store.get_resource("main", "task", "beta")
    assert resource is not None and resource.status == "deleting"
    (beta,) = [r for r in _runs(rig) if r.run_name == "beta"]
    rig.store.update(Run, beta.id, status="terminated")

    await _reconcile(rig)

    assert rig.store.get_resource("main", "task", "beta") is None
    assert rig.store.get_resource("main", "task", "alpha") is not None


async def test_a_removed_fleet_is_terminated_and_kept_until_confirmed(rig: Rig) -> None:
    fleet = "type: fleet\nname: gpus\nnodes: 1\n"
    rig.repo.commit({"a.dstack.yml": task_yaml("alpha"), "f.dstack.yml": fleet})
    await _reconcile(rig)
    rig.repo.commit({"f.dstack.yml": None})

    row = await _reconcile(rig)

    assert row.status == "succeeded", row.error
    project = rig.store.get_or_create_project("main")
    names = {(f.name, f.status) for f in rig.store.list_fleets(project.id)}
    assert ("gpus", "terminating") in names
    resource = rig.store.get_resource("main", "fleet", "gpus")
    assert resource is not None and resource.status == "deleting"


async def test_every_reconcile_ends_with_an_event(rig: Rig) -> None:
    commit = rig.repo.commit({"a.dstack.yml": task_yaml("alpha")})
    row = await _reconcile(rig)
    events = rig.store.list_events(target_type="reconcile")
    assert [(e.target_id, e.message) for e in events] == [
        (row.id, f"reconcile succeeded at {commit[:12]}")
    ]


async def test_a_late_webhook_for_an_older_commit_reconciles_the_head(rig: Rig) -> None:
    old = rig.repo.commit({"a.dstack.yml": task_yaml("alpha", "echo old")})
    new = rig.repo.commit({"a.dstack.yml": task_yaml("alpha", "echo new")})

    row = await _reconcile(rig, revision=old)

    assert (row.status, row.attempted_revision, row.applied_revision) == ("succeeded", new, new)
    assert [r.spec["commands"] for r in _runs(rig)] == [["echo new"]]
