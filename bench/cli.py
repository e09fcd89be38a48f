"""How fast the `dockyard` command starts and plans: `--help`, `ps` and the offline plan.

Start-up (`--only startup`): starts the real server (`dockyard server`, its own process,
SQLite in a temporary data dir, no config repo), then runs each command `--repeat` times
as a fresh process and prints JSON: per command the median and best wall time in ms, the
median CPU time (user + sys; on a busy machine closer to the idle wall time), and —
load-independent — how many modules the command imported and whether SQLAlchemy,
FastAPI or the config models (`schemas`) were among them. `dstack --help` is measured
too when a dstack CLI is found (`--dstack PATH`, else beside this Python, else on PATH);
otherwise it is skipped with the reason.

The offline plan (`--only plan`; no server): makes a config repo of `--configs` task files
(1,000 by default; two commits, the second changes one task) in a temporary directory and
times `dockyard --help`, `dockyard plan --help` and `dockyard plan --repo R --base HEAD~1`
(table output, as a person runs it), `--repeat` rounds, each round running every command
once in turn. It prints the median wall and CPU time of each (and the best CPU time), the
plan's cost beyond the start-up (plan minus `--help`), the modules each imports, and whether
the goals are met, by wall and by CPU time: the plan within 1 s of `--help`, `plan --help`
within 0.3 s. `--baseline REV` times the same commands with the code of commit REV (`git
archive` into a temporary directory, put first on `PYTHONPATH`), alternating with the
working tree's in the same rounds, and prints the CPU ratio of each (working tree /
baseline): on a loaded machine the ratio moves less than either figure.

    python bench/cli.py [--repeat 7] [--dstack /path/to/dstack] [--only startup|plan]
                        [--configs 1000] [--baseline REV]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOALS_MS = {"dockyard --help": 300, "dockyard ps": 500}
PLAN_GOAL_MS = 1000  # the offline plan of 1,000 configs, beyond `dockyard --help`
PLAN_HELP_GOAL_MS = 300
HEAVY = ("sqlalchemy", "fastapi", "schemas", "alembic", "uvicorn")

# Runs the console script in-process and reports the modules it imported, at exit.
_COUNTING = """
import atexit, json, sys
def _report():
    roots = {m.split(".")[0] for m in sys.modules}
    sys.stderr.write("\\nMODULES " + json.dumps({"count": len(sys.modules),
        "heavy": sorted(r for r in roots if r in %r)}) + "\\n")
atexit.register(_report)
sys.argv = ["dockyard", *sys.argv[1:]]
from reconciler.cli.main import run
run()
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], env: dict[str, str], repeat: int) -> dict[str, Any]:
    """Wall time and CPU time (user + sys of the process: what a loaded machine inflates
    least) of `repeat` fresh runs."""
    walls, cpus = [], []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), _cpu_seconds()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        walls.append((time.perf_counter() - start) * 1000)
        cpus.append((_cpu_seconds() - cpu) * 1000)
        if done.returncode != 0:
            return {"error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    return {
        "median_ms": round(statistics.median(walls)),
        "best_ms": round(min(walls)),
        "cpu_median_ms": round(statistics.median(cpus)),
    }


