"""Errors reach clients as one line: no traceback, no internal message, no secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconciler.errors import TransientError
from tests.web.fakes import FakeController
from tests.web.serving import running_server

TASK = {"text": "type: task\nname: t1\ncommands: [echo]\n", "path": "t.dstack.yml"}
BAD = {"text": "type: task\nname: x\ncommandz: []\n", "path": "bad.dstack.yml"}


class Broken(FakeController):
    async def plan_unmanaged(self, project: str, **kwargs: Any) -> Any:
        raise RuntimeError("password=secret-xyz")

    async def apply_unmanaged(self, project: str, **kwargs: Any) -> Any:
        raise TransientError("the runtime is busy, retry", delay=1)


def test_unexpected_and_transient_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with (
        running_server(tmp_path, lambda s, store: Broken(store)) as server,
        server.client(server.admin_token) as http,
    ):
        crashed = http.post("/api/project/main/runs/get_plan", json=TASK)
        busy = http.post("/api/project/main/runs/apply", json=TASK)
    assert crashed.status_code == 500
    assert crashed.json() == {"detail": [{"msg": "internal server error", "code": "error"}]}
    assert "RuntimeError" in caplog.text and "secret-xyz" not in caplog.text
    assert busy.status_code == 503
    assert busy.json() == {"detail": [{"msg": "the runtime is busy, retry", "code": "error"}]}


def test_config_errors_carry_problems(tmp_path: Path) -> None:
    with (
        running_server(tmp_path, lambda s, store: FakeController(store)) as server,
        server.client(server.admin_token) as http,
    ):
        answer = http.post("/api/project/main/runs/get_plan", json=BAD)
    assert answer.status_code == 400
    problems = answer.json()["problems"]
    assert {p["path"] for p in problems} == {"bad.dstack.yml"}
    assert any(p["line"] == 3 and "commandz" in p["field"] for p in problems), problems
