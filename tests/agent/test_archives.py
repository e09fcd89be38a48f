"""Job archives (``JobSpec.archives``) and path variables, in both executors; SSH activity."""

from __future__ import annotations

import base64
import io
import tarfile
import uuid
from pathlib import Path

import pytest

from agent.protocol import MAX_ARCHIVES_BYTES, Archive, JobState, JobStatus
from agent.server.activity import ConnectionActivity
from agent.server.archives import ArchiveError, stage_archives
from tests.agent.conftest import AgentApi
from tests.agent.test_docker_jobs import dagent, docker_job  # noqa: F401
from tests.services.docker import DockerEngine


def tar_gz(members: dict[str, bytes], *, links: dict[str, str] | None = None) -> str:
    """base64 of a tar.gz holding ``members`` (name -> bytes) and symlinks (name -> target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(
    ("members", "links", "needle"),
    [
        ({"../escape.txt": b"x"}, None, "unsafe member"),
        ({"/abs.txt": b"x"}, None, "unsafe member"),
        ({}, {"evil": "/etc/passwd"}, "unsafe member"),
        ({}, {"up": "../../outside"}, "unsafe member"),
    ],
)
def test_staging_refuses_members_leading_out(
    tmp_path: Path, members: dict[str, bytes], links: dict[str, str] | None, needle: str
) -> None:
    root = tmp_path / "job"
    with pytest.raises(ArchiveError, match=needle):
        stage_archives([Archive(path=".", data=tar_gz(members, links=links))], root)
    assert not root.exists()  # nothing of the refused job stays
    assert not (tmp_path / "escape.txt").exists()


def test_staging_refuses_what_is_no_archive(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="not base64"):
        stage_archives([Archive(path=".", data="%%%")], tmp_path / "a")
    with pytest.raises(ArchiveError, match=r"not a readable tar\.gz"):
        stage_archives([Archive(path=".", data=base64.b64encode(b"plain").decode())], tmp_path)


async def test_process_job_gets_its_files_and_path_variables(
    agent: AgentApi, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "abs-target"
    archives = [
        {"path": ".", "data": tar_gz({"repo.txt": b"from the repo\n", "src/a.py": b"A\n"})},
        {"path": "data", "data": tar_gz({"x.csv": b"1,2\n"})},
        {"path": str(elsewhere), "data": tar_gz({"y.txt": b"Y\n"})},
    ]
    commands = [
        'cat repo.txt src/a.py data/x.csv "$ELSEWHERE/y.txt"',
        'echo "repo=$REPO_DIR work=$WORK_DIR"',
        'test "$WORK_DIR" = "$(pwd)"',
    ]
    path_env = {"REPO_DIR": ".", "WORK_DIR": ".", "ELSEWHERE": str(elsewhere)}
    response = await agent.submit(
        id="files", commands=commands, archives=archives, path_env=path_env
    )
    assert response.status_code == 200, response.text
    state = await agent.wait_finished("files")
    log = await agent.read_log("files")
    assert state.exit_status == 0, log
    work = agent.data_dir / "jobs" / "files" / "work"
    assert log == f"from the repo\nA\n1,2\nY\nrepo={work} work={work}\n".encode()
    record = (agent.data_dir / "jobs" / "files" / "job.json").read_text()
    assert "ZnJvbS" not in record and len(record) < 4096  # the data is not kept in job.json


async def test_unsafe_or_oversized_archives_are_refused_at_submit(agent: AgentApi) -> None:
    bad = [{"path": ".", "data": tar_gz({"../../etc/owned": b"x"})}]
    response = await agent.submit(id="bad", commands=["true"], archives=bad)
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_request" and "unsafe member" in body["message"]
    assert not (agent.data_dir / "jobs" / "bad").exists()
    assert (await agent.http.get("/jobs/bad")).status_code == 404
    huge = [{"path": ".", "data": "A" * (MAX_ARCHIVES_BYTES + 4)}]
    response = await agent.submit(id="huge", commands=["true"], archives=huge)
    assert response.status_code == 422 and "more than the limit" in response.json()["message"]


def test_activity_counts_connections_with_an_injected_clock() -> None:
    now = [1000.0]
    activity = ConnectionActivity(clock=lambda: now[0])
    running = JobState(id="j", status=JobStatus.RUNNING, started_at=990.0)
    assert activity.annotate(running) == running  # not watching: nothing known
    activity.watch()  # at 1000
    now[0] = 1005.0
    assert activity.annotate(running).no_connections_secs == 5.0  # since watching, not 990
    session, connection = object(), object()
    activity.opened(session, "j")
    activity.opened(connection, "j")
    activity.opened(connection, "j")  # the same holder counts once
    seen = activity.annotate(running)
    assert (seen.connections, seen.no_connections_secs) == (2, 0.0)
    now[0] = 1010.0
    activity.closed(session)
    assert activity.annotate(running).connections == 1
    now[0] = 1020.0
    activity.closed(connection)
    now[0] = 1032.5
    seen = activity.annotate(running)
    assert (seen.connections, seen.last_connection_at, seen.no_connections_secs) == (
        0,
        1020.0,
        12.5,
    )
    pending = JobState(id="j", status=JobStatus.PENDING)
    assert activity.annotate(pending).no_connections_secs is None


@pytest.mark.docker
async def test_docker_job_gets_its_files_beside_the_image_ones(
    dagent: AgentApi,  # noqa: F811
    docker_engine: DockerEngine,
    tmp_path: Path,
) -> None:
    job_id = f"t-{uuid.uuid4().hex[:10]}"
    archives = [
        {"path": ".", "data": tar_gz({"repo.txt": b"R\n", "sub/b.txt": b"B\n"})},
        {"path": "/etc", "data": tar_gz({"extra.conf": b"E\n"})},
    ]
    commands = [
        'cat repo.txt sub/b.txt /etc/extra.conf && test -f /etc/passwd && echo "repo=$REPO_DIR"'
    ]
    spec = docker_job(docker_engine, tmp_path, id=job_id, commands=commands, archives=archives)
    spec |= {"working_dir": "/workflow", "path_env": {"REPO_DIR": "."}}
    response = await dagent.submit(**spec)
    assert response.status_code == 200, response.text
    state = await dagent.wait_finished(job_id)
    log = await dagent.read_log(job_id)
    assert state.exit_status == 0, log
    assert log == b"R\nB\nE\nrepo=/workflow\n"
    # no working_dir: the image's WORKDIR (none in the test image: `/`)
    plain = docker_job(
        docker_engine,
        tmp_path,
        id=f"{job_id}-wd",
        commands=['cat /app/a.txt && echo "work=$W"'],
        archives=[{"path": "app", "data": tar_gz({"a.txt": b"A\n"})}],
        path_env={"W": "."},
    )
    assert (await dagent.submit(**plain)).status_code == 200
    state = await dagent.wait_finished(f"{job_id}-wd")
    assert (state.exit_status, await dagent.read_log(f"{job_id}-wd")) == (0, b"A\nwork=/\n")
    bad = docker_job(
        docker_engine,
        tmp_path,
        id=f"{job_id}-bad",
        commands=["true"],
        archives=[{"path": ".", "data": tar_gz({}, links={"x": "/etc/shadow"})}],
    )
    response = await dagent.submit(**bad)
    assert response.status_code == 422 and "unsafe member" in response.json()["message"]
