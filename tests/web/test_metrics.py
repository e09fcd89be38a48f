"""`/metrics`: reconciles by outcome and duration, runs and jobs by status, worker lag."""

from __future__ import annotations

from tests.web.serving import Running

TASK = "type: task\nname: train\ncommands:\n  - echo hi\n"


def _sample(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{line_start} not in metrics:\n{text}")


def test_state_metrics(server: Running) -> None:
    with server.client(server.admin_token) as http:
        body = {"text": TASK, "path": "train.dstack.yml"}
        assert http.post("/api/project/main/runs/apply", json=body).status_code == 200
        assert http.post("/api/project/main/reconciles/trigger").status_code == 200
        text = http.get("/metrics").text
    assert _sample(text, 'dockyard_runs{status="submitted"}') == 1
    assert _sample(text, 'dockyard_jobs{status="submitted"}') == 1
    assert _sample(text, 'dockyard_reconciles{status="succeeded"}') == 1
    assert _sample(text, 'dockyard_reconcile_duration_seconds_count{outcome="succeeded"}') == 1
    assert _sample(text, 'dockyard_reconcile_duration_seconds_sum{outcome="succeeded"}') >= 0
    assert _sample(text, 'dockyard_worker_lag_seconds{kind="runs"}') >= 0
    assert _sample(text, 'dockyard_worker_lag_seconds{kind="reconciles"}') == 0
