"""A config writer cannot mount the host's system paths through an instance volume.

The attack: a run spec's `volumes: ["/etc:/x"]` (or `/root`, `/home`, `/`, `/proc`, the
Docker socket, or a link under an allowed root that points at `/etc`) would hand the
host's files to whoever writes the config. The agent mounts only host paths that lie,
resolved, below a root the operator allows (`--volume-root`, env
`DOCKYARD_AGENT_VOLUME_ROOTS`; docs/security.md, "Jobs and the host"), checks again right
before the container is created (a link planted after the submit), and a process job
refuses what only a container gives (`privileged`, `docker: true`, volumes without a
sandbox). The allowed root here is a temp dir standing in for `/data`: the real `/data`
is never written.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import docker
import httpx
import pytest

from agent.__main__ import _volume_roots
from agent.protocol import API_PREFIX, JobReason, JobSpec, JobStatus
from agent.remote_scripts import AgentOptions
from agent.server.executors.base import ExecutorError
from agent.server.executors.docker import DockerExecutor
from agent.server.mounts import DEFAULT_VOLUME_ROOTS, DOCKER_SOCKETS, volume_problem
from agent.server.processrules import process_job_problem
from agent.server.serving import AgentConfig, start_agent
from agent.server.store import JobFiles
from reconciler.engine.agentsetup import ssh_agent_options
from reconciler.errors import UsageError
from reconciler.settings import Settings
from tests.agent.conftest import AgentApi, recorded_tools
from tests.security.local_users import need_root
from tests.services.docker import DockerEngine

SETTING = "--volume-root"


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    """A stand-in for `/data`: the one root the tests allow."""
    root = tmp_path / "data"
    (root / "ok").mkdir(parents=True)
    (root / "ok" / "note.txt").write_text("from the data disk\n")
    return root


SYSTEM_PATHS = ["/etc", "/root", "/home", "/", "/proc", "/sys", "/dev", "/etc/shadow"]


@pytest.mark.parametrize("path", SYSTEM_PATHS + [str(s) for s in DOCKER_SOCKETS])
def test_system_paths_are_refused_by_default(path: str) -> None:
    problem = volume_problem(path, DEFAULT_VOLUME_ROOTS, protected=DOCKER_SOCKETS)
    assert problem is not None, path
    assert SETTING in problem and "DOCKYARD_AGENT_VOLUME_ROOTS" in problem, problem
    assert f"volume {path}" in problem


def test_a_link_under_an_allowed_root_counts_where_it_points(data_root: Path) -> None:
    (data_root / "x").symlink_to("/etc")
    problem = volume_problem(str(data_root / "x"), (data_root,), protected=())
    assert problem is not None and "-> /etc" in problem and SETTING in problem
    (data_root / "up").symlink_to("..")  # climbing out of the root through a link
    assert volume_problem(str(data_root / "up"), (data_root,), protected=()) is not None
    assert volume_problem(f"{data_root}/ok/../../", (data_root,), protected=()) is not None


def test_a_path_below_an_allowed_root_is_accepted(data_root: Path) -> None:
    assert volume_problem(str(data_root / "ok"), (data_root,), protected=()) is None
    assert volume_problem(str(data_root / "new"), (data_root,), protected=()) is None


def test_dockyards_data_stays_refused_under_an_allowed_root(data_root: Path) -> None:
    server_data = data_root / "dockyard"
    (server_data / "volumes").mkdir(parents=True)
    protected = (server_data,)
    for path in (server_data, data_root):  # the data dir, or a dir above it
        problem = volume_problem(str(path), (data_root,), protected)
        assert problem is not None and "which no job may mount" in problem
    # the local backend's volumes live inside it, and are mounted all the same
    volumes = (server_data / "volumes",)
    assert volume_problem(str(server_data / "volumes" / "v1"), (), protected, volumes) is None


def test_a_relative_host_path_is_refused(data_root: Path) -> None:
    problem = volume_problem("data/ok", (data_root,), protected=())
    assert problem is not None and "absolute" in problem


def _process_job(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"id": "p1", "run_name": "p", "commands": ["true"], **fields})


def test_a_process_job_refuses_what_only_a_container_gives(data_root: Path) -> None:
    roots = (data_root,)
    privileged = process_job_problem(_process_job(privileged=True), roots, ())
    assert privileged is not None and "docker: true" in privileged
    volume = {"host_path": str(data_root / "ok"), "container_path": "/x"}
    unsandboxed = process_job_problem(_process_job(volumes=[volume]), roots, ())
    assert unsandboxed is not None and "no host directory mounted" in unsandboxed
    sandboxed = process_job_problem(_process_job(volumes=[volume]), roots, (), mounts_volumes=True)
    assert sandboxed is None
    etc = _process_job(volumes=[{"host_path": "/etc", "container_path": "/x"}])
    refused = process_job_problem(etc, roots, (), mounts_volumes=True)
    assert refused is not None and SETTING in refused
    assert process_job_problem(_process_job(), roots, ()) is None


async def test_a_process_job_is_refused_what_it_would_silently_lose(
    tmp_path: Path, data_root: Path
) -> None:
    """Through the agent's API: a process job (no Docker here) with `privileged: true`
    (what `docker: true` renders to) or volumes is refused at submit, never run without."""
    config = AgentConfig(
        data_dir=tmp_path / "agent",
        http_port=0,
        docker=False,
        tool_runner=recorded_tools(False),
        volume_roots=(data_root,),
    )
    volume = {"host_path": str(data_root / "ok"), "container_path": "/x"}
    async with start_agent(config) as context:
        base = f"http://127.0.0.1:{context.http_port}{API_PREFIX}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            cases: list[tuple[str, dict[str, object], str]] = [
                ("priv", {"privileged": True}, "docker: true"),
                ("vol", {"volumes": [volume]}, "no host directory mounted"),
            ]
            for name, fields, says in cases:
                job: dict[str, object] = {"id": name, "run_name": name, "commands": ["true"]}
                job |= fields
                refused = await http.post("/jobs", json=job)
                assert refused.status_code == 422, (name, refused.text)
                assert says in refused.json()["message"], refused.text


def test_the_roots_come_from_the_flags_the_environment_or_the_default() -> None:
    assert _volume_roots(None, {}) == DEFAULT_VOLUME_ROOTS
    assert _volume_roots(None, {"DOCKYARD_AGENT_VOLUME_ROOTS": "/a:/b"}) == (Path("/a"), Path("/b"))
    flags = [Path("/c")]
    assert _volume_roots(flags, {"DOCKYARD_AGENT_VOLUME_ROOTS": "/a"}) == (Path("/c"),)
    with pytest.raises(ValueError, match="absolute"):
        _volume_roots(None, {"DOCKYARD_AGENT_VOLUME_ROOTS": "data"})


@pytest.mark.parametrize(
    ("argv", "environ"),
    [(["--volume-root", "data"], {}), ([], {"DOCKYARD_AGENT_VOLUME_ROOTS": "/mnt:data"})],
    ids=["flag", "env"],
)
def test_the_agent_refuses_a_relative_root_at_start(
    tmp_path: Path, argv: list[str], environ: dict[str, str]
) -> None:
    command = [sys.executable, "-m", "agent", "serve", "--data-dir", str(tmp_path), *argv]
    env = {k: v for k, v in os.environ.items() if k != "DOCKYARD_AGENT_VOLUME_ROOTS"} | environ
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--volume-root" in done.stderr and "absolute" in done.stderr, done.stderr


@pytest.mark.parametrize("hostile", ["/mnt;touch /tmp/x", "/data $(id)", "data", "/a:'b"])
def test_ssh_hosts_roots_are_plain_paths_since_they_land_in_a_shell_command(
    hostile: str,
) -> None:
    with pytest.raises(UsageError, match="ssh_volume_roots"):
        Settings.from_env({"DOCKYARD_SSH_VOLUME_ROOTS": hostile})
    with pytest.raises(ValueError, match="volume root"):
        AgentOptions(volume_roots=hostile)  # and by the deployer itself


def test_ssh_hosts_agents_get_the_roots_on_their_command_line() -> None:
    settings = Settings.from_env({"DOCKYARD_SSH_VOLUME_ROOTS": "/mnt/disk-1:/data"})
    options = ssh_agent_options(settings)
    args = options.args()
    assert args[-4:] == ("--volume-root", "/mnt/disk-1", "--volume-root", "/data")
    assert AgentOptions.from_args(args) == options  # read back from a host: the same
    assert "--volume-root" not in AgentOptions().args()  # unset: the agent's default


def test_the_servers_local_setting_takes_absolute_roots_only() -> None:
    settings = Settings.from_env({"DOCKYARD_LOCAL_VOLUME_ROOTS": "/mnt:/disks"})
    assert settings.local_volume_roots == "/mnt:/disks"
    with pytest.raises(UsageError, match="local_volume_roots"):
        Settings.from_env({"DOCKYARD_LOCAL_VOLUME_ROOTS": "disks"})


@pytest.fixture
async def dagent(
    tmp_path: Path, data_root: Path, docker_engine: DockerEngine
) -> AsyncIterator[AgentApi]:
    need_root()
    config = AgentConfig(
        data_dir=tmp_path / "agent",
        http_port=0,
        docker_url=docker_engine.base_url,
        tool_runner=recorded_tools(False),
        volume_roots=(data_root,),
    )
    async with start_agent(config) as context:
        base = f"http://127.0.0.1:{context.http_port}{API_PREFIX}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            yield AgentApi(http, config.data_dir)
    client = docker.DockerClient(base_url=docker_engine.base_url)
    for container in client.containers.list(
        all=True, filters={"label": f"dockyard.test-dir={tmp_path}"}
    ):
        container.remove(force=True)
    client.close()


def _docker_job(engine: DockerEngine, tmp_path: Path, host_path: str) -> dict[str, object]:
    return {
        "id": f"v-{uuid.uuid4().hex[:8]}",
        "run_name": "v",
        "executor": "docker",
        "image": engine.image,
        "commands": ["cat /x/note.txt /x/passwd /x/shadow 2>&1; ls /x"],
        "volumes": [{"host_path": host_path, "container_path": "/x"}],
        "labels": {"dockyard.test-dir": str(tmp_path)},
    }


async def test_a_docker_job_mounts_no_system_path(
    dagent: AgentApi, docker_engine: DockerEngine, tmp_path: Path, data_root: Path
) -> None:
    (data_root / "etc-link").symlink_to("/etc")
    attacks = [*SYSTEM_PATHS, "/var/run/docker.sock", str(data_root / "etc-link")]
    for path in attacks:
        refused = await dagent.http.post("/jobs", json=_docker_job(docker_engine, tmp_path, path))
        assert refused.status_code == 422, (path, refused.text)
        message = refused.json()["message"]
        assert f"volume {path}" in message, message
        assert SETTING in message or "which no job may mount" in message, message
    spec = _docker_job(docker_engine, tmp_path, str(data_root / "ok"))
    accepted = await dagent.http.post("/jobs", json=spec)
    assert accepted.status_code == 200, accepted.text
    state = await dagent.wait_finished(str(spec["id"]))
    log = await dagent.read_log(str(spec["id"]))
    assert state.status == JobStatus.EXITED and b"from the data disk" in log, (state, log)


async def test_a_link_planted_after_the_submit_is_refused_at_launch(
    tmp_path: Path, data_root: Path, docker_engine: DockerEngine
) -> None:
    """Checked at submit (`check`) then swapped for a link to /etc: `launch` refuses it
    before the engine is asked for anything."""
    executor = DockerExecutor(docker_engine.base_url, volume_roots=(data_root,))
    target = data_root / "later"
    target.mkdir()
    spec = JobSpec.model_validate(_docker_job(docker_engine, tmp_path, str(target)))
    assert executor.check(spec) is None
    target.rmdir()
    target.symlink_to("/etc")
    files = JobFiles(tmp_path / "job")
    files.root.mkdir()
    files.log.touch()
    client = docker.DockerClient(base_url=docker_engine.base_url)
    try:
        with pytest.raises(ExecutorError) as raised:
            await executor.launch(spec, files)
        assert raised.value.reason == JobReason.EXECUTOR_ERROR
        assert "-> /etc" in raised.value.message and SETTING in raised.value.message
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(f"dockyard-{spec.id}")
    finally:  # without the check, the container would exist: leave none behind
        for container in client.containers.list(
            all=True, filters={"label": f"dockyard.test-dir={tmp_path}"}
        ):
            container.remove(force=True)
        client.close()
