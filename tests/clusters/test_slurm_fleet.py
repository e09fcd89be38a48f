"""A `backends: [slurm]` fleet on a real one-node Slurm cluster, through a real server.

The cluster (tests/services/slurm.py: munged, slurmctld, slurmd; one GPU as GRES on
/dev/null) and its "login node" (the tests' sshd with `SetEnv SLURM_CONF`) run on this
machine; the server is the composition root's (`running_server` with no factory) reading
a backends file that names the login node. A fleet is `sbatch` allocations running the
agent; a task runs there and its log reaches the server; deleting the fleet `scancel`s
them; an allocation cancelled behind Dockyard's back ends its jobs and frees the instance.
The plan (`plan_commit` with the Slurm engine's preview) shows the partition and the sbatch
options of each allocation, or is blocked with the login node's error.
Every wait polls with a deadline.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.bundle import Bundle
from agent.deploy import AgentOptions
from agent.tunnel import TunnelPool
from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.policy import RepoPolicy
from reconciler.domain.plan import Action, ActionKind
from reconciler.domain.statuses import InstanceStatus
from reconciler.engine.planning import plan_commit
from reconciler.engine.previewing import Previewer
from reconciler.engine.slurmengine import SlurmEngine
from schemas.serverbackends import parse_backends_config
from tests.planning.factories import live, resource, state
from tests.services.missing import skip_or_fail
from tests.services.ports import reserved_port
from tests.services.slurm import SlurmCluster as RunningSlurm
from tests.services.slurm import slurm_cluster
from tests.services.sshd import SSHHost, make_client_key, sshd_unavailable_reason, start_sshd
from tests.web.serving import Running, running_server, wait_until

GPU_FLEET = """type: fleet
name: {name}
backends: [slurm]
nodes: 1
resources:
  cpu: 1..
  memory: 256MB..
  gpu: H200:1
"""
CPU_FLEET = """type: fleet
name: {name}
backends: [slurm]
nodes: 1
resources:
  cpu: 1..
  memory: 256MB..
"""
TASK = """type: task
name: {name}
fleets: [{fleet}]
commands:
  - {command}
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSlurm]:
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def login(tmp_path_factory: pytest.TempPathFactory, slurm: RunningSlurm) -> Iterator[SSHHost]:
    reason = sshd_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    root = tmp_path_factory.mktemp("login")
    host = start_sshd(
        root / "sshd", make_client_key(root / "client"), extra_config=slurm.login_config()
    )
    yield host
    host.stop()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, slurm: RunningSlurm, login: SSHHost
) -> Iterator[Running]:
    tmp = tmp_path_factory.mktemp("server")
    backends = tmp / "backends.yml"
    backends.write_text(
        "projects:\n- name: main\n  backends:\n  - type: slurm\n    clusters:\n"
        f"    - name: hpc\n      hostname: 127.0.0.1\n      port: {login.port}\n"
        f"      user: {login.user}\n      private_key: {{path: {login.identity_file}}}\n"
        "      gpu_partitions: [{gpu: H200, partitions: [gpu]}]\n"
        "      cpu_partitions: [cpu]\n"
    )
    try:
        # the Slurm files go beside the SSH hosts' agent dir: here, not ~/.dockyard/slurm
        agent_dir = tmp / "agent"
        with running_server(
            tmp, None, backends_config=backends, ssh_agent_dir=str(agent_dir)
        ) as running:
            yield running
    finally:
        with contextlib.suppress(Exception):  # nothing of these tests outlives them
            slurm.run("scancel", "--name", "dockyard-main-fleet-hpc-0")
            slurm.run("scancel", "--name", "dockyard-main-fleet-hpc-cpu-0")
            slurm.run("scancel", "--name", "dockyard-main-fleet-hpc-time-0")


