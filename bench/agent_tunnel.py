"""Log throughput through the agent tunnel, beside raw ``cat`` over the same SSH connection.

    .venv/bin/python bench/agent_tunnel.py [--mib 64] [--chunk-mib 4]

A process job writes `--mib` MiB to its log and stays running. Then, over one SSH
connection, the bench times (1) ``AgentClient.iter_logs`` pulling the whole log by offset
through ``direct-tcpip`` channels and (2) ``cat`` of the same log file in an SSH session,
and prints JSON with both rates in MB/s and their ratio (goal: ≥ 0.5); the median of
three rounds, after one warm-up round.

Two paths are measured when possible:
- ``local_fleet``: the agent started by `agent.local` (detached process) with its embedded
  asyncssh server; the session user is the run name, so ``cat`` runs in the job's env.
- ``ssh_fleet``: an OpenSSH ``sshd`` on loopback (needs root and /usr/sbin/sshd), the agent
  deployed to it by `agent.deploy` from the bundle.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncssh

from agent.bundle import build_bundle
from agent.client import AgentClient
from agent.deploy import deploy_agent, stop_agent
from agent.local import ensure_client_key, ensure_local_agent, stop_local_agent
from agent.protocol import JobSpec
from agent.tunnel import SSHTarget, TunnelPool

RUN = "bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _start_writer(client: AgentClient, job_id: str, mib: int) -> None:
    """A job that writes `mib` MiB of text to its log, then keeps running."""
    kib = "b'0123456789abcdef' * 63 + b'012345678901234\\n'"  # 1 KiB, one line
    script = f"import sys; m = ({kib}) * 1024; [sys.stdout.buffer.write(m) for _ in range({mib})]"
    command = f'{sys.executable} -c "{script}"; echo done; exec sleep 600'
    await client.submit(JobSpec(id=job_id, run_name=RUN, commands=[command]))
    async with asyncio.timeout(120):
        while True:
            chunk = await client.logs(job_id, offset=mib * 1024 * 1024, limit=64)
            if b"done" in chunk.data:
                return
            await asyncio.sleep(0.2)


async def _time_tunnel(client: AgentClient, job_id: str, total: int, chunk: int) -> float:
    start = time.perf_counter()
    offset = 0
    while offset < total:
        part = await client.logs(job_id, offset=offset, limit=min(chunk, total - offset))
        offset = part.next_offset
    return time.perf_counter() - start


async def _time_cat(conn: asyncssh.SSHClientConnection, path: str) -> tuple[int, float]:
    start = time.perf_counter()
    process = await conn.create_process(f"cat {path}", encoding=None)
    received = 0
    while data := await process.stdout.read(1 << 20):
        received += len(data)
    await process.wait()
    return received, time.perf_counter() - start


def _figures(total: int, tunnel_s: float, cat: tuple[int, float]) -> dict[str, float]:
    tunnel = total / tunnel_s / 1e6
    cat_bytes, cat_s = cat
    raw = cat_bytes / cat_s / 1e6
    return {
        "tunnel_mb_s": round(tunnel, 1),
        "cat_mb_s": round(raw, 1),
        "ratio": round(tunnel / raw, 2),
    }


async def _measure(
    pool: TunnelPool, target: SSHTarget, agent_port: int, log_path: str, mib: int, chunk: int
) -> dict[str, Any]:
    total = mib * 1024 * 1024
    async with AgentClient.over_tunnel(pool, target, agent_port, timeout=60) as client:
        job_id = f"bench-{int(time.time())}"
        await _start_writer(client, job_id, mib)
        conn = await pool.connection(target)
        path = log_path.format(job_id=job_id)
        await _time_cat(conn, path)  # warm the page cache and the connection
        await _time_tunnel(client, job_id, total, chunk)
        runs = []
        for _ in range(3):
            tunnel_s = await _time_tunnel(client, job_id, total, chunk)
            runs.append(_figures(total, tunnel_s, await _time_cat(conn, path)))
        await client.stop(job_id, force=True)
    median = sorted(runs, key=lambda r: r["ratio"])[1]
    return {**median, "ratios": [r["ratio"] for r in runs]}


async def bench_local(work: Path, mib: int, chunk: int) -> dict[str, Any]:
    key = ensure_client_key(work / "server_key")
    pool = TunnelPool()
    try:
        agent = await ensure_local_agent(work, key, pool, job_user="self")  # venv Python
        target = SSHTarget("127.0.0.1", agent.ssh_port, user=RUN, identity_file=str(key))
        data_dir = work / "local-agent" / "data"
        log_path = str(data_dir / "jobs" / "{job_id}" / "output.log")
        return await _measure(pool, target, agent.agent_port, log_path, mib, chunk)
    finally:
        await pool.close()
        stop_local_agent(work)


async def bench_sshd(work: Path, mib: int, chunk: int) -> dict[str, Any]:
    from tests.services.sshd import make_client_key, sshd_unavailable_reason, start_sshd

    reason = sshd_unavailable_reason()
    if reason:
        return {"skipped": reason}
    key = make_client_key(work / "client")
    host = start_sshd(work / "sshd", key)
    pool = TunnelPool()
    target = SSHTarget("127.0.0.1", host.port, user="root", identity_file=str(key))
    remote = str(work / "remote-agent")
    try:
        deployed = await deploy_agent(
            pool, target, build_bundle(work / "bundle"), agent_port=_free_port(), remote_dir=remote
        )
        log_path = f"{remote}/data/jobs/{{job_id}}/output.log"
        return await _measure(pool, target, deployed.agent_port, log_path, mib, chunk)
    finally:
        await stop_agent(pool, target, remote)
        await pool.close()
        host.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--chunk-mib", type=int, default=4)
    args = parser.parse_args()
    chunk = args.chunk_mib * 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="dockyard-bench-") as tmp:
        work = Path(tmp)
        result = {
            "log_mib": args.mib,
            "chunk_mib": args.chunk_mib,
            "goal_ratio": 0.5,
            "local_fleet": await bench_local(work / "local", args.mib, chunk),
            "ssh_fleet": await bench_sshd(work / "ssh", args.mib, chunk),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
