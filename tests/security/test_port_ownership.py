"""A service and a forward reach only their own job, never another account's loopback port.

The attack: another local account runs an HTTP server on 127.0.0.1:P, trusting that only
local users reach it. A member writes a service (`auth: false`) that declares port P and
never listens (`sleep`). Before, the proxy and `runs/forward` connected to 127.0.0.1:P and
handed that server to anyone. Now a connection to a job's port opens only while a process
of that job holds the listening socket (`agent.server.portholders`; docs/security.md,
"Service callers and the proxy"): the agent refuses the tunnel's channel, the proxy's
loopback path (the local fleet) asks the same check, the caller gets 502 / close code 1014
with the reason, and the job gets an event. A job that does listen is reached as before.

Runs on the real local agent (its embedded SSH server) with the real runs and jobs
workers (`tests/e2e/runs_harness.py`); the other account's server runs as the probe user.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import pytest_asyncio
import uvicorn
from fastapi import FastAPI
from sqlalchemy import select
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from agent.client import AgentClient
from agent.local import ensure_client_key, ensure_local_agent, stop_local_agent
from agent.protocol import JobSpec, PortRequest
from agent.server.listeners import listening_sockets, netlink_listeners, proc_listeners
from agent.server.portholders import NOT_THE_JOBS, PortHolders
from agent.tunnel import AgentUnreachable, SSHTarget, TunnelPool
from reconciler.adapters.db.models import Event, Run
from reconciler.adapters.db.readmodels.bootstrap import ensure_admin
from reconciler.adapters.db.readmodels.database import Database
from reconciler.app import build_tunnel_opener
from reconciler.domain.inventory import InstanceRecord
from reconciler.engine.agents import AgentDirectory
from reconciler.engine.routes import StoreRoutes
from reconciler.engine.service_routes import ServiceRoute, Upstream
from reconciler.web.forwarding import BAD_GATEWAY, build_forward_router
from reconciler.web.jobnotes import JobNotes
from reconciler.web.proxy import ServiceProxy
from tests.e2e.runs_harness import (
    AgentEnv,
    Harness,
    close_harness,
    make_harness,
    start_agent_env,
    stop_agent_env,
)
from tests.security.local_users import SYSTEM_PYTHON, need_root, probe_uid
from tests.services.docker import DockerEngine
from tests.services.sshd import SSHHost, sshd_hosts  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(180)
SECRET = "SECRET-OF-ANOTHER-ACCOUNT"
TOKEN = "member-token"

# An HTTP server that answers every GET with SECRET: the other account's loopback service.
OTHER_SERVER = f"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"{SECRET}\\n"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _listening(port: int, within: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.05)


def _wait_listening(port: int, within: float = 15.0) -> None:
    """Poll (blocking) until something accepts on 127.0.0.1:`port`."""
    deadline = time.monotonic() + within
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _start_other_server(
    port: int, uid: int | None, marker: str | None = None
) -> subprocess.Popen[bytes]:
    """OTHER_SERVER on 127.0.0.1:`port`, as `uid` (setpriv) or as us; with `marker`, it
    carries `DOCKYARD_JOB_ID=<marker>` as a job's processes do."""
    env = {"PATH": "/usr/bin:/bin"} | ({"DOCKYARD_JOB_ID": marker} if marker else {})
    argv = [str(SYSTEM_PYTHON), "-c", OTHER_SERVER, str(port)]
    if uid is not None:
        gid = pwd.getpwuid(uid).pw_gid
        argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *argv]
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture
def other_port() -> Iterator[int]:
    """Port P, on which another account's loopback-only server answers SECRET."""
    port = _free_port()
    server = _start_other_server(port, probe_uid())
    try:
        _wait_listening(port)
        yield port
    finally:
        server.kill()
        server.wait()


# -- the check itself -------------------------------------------------------------------


def _table(*rows: tuple[str, str, int, int]) -> bytes:
    """/proc/net/tcp{,6} text: a header, then (local address, state, uid, inode) rows."""
    lines = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"]
    for n, (local, state, uid, inode) in enumerate(rows):
        remote = "0" * (len(local) - 5) + ":0000"
        lines.append(f"{n}: {local} {remote} {state} 0:0 00:0 0 {uid} 0 {inode} 1")
    return "\n".join(lines).encode() + b"\n"


