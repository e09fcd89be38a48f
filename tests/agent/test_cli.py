"""``python -m agent serve``: options, the SSH service hook, refusal of a locked data dir."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agent.__main__ import build_parser, extra_services
from agent.server.serving import AgentConfig, start_agent

ROOT = Path(__file__).resolve().parents[2]


def test_ssh_options_start_the_ssh_service() -> None:
    parser = build_parser(with_services=True)
    plain = parser.parse_args(["serve", "--data-dir", "/d"])
    assert (plain.http_port, plain.no_docker, extra_services(plain)) == (10998, False, [])
    with_ssh = parser.parse_args(["serve", "--data-dir", "/d", "--ssh-port", "2222"])
    assert len(extra_services(with_ssh)) == 1


async def test_a_locked_data_dir_is_refused(tmp_path: Path) -> None:
    config = AgentConfig(data_dir=tmp_path, http_port=0, docker=False)
    argv = ["-m", "agent", "serve", "--data-dir", str(tmp_path), "--http-port", "0"]
    async with start_agent(config):
        process = await asyncio.create_subprocess_exec(
            sys.executable, *argv, "--no-docker", cwd=ROOT, stderr=asyncio.subprocess.PIPE
        )
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert stderr.decode().strip() == f"error: another agent serves {tmp_path}"
