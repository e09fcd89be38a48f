"""Elastic fleets (reconciler.core.elastic): which fleet grows for a job, to what size,
why none can, and which idle instances a fleet sheds."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.core.elastic import (
    ElasticFleet,
    Growth,
    IdleView,
    choose_growth,
    elastic_fleet,
    failure_message,
    fleet_kind,
    grow_target,
    hosts_coming,
    node_bounds,
    offer_mismatch,
    offered_by,
    pick_victims,
    provision_nodes,
    stack_nodes,
)
from reconciler.core.jobspecs import requirements_of
from reconciler.core.scheduling import Candidate, Gpu, Requirements
from schemas import parse_config

GPU_FLEET = """
type: fleet
name: gpu
nodes: 0..4
backends: [aws]
resources:
  gpu: A100:80GB:2
"""


def _fleet_spec(text: str) -> dict[str, Any]:
    return parse_config(text, "fleet.dstack.yml").normalized()


def _job(text: str) -> Requirements:
    spec = parse_config("type: task\nname: train\ncommands: [x]\n" + text, "t.dstack.yml")
    return requirements_of(spec.normalized())


def _fleet(name: str = "gpu", spec: str = GPU_FLEET, **counts: Any) -> ElasticFleet:
    text = spec.replace("name: gpu", f"name: {name}")
    return elastic_fleet(
        f"id-{name}", name, counts.pop("status", "active"), _fleet_spec(text), **counts
    )


def _a100(name: str, count: int = 2) -> Candidate:
    gpus = tuple(Gpu(i, "A100", "nvidia", 80) for i in range(count))
    return Candidate(f"id-{name}", name, "gpu", 32, "x86_64", 256, 500, gpus)


def test_kinds_and_bounds_come_from_the_normalized_spec() -> None:
    cloud = _fleet_spec(GPU_FLEET)
    assert fleet_kind(cloud) == "cloud"
    assert node_bounds(cloud) == (0, 4)
    assert fleet_kind(_fleet_spec("type: fleet\nname: local\nnodes: 1\n")) == "local"
    assert node_bounds(_fleet_spec("type: fleet\nname: local\nnodes: 1\n")) == (1, 1)
    ssh = _fleet_spec("type: fleet\nname: lab\nssh_config:\n  user: u\n  hosts: [h1]\n")
    assert fleet_kind(ssh) == "ssh"
    assert node_bounds(_fleet_spec("type: fleet\nname: big\nnodes: 2..\nbackends: [gcp]\n")) == (
        2,
        None,
    )


def test_a_job_within_the_fleets_resources_grows_it_by_one_node() -> None:
    growth = choose_growth(_job("resources:\n  gpu: A100:1\n"), 1, [_fleet(live=1)])
    assert isinstance(growth, Growth)
    assert (growth.fleet_name, growth.nodes, growth.live, growth.target) == ("gpu", 1, 1, 2)
    assert growth.grows
    assert growth.message == "waiting for fleet gpu to provision a node (1 → 2 of max 4)"


@pytest.mark.parametrize(
    ("resources", "failed"),
    [
        ("gpu: A100:4", "gpu nvidia:A100:4 not met: the fleet's resources give gpu A100:80GB:2"),
        ("gpu: H100:1", "gpu nvidia:H100:1 not met"),
        ("gpu: 40GB:1", "gpu nvidia:40GB:1 not met"),
        ("memory: 4GB", "memory 4GB not met: the fleet's resources give 8GB.."),
        ("disk: 50GB", "disk 50GB not met: the fleet's resources give 100GB.."),
    ],
)
def test_a_requirement_the_fleets_resources_cannot_meet_is_named(
    resources: str, failed: str
) -> None:
    reasons = choose_growth(_job(f"resources:\n  {resources}\n"), 1, [_fleet()])
    assert isinstance(reasons, tuple)
    assert len(reasons) == 1 and reasons[0].startswith("fleet gpu: ")
    assert failed in reasons[0]


def test_unset_fleet_resources_offer_anything_and_spot_policies_must_agree() -> None:
    anything = offered_by({"type": "fleet", "resources": None})
    assert offer_mismatch(_job("resources:\n  gpu: H100:8\n"), anything) is None
    on_demand = offered_by({"spot_policy": None})
    spot = _job("spot_policy: spot\n")
    assert offer_mismatch(spot, on_demand) == (
        "spot_policy spot not met: the fleet's spot_policy is on-demand"
    )
    assert offer_mismatch(spot, offered_by({"spot_policy": "auto"})) is None
    assert offer_mismatch(_job("spot_policy: auto\n"), on_demand) is None
    amd_arm = offered_by({"resources": {"cpu": {"arch": "arm"}, "gpu": {"vendor": "amd"}}})
    assert offer_mismatch(_job("resources:\n  gpu: 1\n"), amd_arm) == (
        "gpu nvidia:1 not met: the fleet's resources give gpu amd"
    )
    assert offer_mismatch(_job("resources:\n  cpu: x86:2..\n"), amd_arm) == (
        "cpu arch x86 not met: the fleet's resources give arm"
    )


def test_the_local_and_ssh_fleets_never_grow_and_say_so() -> None:
    local = _fleet("local", "type: fleet\nname: gpu\nnodes: 1\n", live=1)
    ssh = _fleet("lab", "type: fleet\nname: gpu\nssh_config:\n  user: u\n  hosts: [h]\n")
    reasons = choose_growth(Requirements(), 1, [local, ssh])
    assert reasons == (
        "fleet local is this host (the local fleet): one host, it never grows",
        "fleet lab is an SSH fleet: its hosts are listed, it never grows",
    )


def test_a_job_waits_for_a_local_or_ssh_fleet_still_being_set_up() -> None:
    ssh = "type: fleet\nname: gpu\nssh_config:\n  user: u\n  hosts: [h]\n"
    coming = _fleet("lab", ssh, status="submitted")
    assert hosts_coming(Requirements(), [coming]) == (
        "waiting for fleet lab: its hosts are still being set up"
    )
    assert hosts_coming(Requirements(), [_fleet("lab", ssh)]) is None  # active: placement's say
    assert hosts_coming(_job("fleets: [other]\n"), [coming]) is None  # not a fleet it may use
    assert hosts_coming(Requirements(), [_fleet(status="submitted")]) is None  # cloud: growth's


def test_fleets_outside_the_jobs_fleets_filter_are_not_considered() -> None:
    job = _job("fleets: [other]\n")
    assert choose_growth(job, 1, [_fleet()]) == ()


def test_multi_node_tasks_need_a_cluster_fleet_with_room_for_all_nodes() -> None:
    cluster = GPU_FLEET.replace("nodes: 0..4", "nodes: 0..4\nplacement: cluster")
    job = _job("resources:\n  gpu: A100:2\n")
    reasons = choose_growth(job, 2, [_fleet()])
    assert reasons == ("fleet gpu: multi-node tasks need placement: cluster",)
    too_many = choose_growth(job, 5, [_fleet(spec=cluster)])
    assert too_many == ("fleet gpu: 5 nodes needed, nodes max is 4",)
    growth = choose_growth(job, 3, [_fleet(spec=cluster, live=1, spare=1)])
    assert isinstance(growth, Growth)
    assert (growth.live, growth.target) == (1, 3)  # the idle node counts: at least 3 in all
    assert growth.message == "waiting for fleet gpu to provision 2 nodes (1 → 3 of max 4)"


def test_instances_already_up_stand_for_the_new_ones() -> None:
    fleet = _fleet(
        spec=GPU_FLEET.replace("A100:80GB:2", "A100:1.."), live=1, instances=(_a100("gpu-0", 2),)
    )
    reasons = choose_growth(_job("resources:\n  gpu: A100:4\n"), 1, [fleet])
    assert isinstance(reasons, tuple)
    assert reasons[0] == (
        "fleet gpu: its nodes are alike and gpu-0 fails "
        "gpu nvidia:A100:4 not met: the instance has A100:80GB, A100:80GB"
    )
    assert isinstance(choose_growth(_job("resources:\n  gpu: A100:2\n"), 1, [fleet]), Growth)


def test_failed_fleets_and_named_instances_cannot_grow() -> None:
    assert choose_growth(Requirements(), 1, [_fleet(status="failed")]) == ("fleet gpu is failed",)
    named = Requirements(instances=("gpu-0",))
    (reason,) = choose_growth(named, 1, [_fleet()])
    assert "are named, new ones are not" in reason


def test_at_max_the_job_waits_and_says_so() -> None:
    growth = choose_growth(_job("resources:\n  gpu: 1\n"), 1, [_fleet(live=4, spare=0)])
    assert isinstance(growth, Growth)
    assert not growth.grows
    assert "at max 4 nodes" in growth.message


def test_other_jobs_demand_and_starting_nodes_count() -> None:
    # Two jobs already wait; one node is starting for them: a third job needs a new one.
    growth = choose_growth(Requirements(), 1, [_fleet(live=2, spare=1, demand=2)])
    assert isinstance(growth, Growth)
    assert (growth.live, growth.target) == (2, 4)
    # The nodes starting cover this job: it waits for them.
    covered = choose_growth(Requirements(), 1, [_fleet(live=2, spare=2)])
    assert isinstance(covered, Growth) and not covered.grows
    assert covered.message == "waiting for fleet gpu to start its new nodes (2 of max 4)"


def test_the_fleet_already_awaited_is_kept_then_room_then_name() -> None:
    full_a = _fleet("fa", live=4)
    free_b = _fleet("fb", live=0)
    free_c = _fleet("fc", live=0)
    choice = choose_growth(Requirements(), 1, [full_a, free_c, free_b])
    assert isinstance(choice, Growth) and choice.fleet_name == "fb"
    kept = choose_growth(Requirements(), 1, [full_a, free_c, free_b], current="id-fc")
    assert isinstance(kept, Growth) and kept.fleet_name == "fc"
    waits = choose_growth(Requirements(), 1, [full_a, free_b], current="id-fa")
    assert isinstance(waits, Growth) and waits.fleet_name == "fa" and not waits.grows


@pytest.mark.parametrize(
    ("live", "spare", "demand", "maximum", "target"),
    [
        (0, 0, 1, 2, 1),
        (1, 0, 1, 2, 2),
        (2, 0, 1, 2, 2),  # at max
        (1, 1, 1, 2, 1),  # the starting node serves the demand
        (1, 0, 5, 3, 3),  # capped
        (3, 0, 0, 2, 3),  # above max (max lowered): never shrinks here
        (0, 0, 7, None, 7),  # no max
    ],
)
def test_grow_target(live: int, spare: int, demand: int, maximum: int | None, target: int) -> None:
    assert grow_target(live, spare, demand, maximum) == target


def test_failure_message_keeps_placements_and_adds_why_no_fleet_grows() -> None:
    assert failure_message("no offers: f/a: cpu 64 not met", ()) == "no offers: f/a: cpu 64 not met"
    assert failure_message(
        "no fleets: no instance is available in the project's fleets", ["fleet gpu: gpu 4 not met"]
    ) == ("no offers: fleet gpu: gpu 4 not met")
    assert failure_message("no offers: f/a: x", ["fleet lab is an SSH fleet"]) == (
        "no offers: f/a: x; fleet lab is an SSH fleet"
    )


def test_victims_are_idle_long_enough_above_min_highest_first() -> None:
    views = [IdleView("a", 0, 100.0), IdleView("b", 1, 100.0), IdleView("c", 2, 10.0)]
    assert pick_victims(views, 0, 60, from_top=False) == ["b", "a"]
    assert pick_victims(views, 2, 60, from_top=False) == ["b"]
    # A cloud stack drops its highest numbers: the not-idle-enough top instance keeps all.
    assert pick_victims(views, 0, 60, from_top=True) == []
    busy_top = [IdleView("a", 0, 100.0), IdleView("b", 1, None)]
    assert pick_victims(busy_top, 0, 60, from_top=True) == []
    assert pick_victims(busy_top, 0, 60, from_top=False) == ["a"]


def test_stack_and_provision_counts_never_cut_a_staying_instance() -> None:
    assert stack_nodes([]) == 0
    assert stack_nodes([0, 1]) == 2
    assert stack_nodes([0, 2]) == 3  # indexed: keeping #2 keeps the stack at 3
    spec = _fleet_spec(GPU_FLEET)
    assert provision_nodes(spec, []) == 0
    assert provision_nodes(spec, [0, 1, 2]) == 3  # a re-apply keeps the grown nodes
    assert provision_nodes({**spec, "nodes": {"min": 1, "target": 2, "max": 4}}, [0]) == 2
    assert provision_nodes({**spec, "nodes": {"min": 0, "target": 0, "max": 2}}, [0, 1, 2]) == 2
