"""A process job on a root agent gets a sandbox and a uid of its own, nothing more.

The attacks of a project member with nothing but a run spec on the local fleet of a
server run by root (no Docker): an `LD_PRELOAD` in the job's `env` (loaded by whatever
root process still carries it), `files:` aimed at `/root` or out of the working dir with
`..`, a job reading another running job's files and environment, the host's filesystem,
`/tmp`, processes and the server's data, and `user:` naming another host account. The
local agent is started as the server starts it (`ensure_local_agent`, `--job-user auto`),
so its process jobs run in bubblewrap (docs/security.md, "Jobs and the host").
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import os
import shutil
import subprocess
import tarfile
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncssh
import pytest

from agent.__main__ import build_parser, job_account
from agent.client import AgentClient, AgentError
from agent.local import (
    LocalAgent,
    ensure_client_key,
    ensure_local_agent,
    local_paths,
    stop_local_agent,
)
from agent.protocol import Archive, JobSpec, JobState, JobStatus
from agent.server.executors import proctable
from agent.server.jobaccount import default_work_root
from agent.server.serving import AgentConfig, start_agent
from agent.tunnel import TunnelPool
from reconciler.app import build_server
from reconciler.errors import UsageError
from reconciler.settings import Settings
from tests.agent.conftest import _client, wait_for
from tests.security.local_users import need_root
from tests.services.missing import needs

pytestmark = needs(
    shutil.which("bwrap") is not None,
    "bubblewrap (bwrap), the process jobs' sandbox",
    "apt-get install bubblewrap (scripts/setup.sh installs it)",
)

EVIL_SO = textwrap.dedent(
    """
    #include <stdio.h>
    #include <unistd.h>
    __attribute__((constructor)) static void probe(void) {
        FILE *out = fopen(OUT, "a");
        if (out) { fprintf(out, "euid=%d\\n", (int)geteuid()); fclose(out); }
    }
    """
)


@dataclasses.dataclass
class Fleet:
    data_dir: Path
    local: LocalAgent
    client: AgentClient

    @property
    def work_root(self) -> Path:
        return default_work_root(local_paths(self.data_dir).data_dir.resolve())


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    need_root()
    data_dir = tmp_path / "data"
    settings = Settings(data_dir=data_dir, cli_config=tmp_path / "cli.yml")
    server = build_server(settings)
    server.store.close()
    pool = TunnelPool()
    key = ensure_client_key(data_dir / "ssh" / "id_ed25519")
    local = await ensure_local_agent(data_dir, key, pool)
    try:
        async with AgentClient.over_tunnel(pool, local.target, local.agent_port) as client:
            yield Fleet(data_dir, local, client)
    finally:
        await pool.close()
        stop_local_agent(data_dir)


async def _finished(client: AgentClient, job_id: str) -> tuple[JobState, str]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = await client.job(job_id)
        if state.status in (JobStatus.EXITED, JobStatus.FAILED, JobStatus.TERMINATED):
            log = (await client.logs(job_id, limit=2**20)).data.decode(errors="replace")
            return state, log
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


async def _run(client: AgentClient, spec: JobSpec) -> tuple[JobState, str]:
    await client.submit(spec)
    state, log = await _finished(client, spec.id)
    await client.remove(spec.id)
    return state, log


def _exists(*paths: Path) -> bool:
    return any(path.exists() for path in paths)


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.fixture
def evil_library(tmp_path: Path) -> tuple[Path, Path]:
    """A shared library whose constructor appends its euid to a file: (library, file)."""
    out = tmp_path / "euids"
    source = tmp_path / "evil.c"
    source.write_text(EVIL_SO.replace("OUT", f'"{out}"'))
    library = tmp_path / "evil.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True, timeout=60
    )
    return library, out


@pytest.fixture
def host_tmp_file() -> Iterator[Path]:
    """A world-readable file in the host's /tmp."""
    path = Path(f"/tmp/dockyard-host-probe-{os.getpid()}")
    path.write_text("host-tmp")
    path.chmod(0o644)
    yield path
    path.unlink()


def _tar_of(name: str, text: str) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buffer.getvalue()).decode()


