"""`dockyard event` with dstack's filters, against a real server's events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from sqlalchemy import select

from reconciler.adapters.db.models import Project
from tests.cli.conftest import Cli

EVENTS = [
    ("run", "train", "Run submitted"),
    ("job", "train-0-0", "Job running"),
    ("run", "other", "Run submitted"),
    ("fleet", "local", "Fleet created"),
    ("instance", "local-0", "Instance idle"),
    ("fleet", "localhost", "Fleet created"),
]


def _record(cli: Cli) -> None:
    store = cli.server.server.store
    with store.reading() as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "main"))
    for kind, name, message in EVENTS:
        store.append_event(
            project_id=project_id, target_type=kind, target_name=name, message=message
        )


def _targets(cli: Cli, *args: str) -> list[str]:
    result = cli("event", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return [f"{t['type']} {t['name']}" for e in json.loads(result.stdout) for t in e["targets"]]


def test_target_within_and_type_filters(cli: Cli) -> None:
    _record(cli)
    assert _targets(cli, "--target-run", "train") == ["run train"]
    assert _targets(cli, "--target-run", "train", "--target-run", "other") == [
        "run train",
        "run other",
    ]
    assert _targets(cli, "--within-run", "train") == ["run train", "job train-0-0"]
    assert _targets(cli, "--within-fleet", "local") == ["fleet local", "instance local-0"]
    assert _targets(cli, "--include-target-type", "instance") == ["instance local-0"]
    assert _targets(cli, "list", "--within-fleet", "localhost") == ["fleet localhost"]
    assert len(_targets(cli)) == len(EVENTS)


def test_two_kinds_of_target_filter_are_a_usage_error(cli: Cli) -> None:
    both = cli("event", "--target-run", "train", "--target-fleet", "local")
    assert both.exit_code == 2 and "one kind of --target-*" in both.stderr


def test_watch_prints_events_until_ctrl_c(cli: Cli) -> None:
    _record(cli)
    code = "from reconciler.cli.main import run; run()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "event", "-w", "--within-run", "train"],
        env={**os.environ, **cli.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline() for _ in range(3)]  # header and the two events
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert "TIME" in lines[0] and "run train" in lines[1] and "job train-0-0" in lines[2]
    assert proc.returncode == 0, err
