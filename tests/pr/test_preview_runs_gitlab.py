"""Preview runs of a GitLab merge request, end to end: the real server and local fleet of
`test_preview_runs.py`, the GitLab webhook, and the recording fake GitLab API. The label
added by a Developer deploys `main-mr-7` (reachable through the proxy with a member's
token, the note shows it); a `/dockyard preview` note from a Reporter deploys nothing and
is answered once; the merge tears it down and removes the project.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reconciler.adapters.db.previewruns import PreviewRunsStore
from reconciler.domain.previewruns import PreviewState, PullRef
from tests.pr.fakehost import GITLAB_TOKEN
from tests.pr.fakepreviews import FakePreviewHost, fake_preview_host
from tests.pr.gitrepo import make_repo
from tests.pr.test_preview_runs import BASE, HEAD, _free_port, _member_token, _real, service
from tests.web.serving import WEBHOOK_SECRET, Running, running_server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PREVIEW = "main-mr-7"
PULL = PullRef("gitlab", "acme/cfg", 7)


@pytest.fixture
def gitlab() -> Iterator[FakePreviewHost]:
    with fake_preview_host() as host:
        host.state.head = HEAD
        yield host


def deliver(server: Running, event: str, payload: dict[str, Any], delivery: str) -> httpx.Response:
    headers = {
        "X-Gitlab-Event": event,
        "X-Gitlab-Token": WEBHOOK_SECRET,
        "X-Gitlab-Event-UUID": delivery,
        "Content-Type": "application/json",
    }
    body = json.dumps(payload).encode()
    return httpx.post(f"{server.url}/api/webhooks/gitlab", content=body, headers=headers)


def merge_request(action: str, **extra: Any) -> dict[str, Any]:
    return {
        "object_kind": "merge_request",
        "project": {"path_with_namespace": "acme/cfg"},
        "object_attributes": {"iid": 7, "action": action, "target_branch": "main"},
        "user": {"username": "maintainer"},
        **extra,
    }


def _note(gitlab: FakePreviewHost) -> str:
    bodies = [b for b in gitlab.state.bodies() if "dockyard:preview-runs" in b]
    return bodies[-1] if bodies else ""


def _answers(server: Running, token: str) -> bool:
    url = f"{server.url}/proxy/services/{PREVIEW}/web/"
    try:
        reply = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200 and "preview-of-pr-7" in reply.text


def test_a_developers_label_deploys_and_the_merge_tears_down(
    tmp_path: Path, gitlab: FakePreviewHost
) -> None:
    repo, _ = make_repo(tmp_path / "config-repo", BASE)
    gitlab.state.files = {**BASE, "web.dstack.yml": service(_free_port())}
    overrides = {
        "gitlab_token": GITLAB_TOKEN,
        "gitlab_api_url": gitlab.gitlab_url,
        "repo": str(repo),
        "fetch_interval": 3600.0,
    }
    with running_server(tmp_path, _real, **overrides) as server:
        store = server.server.store
        main = store.get_project("main")
        wait_until(
            lambda: main is not None and store.last_applied_revision(main.id) is not None,
            timeout=60,
            what="main's first reconcile",
        )
        member, _ = _member_token(server)
        gitlab.state.pull.label("maintainer")
        changes = {"labels": {"previous": [], "current": [{"title": "dockyard:preview"}]}}
        answer = deliver(server, "Merge Request Hook", merge_request("update", changes=changes),
                         "g-1")  # fmt: skip
        assert answer.status_code == 202
        wait_until(lambda: _answers(server, member), timeout=120, what="the preview to answer")
        assert gitlab.state.calls("/merge_requests/7/resource_label_events")
        assert gitlab.state.calls(f"/members/all/{sum(map(ord, 'maintainer'))}")
        wait_until(lambda: "running, ready" in _note(gitlab), what="the note's status", timeout=60)
        assert f"/proxy/services/{PREVIEW}/web/" in _note(gitlab)

        # a Reporter's `/dockyard preview` deploys nothing and is answered once
        note_id = gitlab.state.add_comment("/dockyard preview", "reporter")
        note = {
            "object_kind": "note",
            "project": {"path_with_namespace": "acme/cfg"},
            "object_attributes": {
                "id": note_id,
                "noteable_type": "MergeRequest",
                "note": "/dockyard preview",
            },
            "merge_request": {"iid": 7},
        }
        deliver(server, "Note Hook", note, "g-2")
        refused = "`/dockyard preview` from @reporter did not count: reporter has no write access"
        wait_until(
            lambda: any(b.startswith(refused) for b in gitlab.state.bodies()), what="the answer"
        )
        assert gitlab.state.calls("/users?username=reporter")
        previews = PreviewRunsStore(store.engine)
        preview = previews.get_preview(PULL)
        assert preview is not None and preview.requested_by == "maintainer"

        gitlab.state.pull.state = "merged"
        deliver(server, "Merge Request Hook", merge_request("merge"), "g-3")
        wait_until(lambda: store.get_project(PREVIEW) is None, timeout=120, what="teardown")
        wait_until(
            lambda: _state(previews) is PreviewState.CLOSED, what="the record closed", timeout=60
        )
        preview = previews.get_preview(PULL)
        assert preview is not None and preview.reason == "the pull request was merged"
        wait_until(lambda: "torn down" in _note(gitlab), what="the note saying so", timeout=60)


def _state(previews: PreviewRunsStore) -> PreviewState | None:
    preview = previews.get_preview(PULL)
    return None if preview is None else preview.state
