"""The reconcile page a `dockyard/apply` status links to, as headless Chromium renders it.

A real server on loopback with a finished reconcile in its store; Chromium loads the
signed link and dumps the DOM after layout; the test reads the text a person sees: the
commit, every action with its outcome, the reconcile's status and error.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest

from reconciler.pr.bot import PullRequestBot
from reconciler.web.pages import action_outcomes
from tests.pr.fakehost import TOKEN
from tests.pr.samples import HEAD_SHA, clean_json
from tests.services.missing import needs
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    overrides = {"github_token": TOKEN, "github_repo": "acme/cfg"}
    with running_server(tmp_path, lambda s, store: FakeController(store), **overrides) as running:
        yield running


def finished_reconcile(server: Running) -> str:
    store = server.server.store
    project = store.get_project("main")
    assert project is not None
    row = store.create_reconcile(project.id, trigger="webhook", attempted_revision=HEAD_SHA)
    store.set_reconcile_stage(row.id, "apply", plan=clean_json())
    store.finish_reconcile(
        row.id, status="failed", error="main/task/train: the image could not be pulled"
    )
    return row.id


def dump_dom(url: str, profile: Path) -> str:
    command = [
        CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}", "--dump-dom", url,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def visible_rows(dom: str) -> list[list[str]]:
    table = dom.split('id="actions"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    cells = [re.findall(r"<t[dh]>(.*?)</t[dh]>", row, re.S) for row in rows]
    return [[unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in row] for row in cells]


@needs(Path(CHROMIUM).exists(), "chromium", "apt-get install chromium (scripts/setup.sh --dev)")
def test_the_page_shows_the_commit_every_action_and_the_outcome(
    server: Running, tmp_path: Path
) -> None:
    reconcile_id = finished_reconcile(server)
    bot = server.server.app.state.pull_requests
    assert isinstance(bot, PullRequestBot)
    dom = dump_dom(bot.page_url("reconciles", reconcile_id), tmp_path / "profile")
    assert f'<code id="commit">{HEAD_SHA}</code>' in dom
    assert '<span class="status failed">failed</span>' in dom
    assert "the image could not be pulled" in dom
    rows = visible_rows(dom)
    assert rows[0] == ["action", "kind", "name", "file", "reason", "outcome"]
    seen = {(r[0], r[1], r[2]): r[5] for r in rows[1:]}
    assert seen == {
        ("create", "fleet", "gpu"): "applied",
        ("update", "service", "llm"): "applied",
        ("replace", "task", "train"): "failed the image could not be pulled",
        ("retain", "volume", "data"): "retained",
        ("noop", "fleet", "lab"): "unchanged",
    }


def test_outcomes_follow_the_reconcile_status() -> None:
    actions = [
        {"action": "create", "kind": "fleet", "name": "gpu", "project": "main"},
        {"action": "noop", "kind": "fleet", "name": "lab", "project": "main"},
    ]
    assert action_outcomes("running", None, actions) == [("pending", ""), ("unchanged", "")]
    assert action_outcomes("aborted", "preview failed", actions)[0] == ("not-applied", "aborted")
    assert action_outcomes("succeeded", None, actions)[0] == ("applied", "")


def test_recorded_results_name_every_failure_beyond_the_error_line() -> None:
    actions = [
        {"action": "create", "kind": "task", "name": f"t{i}", "project": "main"} for i in range(7)
    ]
    results = [
        {"key": f"main/task/t{i}", "action": "create", "result": "failed", "message": f"bad {i}"}
        for i in range(6)
    ] + [{"key": "main/task/t6", "action": "create", "result": "applied", "message": ""}]
    # The error line names the first five failures only ("… and 1 more").
    error = "; ".join(f"main/task/t{i}: bad {i}" for i in range(5)) + "; and 1 more"
    outcomes = action_outcomes("failed", error, actions, results)
    assert outcomes[5] == ("failed", "bad 5"), "the sixth failure is exact, not guessed"
    assert outcomes[6] == ("applied", "")
    guessed = action_outcomes("failed", error, actions)
    assert guessed[5] == ("applied", ""), "without results the error line is all there is"
