"""A real one-node Slurm cluster for tests: munged + slurmctld + slurmd in a temp dir.

Debian's `slurmctld`, `slurmd`, `slurm-client` and `munge` packages (scripts/setup.sh --dev)
are run by hand, not as services: a generated `slurm.conf` (free reserved ports for
SlurmctldPort/SlurmdPort, state and spool under the temp dir, `proctrack/linuxproc`,
`task/none`, `select/cons_tres`), munged on its own socket with its own key, and one node
with the GPUs given as GRES backed by `/dev/null` (Slurm accepts a GRES without a device:
`sbatch --gres=gpu:h200:1` runs with `CUDA_VISIBLE_DEVICES=0`). Partitions: `gpu` (default)
and `cpu`, both holding the node. Clients find the cluster through `SLURM_CONF=<conf>`
(`cluster.env`); an sshd "login node" sets it with `SetEnv` (`login_config`).

Under CI=true a missing package fails the test (`missing.need`).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.services.missing import need
from tests.services.ports import reserved_port

BINARIES = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sinfo")
HOW = "apt-get install slurmctld slurmd slurm-client munge (scripts/setup.sh --dev)"
NODE = "dy1"


@dataclass
class SlurmCluster:
    """A running one-node cluster: its config file, node name and daemons."""

    conf: Path
    node: str
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(repr=False)

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm client command needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def login_config(self) -> str:
        """sshd_config lines making the sshd a login node of this cluster."""
        return f"SetEnv SLURM_CONF={self.conf}\n"

    def run(self, *argv: str) -> str:
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, check=True, timeout=30
        ).stdout

    def wait_idle(self, timeout: float = 60) -> None:
        """Until Slurm says the node is idle and responding (after a change of its state)."""
        _wait_idle(self, time.monotonic() + timeout)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


def need_slurm() -> None:
    """Skip (fail under CI) unless the Slurm and munge binaries are here and we are root."""
    for binary in BINARIES:
        need(Path(binary).exists(), binary, HOW)
    need(os.geteuid() == 0, "root", "slurmd runs jobs as their users; run the tests as root")


def _conf(workdir: Path, ctld_port: int, d_port: int, gres: str, cpus: int) -> str:
    host = socket.gethostname()
    gres_line = f" Gres=gpu:{gres}" if gres else ""
    return (
        "ClusterName=dockyardtest\n"
        f"SlurmctldHost={host}(127.0.0.1)\n"
        f"SlurmctldPort={ctld_port}\nSlurmdPort={d_port}\n"
        "SlurmUser=root\nSlurmdUser=root\n"
        "AuthType=auth/munge\nCredType=cred/munge\n"
        f"AuthInfo=socket={workdir / 'munge' / 'munge.sock'}\n"
        f"StateSaveLocation={workdir / 'state'}\nSlurmdSpoolDir={workdir / 'spool'}\n"
        f"SlurmctldPidFile={workdir / 'slurmctld.pid'}\nSlurmdPidFile={workdir / 'slurmd.pid'}\n"
        f"SlurmctldLogFile={workdir / 'slurmctld.log'}\nSlurmdLogFile={workdir / 'slurmd.log'}\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n"
        + ("GresTypes=gpu\n" if gres else "")
        + "ReturnToService=2\nMpiDefault=none\nSwitchType=switch/none\n"
        "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        f"NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} "
        f"RealMemory=1000{gres_line} State=UNKNOWN\n"
        f"PartitionName=gpu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP\n"
        f"PartitionName=cpu Nodes={NODE} MaxTime=INFINITE State=UP\n"
    )


def _wait_idle(cluster: SlurmCluster, deadline: float) -> None:
    while time.monotonic() < deadline:
        for process in cluster.processes:
            if process.poll() is not None:
                raise RuntimeError(
                    f"{process.args!r} exited with {process.returncode}; logs in {cluster.workdir}"
                )
        done = subprocess.run(
            ["sinfo", "-h", "-n", NODE, "-o", "%T"], env=cluster.env, capture_output=True, text=True
        )
        if done.returncode == 0 and done.stdout.strip() == "idle":  # not `idle*`, `drained`
            return
        time.sleep(0.1)
    raise RuntimeError(f"the Slurm node did not become idle in time; logs in {cluster.workdir}")


@contextmanager
def slurm_cluster(workdir: Path, *, gres: str = "h200:1") -> Iterator[SlurmCluster]:
    """Start the cluster in `workdir` (see the module docstring), stop it after the block."""
    need_slurm()
    with ExitStack() as stack:
        ctld_port = stack.enter_context(reserved_port())
        d_port = stack.enter_context(reserved_port())
        for name in ("munge", "state", "spool"):
            (workdir / name).mkdir(parents=True, exist_ok=True)
        key = workdir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        conf = workdir / "slurm.conf"
        cpus = min(2, os.cpu_count() or 1)
        conf.write_text(_conf(workdir, ctld_port, d_port, gres, cpus))
        if gres:
            gpu_type = gres.split(":")[0]
            (workdir / "gres.conf").write_text(
                f"NodeName={NODE} Name=gpu Type={gpu_type} File=/dev/null\n"
            )
        munge = workdir / "munge"
        processes: list[subprocess.Popen[bytes]] = []
        cluster = SlurmCluster(conf, NODE, workdir, processes)
        stack.callback(cluster.stop)
        processes.append(_start(
            ["/usr/sbin/munged", "-F", "--force", f"--key-file={key}",
             f"--socket={munge / 'munge.sock'}", f"--pid-file={munge / 'munged.pid'}",
             f"--seed-file={munge / 'seed'}", f"--log-file={munge / 'munged.log'}"],
            workdir, "munged",
        ))  # fmt: skip
        _wait_for(lambda: (munge / "munge.sock").exists(), processes, "munged")
        env = cluster.env
        processes.append(_start(["/usr/sbin/slurmctld", "-D", "-i"], workdir, "slurmctld", env))
        processes.append(_start(["/usr/sbin/slurmd", "-D", "-N", NODE], workdir, "slurmd", env))
        _wait_idle(cluster, time.monotonic() + 60)
        yield cluster


def _start(
    argv: list[str], workdir: Path, name: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / f"{name}.stderr", "wb"),
    )


def _wait_for(
    condition: Callable[[], bool],
    processes: list[subprocess.Popen[bytes]],
    name: str,
    timeout: float = 20,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if any(p.poll() is not None for p in processes):
            raise RuntimeError(f"{name} exited before it was ready")
        time.sleep(0.05)
    raise RuntimeError(f"{name} was not ready in time")
