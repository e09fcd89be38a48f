"""Rendering run specs into jobs and agent job specs (reconciler.core.jobspecs)."""

from __future__ import annotations

import pytest

from agent.protocol import GpuVendor, JobSpec
from reconciler.core.jobspecs import (
    ClusterInfo,
    JobSlot,
    container_ports,
    env_of,
    expand_jobs,
    interpolate_secrets,
    render_agent_job,
    requirements_of,
)
from reconciler.errors import PermanentError
from schemas.requirements import Range


def test_task_nodes_expand_to_ranked_jobs() -> None:
    slots = expand_jobs({"type": "task", "nodes": 3, "commands": ["x"]})
    assert [(s.replica_num, s.job_num, s.nodes) for s in slots] == [(0, 0, 3), (0, 1, 3), (0, 2, 3)]


def test_task_groups_do_not_inherit_resources() -> None:
    spec = {
        "type": "task",
        "resources": {"gpu": {"count": {"min": 8, "max": 8}}},
        "groups": [
            {"name": "master", "nodes": 1, "commands": ["m"]},
            {"name": "workers", "nodes": 2, "commands": ["w"], "resources": {"cpu": {}}},
        ],
    }
    slots = expand_jobs(spec)
    assert [(s.group_name, s.job_num) for s in slots] == [
        ("master", 0),
        ("workers", 1),
        ("workers", 2),
    ]
    assert slots[1].spec["commands"] == ["w"]
    assert slots[1].spec["resources"] == {"cpu": {}}


def test_service_replicas_and_override() -> None:
    spec = {"type": "service", "replicas": {"min": 2, "max": 4}, "port": 8000}
    assert len(expand_jobs(spec)) == 2
    assert len(expand_jobs(spec, replicas=3)) == 3
    assert len(expand_jobs({"type": "service", "replicas": {"min": 0, "max": 2}})) == 1


def test_requirements_from_normalized_resources() -> None:
    spec = {
        "type": "task",
        "resources": {
            "cpu": {"arch": "arm", "count": {"min": 4, "max": None}},
            "memory": {"min": 16.0, "max": None},
            "gpu": {"name": ["A100"], "count": {"min": 2, "max": 2}, "memory": {"min": 40.0}},
        },
        "spot_policy": "auto",
        "fleets": ["gpu-fleet", {"name": "other"}],
    }
    req = requirements_of(spec)
    assert req.cpu == Range(4, None)
    assert req.cpu_arch == "arm"
    assert req.gpu_count == Range(2, 2)
    assert req.gpu_names == ("A100",)
    assert req.fleets == ("gpu-fleet", "other")
    assert not requirements_of({"type": "task", "resources": {"gpu": None}}).wants_gpu


def test_env_forms() -> None:
    assert env_of({"env": ["A=1", "B=x=y"]}) == {"A": "1", "B": "x=y"}
    assert env_of({"env": {"A": 1}}) == {"A": "1"}


def test_secret_interpolation() -> None:
    assert interpolate_secrets("t=${{ secrets.HF_TOKEN }}", {"HF_TOKEN": "s"}) == "t=s"
    with pytest.raises(PermanentError, match="HF_TOKEN"):
        interpolate_secrets("${{ secrets.HF_TOKEN }}", {})


def test_render_agent_job_for_multinode_rank() -> None:
    slot = JobSlot(0, 1, None, 2, {"type": "task", "commands": ["a", "b"], "env": {"X": "1"}})
    body = render_agent_job(
        job_id="j1",
        run_name="train",
        slot=slot,
        gpus=[0, 1],
        cluster=ClusterInfo(("10.0.0.1", "10.0.0.2"), 2),
        secrets={},
        executor="process",
        working_dir=None,
        labels={"dockyard.run": "train"},
    )
    assert body["commands"] == ["a && b"]
    env = body["env"]
    assert env["X"] == "1"
    assert env["DSTACK_NODE_RANK"] == "1"
    assert env["DSTACK_NODES_NUM"] == "2"
    assert env["DSTACK_MASTER_NODE_IP"] == "10.0.0.1"
    assert env["DSTACK_NODES_IPS"] == "10.0.0.1\n10.0.0.2"
    assert env["DSTACK_GPUS_NUM"] == "4"
    assert body["gpus"] == [0, 1]
    assert "gpu_vendor" not in body, "the default is left out (older agents forbid it)"
    JobSpec.model_validate(body)  # what the agent accepts


