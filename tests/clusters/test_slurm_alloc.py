"""The Slurm allocation decisions (`reconciler.core.slurm_alloc`, pure): the partition, the
sbatch options, the batch script, and what `squeue` and the endpoint file say."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from reconciler.core.slurm_alloc import (
    SlurmTextError,
    Wanted,
    batch_script,
    choose_offer,
    ended_reason,
    parse_endpoint,
    parse_queue,
    sbatch_options,
)
from reconciler.core.slurm_nodes import ClusterOffer
from reconciler.domain.statuses import JobTerminationReason
from schemas.requirements import ANY, Range

GPU = ClusterOffer("hpc", "gpu", "H200", 8, 64, 512000, nodes=4, available=0, price=0.0)
GPU_FREE = ClusterOffer("hpc", "gpu-b", "H200", 8, 64, 512000, nodes=2, available=1, price=0.0)
CPU = ClusterOffer("hpc", "cpu", None, 0, 32, 128000, nodes=10, available=10, price=0.0)


def _wanted(**changes: object) -> Wanted:
    values: dict[str, object] = {
        "gpu_names": (),
        "gpu_count": ANY,
        "cpus": ANY,
        "memory_gib": ANY,
    }
    values.update(changes)
    return Wanted(**values)  # type: ignore[arg-type]


def test_the_partition_fits_the_resources_and_prefers_a_free_node() -> None:
    gpus = _wanted(gpu_names=("H200",), gpu_count=Range(2, None))
    assert choose_offer([GPU, GPU_FREE, CPU], gpus) == GPU_FREE
    assert choose_offer([GPU, CPU], _wanted(cpus=Range(4, None))) == CPU  # no GPU asked
    assert choose_offer([GPU, CPU], _wanted(memory_gib=Range(1000, None))) is None
    assert choose_offer([CPU], _wanted(gpu_names=("A100",))) is None


def test_sbatch_options_are_the_fleets_minimums_in_the_chosen_partition() -> None:
    wanted = _wanted(gpu_count=Range(2, 4), cpus=Range(8, None), memory_gib=Range(64, None))
    assert sbatch_options(GPU, wanted) == (
        "--partition=gpu",
        "--nodes=1",
        "--ntasks=1",
        "--gres=gpu:h200:2",
        "--cpus-per-task=8",
        "--mem=65536M",
    )
    # no count asked: the node's GPUs; no CPUs or memory asked: Slurm's defaults
    assert sbatch_options(GPU, _wanted()) == (
        "--partition=gpu",
        "--nodes=1",
        "--ntasks=1",
        "--gres=gpu:h200:8",
    )
    assert sbatch_options(CPU, _wanted()) == ("--partition=cpu", "--nodes=1", "--ntasks=1")


def test_squeue_lines_and_the_reason_an_allocation_ended() -> None:
    queue = parse_queue(
        "12|RUNNING|dy1|None\n13|PENDING||Resources\n14|TIMEOUT|dy1|TimeLimit\n"
        "15|CANCELLED|dy1|None\n16|COMPLETING|dy1|TimeLimit\n"
    )
    assert queue["12"].running and not queue["13"].running
    assert ended_reason("12", queue["12"]) is None
    assert ended_reason("13", queue["13"]) is None  # still waiting for its node
    for job_id in ("14", "16"):  # the time limit, also while its processes are killed
        reason = ended_reason(job_id, queue[job_id])
        assert reason is not None and reason[0] is JobTerminationReason.MAX_DURATION_EXCEEDED
    assert ended_reason("15", queue["15"]) == (
        JobTerminationReason.INTERRUPTED_BY_NO_CAPACITY,
        "the Slurm allocation (job 15) ended: CANCELLED",
    )
    gone = ended_reason("99", None)
    assert gone is not None and "gone from the queue" in gone[1]
    with pytest.raises(SlurmTextError, match="squeue line 1"):
        parse_queue("not squeue output\n")


@pytest.mark.parametrize(
    "text",
    ["dy1 22 23 24", "dy1 22", "dy1 $(reboot) 23", "dy1 22 23;id", ""],
)
def test_an_endpoint_file_that_is_not_node_and_two_ports_is_refused(text: str) -> None:
    with pytest.raises(SlurmTextError, match="endpoint file"):
        parse_endpoint(text)
    assert parse_endpoint("dy1 22 23\n") == ("dy1", 22, 23)


def test_the_batch_script_runs_what_it_is_given_as_words_never_as_commands(
    tmp_path: Path,
) -> None:
    """A job dir, bundle dir or agent argument holding shell syntax stays one word: the
    script is run for real (sh, a stub Python recording its arguments) and nothing of it
    is executed."""
    job_dir = "jobs/x$(touch PWNED1)"
    (tmp_path / job_dir).mkdir(parents=True)
    python = tmp_path / "python"
    python.write_text(
        '#!/bin/sh\nif [ "$1" = -c ]; then echo 5000 5001; exit 0; fi\n'
        'printf "%s\\n" "$@" > args; printf "%s\\n" "$PYTHONPATH" > pythonpath\n'
    )
    python.chmod(0o755)
    script = batch_script(job_dir, "b;touch PWNED2", str(python), ["--job-user", "a b$(id)"])
    done = subprocess.run(
        ["sh", "-c", script],
        cwd=tmp_path,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "SLURMD_NODENAME": "dy1"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    where = tmp_path / job_dir
    assert not list(tmp_path.rglob("PWNED*"))  # no command substitution, no `;` ran
    deadline = time.monotonic() + 10  # written in the background, once the agent listens
    while not (where / "endpoint").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (where / "endpoint").read_text() == "dy1 5000 5001\n"
    args = (where / "args").read_text().splitlines()
    assert args[:5] == ["-s", "-m", "agent", "serve", "--data-dir"]
    assert args[-2:] == ["--job-user", "a b$(id)"]
    assert args[args.index("--ssh-port") + 1] == "5000"
    assert args[args.index("--http-port") + 1] == "5001"
    assert (where / "pythonpath").read_text() == f"{tmp_path}/b;touch PWNED2/current/site\n"
