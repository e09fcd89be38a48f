"""`optional: true` instance volumes follow dstack's meaning, through the agent's API.

An optional volume that cannot be attached on this host is skipped: the job is accepted,
runs without it, and its notice names the volume and why. A volume without `optional` is
never dropped: the job is refused (422) with the reason. Two real agents: one whose
process jobs get no volume at all (no sandbox), and a root one whose sandboxed process
jobs mount volumes below the allowed roots (a temp dir standing in for `/data`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.__main__ import job_account
from agent.protocol import JobSpec, JobStatus, VolumeMount
from agent.server.optionalvolumes import skip_unattachable
from agent.server.serving import AgentConfig, start_agent
from tests.agent.conftest import AgentApi, _client, _stop_all, recorded_tools
from tests.services.missing import need

OPTIONAL_GONE = "test ! -e /opt-data && echo ran-without"


def _volume(host: Path | str, path: str, *, optional: bool) -> dict[str, object]:
    return {"host_path": str(host), "container_path": path, "optional": optional}


async def test_an_unsandboxed_process_job_runs_without_its_optional_volume(
    agent: AgentApi, tmp_path: Path
) -> None:
    volume = _volume(tmp_path, "/opt-data", optional=True)
    accepted = await agent.submit(id="opt", commands=[OPTIONAL_GONE], volumes=[volume])
    assert accepted.status_code == 200, accepted.text
    notice = accepted.json()["notice"]
    assert f"optional volume {tmp_path} (at /opt-data) skipped" in notice, notice
    assert "no host directory mounted" in notice, notice
    state = await agent.wait_finished("opt")
    assert state.status == JobStatus.EXITED and state.exit_status == 0, state
    assert await agent.read_log("opt") == b"ran-without\n"
    # the same volume without `optional`: refused with the reason, never dropped
    volume["optional"] = False
    refused = await agent.submit(id="req", commands=["true"], volumes=[volume])
    assert refused.status_code == 422, refused.text
    assert "no host directory mounted" in refused.json()["message"]


@pytest.fixture
async def sandboxed(tmp_path: Path) -> AsyncIterator[tuple[AgentApi, Path]]:
    need(
        job_account("auto", None, tmp_path / "agent").sandbox is not None,
        "root and bubblewrap",
        "run the tests as root with bubblewrap installed, as CI does",
    )
    root = tmp_path / "data"
    root.mkdir()
    data_dir = tmp_path / "agent"
    config = AgentConfig(
        data_dir=data_dir,
        http_port=0,
        docker=False,
        tool_runner=recorded_tools(False),
        job_account=job_account("auto", tmp_path / "work", data_dir, hidden=(data_dir,)),
        volume_roots=(root,),
    )
    async with start_agent(config) as context, _client(context.http_port) as http:
        yield AgentApi(http, data_dir), root
        await _stop_all(http)


async def test_a_sandboxed_job_skips_only_the_optional_volumes_it_cannot_mount(
    sandboxed: tuple[AgentApi, Path],
) -> None:
    agent, root = sandboxed
    present = root / "present"
    present.mkdir(mode=0o777)
    present.chmod(0o777)  # the job writes as its own uid
    volumes = [
        _volume(present, "/kept", optional=True),
        _volume(root / "missing", "/opt-data", optional=True),
        _volume("/etc", "/host-etc", optional=True),
    ]
    commands = [f"{OPTIONAL_GONE} && test ! -e /host-etc && echo hi > /kept/out"]
    accepted = await agent.submit(id="mix", commands=commands, volumes=volumes)
    assert accepted.status_code == 200, accepted.text
    notice = accepted.json()["notice"]
    assert f"{root / 'missing'} does not exist" in notice, notice
    assert "optional volume /etc (at /host-etc) skipped" in notice, notice
    assert "/kept" not in notice, notice
    state = await agent.wait_finished("mix")
    assert state.status == JobStatus.EXITED and state.exit_status == 0, (
        state,
        await agent.read_log("mix"),
    )
    assert (present / "out").read_text() == "hi\n"  # the attachable one was mounted
    # without `optional`, each refuses the job with its reason
    for host, says in ((root / "missing", "does not exist"), ("/etc", "volume roots")):
        body = [_volume(host, "/v", optional=False)]
        refused = await agent.submit(id=f"req-{len(str(host))}", commands=["true"], volumes=body)
        assert refused.status_code == 422, refused.text
        assert says in refused.json()["message"], refused.text


def test_a_job_refused_for_something_else_keeps_its_volumes() -> None:
    """The job's own refusal is what the caller sees, not a volume quietly dropped."""
    spec = JobSpec(
        id="j",
        run_name="r",
        commands=["true"],
        volumes=[VolumeMount(host_path="/etc", container_path="/x", optional=True)],
    )

    def refuses_all(candidate: JobSpec) -> str | None:
        return "no such user"

    assert skip_unattachable(spec, refuses_all) == (spec, [])
