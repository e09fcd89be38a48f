"""Webhooks route by repository and verify with the source's own secret.

A real server (real controller, no `--repo`) following two sources of two real git
repos, each with its own secret (`env:` references). Deliveries over loopback HTTP, in
the attack's own form: a push for repo A signed with repo B's secret is refused and
queues nothing; a push for a repository no source follows, signed with a real secret, is
202 `ignored` and queues nothing (no fetch); a GitLab push with the wrong source's token
is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from reconciler.core.sources import repository_key
from tests.engine.fixtures import ConfigRepo
from tests.sources.test_source_loops import reconciles, sources_file
from tests.web.serving import Running, running_server, wait_until

SECRET_A, SECRET_B = "team-a-hook-secret", "team-b-hook-secret"


@dataclass
class Two:
    server: Running
    a: ConfigRepo
    b: ConfigRepo

    def counts(self) -> tuple[int, int]:
        return len(reconciles(self.server, "alpha")), len(reconciles(self.server, "beta"))

    def settled(self) -> bool:
        rows = reconciles(self.server, "alpha") + reconciles(self.server, "beta")
        return len(rows) >= 2 and all(r["status"] not in ("queued", "running") for r in rows)


@pytest.fixture
def two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Two]:
    monkeypatch.setenv("TEAM_A_HOOK", SECRET_A)
    monkeypatch.setenv("TEAM_B_HOOK", SECRET_B)
    a, b = ConfigRepo(tmp_path / "team-a"), ConfigRepo(tmp_path / "team-b")
    a.commit({"README.md": "a\n"}, "a")
    b.commit({"README.md": "b\n"}, "b")
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "team-a", "repo": str(a.path), "project": "alpha",
         "webhook_secret": "env:TEAM_A_HOOK"},
        {"name": "team-b", "repo": str(b.path), "project": "beta",
         "webhook_secret": "env:TEAM_B_HOOK"},
    )  # fmt: skip
    with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as server:
        two = Two(server, a, b)
        wait_until(two.settled, 60, "the sources' first reconciles")
        yield two


def github_push(server: Running, repo: str, secret: str) -> httpx.Response:
    body = json.dumps(
        {"ref": "refs/heads/main", "after": "1" * 40, "repository": {"clone_url": repo}}
    ).encode()
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": signature,
        "Content-Type": "application/json",
    }
    return httpx.post(f"{server.url}/api/webhooks/github", content=body, headers=headers)


def gitlab_push(server: Running, repo: str, token: str) -> httpx.Response:
    body = json.dumps(
        {"ref": "refs/heads/main", "after": "2" * 40, "project": {"git_http_url": repo}}
    ).encode()
    headers = {
        "X-Gitlab-Event": "Push Hook",
        "X-Gitlab-Event-UUID": str(uuid.uuid4()),
        "X-Gitlab-Token": token,
        "Content-Type": "application/json",
    }
    return httpx.post(f"{server.url}/api/webhooks/gitlab", content=body, headers=headers)


def test_a_push_reaches_its_own_source_only(two: Two) -> None:
    before = two.counts()
    answer = github_push(two.server, str(two.a.path), SECRET_A)
    assert answer.status_code == 202 and answer.json()["outcome"] == "queued", answer.text
    reconcile_id = answer.json()["reconcile_id"]
    alpha = reconciles(two.server, "alpha")
    assert reconcile_id in [r["id"] for r in alpha]
    assert two.counts() == (before[0] + 1, before[1])
    answer = gitlab_push(two.server, str(two.b.path), SECRET_B)
    assert answer.status_code == 202 and answer.json()["outcome"] == "queued", answer.text
    assert answer.json()["reconcile_id"] in [r["id"] for r in reconciles(two.server, "beta")]


def test_repo_a_signed_with_repo_bs_secret_is_refused(two: Two) -> None:
    before = two.counts()
    answer = github_push(two.server, str(two.a.path), SECRET_B)
    assert answer.status_code == 401, answer.text
    assert "team-a" in answer.json()["reason"]
    answer = gitlab_push(two.server, str(two.a.path), SECRET_B)
    assert answer.status_code == 401, answer.text
    assert two.counts() == before


def test_an_unknown_repository_is_ignored_and_nothing_fetched(two: Two) -> None:
    before = two.counts()
    answer = github_push(two.server, "https://github.com/acme/unknown.git", SECRET_A)
    assert answer.status_code == 202, answer.text
    assert answer.json()["outcome"] == "ignored"
    assert "github.com/acme/unknown" in answer.json()["reason"]
    assert two.counts() == before


def test_a_delivery_signed_with_no_known_secret_is_refused(two: Two) -> None:
    answer = github_push(two.server, str(two.a.path), "not-a-secret-of-anyone")
    assert answer.status_code == 401, answer.text


def test_repository_keys_agree_across_url_forms() -> None:
    forms = [
        "https://github.com/Acme/GPU-Configs.git",
        "https://x-access-token@github.com/acme/gpu-configs",
        "git@github.com:acme/gpu-configs.git",
        "ssh://git@github.com:22/acme/gpu-configs.git",
        "git://github.com/acme/gpu-configs.git",
    ]
    assert {repository_key(form) for form in forms} == {"github.com/acme/gpu-configs"}
    assert repository_key("https://gitlab.com/acme/gpu-configs") != repository_key(forms[0])
    assert repository_key("/srv/repos/team-a/") == "/srv/repos/team-a"


def test_a_monorepos_sources_each_take_their_directory_and_each_push(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONO_HOOK", SECRET_A)
    mono = ConfigRepo(tmp_path / "mono")
    mono.commit(
        {
            "teams/nlp/train.dstack.yml": "type: task\nname: nlp-train\ncommands: [echo n]\n",
            "teams/speech/train.dstack.yml": "type: task\nname: asr-train\ncommands: [echo s]\n",
        },
        "two teams",
    )
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "nlp", "repo": str(mono.path), "paths": "[teams/nlp]", "project": "nlp",
         "webhook_secret": "env:MONO_HOOK"},
        {"name": "speech", "repo": str(mono.path), "paths": "[teams/speech]",
         "project": "speech", "webhook_secret": "env:MONO_HOOK"},
    )  # fmt: skip
    with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as server:
        refused: list[str] = []  # answers that were not a list, said if the wait fails

        def runs(project: str) -> list[str]:
            with server.client(server.admin_token) as http:
                # finished runs too: a task that echoes once may end before the other's starts
                got = http.post(f"/api/project/{project}/runs/list", json={"all": True})
            if not got.is_success:
                refused.append(f"{project}: {got.status_code} {got.text[:200]}")
                return []
            return sorted(r["run_spec"]["run_name"] for r in got.json())

        # each project's implicit local fleet comes up before its run is submitted; each
        # project gets its own directory's run and only that one
        try:
            wait_until(
                lambda: runs("nlp") == ["nlp-train"] and runs("speech") == ["asr-train"],
                150,
                "each team's own run",
            )
        except AssertionError as timed_out:
            seen = refused[-3:]
            raise AssertionError(f"{timed_out}; answers that were no list: {seen}") from None
        wait_until(
            lambda: all(
                r["status"] not in ("queued", "running")
                for p in ("nlp", "speech")
                for r in reconciles(server, p)
            ),
            150,
            "the first reconciles",
        )
        before = [len(reconciles(server, p)) for p in ("nlp", "speech")]
        answer = github_push(server, str(mono.path), SECRET_A)
        assert answer.status_code == 202 and answer.json()["outcome"] == "queued", answer.text
        assert [len(reconciles(server, p)) for p in ("nlp", "speech")] == [
            before[0] + 1,
            before[1] + 1,
        ]