TCP = _table(
    ("0100007F:1F90", "0A", 1001, 111),  # 127.0.0.1:8080, LISTEN
    ("00000000:1F90", "0A", 0, 222),  # 0.0.0.0:8080
    ("0500000A:1F90", "0A", 0, 333),  # 10.0.0.5:8080: no loopback connection lands there
    ("0100007F:1F90", "01", 1001, 444),  # an established connection, not a listener
    ("0100007F:1F91", "0A", 1001, 555),  # port 8081
)
TCP6 = _table(
    ("00000000000000000000000000000000:1F90", "0A", 1002, 666),  # [::]:8080
    ("00000000000000000000000001000000:1F90", "0A", 1002, 777),  # [::1]:8080
)


def test_the_listening_sockets_that_take_a_loopback_connection() -> None:
    # 127.0.0.1, 0.0.0.0 and :: on port 8080 (0x1F90) in LISTEN; not 10.0.0.5, not an
    # established connection, not port 8081, not ::1 (a 127.0.0.1 connection never lands there)
    assert listening_sockets([TCP, TCP6], 8080) == [(1001, 111), (0, 222), (1002, 666)]


def test_netlink_and_the_proc_tables_agree() -> None:
    with socket.socket() as v4, socket.socket(socket.AF_INET6) as v6:
        v4.bind(("127.0.0.1", 0))
        v4.listen()
        v6.bind(("::", 0))
        v6.listen()
        for sock in (v4, v6):
            port = sock.getsockname()[1]
            found = netlink_listeners(port)
            assert len(found) == 1 and found == proc_listeners(port), port
            assert found[0][0] == os.geteuid()


def test_a_port_held_by_another_account_is_not_the_jobs() -> None:
    port = _free_port()
    other = _start_other_server(port, probe_uid())
    try:
        _wait_listening(port)
        holders = PortHolders()
        problem = holders.problem(port, "job-1")
        assert problem is not None and NOT_THE_JOBS in problem, problem
        assert f"port {port} of job job-1" in problem
    finally:
        other.kill()
        other.wait()
    gone = PortHolders().problem(port, "job-1")
    assert gone is not None and "nothing listens" in gone


def test_a_port_held_by_the_job_passes_and_the_verdict_is_cached() -> None:
    port = _free_port()
    job = _start_other_server(port, None, marker="job-1")
    now = [0.0]
    holders = PortHolders(ttl=2.0, clock=lambda: now[0])
    try:
        _wait_listening(port)
        for _ in range(100):
            assert holders.problem(port, "job-1") is None
        assert holders.scans == 1, "one /proc scan per listening socket while cached"
        other_job = holders.problem(port, "job-2")  # the same socket: not job-2's
        assert other_job is not None and NOT_THE_JOBS in other_job
        now[0] = 2.5  # the verdict expired: looked up again
        assert holders.problem(port, "job-1") is None and holders.scans == 2
    finally:
        job.kill()
        job.wait()


def test_a_host_network_container_of_the_job_holds_its_port(docker_engine: DockerEngine) -> None:
    """A Docker job on the host's network: its container's processes carry the marker
    (`containers.to_container_kwargs`), and a process whose environment lost it is still
    the job's when its cgroup is the job's container; another job's or container's: not."""
    port, bare_port = _free_port(), _free_port()
    client = docker_engine.client()
    marked = client.containers.run(
        docker_engine.image,
        ["httpd", "-f", "-p", f"127.0.0.1:{port}"],
        environment={"DOCKYARD_JOB_ID": "job-c"},
        network_mode="host",
        detach=True,
    )
    bare = client.containers.run(  # no marker: as an image whose init clears the environment
        docker_engine.image,
        ["httpd", "-f", "-p", f"127.0.0.1:{bare_port}"],
        network_mode="host",
        detach=True,
    )
    try:
        _wait_listening(port)
        _wait_listening(bare_port)
        holders = PortHolders()
        assert holders.problem(port, "job-c") is None
        other = holders.problem(port, "job-d")
        assert other is not None and NOT_THE_JOBS in other
        assert holders.problem(bare_port, "job-e", str(bare.id)) is None
        for container_id in (None, str(marked.id)):
            refused = holders.problem(bare_port, "job-e", container_id)
            assert refused is not None and NOT_THE_JOBS in refused, container_id
    finally:
        marked.remove(force=True)
        bare.remove(force=True)
        client.close()


# -- through the server, on the real local agent ------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent_env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentEnv]:
    env = await start_agent_env(tmp_path_factory.mktemp("agent"))
    yield env
    stop_agent_env(env)


@pytest.fixture
async def h(tmp_path: Path, agent_env: AgentEnv) -> AsyncIterator[Harness]:
    harness = await make_harness(tmp_path, agent_env)
    yield harness
    await close_harness(harness)


async def _member(project: str, token: str | None) -> bool:
    return token == TOKEN


def _service(port: int, commands: list[str]) -> str:
    lines = "\n".join(f"  - {command}" for command in commands)
    return f"type: service\nname: web\nport: {port}\nauth: false\ncommands:\n{lines}\n"


