"""Benchmark of `dockyard plan`: a generated config repo of N configs of all six kinds.

    .venv/bin/python bench/plan.py [--configs 1000] [--repeat 5]

Builds a git repo with N `*.dstack.yml` files (tasks, services, dev environments, fleets,
volumes, gateways; runs reference volumes, fleets and gateways), commits it, and measures:

- `full_plan_s`: a cold git source (empty parse cache) snapshots the commit, reads and
  parses every file, and plans against an empty store (everything is created);
- `one_file_change_s`: after a commit that changes one file, the warm source snapshots the
  new commit (git diff-tree), parses the one changed blob and plans against the state that
  applying the first plan left (one update, the rest noop).

Prints one JSON object: the median of `--repeat` runs of the wall time of each stage, the
CPU time (this process and its git children; stable when other work shares the machine),
and the load average. Goals on a 2-core machine: full plan <= 1 s, one-file change
<= 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import git

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reconciler.adapters.gitsource import GitSource, RepoLocation
from reconciler.core.planning import plan
from reconciler.domain.observed import ObservedState
from schemas import parse_config

_TEMPLATES: list[tuple[str, str]] = [
    ("volumes", "type: volume\nname: vol-{i}\nbackend: aws\nregion: us-east-1\nsize: {s}GB\n"),
    ("fleets", "type: fleet\nname: fleet-{i}\nnodes: 0..{s}\nbackends: [aws]\nresources:\n"
               "  gpu: A100:40GB:1\n"),
    ("gateways", "type: gateway\nname: gw-{i}\nbackend: aws\nregion: us-east-1\n"
                 "domain: gw{i}.example.com\n"),
    ("tasks", "type: task\nname: train-{i}\nimage: pytorch/pytorch:2.{s}\ncommands:\n"
              "  - pip install -r requirements.txt\n  - python train.py --epochs {s}\n"
              "volumes: ['vol-{i}:/data']\nfleets: [fleet-{i}]\nresources:\n  gpu: 24GB..:1\n"),
    ("services", "type: service\nname: svc-{i}\nimage: vllm/vllm-openai:v0.{s}\nport: 8000\n"
                 "gateway: gw-{i}\nreplicas: 1..{s}\nscaling:\n  metric: rps\n  target: 10\n"
                 "commands: [vllm serve model]\nenv:\n  HF_HOME: /data\nresources:\n"
                 "  gpu: H100:1\n"),
    ("dev", "type: dev-environment\nname: dev-{i}\nide: vscode\npython: '3.11'\n"
            "inactivity_duration: {s}h\n"),
]  # fmt: skip


def generate(root: Path, count: int) -> git.Repo:
    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as config:
        config.set_value("user", "name", "bench")
        config.set_value("user", "email", "bench@example.com")
    paths = []
    for n in range(count):
        folder, template = _TEMPLATES[n % len(_TEMPLATES)]
        path = root / folder / f"c{n:05d}.dstack.yml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(template.format(i=n // len(_TEMPLATES), s=2 + n % 5))
        paths.append(str(path.relative_to(root)))
    repo.index.add(paths)
    repo.index.commit("generated configs")
    return repo


def cpu_seconds() -> float:
    """CPU time of this process and its finished children (git), in seconds."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def cpu_timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    start_cpu = cpu_seconds()
    wall, value = timed(fn)
    return wall, cpu_seconds() - start_cpu, value


def run_once(root: Path, repo: git.Repo, data_dir: Path, count: int) -> dict[str, float]:
    source = GitSource(RepoLocation(str(root)), data_dir=data_dir, parse=parse_config)
    head = source.fetch()
    cpu_start = cpu_seconds()
    t_snapshot, snap = timed(lambda: source.snapshot(head))
    t_load, loaded = timed(lambda: source.load(snap))
    assert loaded.desired.ok and len(snap.files) == count, loaded.desired.issues[:3]
    empty = ObservedState(project=loaded.policy.project)
    t_plan, full = timed(lambda: plan(loaded.desired, empty, loaded.policy))
    cpu_full = cpu_seconds() - cpu_start
    assert full.ok and full.summary["create"] == len(loaded.desired.resources)
    deployed = ObservedState.from_desired(loaded.desired)

    target = root / "services" / "c00004.dstack.yml"
    target.write_text(target.read_text().replace("target: 10", "target: 20"))
    repo.index.add([str(target.relative_to(root))])
    new_head = repo.index.commit("scale one service").hexsha

    def replan() -> Any:
        commit = source.resolve()
        changed = source.load(source.snapshot(commit))
        return plan(changed.desired, deployed, changed.policy)

    parsed_before = source.cache.parsed
    t_change, cpu_change, after = cpu_timed(replan)
    assert after.commit == new_head and after.summary["update"] == 1, after.summary
    assert source.cache.parsed == parsed_before + 1
    repo.git.reset("--hard", "HEAD~1")  # restore for the next repetition
    return {
        "full_plan_s": t_snapshot + t_load + t_plan,
        "full_snapshot_s": t_snapshot,
        "full_read_and_parse_s": t_load,
        "full_planning_s": t_plan,
        "one_file_change_s": t_change,
        "full_plan_cpu_s": cpu_full,
        "one_file_change_cpu_s": cpu_change,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dockyard-bench-") as tmp:
        root = Path(tmp) / "repo"
        repo = generate(root, args.configs)
        runs = [run_once(root, repo, Path(tmp) / f"data{i}", args.configs)
                for i in range(args.repeat)]  # fmt: skip
    result: dict[str, Any] = {"configs": args.configs, "repeat": args.repeat}
    for key in runs[0]:
        result[key] = round(statistics.median(r[key] for r in runs), 4)
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    result["goals"] = {"full_plan_s": 1.0, "one_file_change_s": 0.05}
    result["met"] = {
        "full_plan": result["full_plan_s"] <= 1.0,
        "one_file_change": result["one_file_change_s"] <= 0.05,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
