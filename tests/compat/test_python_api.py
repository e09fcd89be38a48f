"""dstack 0.22.5's Python API (`dstack.api.Client`) against `dockyard server`, in a subprocess:
`Client.from_config()`, `runs.get_run_plan`, `runs.apply_configuration`, a run's `refresh`
and `logs()`, `runs.get`, `runs.list`, `run.stop`.
"""

from __future__ import annotations

import pytest

from tests.compat.conftest import Dstack

pytestmark = pytest.mark.slow

PLAN_APPLY_LOGS = """
import json, time
from dstack.api import Client, Task

client = Client.from_config()
task = Task(name="apitask", commands=["echo from the python api"])
plan = client.runs.get_run_plan(task)
run = client.runs.apply_configuration(task)
deadline = time.monotonic() + 120
while not run.status.is_finished() and time.monotonic() < deadline:
    time.sleep(0.2)
    run.refresh()
print(json.dumps({
    "plan_action": plan.action.value,
    "offers": len(plan.job_plans[0].offers),
    "status": run.status.value,
    "logs": b"".join(run.logs()).decode(),
    "got": client.runs.get("apitask").name,
    "listed": [r.name for r in client.runs.list(all=True)],
}))
"""

STOP = """
import json, time
from dstack.api import Client, Task

client = Client.from_config()
run = client.runs.apply_configuration(
    Task(name="apisleeper", commands=["sleep 600"]), reserve_ports=False
)
deadline = time.monotonic() + 120
while run.status.value != "running" and time.monotonic() < deadline:
    time.sleep(0.2)
    run.refresh()
running = run.status.value
run.stop(abort=True)
while not run.status.is_finished() and time.monotonic() < deadline:
    time.sleep(0.2)
    run.refresh()
print(json.dumps({"running": running, "after": run.status.value,
                  "missing": client.runs.get("no-such-run") is None}))
"""


def test_plan_apply_logs_get_and_list(dstack: Dstack) -> None:
    result = dstack.python(PLAN_APPLY_LOGS)
    assert result == {
        "plan_action": "create",
        "offers": 1,
        "status": "done",
        "logs": "from the python api\n",
        "got": "apitask",
        "listed": result["listed"],  # type: ignore[index]
    }
    assert "apitask" in result["listed"]  # type: ignore[index]


def test_stop_and_a_missing_run(dstack: Dstack) -> None:
    result = dstack.python(STOP)
    assert result == {"running": "running", "after": "terminated", "missing": True}
