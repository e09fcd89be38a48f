"""A JobSpec as container arguments (pure): commands, network, ports, GPUs, limits."""

from __future__ import annotations

from typing import Any

from docker.types import DeviceRequest

from agent.protocol import JobSpec, PortMapping
from agent.server.executors.containers import (
    CONTAINER_INIT,
    CONTAINER_LOG,
    to_container_kwargs,
    to_port_mappings,
)


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
