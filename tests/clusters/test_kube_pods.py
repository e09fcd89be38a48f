"""The pods of a `backends: [kubernetes]` fleet, pure (`reconciler.core.kube_pods`): which
node shape, names Kubernetes accepts, the pod spec's GPU request and selectors, and what a
pod's status means for its instance."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reconciler.core.kube_nodes import KubeOffer
from reconciler.core.kube_pods import (
    Wanted,
    choose_offer,
    dns_name,
    pod_manifest,
    pod_name,
    pod_status,
)
from reconciler.domain.statuses import JobTerminationReason
from schemas.requirements import Range

DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _offer(
    gpus: int = 0,
    name: str | None = None,
    *,
    cpus: int = 16,
    available: int = 1,
    vendor: str = "nvidia",
    product: str | None = None,
) -> KubeOffer:
    return KubeOffer(
        "c", "pool", vendor if gpus else "", name, gpus, None, cpus, 65536, 2, available, product
    )


def _wanted(gpus: Range, names: tuple[str, ...] = (), cpus: float = 2) -> Wanted:
    return Wanted(names, gpus, Range(min=cpus, max=None), Range(min=8, max=None))


def test_a_pod_takes_part_of_a_node_and_ready_small_shapes_come_first() -> None:
    big, small, busy = _offer(8, "H100"), _offer(2, "H100"), _offer(2, "H100", available=0)
    assert choose_offer([big, busy, small], _wanted(Range(min=2, max=2), ("H100",))) == small
    assert choose_offer([big, busy], _wanted(Range(min=2, max=2), ("H100",))) == big
    assert choose_offer([big], _wanted(Range(min=1, max=1), ("A100",))) is None
    assert choose_offer([big], _wanted(Range(min=9, max=None))) is None
    cpu = _offer(cpus=4)
    assert choose_offer([big, cpu], _wanted(Range(min=0, max=0), cpus=4)) == cpu
    assert choose_offer([big], _wanted(Range(min=0, max=0))) is None  # gpu: 0 stays off GPUs


@pytest.mark.parametrize(
    "stack", ["main-fleet-pods", "Main_Fleet.x", "p-fleet-" + "a" * 80, "--", "ü-fleet-ü"]
)
def test_names_are_dns_labels_and_long_ones_stay_apart(stack: str) -> None:
    for index in (0, 7, 123):
        name = pod_name(stack, index)
        assert DNS.match(name) and len(name) <= 63 and name.endswith(f"-{index}")
    assert DNS.match(dns_name(stack))
    assert pod_name("p-fleet-" + "a" * 80, 0) != pod_name("p-fleet-" + "a" * 79 + "b", 0)


def test_an_amd_fleet_asks_for_amd_gpus_without_the_nvidia_selector() -> None:
    manifest = pod_manifest(
        stack_name="s",
        index=0,
        image="img",
        authorized_key="ssh-ed25519 K",
        offer=_offer(4, None, vendor="amd"),
        wanted=_wanted(Range(min=1, max=None)),
    )
    resources = manifest["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"amd.com/gpu": "1"}
    assert "nodeSelector" not in manifest["spec"]
    assert manifest["spec"]["tolerations"][0]["key"] == "amd.com/gpu"


def _pod(phase: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n1"},
        "status": {"phase": phase, **status},
    }


@pytest.mark.parametrize(
    ("pod", "reason", "message"),
    [
        (
            None,
            JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY,
            "the pod p was deleted from the cluster",
        ),
        (
            _pod("Failed", reason="Evicted", message="The node was low on memory."),
            JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY,
            "the pod p ended: Failed (Evicted): The node was low on memory.",
        ),
        (
            _pod("Failed", reason="DeadlineExceeded"),
            JobTerminationReason.MAX_DURATION_EXCEEDED,
            "the pod p ended: Failed (DeadlineExceeded)",
        ),
        (
            _pod(
                "Failed",
                containerStatuses=[
                    {"state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}
                ],
            ),
            JobTerminationReason.INSTANCE_UNREACHABLE,
            "the pod p ended: Failed (OOMKilled, exit code 137)",
        ),
        (
            _pod("Succeeded"),
            JobTerminationReason.TERMINATED_BY_SERVER,
            "the pod p ended: Succeeded (Succeeded)",
        ),
    ],
)
def test_an_ended_pod_ends_its_instance_with_dstack_s_reason(
    pod: dict[str, Any] | None, reason: JobTerminationReason, message: str
) -> None:
    assert pod_status("p", pod).ended == (reason, message)


def test_a_pending_or_running_pod_has_not_ended() -> None:
    assert pod_status("p", _pod("Pending")).ended is None
    running = pod_status("p", _pod("Running", podIP="10.0.0.5"))
    assert running.running and (running.pod_ip, running.node) == ("10.0.0.5", "n1")
    assert not pod_status("p", _pod("Running")).running  # no IP yet: not reachable
    deleting = _pod("Running", podIP="10.0.0.5")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_status("p", deleting).ended is not None
