"""Using a `backends: [slurm]` fleet of the config repo: a service through the proxy,
`dockyard attach`'s port forward, and a scale-down (`nodes: 2` → `nodes: 1`).

One real one-node cluster (tests/services/slurm.py) whose login node is the tests' sshd,
and one real server (the composition root's controller) watching a real config repo. To
keep the suite short, the module makes ONE fleet of two allocations (`served`): a service
runs on its first node; the proxy and `dockyard attach` reach it through the login node as
jump host; then the scale-down cancels the second allocation and the service on the first
keeps answering. The fixture's teardown stops the server and `scancel`s the fleet's
allocations by name, even when a test failed. Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.api import models as wire
from reconciler.api.forwarding import ForwardTarget, PortForwarder
from reconciler.cli.attach import _alias
from reconciler.domain.statuses import InstanceStatus
from tests.clusters.test_slurm_fleet import _allocation, _backends, _processes_with, _state
from tests.engine.fixtures import ConfigRepo
from tests.services.missing import skip_or_fail
from tests.services.ports import reserved_port
from tests.services.slurm import SlurmCluster as RunningSlurm
from tests.services.slurm import slurm_cluster
from tests.services.sshd import SSHHost, make_client_key, sshd_unavailable_reason, start_sshd
from tests.web.serving import Running, running_server, wait_until

FLEET = """type: fleet
name: down
backends: [slurm]
nodes: {nodes}
resources:
  cpu: 1..
  memory: 256MB..
"""
SERVICE = """type: service
name: svc
fleets: [down]
port: {port}
auth: true
commands:
  - mkdir -p site && echo {marker} > site/index.html
  - exec python3 -m http.server {port} --bind 127.0.0.1 --directory site
"""
MARKER = "served-from-a-slurm-allocation"
NAMES = ("dockyard-main-fleet-down-0", "dockyard-main-fleet-down-1")


@dataclass
class Served:
    server: Running
    repo: ConfigRepo
    login: SSHHost
    slurm: RunningSlurm
    port: int  # the service's port on the compute node


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


def _trigger(server: Running) -> str:
    """Reconcile the config repo now; the reconcile's id."""
    with server.client(server.admin_token) as http:
        answer = http.post("/api/project/main/reconciles/trigger")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["id"])


def _reconcile(server: Running, reconcile_id: str) -> dict[str, Any]:
    with server.client(server.admin_token) as http:
        answer = http.post("/api/project/main/reconciles/get", json={"id": reconcile_id})
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def _live(server: Running) -> list[str]:
    """Names of the fleet's instances that are ready (idle or busy)."""
    store = server.controller.runtime.store  # type: ignore[attr-defined]
    return sorted(i.name for i in store.instance_records(statuses=["idle", "busy"]))


def _proxied(server: Running) -> httpx.Response | None:
    try:
        with server.client(server.admin_token) as http:
            return http.get("/proxy/services/main/svc/")
    except httpx.HTTPError:
        return None


def _answers(server: Running) -> bool:
    got = _proxied(server)
    return got is not None and got.status_code == 200 and MARKER in got.text


def _clients_of(port: int) -> set[str]:
    """Names of this machine's processes that hold a TCP connection to 127.0.0.1:`port`
    (/proc/net/tcp's established sockets, matched to the processes' fds by inode)."""
    wanted = f"0100007F:{port:04X}"
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2] == wanted and fields[3] == "01":  # remote address, ESTABLISHED
            inodes.add(f"socket:[{fields[9]}]")
    names = set()
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # a process gone meanwhile
            if proc.name.isdigit() and inodes & _sockets(proc):
                names.add((proc / "comm").read_text().strip())
    return names


def _sockets(proc: Path) -> set[str]:
    """What the process's file descriptors point to (an fd closed meanwhile is left out)."""
    found = set()
    for fd in (proc / "fd").iterdir():
        with contextlib.suppress(OSError):
            found.add(os.readlink(fd))
    return found


def _queued(slurm: RunningSlurm) -> list[str]:
    """Names of the jobs Slurm still holds a node for (cancelled ones that are still
    completing included)."""
    out = slurm.run("squeue", "-h", "-o", "%j")
    return sorted(line.strip() for line in out.splitlines() if line.strip())


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, slurm: RunningSlurm, login: SSHHost
) -> Iterator[Served]:
    """The fleet `down` (two allocations) from the config repo, then the service `svc`
    on its first node (committed once both nodes are idle: placement takes the first by
    name), answering through the proxy."""
    tmp = tmp_path_factory.mktemp("server")
    backends = tmp / "backends.yml"
    backends.write_text(_backends(login))
    repo = ConfigRepo(tmp / "config-repo")
    repo.commit({"fleets/down.dstack.yml": FLEET.format(nodes=2)}, "a Slurm fleet of 2")
    used: list[int] = []  # the service's port, for the teardown's check
    try:
        with (
            reserved_port() as port,
            running_server(
                tmp, None, repo=str(repo.path), fetch_interval=3600,
                backends_config=backends, ssh_agent_dir=str(tmp / "agent"),
            ) as server,
        ):  # fmt: skip
            wait_until(
                lambda: _live(server) == ["down-0", "down-1"],
                timeout=180,
                what="both allocations of the Slurm fleet",
            )
            used.append(port)
            service = SERVICE.format(port=port, marker=MARKER)
            repo.commit({"svc.dstack.yml": service}, "a service on it")
            _trigger(server)
            wait_until(lambda: _answers(server), timeout=120, what="the service via the proxy")
            yield Served(server, repo, login, slurm, port)
    finally:
        for name in NAMES:  # after the server: nothing submits again
            with contextlib.suppress(Exception):
                slurm.run("scancel", "--name", name)
        wait_until(
            lambda: not (set(_queued(slurm)) & set(NAMES)),
            timeout=60,
            what="the fleet's allocations to leave the queue",
        )
        wait_until(
            lambda: (
                not _processes_with("main-fleet-down-")
                and not any(_processes_with(f"http.server {p} ") for p in used)
            ),
            timeout=30,
            what="the allocations' agents and the service to be gone",
        )


