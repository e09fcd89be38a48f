"""`dockyard notification …` against a real server, and docs/notifications.md's worked
example end to end: a Slack-compatible receiver gets a message when a run of the config
repo fails (real server, real engine, the local fleet, a real HTTP receiver on loopback).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Cli, RepoCli
from tests.engine.fixtures import task_yaml
from tests.notifications.receiver import local_receiver
from tests.web.serving import wait_until

SECRET = "cli-webhook-secret-0123456789"


def test_receiver_add_list_delete_never_prints_the_secret(cli: Cli, tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    added = cli(
        "notification", "receiver", "add", "ops", "--url", "http://127.0.0.1:9/hook",
        "--secret-file", str(secret_file), "--event", "run.failed", "--for-project", "main",
    )  # fmt: skip
    assert added.exit_code == 0, added.stdout + added.stderr
    assert "receiver ops added" in added.stdout
    listed = cli("notification", "receiver", "list")
    assert listed.exit_code == 0 and "ops" in listed.stdout and "run.failed" in listed.stdout
    as_json = cli("notification", "receiver", "list", "--json")
    assert json.loads(as_json.stdout)[0]["has_secret"] is True
    assert SECRET not in added.stdout + listed.stdout + as_json.stdout
    weak = cli(
        "notification", "receiver", "add", "weak", "--url", "http://127.0.0.1:9/hook",
        "--secret-env", "NO_SUCH_VARIABLE_SET",
    )  # fmt: skip
    assert weak.exit_code == 2 and "--secret-env NO_SUCH_VARIABLE_SET" in weak.stderr
    assert cli("notification", "receiver", "delete", "ops").exit_code == 0
    assert "ops" not in cli("notification", "receiver", "list").stdout
    assert cli("notification", "list").exit_code == 0


def test_a_slack_message_on_a_failed_run(repo_cli: RepoCli) -> None:
    """docs/notifications.md, "Worked example"."""
    with local_receiver() as slack:
        added = repo_cli(
            "notification", "receiver", "add", "team-chat", "--kind", "slack",
            "--url", slack.url("/services/T000/B000/XXXX"), "--event", "run.failed",
            "--for-project", "main",
        )  # fmt: skip
        assert added.exit_code == 0, added.stdout + added.stderr
        repo_cli.real.repo.commit({"train.dstack.yml": task_yaml("train", "exit 3")}, "train")
        assert repo_cli("reconcile", "--wait", "--timeout", "120").exit_code == 0
        wait_until(lambda: len(slack.requests) >= 1, 120, "the Slack message")
        [message] = slack.requests
        text = json.loads(message.body)["text"]
        assert text.startswith("*Run failed* in project main: run `train`")
        # the event's own words (escaped as Slack wants) and why the run ended
        assert "run status terminating -&gt; failed; job_failed: job 0/0" in text
        assert text.endswith("exit status 3")
        wait_until(lambda: "delivered" in repo_cli("notification", "list").stdout, 30, "delivered")
        listed = repo_cli("notification", "list")
        assert "team-chat" in listed.stdout and "run.failed" in listed.stdout
        print(listed.stdout)  # the docs' example output
        print(text)
