"""Preview runs, the pure part: names, what a preview deploys, the budget rule, the comment,
the `policy.previews` section, and which webhook deliveries concern a preview."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from reconciler.core.policy import PolicyRules, PreviewRules, RepoPolicy, parse_policy
from reconciler.core.previewruns import (
    budget_refusal,
    cost_so_far,
    is_preview_command,
    preview_project_name,
    render_section,
    select_preview,
)
from reconciler.domain.kinds import Kind
from reconciler.domain.previewruns import PreviewRun, PreviewRunStatus, PreviewState, PullRef
from reconciler.pr.previewhooks import PreviewHint, github_hint, gitlab_hint
from reconciler.pr.reviewing import load_files
from schemas import parse_config

SERVICE = b"type: service\nname: web\nport: 8000\ncommands: [serve]\n"
DEV = b"type: dev-environment\nname: ide\nide: vscode\n"
TASK = b"type: task\nname: train\ncommands: [train]\n"
CLOUD = b"type: fleet\nname: cloud\nbackends: [aws]\nnodes: 1\n"
ON_CLOUD = b"type: service\nname: chat\nport: 8000\ncommands: [serve]\nfleets: [cloud]\n"
WITH_VOLUME = b"type: service\nname: db\nport: 5432\ncommands: [pg]\nvolumes: [data:/data]\n"


def _desired(files: dict[str, bytes]) -> Any:
    return load_files(files, commit="c" * 40, parse=parse_config).desired


def test_the_project_name_holds_the_config_project_and_the_provider() -> None:
    assert preview_project_name("main", "github", 7) == "main-pr-7"
    assert preview_project_name("main", "gitlab", 7) == "main-mr-7"
    assert preview_project_name("ml", "github", 7) != preview_project_name("main", "github", 7)
    long = "a" * 48
    name = preview_project_name(long, "github", 123)
    assert len(name) <= 50 and name.startswith("pr-123-")
    assert name != preview_project_name("b" * 48, "github", 123)
    assert RepoPolicy(project=name).project == name  # a valid project name


def test_services_and_dev_environments_only_on_allowed_fleets() -> None:
    files = {
        "web.dstack.yml": SERVICE,
        "ide.dstack.yml": DEV,
        "train.dstack.yml": TASK,
        "chat.dstack.yml": ON_CLOUD,
        "db.dstack.yml": WITH_VOLUME,
    }
    chosen = select_preview(_desired(files), PreviewRules(), "main-pr-7")
    kinds = {(r.kind, r.name) for r in chosen.resources}
    assert kinds == {(Kind.FLEET, "local"), (Kind.SERVICE, "web"), (Kind.DEV_ENVIRONMENT, "ide")}
    assert {r.project for r in chosen.resources} == {"main-pr-7"}
    notes = "\n".join(chosen.notes)
    assert "task train: not previewed (tasks run only with policy.previews.tasks: true)" in notes
    assert "policy: previews.fleets: service chat asks cloud, previews may use local" in notes
    assert "service db: not previewed: it mounts volume data" in notes

    with_cloud = _desired({**files, "cloud.dstack.yml": CLOUD})  # no implicit `local` now
    chosen = select_preview(with_cloud, PreviewRules(), "main-pr-7")
    assert chosen.resources == ()
    assert "service web asks any fleet of the repo, previews may use local" in "".join(chosen.notes)
    allowed = PreviewRules(fleets=("cloud",), tasks=True)
    chosen = select_preview(with_cloud, allowed, "main-pr-7")
    names = [r.name for r in chosen.resources]
    assert names[0] == "cloud" and set(names) == {"cloud", "web", "ide", "train", "chat"}


def test_the_implicit_local_fleet_comes_along() -> None:
    chosen = select_preview(_desired({"web.dstack.yml": SERVICE}), PreviewRules(), "x-pr-1")
    assert [(r.kind, r.name, r.implicit) for r in chosen.resources] == [
        (Kind.FLEET, "local", True),
        (Kind.SERVICE, "web", False),
    ]


def test_the_budget_counts_every_preview_of_the_project() -> None:
    rules = PreviewRules.model_validate({"budget": {"hourly": 5}})
    assert budget_refusal(rules, "main", 2.0, 3.0, []) is None
    line = budget_refusal(rules, "main", 2.0, 3.5, ["chat 3.5/h"])
    assert line == (
        "policy: previews.budget.hourly: this preview brings the previews of project main "
        "to $5.50/h, over their $5.00/h budget (runs: chat 3.5/h)"
    )
    assert budget_refusal(PreviewRules(), "main", 100.0, 100.0, []) is None  # no limit


def test_policy_previews_is_validated_with_its_line() -> None:
    policy = parse_policy("policy:\n  previews:\n    ttl: 30m\n    budget: {hourly: 2}\n")
    assert isinstance(policy, RepoPolicy)
    assert policy.policy.previews.ttl == 1800 and policy.policy.previews.budget.hourly == 2
    assert PolicyRules().previews.ttl == 4 * 3600 and PolicyRules().previews.fleets == ("local",)
    problems = parse_policy("policy:\n  previews:\n    tll: 1h\n")
    assert isinstance(problems, list)
    (problem,) = problems
    assert (problem.line, problem.field) == (3, "policy.previews.tll")
    too_long = parse_policy("policy:\n  previews:\n    ttl: 30d\n")
    assert isinstance(too_long, list) and too_long[0].field == "policy.previews.ttl"


def _preview(state: PreviewState = PreviewState.ACTIVE, **extra: Any) -> PreviewRun:
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    values: dict[str, Any] = {
        "pull": PullRef("github", "acme/cfg", 7),
        "project": "main",
        "preview_project": "main-pr-7",
        "state": state,
        "head": "c" * 40,
        "requested_by": "maintainer",
        "trigger": "label",
        "fork": False,
        "prices": {"web": 2.0},
        "deployed_at": now,
        "expires_at": now + timedelta(hours=4),
    }
    values.update(extra)
    return PreviewRun(**values)


def test_the_comment_shows_url_status_and_cost_so_far() -> None:
    now = datetime(2026, 12, 1, 13, 30, tzinfo=UTC)
    runs = [
        PreviewRunStatus("web", "service", "running", now - timedelta(hours=1, minutes=30), True),
        PreviewRunStatus("ide", "dev-environment", "provisioning", now, False),
    ]
    body = render_section(_preview(notes=("task train: not previewed",)), runs,
                          base_url="https://dy.example.com/", now=now)  # fmt: skip
    assert body.startswith("<!-- dockyard:preview-runs -->\n")
    url = "https://dy.example.com/proxy/services/main-pr-7/web/"
    assert f"| `web` | service | running, ready | {url} | $3.00 (at $2.00/h) |" in body
    assert "| `ide` | dev-environment | provisioning | — | $0.00 (at $0.00/h) |" in body
    assert "torn down at 2026-12-01 16:00 UTC" in body and "- task train: not previewed" in body
    refused = render_section(_preview(PreviewState.REFUSED, reason="policy: previews.budget…"),
                             runs, base_url="u", now=now)  # fmt: skip
    assert "**Not deployed**" in refused and "policy: previews.budget…" in refused
    assert "| `web`" not in refused
    closed = render_section(_preview(PreviewState.CLOSED, reason="the pull request was merged"),
                            runs, base_url="u", now=now)  # fmt: skip
    assert "**Preview torn down**: the pull request was merged" in closed


def test_cost_so_far() -> None:
    start = datetime(2026, 12, 1, tzinfo=UTC)
    assert cost_so_far(2.0, start, start + timedelta(minutes=90)) == 3.0
    assert cost_so_far(0.0, start, start + timedelta(hours=9)) == 0.0
    assert cost_so_far(2.0, None, start) == 0.0


def test_the_command_is_a_line_of_its_own() -> None:
    assert is_preview_command("LGTM\n/dockyard preview\n")
    assert not is_preview_command("please run /dockyard preview later")


def _github_pull(action: str, **extra: Any) -> dict[str, Any]:
    return {
        "action": action,
        "pull_request": {"number": 7},
        "repository": {"full_name": "acme/cfg"},
        **extra,
    }


@pytest.mark.parametrize(
    ("action", "extra", "cause"),
    [
        ("labeled", {"label": {"name": "dockyard:preview"}}, "label"),
        ("unlabeled", {"label": {"name": "dockyard:preview"}}, "unlabel"),
        ("synchronize", {}, "push"),
        ("closed", {}, "closed"),
        ("reopened", {}, "reopened"),
    ],
)
def test_github_deliveries_that_concern_a_preview(
    action: str, extra: dict[str, Any], cause: str
) -> None:
    hint = github_hint("pull_request", _github_pull(action, **extra))
    assert hint == PreviewHint(PullRef("github", "acme/cfg", 7), cause)


def test_github_deliveries_that_do_not() -> None:
    assert isinstance(github_hint("pull_request", _github_pull("opened")), str)
    other_label = _github_pull("labeled", label={"name": "bug"})
    assert isinstance(github_hint("pull_request", other_label), str)
    comment = {
        "action": "created",
        "issue": {"number": 7, "pull_request": {}},
        "comment": {"id": 5, "body": "/dockyard preview"},
        "repository": {"full_name": "acme/cfg"},
    }
    assert github_hint("issue_comment", comment) == PreviewHint(
        PullRef("github", "acme/cfg", 7), "comment", 5
    )
    on_issue = {**comment, "issue": {"number": 7}}
    assert isinstance(github_hint("issue_comment", on_issue), str)
    approve = {**comment, "comment": {"id": 5, "body": "/dockyard approve"}}
    assert isinstance(github_hint("issue_comment", approve), str)
    assert isinstance(github_hint("push", {"repository": {"full_name": "a/b"}}), str)


def _gitlab_mr(action: str, **extra: Any) -> dict[str, Any]:
    return {
        "object_kind": "merge_request",
        "project": {"path_with_namespace": "acme/cfg"},
        "object_attributes": {"iid": 3, "action": action, **extra.pop("attributes", {})},
        **extra,
    }


def test_gitlab_deliveries() -> None:
    pull = PullRef("gitlab", "acme/cfg", 3)
    added = _gitlab_mr(
        "update",
        changes={"labels": {"previous": [], "current": [{"title": "dockyard:preview"}]}},
    )
    assert gitlab_hint("Merge Request Hook", added) == PreviewHint(pull, "label")
    removed = _gitlab_mr(
        "update",
        changes={"labels": {"previous": [{"title": "dockyard:preview"}], "current": []}},
    )
    assert gitlab_hint("Merge Request Hook", removed) == PreviewHint(pull, "unlabel")
    assert gitlab_hint("Merge Request Hook", _gitlab_mr("merge")) == PreviewHint(pull, "closed")
    assert gitlab_hint("Merge Request Hook", _gitlab_mr("close")) == PreviewHint(pull, "closed")
    pushed = _gitlab_mr("update", attributes={"oldrev": "a" * 40})
    assert gitlab_hint("Merge Request Hook", pushed) == PreviewHint(pull, "push")
    assert isinstance(gitlab_hint("Merge Request Hook", _gitlab_mr("approved")), str)
    note: dict[str, Any] = {
        "project": {"path_with_namespace": "acme/cfg"},
        "object_attributes": {
            "id": 9,
            "noteable_type": "MergeRequest",
            "note": "/dockyard preview",
        },
        "merge_request": {"iid": 3},
    }
    assert gitlab_hint("Note Hook", note) == PreviewHint(pull, "comment", 9)
    on_issue = {
        **note,
        "object_attributes": {**note["object_attributes"], "noteable_type": "Issue"},
    }
    assert isinstance(gitlab_hint("Note Hook", on_issue), str)
