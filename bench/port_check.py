"""What the port-ownership check costs per connection (`agent.server.portholders`), as JSON.

A process carrying `DOCKYARD_JOB_ID=bench-job` listens on a free loopback port, as a
job's server does. The bench then times `PortHolders.problem(port, "bench-job")`:

- ``cached_us``: with the verdict cached (the common case: every connection within
  `ttl` of the last lookup of that socket): two reads of /proc/net/tcp{,6} and a parse;
- ``uncached_us``: with `ttl=0`, so every call scans /proc for the socket's holder
  (the first connection to a socket, then at most one per `ttl` per socket);
- ``proc_tables_us``: `PortHolders` given `proc_listeners` (reading /proc/net/tcp and
  tcp6, the fallback where sock_diag netlink is refused), verdict cached.

Each is the median of ``--calls`` calls; the host's process count and the TCP table
sizes are reported beside them, since the scan grows with the first and the read with
the second. Run:

    .venv/bin/python bench/port_check.py [--calls 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.server.listeners import TABLES, proc_listeners
from agent.server.portholders import PortHolders

LISTENER = """
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(3600)
"""


def _median_us(holders: PortHolders, port: int, calls: int) -> float:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        problem = holders.problem(port, "bench-job")
        times.append(time.perf_counter() - started)
        assert problem is None, problem
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DOCKYARD_JOB_ID": "bench-job"}
    listener = subprocess.Popen(
        [sys.executable, "-c", LISTENER], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        cached = PortHolders()
        uncached = PortHolders(ttl=0.0)
        result = {
            "processes": sum(1 for name in os.listdir("/proc") if name.isdigit()),
            "tcp_rows": sum(
                len(path.read_bytes().splitlines()) - 1 for path in TABLES if path.exists()
            ),
            "cached_us": round(_median_us(cached, port, args.calls), 1),
            "cached_scans": cached.scans,
            "uncached_us": round(_median_us(uncached, port, args.calls), 1),
            "uncached_scans": uncached.scans,
            "proc_tables_us": round(
                _median_us(PortHolders(listening=proc_listeners), port, args.calls), 1
            ),
            "calls": args.calls,
        }
    finally:
        listener.kill()
        listener.wait()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