def test_a_service_on_a_slurm_fleet_answers_through_the_proxy(served: Served) -> None:
    server = served.server
    got = _proxied(server)
    assert got is not None and got.status_code == 200 and MARKER in got.text
    with server.client() as http:  # `auth: true`: the proxy wants a member's token
        assert http.get("/proxy/services/main/svc/").status_code in (401, 403)
    # the replica runs on the first allocation's node, reached through the login node
    store = server.controller.runtime.store  # type: ignore[attr-defined]
    (busy,) = store.instance_records(statuses=["busy"])
    assert (busy.name, busy.backend) == ("down-0", "slurm")
    jump = busy.resources["proxy_jump"]
    assert (jump["hostname"], jump["port"]) == ("127.0.0.1", served.login.port)
    # the test cluster's node is this machine, so the server could reach the agent's SSH
    # server directly: the connection to it is the login node's sshd's (`ssh -J`), not ours
    clients = _clients_of(busy.ssh_port)
    assert clients and all(name.startswith("sshd") for name in clients), clients


def test_dockyard_attach_forwards_a_port_of_a_job_on_a_slurm_allocation(
    served: Served,
) -> None:
    """What `dockyard attach svc` does for the service's port: a local listener whose
    connections go through the server's `runs/forward` to the job on the compute node."""
    server = served.server

    async def fetch() -> str:
        target = ForwardTarget(server.url, server.admin_token, "main", "svc")
        forwarder = PortForwarder(target, [(0, served.port)])
        errors: list[str] = []
        forwarder.on_error = errors.append
        await forwarder.start()
        try:
            local = forwarder.bound[served.port]
            async with httpx.AsyncClient(timeout=30) as http:
                answer = await http.get(f"http://127.0.0.1:{local}/")
            assert answer.status_code == 200, (answer.text, errors)
            return answer.text
        finally:
            await forwarder.close()

    assert MARKER in asyncio.run(fetch())
    # and no SSH alias that could not log in (users' keys are not on the allocation's agent)
    with server.client(server.admin_token) as http:
        got = http.post("/api/project/main/runs/get", json={"run_name": "svc"}).json()
    assert _alias(wire.Run.model_validate(got), "svc") is None


def test_a_scale_down_cancels_one_allocation_and_keeps_the_other(served: Served) -> None:
    server, slurm = served.server, served.slurm
    store = server.controller.runtime.store  # type: ignore[attr-defined]
    kept = [i for i in store.instance_records(statuses=["busy"]) if i.name == "down-0"]
    leaving = [i for i in store.instance_records(statuses=["idle"]) if i.name == "down-1"]
    assert len(kept) == 1 and len(leaving) == 1
    kept_job = kept[0].resources["slurm"]["job_id"]
    leaving_job = leaving[0].resources["slurm"]["job_id"]
    assert _queued(slurm) == list(NAMES)
    run = _service_job(server)

    served.repo.commit({"fleets/down.dstack.yml": FLEET.format(nodes=1)}, "nodes: 1")
    reconcile = _trigger(server)
    wait_until(
        lambda: _state(slurm, leaving_job) in ("", "CANCELLED"),
        timeout=90,
        what="the second allocation to be cancelled",
    )
    wait_until(
        lambda: _queued(slurm) == [NAMES[0]], timeout=60, what="one allocation left in squeue"
    )
    wait_until(
        lambda: (
            [i.status for i in store.instance_records() if i.name == "down-1"]
            == [InstanceStatus.TERMINATED.value]
        ),
        timeout=60,
        what="the second instance to be terminated",
    )
    wait_until(
        lambda: not _processes_with("main-fleet-down-1-"),
        timeout=30,
        what="the second allocation's agent to be gone",
    )
    # the first allocation and its job are untouched: same Slurm job, same job submission
    assert _state(slurm, kept_job) == "RUNNING"
    assert _allocation(server, "down")["job_id"] == kept_job
    assert _service_job(server) == run
    assert _answers(server)
    # what the plan said it would do: the fleet updated in place, the second allocation gone
    wait_until(
        lambda: _reconcile(server, reconcile)["status"] not in ("queued", "running"),
        timeout=30,
        what="the reconcile to finish",
    )
    (fleet,) = [a for a in _reconcile(server, reconcile)["plan"]["actions"] if a["kind"] == "fleet"]
    assert fleet["action"] == "update"
    steps = [(s["op"], s["name"], s["type"]) for s in fleet["preview"]["steps"]]
    assert steps == [("delete", "allocation/down-1", "slurm:scancel")]


def _service_job(server: Running) -> tuple[str, str, str]:
    """(job id, status, instance) of the service's current job submission."""
    with server.client(server.admin_token) as http:
        got = http.post("/api/project/main/runs/get", json={"run_name": "svc"}).json()
    job = got["jobs"][0]["job_submissions"][-1]
    instance = (job.get("job_provisioning_data") or {}).get("instance_id") or ""
    return job["id"], job["status"], str(instance)
