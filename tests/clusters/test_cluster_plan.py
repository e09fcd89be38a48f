"""A `backends: [slurm]` / `[kubernetes]` fleet in the plan: blocked, saying which file
and key to add when the project's entry of the server's backends file lacks the backend
(the one plan function, `engine.planning.plan_commit`, with the server's previewer)."""

from __future__ import annotations

import pytest

from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.policy import RepoPolicy
from reconciler.domain.desired import DesiredResource
from reconciler.domain.plan import ActionKind
from reconciler.engine.planning import plan_commit
from reconciler.engine.previewing import Previewer
from schemas.serverbackends import BackendsConfig, parse_backends_config
from tests.engine.cloud_double import CloudDouble
from tests.planning.factories import live, resource, state

SLURM_FLEET = resource("type: fleet\nname: hpc\nbackends: [slurm]\nnodes: 2\n")
KUBE_FLEET = resource("type: fleet\nname: pods\nbackends: [kubernetes]\nnodes: 1\n")
TASK = resource("type: task\nname: train\nfleets: [hpc]\ncommands: [nvidia-smi]\n")
FILE = """\
projects:
- name: main
  backends:
  - type: slurm
    clusters:
    - name: hpc1
      hostname: login
      user: alice
      private_key: {path: /srv/keys/hpc1}
      gpu_partitions: [{gpu: H100, partitions: [gpu]}]
- name: other
  backends:
  - type: kubernetes
    kubeconfig: {filename: /srv/kube}
"""


async def _reasons(clusters: ServerBackends | None, *resources: DesiredResource) -> dict[str, str]:
    previewer = Previewer({"pulumi": CloudDouble()}, clusters=clusters)
    planned = await plan_commit(
        state(*resources),
        RepoPolicy(),
        live(),
        base=None,
        previewer=previewer,
    )
    assert all(a.action is ActionKind.BLOCKED for a in planned.plan.actions)
    return {a.name: a.reason or "" for a in planned.plan.actions}


async def test_a_project_without_the_backend_is_told_which_file_and_key_to_add() -> None:
    clusters = ServerBackends("/etc/dockyard/backends.yml", parse_backends_config(FILE, "b"))
    reasons = await _reasons(clusters, KUBE_FLEET)
    assert reasons["pods"] == (
        "blocked: backend `kubernetes` is not configured for project `main` on this server: "
        "add `- type: kubernetes` with its `kubeconfig:` under `projects: - name: main` → "
        "`backends:` in /etc/dockyard/backends.yml, then restart the server "
        "(docs/backends.md)"
    )


async def test_no_backends_file_names_the_default_one_to_create() -> None:
    clusters = ServerBackends("/data/backends.yml", BackendsConfig(), found=False)
    reasons = await _reasons(clusters, SLURM_FLEET, TASK)
    assert reasons["hpc"].startswith(
        "blocked: backend `slurm` is not configured for project `main` on this server: add "
        "`- type: slurm` with its `clusters:` (hostname, user, private_key, gpu_partitions) "
        "under `projects: - name: main` → `backends:` in /data/backends.yml (no such file yet)"
    )
    # the run that can only run there waits for it, with the same line
    assert reasons["train"] == "blocked: waits for fleet `hpc`, which is " + reasons["hpc"]


async def test_a_configured_cluster_is_still_blocked_but_says_so_honestly() -> None:
    text = "projects:\n- name: main\n  backends:\n  - {type: kubernetes, kubeconfig: {data: x}}\n"
    clusters = ServerBackends("/etc/dockyard/backends.yml", parse_backends_config(text, "b"))
    reasons = await _reasons(clusters, KUBE_FLEET)
    assert reasons["pods"] == (
        "blocked: backend `kubernetes` is configured for project `main` in "
        "/etc/dockyard/backends.yml, but a run gets no pod of its own yet: declare a fleet "
        "with `backends: [kubernetes]` and name it in the run's `fleets:` (docs/kubernetes.md)"
        "; the cluster has: no node; "
        "/etc/dockyard/backends.yml (projects[0].backends[0]): `kubeconfig.data`: not a usable "
        "kubeconfig: not a kubeconfig mapping"
    )


@pytest.mark.parametrize("clusters", [None])
async def test_without_a_backends_file_loaded_the_old_line_stays(clusters: None) -> None:
    reasons = await _reasons(clusters, SLURM_FLEET)
    assert reasons["hpc"].startswith("blocked: backend slurm is not supported by Dockyard")


SLURM_RUN = resource("type: task\nname: solo\nbackends: [slurm]\ncommands: [nvidia-smi]\n")
MIXED_RUN = resource("type: task\nname: either\nbackends: [slurm, aws]\ncommands: [nvidia-smi]\n")


async def test_a_run_that_only_a_cluster_could_take_is_blocked_the_same_way() -> None:
    clusters = ServerBackends("/data/backends.yml", BackendsConfig(), found=False)
    previewer = Previewer({"pulumi": CloudDouble()}, clusters=clusters)
    planned = await plan_commit(
        state(SLURM_RUN, MIXED_RUN), RepoPolicy(), live(), base=None, previewer=previewer
    )
    actions = {a.name: a for a in planned.plan.actions}
    assert actions["solo"].action is ActionKind.BLOCKED
    assert (actions["solo"].reason or "").startswith(
        "blocked: backend `slurm` is not configured for project `main` on this server: add "
    )
    assert "/data/backends.yml (no such file yet)" in (actions["solo"].reason or "")
    assert actions["either"].action is ActionKind.CREATE  # aws may take it


async def test_a_slurm_run_without_a_fleet_is_told_to_name_a_slurm_fleet() -> None:
    clusters = ServerBackends("/etc/dockyard/backends.yml", parse_backends_config(FILE, "b"))
    previewer = Previewer({"pulumi": CloudDouble()}, clusters=clusters)
    on_fleet = resource(
        'type: task\nname: onfleet\nbackends: [slurm]\nfleets: [hpc]\ncommands: ["true"]\n'
    )
    planned = await plan_commit(
        state(SLURM_RUN, on_fleet), RepoPolicy(), live(), base=None, previewer=previewer
    )
    actions = {a.name: a for a in planned.plan.actions}
    assert actions["solo"].action is ActionKind.BLOCKED
    assert actions["solo"].reason == (
        "blocked: backend `slurm` is configured for project `main` in "
        "/etc/dockyard/backends.yml, but a run gets no Slurm allocation of its own yet: "
        "declare a fleet with `backends: [slurm]` and name it in the run's `fleets:` "
        "(docs/slurm.md)"
    )
    # a run on a fleet is left to that fleet (here none exists: it waits for it)
    assert "no Slurm allocation of its own" not in (actions["onfleet"].reason or "")
