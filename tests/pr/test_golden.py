"""The PR comment of a representative PR, compared byte for byte with a golden file.

The PR (tests/pr/samples.py) adds a cloud fleet, updates a service in place, replaces a
task, removes a volume's file (retained) and adds an invalid file. To accept a deliberate
change of the comment: `DOCKYARD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/pr/test_golden.py`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from reconciler.pr.commenting import comment_body
from reconciler.pr.document import read_report, report_to_json
from tests.pr.samples import representative_report

GOLDEN = Path(__file__).with_name("golden") / "representative.md"
URL = "https://github.com/acme/configs/actions/runs/1"


def test_the_comment_matches_the_golden_file() -> None:
    body = comment_body(representative_report(), limit=65_536, full_plan_url=URL)
    if os.environ.get("DOCKYARD_UPDATE_GOLDEN"):
        GOLDEN.write_text(body, encoding="utf-8")
    assert body == GOLDEN.read_text(encoding="utf-8")


def test_the_golden_comment_shows_what_a_reviewer_needs() -> None:
    body = GOLDEN.read_text(encoding="utf-8")
    lines = body.splitlines()
    assert lines[0] == "<!-- dockyard:plan -->"
    assert lines[3] == "**1 create, 1 update, 1 replace, 1 retain, 1 noop**"  # summary first
    assert "**Cost: +$1.006/h**" in body
    assert "- notebook.dstack.yml:5:8 [resources.gpu]:" in body  # error with file:line
    assert body.index("error(s)") < body.index("<details>")
    for summary in (
        "<b>create</b> fleet <code>gpu</code>",
        "<b>update</b> service <code>llm</code>",
        "<b>replace</b> task <code>train</code>",
        "<b>retain</b> volume <code>data</code>",
    ):
        assert summary in body
    assert "aws us-east-1 g5.xlarge (1xA10G, on-demand, $1.006/h) on fleet `gpu`" in body


def test_the_plan_json_round_trips_to_the_same_comment() -> None:
    report = representative_report()
    again = read_report(json.loads(json.dumps(report_to_json(report))))
    assert comment_body(again, limit=65_536) == comment_body(report, limit=65_536)
