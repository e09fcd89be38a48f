"""`/dockyard approve` on GitHub: the recording fake GitHub API, a real store (SQLite and
PostgreSQL) and a real server for the webhook. A comment by an approver the deployed
`.dockyard.yml` names, as the API says, turns `dockyard/plan` green for that head; someone
else, a forged payload whose comment the API says another user wrote, a PR head naming its
own author as approver, and a new push after the approval do not.

The deployed policy (`.dockyard.yml` at the last applied revision, read from the config
repo by a real server) is given here as the function the server passes (`deployed`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.db.store import Store
from reconciler.core.policy import PolicyRules, RepoPolicy, parse_policy
from reconciler.domain.approvals import Approval
from reconciler.pr.approving import ApprovalRequest, approve
from reconciler.pr.github import GitHub
from reconciler.pr.liveplan import plan_files
from reconciler.pr.posting import post_plan
from stacks.catalog import load_catalog
from tests.pr.fakehost import TOKEN, FakeHost, fake_host
from tests.pr.test_server_bot import deliver
from tests.services.postgres import PostgresServer, postgres_server  # noqa: F401
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server, wait_until

POLICY = b"policy:\n  approvers: [alice]\n  runs:\n    max_gpus: 1\n"
BIG = (
    b"type: task\nname: big\ncommands:\n  - echo hi\n"
    b"resources:\n  gpu: 4\n  cpu: 1..\n  memory: 0.1GB..\n  disk: 0.1GB..\n"
)
HEAD = "e" * 40
VIOLATION = "runs.max_gpus: run big asks 4 GPUs, the policy allows 1"


def _rules(text: bytes) -> PolicyRules:
    policy = parse_policy(text.decode())
    assert isinstance(policy, RepoPolicy)
    return policy.policy


DEPLOYED = _rules(POLICY)  # the deployed branch names alice


def deployed(project: str, revision: str | None) -> PolicyRules:
    """The deployed `.dockyard.yml`'s rules, as the server's `rules_at(source)` gives them."""
    return DEPLOYED


def deploy(running: Running) -> None:
    """Give a server on the fake runtime (no config repo) the deployed policy above."""
    state = running.server.app.state
    state.deployed_rules = deployed
    for bot in (state.pull_requests, getattr(state, "gitlab_pull_requests", None)):
        if bot is not None:
            bot.deployed = deployed


@pytest.fixture
def github() -> Iterator[FakeHost]:
    with fake_host() as host:
        host.state.files = {".dockyard.yml": POLICY, "big.dstack.yml": BIG}
        host.state.head = HEAD
        yield host


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'dockyard.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        url = server.create_database()
    store = Store.from_url(url, migrate=True)
    yield store
    store.close()


def _approve(store: Store, github: FakeHost, comment_id: int) -> str:
    host = GitHub("acme/cfg", token=TOKEN, api_url=github.url)
    try:
        request = ApprovalRequest("acme/cfg", 7, comment_id, "main")
        return asyncio.run(approve(store, host, request, None, load_catalog(), deployed)).text
    finally:
        host.close()


def _approvers(store: Store) -> list[str]:
    return [a.approver for a in store.approvals_for("main", "tree" + HEAD)]


def test_a_named_approver_turns_the_status_green_for_that_head(
    store: Store, github: FakeHost
) -> None:
    comment = github.state.add_comment("LGTM\n/dockyard approve\n", "alice")

    done = _approve(store, github, comment)

    assert done == f"alice approved 1 violation(s) of {HEAD[:12]}"
    assert _approvers(store) == ["alice"]
    (sha, status) = github.state.statuses[-1]
    assert (sha, status["state"]) == (HEAD, "success")
    assert status["description"].startswith("policy exception approved by alice;")
    plan = next(b for b in github.state.bodies() if b.startswith("<!-- dockyard:plan"))
    assert "**✅ Policy exception approved by @alice for this content" in plan
    assert VIOLATION in plan and "⛔" not in plan
    reads = [r.path for r in github.state.requests if r.method == "GET"]
    assert f"/repos/acme/cfg/issues/comments/{comment}" in reads  # the author is the API's


def test_someone_else_and_other_comments_record_nothing_and_are_answered(
    store: Store, github: FakeHost
) -> None:
    mallory = github.state.add_comment("/dockyard approve", "mallory")
    chatter = github.state.add_comment("please /dockyard approve this", "alice")

    why = (
        "mallory is not in `policy.approvers` of the deployed `.dockyard.yml` (nothing is "
        "applied yet); a pull request cannot name its own approvers"
    )
    assert _approve(store, github, mallory) == why
    assert github.state.bodies()[-1] == f"`/dockyard approve` from @mallory did not count: {why}."
    assert _approve(store, github, chatter).endswith("is not /dockyard approve")
    assert len(github.state.comments) == 3  # chatter is not answered
    assert _approvers(store) == [] and github.state.statuses == []
    posted = [r for r in github.state.requests if r.method == "POST"]
    assert [r.path for r in posted] == ["/repos/acme/cfg/issues/7/comments"]


def test_an_approval_of_another_head_or_of_nothing_does_not_count(
    store: Store, github: FakeHost
) -> None:
    stale = github.state.add_comment("/dockyard approve 0123abc", "alice")
    why = f"it approves 0123abc, but the head is now {HEAD[:12]}: approve the new head"
    assert _approve(store, github, stale) == why
    assert github.state.bodies()[-1] == f"`/dockyard approve` from @alice did not count: {why}."
    named = github.state.add_comment(f"/dockyard approve {HEAD[:9]}", "alice")
    assert _approve(store, github, named) == f"alice approved 1 violation(s) of {HEAD[:12]}"

    github.state.files["big.dstack.yml"] = BIG.replace(b"gpu: 4", b"gpu: 1")
    github.state.head = "d" * 40
    nothing = github.state.add_comment("/dockyard approve", "alice")
    why = f"the plan of {'d' * 12} breaks no policy rule, so there is nothing to approve"
    assert _approve(store, github, nothing) == why
    assert github.state.bodies()[-1] == f"`/dockyard approve` from @alice did not count: {why}."
    assert _approvers(store) == ["alice"]  # the first head's approval only


def test_a_pr_head_naming_its_author_as_approver_changes_nothing(
    store: Store, github: FakeHost
) -> None:
    """mallory's PR adds mallory to `policy.approvers` beside the violating run: the
    approvers are the deployed branch's (alice), so mallory's approval is refused, and even
    one recorded for this content does not make the head's plan pass."""
    github.state.files[".dockyard.yml"] = POLICY.replace(b"[alice]", b"[alice, mallory]")
    mallory = github.state.add_comment("/dockyard approve", "mallory")

    text = _approve(store, github, mallory)

    assert text.startswith("mallory is not in `policy.approvers` of the deployed `.dockyard.yml`")
    assert _approvers(store) == [] and github.state.statuses == []
    tree = "tree" + HEAD
    recorded = Approval("main", tree, HEAD, "mallory", "github", "acme/cfg", 7, mallory, ())
    assert store.record_approval(recorded)
    report = asyncio.run(
        plan_files(
            store,
            "main",
            dict(github.state.files),
            commit=HEAD,
            previewer=None,
            catalog=load_catalog(),
            tree=tree,
            deployed=deployed,
        )
    )
    big = next(a for a in report.plan.actions if a.name == "big")
    assert big.action.value == "blocked" and big.approved_by == ()