def _api(server: Running, path: str, body: dict[str, Any]) -> Any:
    with server.client(server.admin_token) as http:
        answer = http.post(f"/api/project/main/{path}", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _instances(server: Running, fleet: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = _api(server, "fleets/get", {"name": fleet})["instances"]
    return found


def _ready(server: Running, fleet: str) -> bool:
    return any(i["status"] in ("idle", "busy") for i in _instances(server, fleet))


def _allocation(server: Running, fleet: str) -> dict[str, Any]:
    """The Slurm allocation the store records for the fleet's live instance."""
    store = server.controller.runtime.store  # type: ignore[attr-defined]
    live = [
        i
        for i in store.instance_records(statuses=["pending", "provisioning", "idle", "busy"])
        if i.name.startswith(f"{fleet}-")
    ]
    assert len(live) == 1, live
    assert live[0].backend == "slurm"
    record: dict[str, Any] = live[0].resources["slurm"]
    return record


def _state(slurm: RunningSlurm, job_id: str) -> str:
    """The job's state as Slurm says it ("" once it left the queue)."""
    out = slurm.run("sh", "-c", f"squeue -h -t all -j {job_id} -o %T 2>/dev/null; true")
    return out.strip()


def _job(server: Running, run: str) -> dict[str, Any]:
    got = _api(server, "runs/get", {"run_name": run})
    job: dict[str, Any] = got["jobs"][0]["job_submissions"][-1]
    return job


def _log(server: Running, run: str) -> str:
    chunk = _api(server, "logs/poll", {"run_name": run, "limit": 100000})
    return base64.b64decode(chunk["data"]).decode(errors="replace")


def _jobs_dir(server: Running) -> Path:
    """Where this server's allocations keep their files (beside its SSH agent dir)."""
    return Path(server.settings.data_dir).parent / "slurm" / "jobs"


def _processes_with(text: str) -> list[str]:
    """Command lines of this machine's processes that contain `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit():
                line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if text in line:
                    found.append(line)
    return found


def _apply(server: Running, kind: str, text: str, path: str) -> None:
    _api(server, f"{kind}/apply", {"text": text, "path": path, "force": False})


def test_a_fleet_is_sbatch_allocations_running_the_agent_and_runs_a_task(
    server: Running, slurm: RunningSlurm
) -> None:
    _apply(server, "fleets", GPU_FLEET.format(name="hpc"), "hpc.dstack.yml")
    wait_until(lambda: _ready(server, "hpc"), timeout=180, what="the Slurm fleet's instance")
    allocation = _allocation(server, "hpc")
    job_id = allocation["job_id"]
    assert allocation["cluster"] == "hpc" and allocation["partition"] == "gpu"
    shown = slurm.run("scontrol", "show", "job", job_id, "--oneliner")
    assert "JobState=RUNNING" in shown and "Partition=gpu" in shown
    assert "JobName=dockyard-main-fleet-hpc-0" in shown
    assert "gres/gpu:h200=1" in shown or "gres:gpu:h200:1" in shown, shown  # --gres asked

    marker = "hello-from-the-slurm-allocation"
    _apply(server, "runs", TASK.format(name="on-slurm", fleet="hpc", command=f"echo {marker}"),
           "on-slurm.dstack.yml")  # fmt: skip
    wait_until(
        lambda: _api(server, "runs/get", {"run_name": "on-slurm"})["status"] in ("done", "failed"),
        timeout=120,
        what="the task on the Slurm fleet",
    )
    assert _job(server, "on-slurm")["status"] == "done", _job(server, "on-slurm")
    assert marker in _log(server, "on-slurm")

    # deleting the fleet ends its allocation with scancel, and frees its instance
    _api(server, "fleets/delete", {"names": ["hpc"]})
    wait_until(
        lambda: _state(slurm, job_id) in ("", "CANCELLED", "COMPLETED"),
        timeout=60,
        what="the allocation to be cancelled",
    )
    assert _state(slurm, job_id) in ("", "CANCELLED")
    wait_until(
        lambda: not _processes_with(f"{_jobs_dir(server)}/main-fleet-hpc-0-"),
        timeout=30,
        what="the allocation's agent to be gone",
    )
    assert not list(_jobs_dir(server).glob("*"))  # rm -rf'd
    store = server.controller.runtime.store  # type: ignore[attr-defined]
    wait_until(
        lambda: all(
            i.status == InstanceStatus.TERMINATED.value
            for i in store.instance_records()
            if i.name == "hpc-0"
        ),
        timeout=30,
        what="the instance to be terminated",
    )


def test_an_allocation_cancelled_behind_dockyards_back_ends_its_jobs(
    server: Running, slurm: RunningSlurm
) -> None:
    _apply(server, "fleets", CPU_FLEET.format(name="hpc-cpu"), "cpu.dstack.yml")
    wait_until(lambda: _ready(server, "hpc-cpu"), timeout=180, what="the CPU Slurm fleet")
    allocation = _allocation(server, "hpc-cpu")
    assert allocation["partition"] == "cpu"
    _apply(server, "runs", TASK.format(name="long", fleet="hpc-cpu", command="sleep 611"),
           "long.dstack.yml")  # fmt: skip
    wait_until(
        lambda: _api(server, "runs/get", {"run_name": "long"})["status"] == "running",
        timeout=120,
        what="the long task to run",
    )
    slurm.run("scancel", allocation["job_id"])  # not through Dockyard
    wait_until(
        lambda: _job(server, "long")["status"] in ("failed", "terminated", "done"),
        timeout=90,
        what="the job on the cancelled allocation to end",
    )
    job = _job(server, "long")
    assert job["status"] == "failed"
    assert job["termination_reason"] == "interrupted_by_no_capacity"
    assert f"Slurm allocation (job {allocation['job_id']}) ended" in job["status_message"]
    store = server.controller.runtime.store  # type: ignore[attr-defined]
    wait_until(
        lambda: (
            [i.status for i in store.instance_records() if i.name == "hpc-cpu-0"]
            == [InstanceStatus.TERMINATED.value]
        ),
        timeout=30,
        what="the instance of the cancelled allocation to be terminated",
    )
    ended = [i for i in store.instance_records() if i.name == "hpc-cpu-0"]
    assert ended[0].termination_reason == "error"
    assert f"(job {allocation['job_id']}) ended: " in ended[0].status_message
    # nothing of the allocation runs any more: its agent, the task's process
    wait_until(
        lambda: (
            not _processes_with("sleep 611")
            and not _processes_with(f"{_jobs_dir(server)}/main-fleet-hpc-cpu-0-")
        ),
        timeout=30,
        what="the allocation's processes to be gone",
    )


def _backends(login: SSHHost, port: int | None = None) -> str:
    return (
        "projects:\n- name: main\n  backends:\n  - type: slurm\n    clusters:\n"
        f"    - name: hpc\n      hostname: 127.0.0.1\n      port: {port or login.port}\n"
        f"      user: {login.user}\n      private_key: {{path: {login.identity_file}}}\n"
        "      gpu_partitions: [{gpu: H200, partitions: [gpu]}]\n"
        "      cpu_partitions: [cpu]\n"
    )


async def _planned(login: SSHHost, tmp: Path, text: str, port: int | None = None) -> Action:
    """The action of one fleet in the plan (`plan_commit`, the one plan function) made with
    the server's previewer over a Slurm engine of the backends file."""
    clusters = ServerBackends("backends.yml", parse_backends_config(_backends(login, port), "b"))

    async def no_bundle() -> Bundle:
        raise AssertionError("planning installs nothing")

    engine = SlurmEngine(clusters, TunnelPool(), tmp, tmp / "key", no_bundle, AgentOptions())
    previewer = Previewer({"slurm": engine}, clusters=clusters)
    planned = await plan_commit(
        state(resource(text)), RepoPolicy(), live(), base=None, previewer=previewer
    )
    (action,) = planned.plan.actions
    return action


async def test_the_plan_shows_what_would_be_allocated_and_from_which_partition(
    login: SSHHost, slurm: RunningSlurm, tmp_path: Path
) -> None:
    action = await _planned(login, tmp_path, GPU_FLEET.format(name="planned"))
    assert action.action is ActionKind.CREATE, action.reason
    assert action.preview is not None and action.preview.error is None
    steps = [(s.op, s.name, s.type, s.diffs) for s in action.preview.steps]
    assert steps == [
        (
            "create",
            "allocation/planned-0",
            "slurm:sbatch",
            ("hpc/gpu", "--partition=gpu", "--nodes=1", "--ntasks=1", "--gres=gpu:h200:1",
             "--cpus-per-task=1", "--mem=256M"),
        )
    ]  # fmt: skip
    cpu = await _planned(login, tmp_path, CPU_FLEET.format(name="small"))
    assert cpu.preview is not None
    assert cpu.preview.steps[0].diffs[:2] == ("hpc/cpu", "--partition=cpu")
    assert "dockyard-main-fleet" not in slurm.run("squeue", "-h", "-o", "%j")  # nothing sbatched


async def test_the_plan_is_blocked_with_the_reason_when_the_login_node_cannot_answer(
    login: SSHHost, tmp_path: Path
) -> None:
    with reserved_port() as closed:  # bound, never listening: the login is refused
        action = await _planned(login, tmp_path, GPU_FLEET.format(name="planned"), closed)
    assert action.action is ActionKind.BLOCKED
    assert action.reason is not None
    assert f"Slurm cluster `hpc` (login node {login.user}@127.0.0.1:{closed})" in action.reason
    assert "cannot log in" in action.reason


def test_an_allocation_that_reaches_its_time_limit_ends_its_jobs(
    server: Running, slurm: RunningSlurm
) -> None:
    _apply(server, "fleets", CPU_FLEET.format(name="hpc-time"), "time.dstack.yml")
    wait_until(lambda: _ready(server, "hpc-time"), timeout=180, what="the Slurm fleet")
    allocation = _allocation(server, "hpc-time")
    _apply(server, "runs", TASK.format(name="timed", fleet="hpc-time", command="sleep 612"),
           "timed.dstack.yml")  # fmt: skip
    wait_until(
        lambda: _api(server, "runs/get", {"run_name": "timed"})["status"] == "running",
        timeout=120,
        what="the task to run",
    )
    # the allocation's time limit (Slurm's granularity: minutes) as the cluster imposes it
    slurm.run("scontrol", "update", f"JobId={allocation['job_id']}", "TimeLimit=1")
    wait_until(
        lambda: _job(server, "timed")["status"] in ("failed", "terminated", "done"),
        timeout=180,
        what="the job on the timed-out allocation to end",
    )
    job = _job(server, "timed")
    assert (job["status"], job["termination_reason"]) == ("terminated", "max_duration_exceeded")
    assert "(its time limit)" in job["status_message"], job
    store = server.controller.runtime.store  # type: ignore[attr-defined]
    wait_until(
        lambda: (
            [i.status for i in store.instance_records() if i.name == "hpc-time-0"]
            == [InstanceStatus.TERMINATED.value]
        ),
        timeout=30,
        what="the instance of the timed-out allocation to be terminated",
    )
    wait_until(
        lambda: not _processes_with("sleep 612"), timeout=60, what="the task's process to end"
    )


def test_the_allocations_survive_a_server_restart(
    tmp_path: Path, slurm: RunningSlurm, login: SSHHost
) -> None:
    """The store and the engine's state keep the allocation: a new server process on the
    same data dir reaches the same agent, runs a task there, and cancels it on delete."""
    backends = tmp_path / "backends.yml"
    backends.write_text(_backends(login))
    settings: dict[str, Any] = {
        "backends_config": backends,
        "ssh_agent_dir": str(tmp_path / "agent"),
    }
    try:
        with running_server(tmp_path, None, **settings) as first:
            _apply(first, "fleets", CPU_FLEET.format(name="kept"), "kept.dstack.yml")
            wait_until(lambda: _ready(first, "kept"), timeout=180, what="the Slurm fleet")
            job_id = _allocation(first, "kept")["job_id"]
        assert _state(slurm, job_id) == "RUNNING"  # the server's stop leaves it running
        with running_server(tmp_path, None, **settings) as second:
            assert _allocation(second, "kept")["job_id"] == job_id
            wait_until(lambda: _ready(second, "kept"), timeout=60, what="the fleet, again")
            _apply(second, "runs", TASK.format(name="after", fleet="kept", command="echo again"),
                   "after.dstack.yml")  # fmt: skip
            wait_until(
                lambda: (
                    _api(second, "runs/get", {"run_name": "after"})["status"] in ("done", "failed")
                ),
                timeout=120,
                what="the task after the restart",
            )
            assert _job(second, "after")["status"] == "done"
            assert "again" in _log(second, "after")
            assert _state(slurm, job_id) == "RUNNING"  # the same allocation, not a new one
            _api(second, "fleets/delete", {"names": ["kept"]})
            wait_until(
                lambda: _state(slurm, job_id) in ("", "CANCELLED"),
                timeout=60,
                what="the allocation to be cancelled after the restart",
            )
    finally:
        with contextlib.suppress(Exception):
            slurm.run("scancel", "--name", "dockyard-main-fleet-kept-0")
