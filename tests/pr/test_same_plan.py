"""The same plan three ways: one PR head planned offline (`dockyard plan --base`), on the
server through the `pull_request` webhook (the fake GitHub API gets the comment), and by
the reconcile once it is merged — the same actions (kind, name, action, fields) in all
three, apart from what the offline plan says it could not check.

A real git repo, a real server on loopback whose runtime previews with the local engine and
a Pulumi engine without its CLI (so the PR's cloud fleet and volume are blocked), the real
`Reconciler` on the server's store, and the fake GitHub of the other tests/pr tests.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.db.workleasing import StoreLeasing
from reconciler.adapters.gitsource.remotes import RepoLocation
from reconciler.adapters.gitsource.source import GitSource
from reconciler.core.rendering_json import canonical
from reconciler.engine.previewing import Previewer
from reconciler.engine.reconciling import GitConfigSource, Reconciler
from reconciler.engine.worker import Lease, Worker, WorkerConfig
from reconciler.pr.checkout import plan_offline
from reconciler.pr.document import report_to_json
from reconciler.pr.remote import plan_on_server
from schemas import parse_config
from stacks.engines import UnavailableEngine
from stacks.local import LocalEngine, LocalSettings
from stacks.protocol import PULUMI_NOT_FOUND, Engine, EngineName
from tests.pr.fakehost import TOKEN, FakeHost, fake_host
from tests.pr.gitrepo import commit_files, git, make_repo
from tests.pr.test_server_bot import deliver, pull_request
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server, wait_until

TASK = "type: task\nname: {name}\ncommands: [{command}]\nresources:\n  cpu: 1..\n"
BASE = {
    "fleets/local.dstack.yml": b"type: fleet\nname: local\nnodes: 1\n",
    "tasks/train.dstack.yml": TASK.format(name="train", command="python train.py").encode(),
}
HEAD = {
    **BASE,
    "tasks/train.dstack.yml": TASK.format(name="train", command="python train.py -e 3").encode(),
    "tasks/eval.dstack.yml": TASK.format(name="eval", command="python eval.py").encode(),
    "fleets/lab.dstack.yml": b"type: fleet\nname: lab\nssh_config:\n  user: ubuntu\n"
    b"  hosts: [10.0.0.5]\n",
    "fleets/cloud.dstack.yml": b"type: fleet\nname: cloud\nbackends: [aws]\nnodes: 1\n"
    b"resources:\n  gpu: A10G\n",
    "volumes/data.dstack.yml": b"type: volume\nname: data\nbackend: aws\nregion: us-east-1\n"
    b"size: 100GB\n",
    "tasks/gpu.dstack.yml": TASK.format(name="gpu", command="nvidia-smi").encode()
    + b"fleets: [cloud]\n",
}


class PreviewingController(FakeController):
    """The fake runtime with the real previewer a server's runtime has."""

    def __init__(self, store: Any, previewer: Previewer) -> None:
        super().__init__(store)
        self.previewer = previewer


@pytest.fixture
def github() -> Iterator[FakeHost]:
    with fake_host() as host:
        yield host


@pytest.fixture
def previewer(tmp_path: Path) -> Previewer:
    engines: dict[EngineName, Engine] = {
        "local": LocalEngine(LocalSettings(data_dir=tmp_path / "engines", user="root")),
        "pulumi": UnavailableEngine("pulumi", PULUMI_NOT_FOUND),
    }
    return Previewer(engines)


@pytest.fixture
def server(tmp_path: Path, github: FakeHost, previewer: Previewer) -> Iterator[Running]:
    overrides = {"github_token": TOKEN, "github_api_url": github.url, "github_repo": "acme/cfg"}
    with running_server(
        tmp_path, lambda s, store: PreviewingController(store, previewer), **overrides
    ) as running:
        yield running


def shape(actions: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[str, str]]:
    """(kind, name) → (action, fields as canonical JSON) of plan JSON actions."""
    return {
        (a["kind"], a["name"]): (a["action"], json.dumps(canonical(a["fields"]))) for a in actions
    }


