"""Opening a code host from a provider name and the CI environment.

GitHub: `GITHUB_TOKEN`, and `GITHUB_API_URL` for GitHub Enterprise (GitHub Actions sets
it). GitLab: `GITLAB_TOKEN`, and `CI_API_V4_URL` (GitLab CI sets it). The environment is
passed in, never read implicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

import httpx

from reconciler.errors import UsageError
from reconciler.pr.github import DEFAULT_API_URL as GITHUB_API
from reconciler.pr.github import GitHub
from reconciler.pr.gitlab import DEFAULT_API_URL as GITLAB_API
from reconciler.pr.gitlab import GitLab
from reconciler.pr.hosting import CodeHost


class Provider(StrEnum):
    GITHUB = "github"
    GITLAB = "gitlab"


def open_host(
    provider: Provider,
    repo: str,
    environ: Mapping[str, str],
    *,
    transport: httpx.BaseTransport | None = None,
) -> CodeHost:
    if provider is Provider.GITHUB:
        token = environ.get("GITHUB_TOKEN", "")
        if not token:
            raise UsageError(
                "GITHUB_TOKEN is not set: in a workflow, pass `GITHUB_TOKEN: "
                "${{ secrets.GITHUB_TOKEN }}` with `pull-requests: write` and `statuses: write`"
            )
        api = environ.get("GITHUB_API_URL") or GITHUB_API
        return GitHub(repo, token=token, api_url=api, transport=transport)
    token = environ.get("GITLAB_TOKEN", "")
    if not token:
        raise UsageError(
            "GITLAB_TOKEN is not set: add a project access token with the `api` scope "
            "as a masked CI/CD variable named GITLAB_TOKEN"
        )
    api = environ.get("CI_API_V4_URL") or GITLAB_API
    return GitLab(repo, token=token, api_url=api, transport=transport)
