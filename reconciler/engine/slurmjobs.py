"""Slurm's job commands on a cluster's login node, over the server's pooled SSH connection.

`LoginNode` is what the Slurm engine (`reconciler.engine.slurmengine`) does on the login
node: `submit` writes an allocation's key file and batch script into its job directory and
`sbatch`es it, `queue` reads `squeue`, `endpoint` reads what the allocation's agent wrote
(and the node's `NodeAddr`), `cancel` runs `scancel` and removes the job directories. Each
command's output is bounded while it is read (`adapters.slurm_login.run_command`); every
failure is a `StackFailed` naming the login node (the fleet retries).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

import asyncssh

from agent.tunnel import AgentUnreachable, SSHTarget, TunnelPool
from reconciler.adapters.slurm_login import SlurmUnavailable, run_command
from reconciler.core.slurm_alloc import (
    QueuedJob,
    SlurmTextError,
    home_path,
    parse_endpoint,
    parse_queue,
)
from reconciler.core.slurm_nodes import key_values
from stacks.protocol import StackFailed

QUEUE = "squeue -h -t all -o '%i|%T|%N|%r' -j "
MAX_OUTPUT = 1024 * 1024


class LoginNode:
    """One cluster's login node as the SSH pool reaches it (see the module docstring)."""

    def __init__(self, pool: TunnelPool, target: SSHTarget, limit_s: float) -> None:
        self.pool = pool
        self.target = target
        self._limit_s = limit_s

    async def run(self, command: str, stdin: str | None = None) -> str:
        try:
            conn = await self.pool.connection(self.target)
            return await run_command(conn, command, self._limit_s, MAX_OUTPUT, stdin=stdin)
        except (SlurmUnavailable, AgentUnreachable, OSError, asyncssh.Error) as exc:
            raise StackFailed(f"Slurm login node {self.target}: {exc}") from None

    async def queue(self, job_ids: Sequence[str]) -> dict[str, QueuedJob]:
        """The allocations `squeue` still knows (an id it does not know is left out)."""
        if not job_ids:
            return {}
        ids = ",".join(shlex.quote(str(i)) for i in job_ids)
        text = await self.run(f"{QUEUE}{ids} 2>/dev/null; true")
        try:
            return parse_queue(text)
        except SlurmTextError as exc:
            raise StackFailed(f"Slurm login node {self.target}: {exc}") from None

    async def submit(
        self, job_dir: str, key_line: str, script: str, name: str, options: Sequence[str]
    ) -> str:
        """`sbatch` of `script` from `job_dir` (created, with the agent SSH server's key
        file holding `key_line` alone); the Slurm job id."""
        d = home_path(job_dir)
        await self.run(f"mkdir -p {d} && cd {d} && umask 077 && cat > authorized_keys",
                       stdin=key_line + "\n")  # fmt: skip
        await self.run(f"cat > {d}/batch.sh", stdin=script)
        flags = " ".join(shlex.quote(o) for o in options)
        out = await self.run(
            f"sbatch --parsable --job-name={shlex.quote(name)} --output={d}/slurm.out "
            f"{flags} {d}/batch.sh"
        )
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise StackFailed(
                f"sbatch on {self.target} printed {out.strip()[:200]!r}, not a job id"
            )
        return job_id

    async def endpoint(self, job_dir: str, job_id: str) -> dict[str, Any] | None:
        """Where the allocation's agent listens (node, address, ports), None until written."""
        text = await self.run(f"cat {home_path(job_dir)}/endpoint 2>/dev/null; true")
        if not text.strip():
            return None
        try:
            node, ssh_port, http_port = parse_endpoint(text)
        except SlurmTextError as exc:
            raise StackFailed(f"Slurm job {job_id}: {exc}") from None
        shown = await self.run(f"scontrol show node {shlex.quote(node)} --oneliner")
        address = key_values(shown.strip()).get("NodeAddr") or node
        return {"node": node, "hostname": address, "port": ssh_port, "agent_port": http_port}

    async def cancel(self, job_ids: Sequence[str], job_dirs: Sequence[str] = ()) -> None:
        """`scancel` the jobs; then remove their directories (keys, logs, job data)."""
        if job_ids:
            await self.run("scancel " + " ".join(shlex.quote(str(i)) for i in job_ids))
        if job_dirs:
            await self.run("rm -rf " + " ".join(home_path(d) for d in job_dirs))