def test_a_new_push_after_the_approval_needs_a_new_one(store: Store, github: FakeHost) -> None:
    _approve(store, github, github.state.add_comment("/dockyard approve", "alice"))
    assert _approvers(store) == ["alice"]
    github.state.head = "d" * 40  # a new push: another commit, another tree
    github.state.files["big.dstack.yml"] = BIG.replace(b"echo hi", b"echo again")
    host = GitHub("acme/cfg", token=TOKEN, api_url=github.url)
    try:
        files = dict(github.state.files)
        tree = host.commit_tree("d" * 40)
        report = asyncio.run(
            plan_files(
                store,
                "main",
                files,
                commit="d" * 40,
                previewer=None,
                catalog=load_catalog(),
                tree=tree,
                deployed=deployed,
            )
        )
        posted = post_plan(host, 7, report, sha="d" * 40)
    finally:
        host.close()
    assert posted.status.state.value == "failure"  # the approved tree was the old head's
    assert "⛔ Policy: 1 run(s) break the repo policy" in github.state.bodies()[-1]


# -- through the server's webhook -----------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path, github: FakeHost) -> Iterator[Running]:
    overrides = {"github_token": TOKEN, "github_api_url": github.url, "github_repo": "acme/cfg"}
    with running_server(tmp_path, lambda s, store: FakeController(store), **overrides) as running:
        deploy(running)
        yield running


def _comment_payload(comment_id: int, claimed_author: str) -> dict[str, object]:
    return {
        "action": "created",
        "issue": {"number": 7, "pull_request": {"url": "…"}},
        "comment": {
            "id": comment_id,
            "body": "/dockyard approve",
            "user": {"login": claimed_author},
        },
        "repository": {"full_name": "acme/cfg"},
    }


def test_the_webhook_reads_the_comment_back_and_a_forged_author_does_not_count(
    server: Running, github: FakeHost
) -> None:
    opened = {
        "action": "opened",
        "number": 7,
        "pull_request": {"number": 7, "head": {"sha": HEAD, "ref": "f"}, "base": {"ref": "main"}},
        "repository": {"full_name": "acme/cfg"},
    }
    deliver(server, "pull_request", opened, "d-1")
    wait_until(lambda: len(github.state.statuses) == 1, what="the plan status")
    assert github.state.statuses[0][1]["state"] == "failure"

    forged = github.state.add_comment("/dockyard approve", "mallory")
    answer = deliver(server, "issue_comment", _comment_payload(forged, "alice"), "c-1")
    assert answer.status_code == 202 and answer.json()["outcome"] == "planning"
    comment_read = f"/repos/acme/cfg/issues/comments/{forged}"
    wait_until(
        lambda: any(
            b.startswith("`/dockyard approve` from @mallory") for b in github.state.bodies()
        ),
        what="the forged comment checked and answered",
    )
    assert comment_read in [r.path for r in github.state.requests]

    genuine = github.state.add_comment("/dockyard approve", "alice")
    deliver(server, "issue_comment", _comment_payload(genuine, "alice"), "c-2")
    wait_until(lambda: len(github.state.statuses) == 2, what="the approved plan status")
    assert github.state.statuses[1][1]["state"] == "success"
    store = server.server.store
    approvals = store.approvals_for("main", "tree" + HEAD)
    assert [(a.approver, a.comment_id) for a in approvals] == [("alice", genuine)]