async def test_ld_preload_in_the_env_never_runs_as_root(
    fleet: Fleet, evil_library: tuple[Path, Path]
) -> None:
    library, out = evil_library
    spec = JobSpec(
        id="preload",
        run_name="preload",
        commands=["echo preload=$LD_PRELOAD"],
        env={"LD_PRELOAD": str(library)},
    )
    state, log = await _run(fleet.client, spec)
    assert state.status == JobStatus.EXITED, (state, log)
    assert f"preload={library}" in log, "the job's env reached the job"
    loaded = _read(out)
    assert "euid=0\n" not in loaded, f"the job's LD_PRELOAD ran as root: {loaded!r}"


@pytest.mark.parametrize("target", ["/root/dockyard-probe", "../../dockyard-probe"])
async def test_files_aimed_outside_the_jobs_view_are_refused(fleet: Fleet, target: str) -> None:
    landed = [Path(target), fleet.work_root / "dockyard-probe", fleet.work_root.parent / "x"]
    spec = JobSpec(
        id="files-out",
        run_name="files-out",
        commands=["true"],
        archives=[Archive(path=target, data=_tar_of("probe.txt", "planted"))],
    )
    with pytest.raises(AgentError) as refused:
        await fleet.client.submit(spec)
    assert refused.value.code == "invalid_request"
    assert "archives[0]" in refused.value.message
    assert "outside the job's working dir" in refused.value.message
    assert not _exists(*landed)


async def test_files_land_in_the_jobs_own_view_as_the_job(fleet: Fleet) -> None:
    spec = JobSpec(
        id="files-in",
        run_name="files-in",
        commands=[
            "echo uid=$(id -u)",
            "echo owner=$(stat -c %u sub/probe.txt) $(cat sub/probe.txt)",
            "echo tmp=$(stat -c %u /tmp/in/probe.txt) $(cat /tmp/in/probe.txt)",
        ],
        archives=[
            Archive(path="sub", data=_tar_of("probe.txt", "in-work")),
            Archive(path="/tmp/in", data=_tar_of("probe.txt", "in-tmp")),
        ],
    )
    state, log = await _run(fleet.client, spec)
    assert state.status == JobStatus.EXITED and "uid=" in log, (state, log)
    uid = log.split("uid=")[1].split()[0]
    assert f"owner={uid} in-work" in log and f"tmp={uid} in-tmp" in log, log
    assert not _exists(Path("/tmp/in/probe.txt")), "the job's /tmp is its own"


async def test_a_working_dir_is_the_jobs_own_dir_mounted_there(fleet: Fleet) -> None:
    view = "/dockyard-wd-probe"  # not on the host: only inside the job's view
    spec = JobSpec(
        id="wd",
        run_name="wd",
        working_dir=view,
        commands=["pwd", "cat data/probe.txt", "echo mine > made.txt"],
        archives=[Archive(path="data", data=_tar_of("probe.txt", "in-view"))],
    )
    await fleet.client.submit(spec)
    state, log = await _finished(fleet.client, spec.id)
    made = _read(fleet.work_root / "wd" / "made.txt")
    await fleet.client.remove(spec.id)
    assert state.status == JobStatus.EXITED, (state, log)
    assert log == f"{view}\nin-view", log
    assert made == "mine\n" and not _exists(Path(view))