def _proxy(h: Harness, direct: bool) -> ServiceProxy:
    """The proxy as the server builds it (`reconciler.app.build_proxy`): over the agent's
    tunnel, or (`direct`) dialling the local fleet's replicas on loopback."""
    local = h.local.ssh_port if direct else None
    return ServiceProxy(
        routes=StoreRoutes(h.store, h.agents, ttl=0.2, local_ssh_port=lambda: local),
        pool=h.pool,
        authorize=_member,
        stats=h.stats,
        wait_ready=1.0,
        port_check=PortHolders().problem,
        notes=JobNotes(Database(h.store.engine)),
    )


async def _get(proxy: ServiceProxy) -> httpx.Response:
    transport = httpx.ASGITransport(app=proxy)
    async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
        return await client.get("/proxy/services/main/web/")


async def _running(h: Harness, text: str) -> Run:
    run = h.submit(text)
    await h.until(
        lambda: any(
            j.status == "running" and (j.runtime or {}).get("ready") for j in h.jobs_of(run.id)
        )
    )
    return run


def _job_events(h: Harness, run: Run) -> list[str]:
    job_ids = [job.id for job in h.jobs_of(run.id)]
    with h.store.reading() as session:
        return list(
            session.scalars(
                select(Event.message).where(
                    Event.target_type == "job", Event.target_id.in_(job_ids)
                )
            )
        )


async def _stop(h: Harness, run: Run) -> None:
    h.store.update(
        Run, run.id, status="terminating", termination_reason="stopped_by_user", due_at=None
    )
    await h.until(lambda: h.run(run.id).status == "terminated")


@pytest.mark.parametrize("direct", [False, True], ids=["tunnel", "loopback"])
async def test_the_proxy_never_reaches_another_accounts_server(
    h: Harness, other_port: int, direct: bool
) -> None:
    run = await _running(h, _service(other_port, ["sleep 600"]))
    proxy = _proxy(h, direct)
    try:
        response = await _get(proxy)
    finally:
        await proxy.aclose()
    assert SECRET not in response.text, "the proxy handed out another account's server"
    assert response.status_code == 502, response.text
    assert NOT_THE_JOBS in response.text and f"port {other_port}" in response.text
    events = _job_events(h, run)
    assert any(NOT_THE_JOBS in message for message in events), events
    await _stop(h, run)


async def _forward_app(
    h: Harness, data_dir: Path
) -> tuple[uvicorn.Server, asyncio.Task[None], int, str]:
    """`runs/forward` as the server mounts it, over the harness's store and tunnel pool."""
    db = Database(h.store.engine)
    token = db.write_now(ensure_admin, "main", data_dir / "admin-token", h.store.now())
    assert token is not None
    app = FastAPI()
    opener = build_tunnel_opener(SimpleNamespace(agents=h.agents, pool=h.pool))
    app.include_router(build_forward_router(opener))
    app.state.context = SimpleNamespace(db=db)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(10):
        while not server.started:  # noqa: ASYNC110 - uvicorn has no started event
            await asyncio.sleep(0.01)
    return server, task, port, token


async def _forward(port: int, token: str, target_port: int) -> tuple[bytes, int | None, str]:
    """GET / through `runs/forward`: what came back, the close code and reason."""
    url = f"ws://127.0.0.1:{port}/api/project/main/runs/forward?run_name=web&port={target_port}"
    received = b""
    async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        await ws.send(b"GET / HTTP/1.0\r\nhost: x\r\n\r\n")
        try:
            while True:
                data = await asyncio.wait_for(ws.recv(), timeout=15)
                received += data if isinstance(data, bytes) else data.encode()
        except ConnectionClosed:
            pass
        return received, ws.close_code, ws.close_reason or ""


async def test_runs_forward_never_reaches_another_accounts_server(
    h: Harness, other_port: int, tmp_path: Path
) -> None:
    run = await _running(h, _service(other_port, ["sleep 600"]))
    server, task, port, token = await _forward_app(h, tmp_path)
    try:
        received, code, reason = await _forward(port, token, other_port)
    finally:
        server.should_exit = True
        await task
    assert SECRET.encode() not in received, "runs/forward handed out another account's server"
    assert code == BAD_GATEWAY and NOT_THE_JOBS in reason, (code, reason)
    with pytest.raises(AgentUnreachable, match=NOT_THE_JOBS):  # the channel itself
        await h.pool.open_stream(h.local.target, "127.0.0.1", other_port)
    events = _job_events(h, run)
    assert any(NOT_THE_JOBS in message for message in events), events
    await _stop(h, run)


