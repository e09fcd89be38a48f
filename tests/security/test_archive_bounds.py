"""The agent extracts a job's archives once, within bounds (issue 12, finding 5).

The attack forms: the 2 MB tar.gz that became a 2 GiB file in a job, submitted straight to
the agent (the server refuses it at upload: test_uploads.py); and 4 submits of one job at
once (the server's retries), which started 4 extractions.
"""

from __future__ import annotations

import base64
import io
import tarfile
import threading
from pathlib import Path

import pytest

from agent.protocol import Archive
from agent.server import archives
from agent.server.archives import (
    MAX_EXTRACTED_BYTES,
    ArchiveError,
    ArchiveLimits,
    stage_archives,
    staged_root,
)
from tests.agent.conftest import AgentProcess
from tests.security.bombs import tar_gz_bomb


def _archive(data: bytes, path: str = ".") -> Archive:
    return Archive(path=path, data=base64.b64encode(data).decode())


def _small_tar_gz() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for index in range(50):
            data = b"x" * 1000
            info = tarfile.TarInfo(f"dir/file{index}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_tar_bomb_is_refused_before_it_is_written(tmp_path: Path) -> None:
    bomb = tar_gz_bomb(MAX_EXTRACTED_BYTES + 16 * 2**20)  # 4 GiB of zeros in ~4 MB
    job_root = tmp_path / "jobs" / "bomb"
    with pytest.raises(ArchiveError, match="the agent's limit"):
        stage_archives([_archive(bomb)], job_root)
    assert not job_root.exists(), "nothing of the refused job is kept"


def test_a_bomb_split_over_archives_is_counted_in_all(tmp_path: Path) -> None:
    half = tar_gz_bomb(MAX_EXTRACTED_BYTES // 2 + 16 * 2**20)
    with pytest.raises(ArchiveError, match=r"archives\[1\]: extracts to more than"):
        stage_archives([_archive(half, "a"), _archive(half, "b")], tmp_path / "job")


def test_concurrent_submits_extract_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extractions: list[int] = []
    real_extract = archives._extract

    def counting(*args: object) -> None:
        extractions.append(1)
        real_extract(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(archives, "_extract", counting)
    job_root = tmp_path / "jobs" / "retried"
    specs = [_archive(_small_tar_gz())]
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def submit() -> None:
        start.wait()
        try:
            stage_archives(specs, job_root)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(extractions) == 1
    staged = staged_root(job_root) / "0" / "dir"
    assert len(list(staged.iterdir())) == 50
    assert [p.name for p in job_root.iterdir() if p.name.startswith(".archives-")] == []


def test_the_limits_are_settings_and_errors_say_how_to_raise_them(tmp_path: Path) -> None:
    small = _archive(_small_tar_gz())  # 50 files, 50 000 bytes
    with pytest.raises(ArchiveError) as files:
        stage_archives([small], tmp_path / "a", ArchiveLimits(max_files=10))
    assert "more than 10 files" in str(files.value)
    assert "--max-extracted-files" in str(files.value)
    assert "DOCKYARD_AGENT_MAX_EXTRACTED_FILES" in str(files.value)
    with pytest.raises(ArchiveError) as size:
        stage_archives([small], tmp_path / "b", ArchiveLimits(max_bytes=20_000))
    assert "more than 20000 bytes" in str(size.value)
    assert "--max-extracted-bytes" in str(size.value)
    assert "DOCKYARD_AGENT_MAX_EXTRACTED_BYTES" in str(size.value)
    stage_archives([small], tmp_path / "c", ArchiveLimits(max_bytes=50_000, max_files=50))


async def test_the_agent_takes_the_limits_from_its_flags_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKYARD_AGENT_MAX_EXTRACTED_BYTES", "20000")
    data_dir = tmp_path / "agent"
    data_dir.mkdir()
    agent = AgentProcess(data_dir, ("--no-docker", "--max-extracted-files", "10"))
    api = await agent.start()
    try:
        archive = {"path": ".", "data": _archive(_small_tar_gz()).data}
        files = await api.submit(id="many-files", commands=["true"], archives=[archive])
        assert files.status_code == 422
        assert "more than 10 files" in files.json()["message"]
        assert "--max-extracted-files" in files.json()["message"]
        agent.terminate()
        agent = AgentProcess(data_dir, ("--no-docker",))
        api = await agent.start()
        size = await api.submit(id="big", commands=["true"], archives=[archive])
        assert size.status_code == 422
        assert "more than 20000 bytes" in size.json()["message"]
    finally:
        await api.http.aclose()
        agent.terminate()