async def test_two_running_jobs_have_their_own_uid_files_and_processes(fleet: Fleet) -> None:
    client = fleet.client
    first = JobSpec(
        id="job-a",
        run_name="job-a",
        commands=[
            "echo uid=$(id -u); echo secret-a > a.txt; chmod 644 a.txt",
            "end=$(($(date +%s) + 60)); while [ ! -e stop ] && [ $(date +%s) -lt $end ]; do "
            "sleep 0.05; done",
        ],
        env={"SECRET_A": "env-secret-a"},
    )
    await client.submit(first)
    a_dir = fleet.work_root / "job-a"

    async def written() -> bool:
        return await asyncio.to_thread(_exists, a_dir / "a.txt")

    await wait_for(written, "job a's file")
    a_pids = [p.pid for p in proctable.job_processes(-1, "job-a")]
    assert a_pids, "job a runs"
    reads = [f"cat /proc/{pid}/environ 2>/dev/null | grep -a env-secret-a" for pid in a_pids]
    second = JobSpec(
        id="job-b",
        run_name="job-b",
        commands=[
            "echo uid=$(id -u)",
            f"cat {a_dir}/a.txt && echo READ-FILE || echo no-file",
            f"{{ {' ; '.join(reads)} ; }} && echo READ-ENV || echo no-env",
        ],
    )
    state, log = await _run(client, second)
    await asyncio.to_thread((a_dir / "stop").touch)
    a_state, a_log = await _finished(client, "job-a")
    await client.remove("job-a")
    assert state.status == JobStatus.EXITED and a_state.status == JobStatus.EXITED, log
    a_uid, b_uid = a_log.split("uid=")[1].split()[0], log.split("uid=")[1].split()[0]
    assert a_uid != b_uid and "0" not in (a_uid, b_uid), (a_log, log)
    assert int(a_uid) >= 2_000_000_000 and int(b_uid) >= 2_000_000_000
    assert "secret-a" not in log and "READ-FILE" not in log and "no-file" in log, log
    assert "READ-ENV" not in log and "no-env" in log, log


# None: the host's `/` is bound read-only as a whole; a working dir the host lacks: each
# entry of `/` is bound read-only on bubblewrap's own root (`Sandbox.binds_whole_root`)
@pytest.mark.parametrize("working_dir", [None, "/dockyard-view-probe"])
async def test_the_job_sees_a_read_only_host_its_own_tmp_and_pids(
    fleet: Fleet, host_tmp_file: Path, working_dir: str | None
) -> None:
    token = _read(fleet.data_dir / "admin-token").strip()
    planted = Path(f"/var/tmp/dockyard-sandbox-probe-{os.getpid()}")  # 1777 on the host
    top = Path(f"/dockyard-top-probe-{os.getpid()}")  # a new entry of `/`
    spec = JobSpec(
        id="view",
        run_name="view",
        working_dir=working_dir,
        commands=[
            f"touch {planted} 2>&1 || true",
            f"mkdir {top} 2>/dev/null && echo MADE-TOP || echo no-top",
            "touch /etc/dockyard-probe 2>/dev/null && echo WROTE-ETC || echo no-etc",
            "touch own-dir-probe && echo own-dir-ok",
            f"cat {host_tmp_file} 2>/dev/null || echo no-host-tmp",
            f"test -e /proc/{fleet.local.pid} && echo SEES-AGENT || echo no-agent",
            "echo init=$(cat /proc/1/comm)",
            f"cat {fleet.data_dir}/admin-token 2>/dev/null || echo no-token",
            f"ls -A {fleet.data_dir} | wc -l | sed 's/^/entries=/'",
            "touch /dev/shm/probe && echo shm-ok",
        ],
    )
    state, log = await _run(fleet.client, spec)
    assert state.status == JobStatus.EXITED, (state, log)
    assert "Read-only file system" in log and not _exists(planted), log
    assert "no-top" in log and "no-etc" in log and "own-dir-ok" in log, log
    assert not _exists(top, Path("/etc/dockyard-probe")), log
    assert "no-host-tmp" in log and "host-tmp\n" not in log.replace("no-host-tmp", ""), log
    assert "no-agent" in log and "SEES-AGENT" not in log, log
    assert "init=sh" in log, log  # PID 1 of the job's own namespace: its wrapper
    assert token not in log and "no-token" in log and "entries=0" in log, log
    assert "shm-ok" in log, "shared memory works (PyTorch's data loaders need it)"