async def test_a_job_that_listens_on_its_port_is_reached(h: Harness, tmp_path: Path) -> None:
    port = _free_port()
    name = f"hello-{uuid.uuid4().hex[:6]}"
    serve = f"python3 -m http.server {port} --bind 127.0.0.1 --directory site"
    run = await _running(
        h, _service(port, [f"mkdir -p site && echo {name} > site/index.html", serve])
    )
    await _listening(port)
    for direct in (False, True):
        proxy = _proxy(h, direct)
        try:
            response = await _get(proxy)
        finally:
            await proxy.aclose()
        assert response.status_code == 200 and response.text.strip() == name, (
            direct,
            response.text,
        )
    server, task, app_port, token = await _forward_app(h, tmp_path)
    try:
        received, _, _ = await _forward(app_port, token, port)
    finally:
        server.should_exit = True
        await task
    assert name.encode() in received
    await _stop(h, run)


# -- an SSH fleet host: the server's channel goes through the host's own sshd ------------


class _Routes:
    def __init__(self, route: ServiceRoute) -> None:
        self.value = route

    async def route(self, project: str, run_name: str) -> ServiceRoute | None:
        return self.value


async def test_through_a_hosts_sshd_the_agent_is_asked_first(
    h: Harness,
    other_port: int,
    sshd_hosts: list[SSHHost],  # noqa: F811 - the fixture
) -> None:
    """An SSH fleet host: sshd forwards anywhere, so the proxy and `runs/forward` ask the
    host's agent (`GET /ports/{port}/holder`) before they open the channel. The sshd here
    runs on the same machine as the harness's agent, as on a real fleet host."""
    run = await _running(h, _service(other_port, ["sleep 600"]))
    job_id = h.jobs_of(run.id)[0].id
    host = sshd_hosts[0]
    target = SSHTarget(
        "127.0.0.1", host.port, user=host.user, identity_file=str(host.identity_file)
    )
    pool = TunnelPool()
    upstream = Upstream(target, other_port, job_id, agent_port=h.local.agent_port)
    proxy = ServiceProxy(
        routes=_Routes(ServiceRoute("main", "web", False, True, (upstream,))),
        pool=pool,
        authorize=_member,
        stats=h.stats,
        wait_ready=1.0,
        notes=JobNotes(Database(h.store.engine)),
    )
    instance = InstanceRecord(
        id="ssh-host",
        fleet_id=None,
        project_id=h.project.id,
        name="ssh-host",
        status="busy",
        created_at=h.store.now(),
        hostname="127.0.0.1",
        ssh_port=host.port,
        ssh_user=host.user,
        agent_port=h.local.agent_port,
        backend="ssh",
    )
    agents = AgentDirectory(pool, identity_file=str(host.identity_file))
    opener = build_tunnel_opener(SimpleNamespace(agents=agents, pool=pool))
    assert opener is not None
    try:
        response = await _get(proxy)
        with pytest.raises(AgentUnreachable, match=NOT_THE_JOBS):
            await opener(instance, other_port)
    finally:
        await proxy.aclose()
        await agents.aclose()
        await pool.close()
    assert SECRET not in response.text, "the proxy handed out another account's server"
    assert response.status_code == 502 and NOT_THE_JOBS in response.text, response.text
    assert any(NOT_THE_JOBS in message for message in _job_events(h, run))
    await _stop(h, run)


async def test_a_sandboxed_process_job_holds_its_port(tmp_path: Path) -> None:
    """On a root agent a process job runs in its bubblewrap sandbox with a uid of its own
    (its own PID namespace): its server still carries the job's marker, so it is the
    job's, and the agent's `GET /ports/{port}/holder` says so."""
    need_root()
    data_dir = tmp_path / "data"
    pool = TunnelPool()
    key = ensure_client_key(data_dir / "ssh" / "id_ed25519")
    local = await ensure_local_agent(data_dir, key, pool)  # job user `auto`: sandboxed
    port = _free_port()
    job_id = f"sandboxed-{uuid.uuid4().hex[:8]}"
    spec = JobSpec(
        id=job_id,
        run_name="web",
        commands=[f"python3 -m http.server {port} --bind 127.0.0.1"],
        ports=[PortRequest(container_port=port)],
    )
    try:
        async with AgentClient.over_tunnel(pool, local.target, local.agent_port) as client:
            await client.submit(spec)
            await _listening(port, within=60.0)
            assert await asyncio.to_thread(PortHolders().problem, port, job_id) is None
            assert await client.port_problem(port) is None
            await client.stop(job_id, force=True)
    finally:
        await pool.close()
        stop_local_agent(data_dir)
