"""How fast the `dockyard` command starts: `--help` and `ps` beside `python -c pass`.

Starts the real server (`dockyard server`, its own process, SQLite in a temporary data
dir, no config repo), then runs each command `--repeat` times as a fresh process and
prints JSON: per command the median and best wall time in ms, the median CPU time (user +
sys; on a busy machine closer to the idle wall time), and — load-independent —
how many modules the command imported and whether SQLAlchemy, FastAPI or the config
models (`schemas`) were among them. `dstack --help` is measured too when a dstack CLI is
found (`--dstack PATH`, else beside this Python, else on PATH); otherwise it is skipped
with the reason.

    python bench/cli.py [--repeat 7] [--dstack /path/to/dstack]
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
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120
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


def main(repeat: int, dstack: str | None) -> dict[str, Any]:
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
    load = os.getloadavg()[0]
    return {"repeat": repeat, "cpus": os.cpu_count(), "load_1m": round(load, 2), **results}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--dstack", default=None, help="Path of a dstack CLI to compare with.")
    args = parser.parse_args()
    print(json.dumps(main(args.repeat, args.dstack), indent=2))