def test_render_agent_job_says_when_the_gpus_are_amd() -> None:
    slot = JobSlot(0, 0, None, 1, {"type": "task", "commands": ["rocm-smi"]})
    body = render_agent_job(
        job_id="a",
        run_name="mi300",
        slot=slot,
        gpus=[0],
        cluster=ClusterInfo((), 1),
        secrets={},
        executor="docker",
        working_dir=None,
        labels={},
        gpu_vendor="amd",
    )
    assert JobSpec.model_validate(body).gpu_vendor == GpuVendor.AMD


def test_dev_environment_stays_up_and_service_ports() -> None:
    slot = JobSlot(0, 0, None, 1, {"type": "dev-environment", "init": ["pip install x"]})
    body = render_agent_job(
        job_id="d",
        run_name="dev",
        slot=slot,
        gpus=[],
        cluster=ClusterInfo((), 0),
        secrets={},
        executor="process",
        working_dir="/w",
        labels={},
    )
    assert body["commands"] == ["pip install x && sleep infinity"]
    assert container_ports({"port": {"container_port": 8000}, "ports": [8000, 9000]}) == [
        8000,
        9000,
    ]


def test_a_relative_working_dir_resolves_under_workflow_like_dstack() -> None:
    slot = JobSlot(0, 0, None, 1, {"type": "task", "commands": ["ls"], "working_dir": "src"})
    body = render_agent_job(
        job_id="j1",
        run_name="train",
        slot=slot,
        gpus=[],
        cluster=ClusterInfo(("10.0.0.1",), 0),
        secrets={},
        executor="process",
        working_dir=None,
        labels={},
    )
    assert body["working_dir"] == "/workflow/src"
    assert body["path_env"]["DSTACK_WORKING_DIR"] == "/workflow/src"


def _volumes_body(volumes: str) -> dict[str, object]:
    from schemas import parse_config

    text = f"type: task\nname: vols\ncommands: [ls]\nvolumes: {volumes}\n"
    spec = parse_config(text, "vols.dstack.yml").normalized()
    return render_agent_job(
        job_id="j1",
        run_name="vols",
        slot=JobSlot(0, 0, None, 1, spec),
        gpus=[],
        cluster=ClusterInfo((), 0),
        secrets={},
        executor="process",
        working_dir=None,
        labels={},
    )


def test_instance_volumes_reach_the_agents_job_in_both_forms() -> None:
    body = _volumes_body(
        "[/data/in:/data, {instance_path: /mnt/x, path: /x}, "
        "{instance_path: /mnt/o, path: /o, optional: true}]"
    )
    assert body["volumes"] == [
        {"host_path": "/data/in", "container_path": "/data", "read_only": False, "optional": False},
        {"host_path": "/mnt/x", "container_path": "/x", "read_only": False, "optional": False},
        {"host_path": "/mnt/o", "container_path": "/o", "read_only": False, "optional": True},
    ]
    spec = JobSpec.model_validate(body)  # what the agent accepts
    assert [(v.host_path, v.container_path, v.optional) for v in spec.volumes] == [
        ("/data/in", "/data", False),
        ("/mnt/x", "/x", False),
        ("/mnt/o", "/o", True),
    ]


def test_a_network_volume_fails_the_job_naming_it_never_dropped() -> None:
    with pytest.raises(PermanentError, match=r"network volume 'my-vol' \(at /v\)"):
        _volumes_body("[/data/in:/data, my-vol:/v]")


def test_no_volumes_render_an_empty_list() -> None:
    slot = JobSlot(0, 0, None, 1, {"type": "task", "commands": ["a"]})
    body = render_agent_job(
        job_id="j1",
        run_name="t",
        slot=slot,
        gpus=[],
        cluster=ClusterInfo((), 0),
        secrets={},
        executor="process",
        working_dir=None,
        labels={},
    )
    assert body["volumes"] == []


def test_a_local_volume_mounts_its_directory_one_name_per_node() -> None:
    from reconciler.core.jobspecs import agent_volumes

    spec = {"volumes": [{"name": ["v0", "v1"], "path": "/data"}, {"name": "w", "path": "/w"}]}
    dirs = {"v1": "/srv/dy/volumes/main/v1", "w": "/srv/dy/volumes/main/w"}
    assert agent_volumes(spec, 1, dirs) == [
        {"host_path": "/srv/dy/volumes/main/v1", "container_path": "/data", "read_only": False},
        {"host_path": "/srv/dy/volumes/main/w", "container_path": "/w", "read_only": False},
    ]
    with pytest.raises(PermanentError, match="network volume 'v0'"):
        agent_volumes(spec, 0, dirs)  # node 0's volume is not a directory here