async def test_ssh_into_a_job_enters_its_sandbox_as_its_uid(fleet: Fleet) -> None:
    spec = JobSpec(
        id="shell",
        run_name="shell",
        env={"SECRET_X": "only-after-the-switch"},
        commands=[
            "id -u > /tmp/job-uid",
            "end=$(($(date +%s) + 60)); while [ $(date +%s) -lt $end ]; do sleep 0.05; done",
        ],
    )
    await fleet.client.submit(spec)
    try:

        async def running() -> bool:
            return (await fleet.client.job(spec.id)).status == JobStatus.RUNNING

        await wait_for(running, "the job to run")
        key = str(fleet.data_dir / "ssh" / "id_ed25519")
        async with asyncssh.connect(
            "127.0.0.1",
            fleet.local.ssh_port,
            username="shell",
            client_keys=[key],
            known_hosts=None,
            config=None,
        ) as conn:
            script = (
                "for i in $(seq 100); do test -s /tmp/job-uid && break; sleep 0.05; done; "
                "echo uid=$(id -u) job=$(cat /tmp/job-uid) init=$(cat /proc/1/comm) "
                "x=$SECRET_X pwd=$(pwd)"
            )
            result = await conn.run(script)
    finally:
        await fleet.client.stop(spec.id, force=True)
    line = str(result.stdout).strip()
    fields = dict(item.split("=", 1) for item in line.split())
    assert fields["uid"] == fields["job"] and int(fields["uid"]) >= 2_000_000_000, line
    assert fields["init"] == "sh" and fields["x"] == "only-after-the-switch", line
    assert fields["pwd"] == str(fleet.work_root / "shell"), line


