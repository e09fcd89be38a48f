"""A JobSpec as container arguments (pure): commands, network, ports, GPUs, limits."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from docker.types import DeviceRequest

from agent.protocol import JobSpec, PortMapping
from agent.server.executors.containers import (
    CONTAINER_INIT,
    CONTAINER_LOG,
    amd_device_groups,
    to_container_kwargs,
    to_port_mappings,
)
from agent.server.executors.process import job_environment


def spec(**fields: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"id": "j", "run_name": "r", "executor": "docker", "image": "img:1", **fields}
    )


def test_joined_commands_write_to_the_mounted_log() -> None:
    kwargs = to_container_kwargs(spec(commands=["a", "b c"], shell="/bin/bash"), "/data/log")
    assert kwargs["entrypoint"] == ["/bin/bash", "-c"]
    assert kwargs["command"] == [CONTAINER_INIT, "/bin/bash", "a && b c"]
    assert kwargs["volumes"]["/data/log"] == {"bind": CONTAINER_LOG, "mode": "rw"}
    assert kwargs["name"] == "dockyard-j"
    assert kwargs["labels"] == {"dockyard.job-id": "j", "dockyard.run-name": "r"}
    assert kwargs["environment"] == {"DOCKYARD_JOB_ID": "j", "DOCKYARD_RUN_NAME": "r"}


def test_entrypoint_gets_the_commands_as_arguments() -> None:
    kwargs = to_container_kwargs(spec(entrypoint=["python", "-m", "x"], commands=["--a"]), "/l")
    assert (kwargs["entrypoint"], kwargs["command"]) == (["python", "-m", "x"], ["--a"])
    assert "/l" not in kwargs["volumes"]


def test_image_defaults_when_nothing_is_given() -> None:
    kwargs = to_container_kwargs(spec(), "/l")
    assert "entrypoint" not in kwargs and "command" not in kwargs


def test_host_network_for_a_whole_instance() -> None:
    job = spec(commands=["x"], ports=[{"container_port": 8000}])
    kwargs = to_container_kwargs(job, "/l")
    assert kwargs["network_mode"] == "host" and "ports" not in kwargs
    assert to_port_mappings(job, {}) == [PortMapping(container_port=8000, host_port=8000)]


def test_bridge_publishes_on_loopback() -> None:
    job = spec(
        commands=["x"],
        network_mode="bridge",
        ports=[{"container_port": 8000}, {"container_port": 22, "host_port": 2222}],
    )
    kwargs = to_container_kwargs(job, "/l")
    assert "network_mode" not in kwargs
    assert kwargs["ports"] == {"8000/tcp": ("127.0.0.1",), "22/tcp": ("127.0.0.1", 2222)}
    attrs = {
        "NetworkSettings": {
            "Ports": {
                "8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "49153"}],
                "22/tcp": [{"HostIp": "127.0.0.1", "HostPort": "2222"}],
            }
        }
    }
    assert to_port_mappings(job, attrs) == [
        PortMapping(container_port=8000, host_port=49153),
        PortMapping(container_port=22, host_port=2222),
    ]


def test_gpus_limits_user_volumes() -> None:
    job = spec(
        commands=["x"],
        gpus=[1, 3],
        shm_size_mib=1024,
        cpus=2.5,
        memory_mib=4096,
        user="1000:1000",
        privileged=True,
        working_dir="/workflow",
        volumes=[{"host_path": "/mnt/data", "container_path": "/data", "read_only": True}],
    )
    kwargs = to_container_kwargs(job, "/l")
    [request] = kwargs["device_requests"]
    assert isinstance(request, DeviceRequest)
    assert (request.driver, request.device_ids, request.capabilities) == (
        "nvidia",
        ["1", "3"],
        [["gpu"]],
    )
    assert (kwargs["shm_size"], kwargs["nano_cpus"], kwargs["mem_limit"]) == (
        "1024m",
        2_500_000_000,
        "4096m",
    )
    assert (kwargs["user"], kwargs["privileged"], kwargs["working_dir"]) == (
        "1000:1000",
        True,
        "/workflow",
    )
    assert kwargs["volumes"]["/mnt/data"] == {"bind": "/data", "mode": "ro"}
    assert kwargs["log_config"]["Type"] == "local"


def test_no_gpus_no_device_request() -> None:
    assert "device_requests" not in to_container_kwargs(spec(commands=["x"]), "/l")


def test_amd_gpus_get_rocm_devices_groups_and_visibility() -> None:
    job = spec(commands=["x"], gpus=[2, 3], gpu_vendor="amd")
    kwargs = to_container_kwargs(job, "/l", gpu_groups=[44, 993, 44])
    assert kwargs["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert kwargs["group_add"] == ["44", "993"]
    assert kwargs["environment"]["HIP_VISIBLE_DEVICES"] == "2,3"
    assert kwargs["environment"]["ROCR_VISIBLE_DEVICES"] == "2,3"
    assert "device_requests" not in kwargs, "no NVIDIA runtime request for AMD GPUs"


def test_amd_device_groups_are_the_owners_of_the_device_files(tmp_path: Path) -> None:
    (tmp_path / "dri").mkdir()
    for name in ("kfd", "dri/renderD128", "dri/card0"):
        (tmp_path / name).write_text("")
    if os.geteuid() == 0:  # a group other than the test's own, to tell them apart
        os.chown(tmp_path / "kfd", -1, 44)
    job = spec(commands=["x"], gpus=[0], gpu_vendor="amd")
    groups = amd_device_groups(job, dev=tmp_path)
    assert groups == sorted({(tmp_path / n).stat().st_gid for n in ("kfd", "dri/renderD128")})
    assert amd_device_groups(spec(commands=["x"], gpus=[0]), dev=tmp_path) == [], "NVIDIA"


def test_process_jobs_see_their_vendors_visibility_variable() -> None:
    amd = job_environment(spec(executor="process", gpus=[1], gpu_vendor="amd"), {})
    assert amd["HIP_VISIBLE_DEVICES"] == "1" and "CUDA_VISIBLE_DEVICES" not in amd
    nvidia = job_environment(spec(executor="process", gpus=[0, 1]), {})
    assert nvidia["CUDA_VISIBLE_DEVICES"] == "0,1" and "HIP_VISIBLE_DEVICES" not in nvidia
    assert nvidia["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    none = job_environment(spec(executor="process", gpus=[]), {})
    assert none["CUDA_VISIBLE_DEVICES"] == "" and none["NVIDIA_VISIBLE_DEVICES"] == "none"
