"""Slurm allocations of a `backends: [slurm]` fleet: what to ask `sbatch` for (pure).

The Slurm engine (`reconciler.engine.slurmengine`) makes one allocation per node of the
fleet and reads them back with `squeue`; everything it decides is here, without I/O:

- `choose_offer`: the partition (a `reconciler.core.slurm_nodes.ClusterOffer` of the
  project's clusters) that can hold one node of the fleet's `resources`;
- `sbatch_options`: dstack's fields as `sbatch` options (`--partition`, `--gres`,
  `--cpus-per-task`, `--mem`; docs/slurm.md has the table);
- `batch_script`: the allocation's script: pick two free ports on the compute node, run
  the agent on them (its HTTP API on 127.0.0.1, its SSH server on the node's addresses for
  the server's key only) and, once it listens, write them with the node's name to the
  allocation's `endpoint` file (the home directory is shared with the login node); the
  agent replaces the script's shell, so it lives exactly as long as the allocation;
- `parse_queue` / `ended_reason`: `squeue`'s lines, and the dstack termination reason of
  the jobs on an allocation Slurm ended (its time limit → `max_duration_exceeded`;
  cancelled, preempted, node failure, gone → `interrupted_by_no_capacity`, as a spot
  instance taken back).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from reconciler.core.slurm_nodes import ClusterOffer
from reconciler.domain.statuses import JobTerminationReason
from schemas.requirements import Range

# Slurm's job states (squeue %T) in which the allocation still holds (or will hold) a node.
ALIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
     "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD"}
)  # fmt: skip
TIME_LIMIT_STATES = frozenset({"TIMEOUT", "DEADLINE"})
TIME_LIMIT_REASONS = frozenset({"TimeLimit", "DeadLine"})  # `%r` while it is COMPLETING


class SlurmTextError(ValueError):
    """`squeue` or the endpoint file printed what Dockyard cannot read; names the line."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """One node of the fleet, as its `resources` ask (`stacks.catalog.Requirements`)."""

    gpu_names: tuple[str, ...]
    gpu_count: Range
    cpus: Range
    memory_gib: Range


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """One allocation as `squeue -o '%i|%T|%N|%r'` shows it."""

    job_id: str
    state: str
    node: str
    reason: str

    @property
    def alive(self) -> bool:
        return self.state in ALIVE_STATES

    @property
    def running(self) -> bool:
        return self.state == "RUNNING" and bool(self.node)


def _fits(offer: ClusterOffer, wanted: Wanted) -> bool:
    if wanted.gpu_names and (offer.gpu_name or "").upper() not in wanted.gpu_names:
        return False
    return (
        wanted.gpu_count.contains(offer.gpu_count)
        and wanted.cpus.contains(offer.cpus)
        and wanted.memory_gib.contains(offer.memory_mib / 1024)
    )


def choose_offer(offers: Sequence[ClusterOffer], wanted: Wanted) -> ClusterOffer | None:
    """The partition a node of the fleet is allocated from: one whose nodes fit, those
    with a node free now first, then the cheapest, then the smallest."""
    fitting = [o for o in offers if _fits(o, wanted)]
    if not fitting:
        return None
    return min(
        fitting,
        key=lambda o: (o.available == 0, o.price, o.gpu_count, o.cpus, o.memory_mib),
    )


def sbatch_options(offer: ClusterOffer, wanted: Wanted) -> tuple[str, ...]:
    """`sbatch` options of one allocation (one node, one task) from `offer`'s partition:
    GPUs as GRES of the offer's model (`gpu:<model lowercased>:<count>`, the count the
    fleet's minimum, else all the node's), CPUs and memory the fleet's minimums."""
    options = [f"--partition={offer.partition}", "--nodes=1", "--ntasks=1"]
    if offer.gpu_count and offer.gpu_name:
        low = wanted.gpu_count.min
        count = int(low) if low else offer.gpu_count
        options.append(f"--gres=gpu:{offer.gpu_name.lower()}:{count}")
    if wanted.cpus.min:
        options.append(f"--cpus-per-task={int(wanted.cpus.min)}")
    if wanted.memory_gib.min:
        options.append(f"--mem={int(wanted.memory_gib.min * 1024)}M")
    return tuple(options)


