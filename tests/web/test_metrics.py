"""`/metrics`: reconciles by outcome and duration, runs and jobs by status, worker lag.

The real controller on a config repo (tests/web/realserver.py): the figures are what the
engine did, a reconcile's outcome included, not what a stand-in wrote.
"""

from __future__ import annotations

from pathlib import Path

from tests.web.realserver import real_server
from tests.web.serving import wait_until

TASK = "type: task\nname: train\ncommands:\n  - echo hi\n"
FLEET = "type: fleet\nname: local\nnodes: 1\n"


def _sample(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{line_start} not in metrics:\n{text}")


def test_state_metrics(tmp_path: Path) -> None:
    with real_server(tmp_path, {"fleet.dstack.yml": FLEET}) as real:
        server = real.running
        with server.client(server.admin_token) as http:
            body = {"text": TASK, "path": "train.dstack.yml"}
            assert http.post("/api/project/main/runs/apply", json=body).status_code == 200
            assert http.post("/api/project/main/reconciles/trigger").status_code == 200

            def train_done() -> bool:
                got = http.post("/api/project/main/runs/get", json={"run_name": "train"})
                return got.status_code == 200 and got.json()["status"] == "done"

            wait_until(train_done, 60, "the task to finish")
            wait_until(real.settled, 60, "the triggered reconcile")
            text = http.get("/metrics").text
    assert _sample(text, 'dockyard_runs{status="done"}') == 1
    assert _sample(text, 'dockyard_jobs{status="done"}') == 1
    # the startup reconcile and the triggered one, both applied by the engine
    assert _sample(text, 'dockyard_reconciles{status="succeeded"}') == 2
    assert _sample(text, 'dockyard_reconcile_duration_seconds_count{outcome="succeeded"}') == 2
    assert _sample(text, 'dockyard_reconcile_duration_seconds_sum{outcome="succeeded"}') > 0
    assert _sample(text, 'dockyard_worker_lag_seconds{kind="runs"}') >= 0
    assert _sample(text, 'dockyard_worker_lag_seconds{kind="reconciles"}') == 0