def _modules(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    code = _COUNTING % (HEAVY,)
    done = subprocess.run(
        [sys.executable, "-P", "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = next((x for x in done.stderr.splitlines() if x.startswith("MODULES ")), None)
    if line is None:
        return {"modules_error": done.stderr.strip()[-300:]}
    found = json.loads(line.removeprefix("MODULES "))
    return {"modules": found["count"], "heavy_modules": found["heavy"]}


def _start_server(root: Path, env: dict[str, str], dockyard: str) -> subprocess.Popen[bytes]:
    log = (root / "server.log").open("w")
    server = subprocess.Popen(
        [dockyard, "server", "--port", str(_free_port())],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    config = Path(env["DOCKYARD_CONFIG"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready = config.exists() and subprocess.run([dockyard, "ps"], env=env, capture_output=True)
        if ready and ready.returncode == 0:
            return server
        if server.poll() is not None:
            break
        time.sleep(0.2)
    server.terminate()
    raise SystemExit(f"the server did not start; see {root / 'server.log'}")


def _dstack(path: str | None, env: dict[str, str], repeat: int) -> dict[str, Any]:
    beside = Path(sys.executable).parent / "dstack"  # the dev extra installs it here
    found = path or (str(beside) if beside.exists() else shutil.which("dstack"))
    if not found:
        return {"skipped": "no dstack CLI found (pass --dstack PATH; pip install dstack==0.22.5)"}
    return {"command": f"{found} --help", **_timed([found, "--help"], env, repeat)}


def startup(repeat: int, dstack: str | None) -> dict[str, Any]:
    """`python -c pass`, `dockyard --help` and `dockyard ps` against a real server."""
    bindir = Path(sys.executable).parent
    dockyard = str(bindir / "dockyard")
    root = Path(tempfile.mkdtemp(prefix="dockyard-bench-cli-"))
    env = os.environ | {
        "DOCKYARD_DATA_DIR": str(root / "data"),
        "DOCKYARD_CONFIG": str(root / "cli-config.yml"),
        "DOCKYARD_PROJECT": "",
        "COLUMNS": "120",
    }
    server = _start_server(root, env, dockyard)
    results: dict[str, Any] = {}
    try:
        results["python -c pass"] = _timed([sys.executable, "-c", "pass"], env, repeat)
        for name, args in (("dockyard --help", ["--help"]), ("dockyard ps", ["ps"])):
            results[name] = {
                **_timed([dockyard, *args], env, repeat),
                **_modules(args, env),
                "goal_ms": GOALS_MS[name],
            }
        results["dstack --help"] = _dstack(dstack, env, repeat)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    return results


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def make_config_repo(repo: Path, configs: int) -> None:
    """A config repo of `configs` task files in two commits; the second changes `t1`."""
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "bench@example.com")
    _git(repo, "config", "user.name", "bench")
    for i in range(1, configs + 1):
        text = f"type: task\nname: t{i}\ncommands:\n  - echo {i}\n"
        (repo / f"t{i}.dstack.yml").write_text(text)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    (repo / "t1.dstack.yml").write_text("type: task\nname: t1\ncommands:\n  - echo changed\n")
    _git(repo, "commit", "-q", "-a", "-m", "head")


def _baseline_tree(rev: str, into: Path) -> Path:
    """The code of commit `rev` (this repo) unpacked into `into`, for `PYTHONPATH`."""
    here = Path(__file__).resolve().parent.parent
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(here), "archive", rev, "reconciler", "schemas", "stacks", "agent"],
        check=True,
        capture_output=True,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), _cpu_seconds()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    wall, used = (time.perf_counter() - start) * 1000, (_cpu_seconds() - cpu) * 1000
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr[-500:]}")
    return wall, used


def _summary(variant: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, runs in variant.items():
        out[name] = {
            "median_ms": round(statistics.median(w for w, _ in runs)),
            "best_ms": round(min(w for w, _ in runs)),
            "cpu_median_ms": round(statistics.median(c for _, c in runs)),
            "cpu_best_ms": round(min(c for _, c in runs)),
        }
    return out


def _ratios(
    results: dict[str, Any], baseline: str, commands: dict[str, list[str]]
) -> dict[str, Any]:
    """Working tree / baseline median CPU time per command, from the same rounds."""
    ours, theirs = results["working tree"], results[f"baseline {baseline}"]
    ratios = {
        name: round(ours[name]["cpu_median_ms"] / max(theirs[name]["cpu_median_ms"], 1), 2)
        for name in commands
    }
    beyond = theirs["plan_minus_help_cpu_ms"]
    ratios["plan - help"] = round(ours["plan_minus_help_cpu_ms"] / max(beyond, 1), 2)
    return ratios


def offline_plan(repeat: int, configs: int, baseline: str | None) -> dict[str, Any]:
    """The offline plan of `configs` files beside `--help` and `plan --help` (module doc)."""
    dockyard = str(Path(sys.executable).parent / "dockyard")
    root = Path(tempfile.mkdtemp(prefix="dockyard-bench-plan-"))
    repo = root / "configs"
    make_config_repo(repo, configs)
    env = os.environ | {"DOCKYARD_DATA_DIR": str(root / "data"), "COLUMNS": "120"}
    env.pop("PYTHONPATH", None)
    variants = {"working tree": env}
    if baseline is not None:
        tree = _baseline_tree(baseline, root / "baseline")
        variants[f"baseline {baseline}"] = env | {"PYTHONPATH": str(tree)}
    commands = {
        "dockyard --help": ["--help"],
        "dockyard plan --help": ["plan", "--help"],
        "dockyard plan --base": ["plan", "--repo", str(repo), "--base", "HEAD~1"],
    }
    runs: dict[str, dict[str, list[tuple[float, float]]]] = {
        v: {c: [] for c in commands} for v in variants
    }
    try:
        for _ in range(repeat):  # rounds: every variant and command once, in turn
            for variant, venv in variants.items():
                for name, args in commands.items():
                    runs[variant][name].append(_once([dockyard, *args], venv))
        results: dict[str, Any] = {"configs": configs, "rounds": repeat}
        for variant, venv in variants.items():
            timed = _summary(runs[variant])
            for name, args in commands.items():
                timed[name].update(_modules(args, venv))
            plan, help_, plan_help = (
                timed["dockyard plan --base"],
                timed["dockyard --help"],
                timed["dockyard plan --help"],
            )
            beyond = plan["median_ms"] - help_["median_ms"]
            beyond_cpu = plan["cpu_median_ms"] - help_["cpu_median_ms"]
            results[variant] = {
                **timed,
                "plan_minus_help_ms": beyond,
                "plan_minus_help_cpu_ms": beyond_cpu,
                "goals": {
                    f"plan - help <= {PLAN_GOAL_MS} ms (wall)": beyond <= PLAN_GOAL_MS,
                    f"plan - help <= {PLAN_GOAL_MS} ms (cpu)": beyond_cpu <= PLAN_GOAL_MS,
                    f"plan --help <= {PLAN_HELP_GOAL_MS} ms (wall)": plan_help["median_ms"]
                    <= PLAN_HELP_GOAL_MS,
                    f"plan --help <= {PLAN_HELP_GOAL_MS} ms (cpu)": plan_help["cpu_median_ms"]
                    <= PLAN_HELP_GOAL_MS,
                },
            }
        if baseline is not None:
            results["cpu ratio, working tree / baseline"] = _ratios(results, baseline, commands)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


def main(
    repeat: int, dstack: str | None, only: str | None, configs: int, baseline: str | None
) -> dict[str, Any]:
    results: dict[str, Any] = {"repeat": repeat, "cpus": os.cpu_count()}
    if only in (None, "startup"):
        results.update(startup(repeat, dstack))
    if only in (None, "plan"):
        results["offline plan"] = offline_plan(repeat, configs, baseline)
    results["load_1m"] = round(os.getloadavg()[0], 2)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dstack", default=None, help="Path of a dstack CLI to compare with.")
    parser.add_argument("--only", choices=("startup", "plan"), default=None)
    parser.add_argument("--configs", type=int, default=1000, help="Config files to plan.")
    parser.add_argument("--baseline", default=None, help="Also time the code of this commit.")
    args = parser.parse_args()
    print(
        json.dumps(main(args.repeat, args.dstack, args.only, args.configs, args.baseline), indent=2)
    )