_PORTS = (
    "import socket; s = [socket.socket() for _ in range(2)]; "
    "[x.bind(('0.0.0.0', 0)) for x in s]; print(*[x.getsockname()[1] for x in s])"
)


def home_path(path: str) -> str:
    """`path` for a shell on the cluster: an absolute one quoted, a relative one under
    `$HOME` (the login node's and the compute nodes' shared home)."""
    return shlex.quote(path) if path.startswith("/") else f'"$HOME"/{shlex.quote(path)}'


_LISTENING = (
    "import os, socket, sys, time\n"
    "port, pid, deadline = int(sys.argv[1]), int(sys.argv[2]), time.monotonic() + 120\n"
    "while time.monotonic() < deadline:\n"
    "    try:\n"
    "        socket.create_connection(('127.0.0.1', port), 1).close()\n"
    "        sys.exit(0)\n"
    "    except OSError:\n"
    "        os.kill(pid, 0)\n"  # the agent exited: ProcessLookupError, exit 1
    "        time.sleep(0.05)\n"
    "sys.exit(1)\n"
)


def batch_script(job_dir: str, bundle_dir: str, python: str, agent_args: Sequence[str]) -> str:
    """The allocation's batch script (see the module docstring). `job_dir` and
    `bundle_dir` are absolute or relative to the home directory. The endpoint file is
    written once the agent's SSH server accepts connections, so the server's first look at
    the new instance finds its agent (no failed connection, no back-off); the agent is the
    batch step's own process (`exec`), so every signal Slurm sends the step reaches it."""
    q = shlex.quote
    flags = " ".join(q(arg) for arg in agent_args)
    return (
        "#!/bin/sh\n"
        f"cd {home_path(job_dir)} || exit 1\n"
        f"set -- $({q(python)} -c {q(_PORTS)}) || exit 1\n"
        f"export PYTHONPATH={home_path(bundle_dir + '/current/site')} PYTHONNOUSERSITE=1\n"
        # in the background: once the agent (this process, after `exec`) listens
        f'{{ {q(python)} -c {q(_LISTENING)} "$1" "$$" 2>/dev/null && '
        'echo "${SLURMD_NODENAME:-$(hostname)} $1 $2" > endpoint.tmp && '
        "mv endpoint.tmp endpoint; } &\n"
        f'exec {q(python)} -s -m agent serve --data-dir "$PWD/data" --http-port "$2" '
        f'--ssh-port "$1" --ssh-host 0.0.0.0 --authorized-keys "$PWD/authorized_keys" '
        f'--host-key "$PWD/host_key" {flags}\n'
    )


def parse_endpoint(text: str) -> tuple[str, int, int]:
    """(node name, agent SSH port, agent HTTP port) from the allocation's endpoint file."""
    fields = text.split()
    if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isdigit():
        raise SlurmTextError(f"endpoint file: expected 'node ssh_port http_port', got {text!r}")
    return fields[0], int(fields[1]), int(fields[2])


def parse_queue(text: str) -> dict[str, QueuedJob]:
    """`squeue -h -t all -o '%i|%T|%N|%r'` → job id → its line."""
    found: dict[str, QueuedJob] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.strip().split("|")
        if len(parts) != 4 or not parts[0]:
            raise SlurmTextError(f"squeue line {number}: {line[:200]!r}")
        job_id, state, node, reason = parts
        found[job_id] = QueuedJob(job_id, state.upper(), node, reason)
    return found


def ended_reason(job_id: str, job: QueuedJob | None) -> tuple[JobTerminationReason, str] | None:
    """None while the allocation holds its node, else the reason its jobs end with and
    the message (`squeue` no longer knowing the job counts as ended)."""
    if job is not None and job.alive:
        return None
    state = "gone from the queue" if job is None else job.state
    message = f"the Slurm allocation (job {job_id}) ended: {state}"
    if job is not None and (job.state in TIME_LIMIT_STATES or job.reason in TIME_LIMIT_REASONS):
        return JobTerminationReason.MAX_DURATION_EXCEEDED, message + " (its time limit)"
    return JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY, message