def _cmdlines_holding(secret: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if secret in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_no_secret_of_the_job_shows_in_any_argv(fleet: Fleet) -> None:
    secret = f"s3cr3t-{os.getpid()}-{time.monotonic_ns()}"
    spec = JobSpec(
        id="secret",
        run_name="secret",
        env={"TOKEN": secret},
        commands=[
            'test -n "$TOKEN" && echo has-token',
            "end=$(($(date +%s) + 60)); while [ $(date +%s) -lt $end ]; do sleep 0.05; done",
        ],
    )
    await fleet.client.submit(spec)
    try:

        async def has_token() -> bool:
            log = (await fleet.client.logs(spec.id, limit=4096)).data
            return b"has-token" in log

        await wait_for(has_token, "the job to see its env")
        holders = await asyncio.to_thread(_cmdlines_holding, secret.encode())
    finally:
        await fleet.client.stop(spec.id, force=True)
    assert holders == [], f"the secret is in the argv of pids {holders}"


async def test_user_naming_an_unlisted_account_is_refused(fleet: Fleet) -> None:
    spec = JobSpec(id="as-nobody", run_name="as-nobody", commands=["id"], user="nobody")
    with pytest.raises(AgentError) as refused:
        await fleet.client.submit(spec)
    assert refused.value.code == "invalid_request"
    assert "user nobody" in refused.value.message
    assert "--allow-job-user" in refused.value.message


async def test_a_listed_user_runs_in_the_sandbox_as_that_account(tmp_path: Path) -> None:
    need_root()
    data_dir = tmp_path / "agent"
    account = job_account("auto", tmp_path / "work", data_dir, hidden=(data_dir,))
    account = dataclasses.replace(account, allowed_users=frozenset({"nobody"}))
    config = AgentConfig(data_dir=data_dir, http_port=0, docker=False, job_account=account)
    async with start_agent(config) as context, _client(context.http_port) as http:
        body = {"id": "listed", "run_name": "r", "commands": ["id -un"], "user": "nobody"}
        assert (await http.post("/jobs", json=body)).status_code == 200
        deadline = time.monotonic() + 30
        while (await http.get("/jobs/listed")).json()["status"] != "exited":
            assert time.monotonic() < deadline, "the job did not finish"
            await asyncio.sleep(0.05)
        log = (await http.get("/jobs/listed/logs")).content
    assert log == b"nobody\n"


async def test_the_servers_settings_reach_the_local_agent(tmp_path: Path) -> None:
    need_root()
    environ = {"DOCKYARD_LOCAL_ALLOW_JOB_USERS": "nobody"}
    settings = Settings.from_env(environ, data_dir=tmp_path / "data")
    assert settings.local_allow_job_users == "nobody"
    with pytest.raises(UsageError, match="not an account name"):
        Settings.from_env({"DOCKYARD_LOCAL_ALLOW_JOB_USERS": "nobody,self"})
    data_dir = tmp_path / "data"
    pool = TunnelPool()
    key = ensure_client_key(data_dir / "ssh" / "id_ed25519")
    local = await ensure_local_agent(
        data_dir,
        key,
        pool,
        allow_job_users=settings.local_allow_job_users,
        unsandboxed=settings.local_unsandboxed_process_jobs,
    )
    try:
        async with AgentClient.over_tunnel(pool, local.target, local.agent_port) as client:
            spec = JobSpec(id="listed", run_name="listed", commands=["id -un"], user="nobody")
            state, log = await _run(client, spec)
    finally:
        await pool.close()
        stop_local_agent(data_dir)
    assert state.status == JobStatus.EXITED and log == "nobody\n", (state, log)


def _without_bwrap(name: str) -> str | None:
    return None if name == "bwrap" else shutil.which(name)


async def test_without_bubblewrap_a_root_agent_refuses_process_jobs(tmp_path: Path) -> None:
    need_root()
    data_dir = tmp_path / "agent"
    account = job_account("auto", tmp_path / "work", data_dir, which=_without_bwrap)
    config = AgentConfig(data_dir=data_dir, http_port=0, docker=False, job_account=account)
    async with start_agent(config) as context, _client(context.http_port) as http:
        body = {"id": "plain", "run_name": "r", "commands": ["id"]}
        answer = await http.post("/jobs", json=body)
    assert answer.status_code == 422 and answer.json()["error"] == "invalid_request", answer.text
    message = answer.json()["message"]
    assert "bubblewrap" in message and "--unsandboxed-process-jobs" in message, message


async def test_without_a_sandbox_the_switch_still_drops_the_jobs_env(
    tmp_path: Path, evil_library: tuple[Path, Path]
) -> None:
    need_root()
    library, out = evil_library
    data_dir = tmp_path / "agent"
    account = job_account(
        "auto", tmp_path / "work", data_dir, unsandboxed=True, which=_without_bwrap
    )
    config = AgentConfig(data_dir=data_dir, http_port=0, docker=False, job_account=account)
    async with start_agent(config) as context, _client(context.http_port) as http:
        body = {
            "id": "plain",
            "run_name": "r",
            "commands": ["echo uid=$(id -u) preload=$LD_PRELOAD"],
            "env": {"LD_PRELOAD": str(library)},
        }
        assert (await http.post("/jobs", json=body)).status_code == 200

        async def finished() -> bool:
            return bool((await http.get("/jobs/plain")).json()["status"] == "exited")

        await wait_for(finished, "the job to finish")
        log = (await http.get("/jobs/plain/logs")).text
    assert f"preload={library}" in log and "uid=0 " not in log, log
    assert "euid=0\n" not in _read(out), "the job's LD_PRELOAD ran as root"


def test_the_operator_opts_out_of_the_sandbox_by_flag_or_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_root()
    data_dir = tmp_path / "agent"
    opted = job_account("auto", None, data_dir, unsandboxed=True, which=_without_bwrap)
    assert opted.unsandboxed_refusal is None and opted.sandbox is None
    argv = ["serve", "--data-dir", str(data_dir)]
    assert not build_parser().parse_args(argv).unsandboxed_process_jobs
    monkeypatch.setenv("DOCKYARD_AGENT_UNSANDBOXED_PROCESS_JOBS", "1")
    assert build_parser().parse_args(argv).unsandboxed_process_jobs


@pytest.mark.parametrize("host_path", ["/etc", "/root", "/", "/var/run/docker.sock"])
async def test_a_sandboxed_job_mounts_no_system_path(fleet: Fleet, host_path: str) -> None:
    spec = JobSpec(
        id="vol-system",
        run_name="vol-system",
        commands=["ls /x"],
        volumes=[{"host_path": host_path, "container_path": "/x"}],
    )
    with pytest.raises(AgentError) as refused:
        await fleet.client.submit(spec)
    assert refused.value.code == "invalid_request"
    assert host_path in refused.value.message
    assert "DOCKYARD_LOCAL_VOLUME_ROOTS" in refused.value.message