def comment_actions(body: str) -> dict[tuple[str, str], tuple[str, list[str]]]:
    """(kind, name) → (action, changed field names) as the PR comment shows them."""
    found: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for block in body.split("<details>")[1:]:
        head = re.search(r"<b>(\w+)</b> ([\w-]+) <code>([^<]+)</code>", block)
        if head is not None:
            fields = re.findall(r"^\| `([^`]+)` \|", block, re.MULTILINE)
            found[(head[2], html.unescape(head[3]))] = (head[1], fields)
        for kind, name in re.findall(r"^- ([\w-]+) `([^`]+)`: ", block, re.MULTILINE):
            found.setdefault((kind, name), ("noop", []))
    return found


async def test_one_pr_head_planned_offline_on_the_server_and_by_the_reconcile(
    tmp_path: Path, server: Running, github: FakeHost, previewer: Previewer
) -> None:
    repo, base = make_repo(tmp_path / "configs", BASE)
    store = server.server.store
    source = GitSource(RepoLocation(str(repo)), data_dir=tmp_path / "mirror", parse=parse_config)
    reconciler = Reconciler(
        store, GitConfigSource(source), previewer=previewer, hint=lambda k: None, capacity_wait=0
    )
    worker = Worker(
        WorkerConfig(kind="reconciles", concurrency=1),
        leasing=StoreLeasing(store.leases, make_lease=Lease),
        process=reconciler.process,
    )

    async def reconcile() -> Any:
        project = store.get_or_create_project("main")
        row_id = store.create_reconcile(project.id, trigger="api").id
        assert await worker.process_once() == 1
        return store.get_reconcile(row_id)

    assert (await reconcile()).status == "succeeded"  # the base is deployed
    git(repo, "checkout", "-q", "-b", "pr")
    head = commit_files(repo, HEAD, "the PR")

    # 1. offline, as `dockyard plan --base` makes it
    offline = report_to_json(plan_offline(source, ref=head, base=base))
    # 2. on the server, through the pull_request webhook (and the same function's JSON)
    github.state.files = dict(HEAD)
    answer = deliver(server, "pull_request", pull_request("opened", head), "d-1")
    assert answer.json()["outcome"] == "planning"
    wait_until(lambda: len(github.state.statuses) == 1, what="the plan status")
    (body,) = github.state.bodies()
    texts = {p: t.decode() for p, t in HEAD.items()}
    live = report_to_json(
        plan_on_server(server.url, server.admin_token, project="main", commit=head, files=texts)
    )
    # 3. by the reconcile once merged
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--ff-only", "pr")
    merged = await reconcile()
    assert merged.attempted_revision == head and merged.status == "succeeded"

    applied = shape(merged.plan["actions"])
    assert shape(live["actions"]) == applied
    blocked = {key for key, (action, _) in applied.items() if action == "blocked"}
    assert blocked == {("fleet", "cloud"), ("volume", "data"), ("task", "gpu")}
    assert {k: v for k, v in shape(offline["actions"]).items() if k not in blocked} == {
        k: v for k, v in applied.items() if k not in blocked
    }
    assert {shape(offline["actions"])[k][0] for k in blocked} == {"create"}
    assert offline["unchecked"][0].startswith("stack previews:")  # why they differ
    assert "unchecked" not in live and "unchecked" not in merged.plan
    shown = comment_actions(body)
    assert {k: v[0] for k, v in shown.items()} == {k: v[0] for k, v in applied.items()}
    for key, (_, fields) in applied.items():
        assert shown[key][1] == [f["field"] for f in json.loads(fields)]

    previews = {a["name"]: a.get("preview") for a in merged.plan["actions"]}
    assert previews == {a["name"]: a.get("preview") for a in live["actions"]}
    assert previews["lab"] is not None and previews["lab"]["counts"]["create"] >= 1
    assert "🔍 stack `main-fleet-lab`: 1 to create" in body
    cloud = previews["cloud"]
    assert cloud["error"] == PULUMI_NOT_FOUND and cloud["per_hour"] == pytest.approx(1.006)
    assert "🔍 stack `main-fleet-cloud`: ⚠️ no preview: Pulumi CLI not found" in body
    data = previews["data"]  # a volume's $/h: 100 GB of gp3 at its list price
    assert (data["per_hour"], data["price_basis"]) == (0.011, "100 GB gp3 $0.08/GB-month")
    assert "est. $0.011/h (100 GB gp3 $0.08/GB-month)" in html.unescape(body)
    assert previews["lab"]["per_hour"] == 0.0  # an SSH fleet costs nothing here
    assert f"blocked: {PULUMI_NOT_FOUND}" in html.unescape(body)
    assert "waits for fleet <code>cloud</code>, which is blocked" in body
