"""A `/dockyard preview` that does not count is answered on the PR/MR, GitHub and GitLab:
the preview bot (`reconciler.pr.previews.PreviewBot`) over a real store (SQLite) and the
recording fake GitHub/GitLab API of `tests/pr/fakepreviews.py`. A read-only user's comment
(or a fork's author's, or one on a closed PR) gets exactly one short answer and deploys
nothing; the answer itself, fed back, and a comment that is not the command get none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.db.store import Store
from reconciler.core.policy import PolicyRules
from reconciler.core.previewruns import is_preview_command
from reconciler.domain.previewruns import PullRef
from reconciler.engine.previewruns import PreviewRuns
from reconciler.pr.approving import is_approve_command
from reconciler.pr.previewhooks import PreviewHint
from reconciler.pr.previewhosts import GitHubPreviewHost, GitLabPreviewHost, PreviewHost
from reconciler.pr.previews import PreviewBot, PreviewConfig
from tests.pr.fakehost import GITLAB_TOKEN, TOKEN
from tests.pr.fakepreviews import FakePreviewHost, fake_preview_host

SERVICE = b"type: service\nname: web\nport: 8000\ncommands: [serve]\n"


@pytest.fixture
def fake() -> Iterator[FakePreviewHost]:
    with fake_preview_host() as host:
        host.state.head = "c" * 40
        host.state.files = {"web.dstack.yml": SERVICE}
        yield host


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store.from_url(f"sqlite:///{tmp_path / 'dockyard.db'}", migrate=True)
    yield store
    store.close()


def _bot(store: Store, fake: FakePreviewHost) -> PreviewBot:
    def github(repo: str) -> PreviewHost:
        return GitHubPreviewHost(repo, token=TOKEN, api_url=fake.url)

    def gitlab(repo: str) -> PreviewHost:
        return GitLabPreviewHost(repo, token=GITLAB_TOKEN, api_url=fake.gitlab_url)

    config = PreviewConfig(project="main", external_url="http://dockyard.test")
    runs = PreviewRuns(store, capacity_wait=0.0)
    return PreviewBot(runs, {"github": github, "gitlab": gitlab}, config, lambda _: PolicyRules())


def _ask(bot: PreviewBot, pull: PullRef, comment_id: int) -> None:
    asyncio.run(bot.consider(PreviewHint(pull, "comment", comment_id)))


def _answers(fake: FakePreviewHost) -> list[str]:
    return [b for b in fake.state.bodies() if "did not count" in b]


def _posts(fake: FakePreviewHost) -> int:
    return sum(r.method == "POST" for r in fake.state.requests)


@pytest.mark.parametrize("provider", ["github", "gitlab"])
def test_a_read_only_users_preview_gets_one_answer_and_deploys_nothing(
    store: Store, fake: FakePreviewHost, provider: str
) -> None:
    bot = _bot(store, fake)
    pull = PullRef(provider, "acme/cfg", 7)
    asked = fake.state.add_comment("please\n/dockyard preview\n", "reader")

    _ask(bot, pull, asked)

    assert _answers(fake) == [
        "`/dockyard preview` from @reader did not count: reader has no write access to acme/cfg."
    ]
    assert _posts(fake) == 1
    permission = "/collaborators/reader/permission" if provider == "github" else "/members/all/"
    assert fake.state.calls(permission)
    assert bot.runs.previews.get_preview(pull) is None
    assert store.get_project("main-pr-7") is None and store.get_project("main-mr-7") is None

    # the answer is no command: fed back (a webhook for the bot's own comment), it is not
    # answered again; a comment that is not the command is not answered either
    answer = max(fake.state.comments)
    assert not is_preview_command(_answers(fake)[0])
    assert not is_approve_command(_answers(fake)[0])
    _ask(bot, pull, answer)
    _ask(bot, pull, fake.state.add_comment("could someone run /dockyard preview?", "reader"))
    assert len(_answers(fake)) == 1 and _posts(fake) == 1


def test_a_forks_author_and_a_closed_pull_request_are_answered(
    store: Store, fake: FakePreviewHost
) -> None:
    bot = _bot(store, fake)
    pull = PullRef("github", "acme/cfg", 7)
    fake.state.pull.fork = True
    _ask(bot, pull, fake.state.add_comment("/dockyard preview", "forker"))
    fake.state.pull.fork = False
    fake.state.pull.state = "closed"
    _ask(bot, pull, fake.state.add_comment("/dockyard preview", "maintainer"))

    assert _answers(fake) == [
        "`/dockyard preview` from @forker did not count: forker has no write access to "
        "acme/cfg (a pull request from a fork is previewed when a maintainer asks).",
        "`/dockyard preview` from @maintainer did not count: the pull request is closed.",
    ]
    assert _posts(fake) == 2
    assert bot.runs.previews.get_preview(pull) is None and store.get_project("main-pr-7") is None
