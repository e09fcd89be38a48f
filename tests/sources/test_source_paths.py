"""A source's `paths:` names several directories of its repo (docs/sources.md).

On a real server with real git: a monorepo source with `paths: [teams/a, teams/b]` plans
and applies the configs of both directories into its project, and not those of
`teams/c` nor of the repo's root, on its first commit (one `git ls-tree`) and on the next
(a `git diff-tree` from the previous snapshot); the repo root's `.dockyard.yml` is its
policy. Bad `paths:` are refused at the edges, by
file, line and column in the sources file (the server does not start) and by field
through the API and the CLI (which takes `--path` once per directory), each saying what
to write instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.sources import SourceSpec
from reconciler.errors import UsageError
from tests.engine.fixtures import ConfigRepo
from tests.sources.test_source_api import dockyard
from tests.sources.test_source_loops import post, reconciles, sources_file
from tests.web.serving import running_server, wait_until


def task(name: str) -> str:
    return f"type: task\nname: {name}\ncommands: [echo {name}]\n"


def _settled(reconciles_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in reconciles_ if r["status"] not in ("queued", "running")]


def _creates(reconcile: dict[str, Any]) -> set[str]:
    """The tasks the pass creates (the project's implicit local fleet aside)."""
    actions = reconcile["plan"]["actions"]
    return {a["name"] for a in actions if a["action"] == "create" and a["kind"] == "task"}


def test_a_source_takes_the_configs_of_each_of_its_directories(tmp_path: Path) -> None:
    mono = ConfigRepo(tmp_path / "mono")
    mono.commit(
        {
            "teams/a/train.dstack.yml": task("a-train"),
            "teams/b/train.dstack.yml": task("b-train"),
            "teams/c/train.dstack.yml": task("c-train"),
            "teams/ab/train.dstack.yml": task("ab-train"),  # `teams/a` is no prefix of it
            "root.dstack.yml": task("root-train"),
        },
        "four teams and the root",
    )
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "two-teams", "repo": str(mono.path), "paths": "[teams/a, teams/b]",
         "project": "pair"},
    )  # fmt: skip
    with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as server:
        wait_until(lambda: len(_settled(reconciles(server, "pair"))) == 1, 90, "the first pass")
        (first,) = reconciles(server, "pair")
        assert first["status"] == "succeeded", first
        assert _creates(first) == {"a-train", "b-train"}, first["plan"]["actions"]

        mono.commit(
            {
                "teams/b/more.dstack.yml": task("b-more"),
                "teams/c/more.dstack.yml": task("c-more"),
                "more.dstack.yml": task("root-more"),
            },
            "one more each",
        )
        assert post(server, "/api/project/pair/reconciles/trigger").status_code == 200
        wait_until(lambda: len(_settled(reconciles(server, "pair"))) == 2, 90, "the second pass")
        second = reconciles(server, "pair")[0]
        assert second["status"] == "succeeded", second
        assert _creates(second) == {"b-more"}, second["plan"]["actions"]
        names = {a["name"] for a in second["plan"]["actions"]}
        assert not names & {"c-train", "c-more", "ab-train", "root-train", "root-more"}

        got = post(server, "/api/project/pair/runs/list", {"all": True})
        assert sorted(r["run_spec"]["run_name"] for r in got.json()) == [
            "a-train",
            "b-more",
            "b-train",
        ]


def test_with_several_directories_the_repo_roots_policy_is_read(tmp_path: Path) -> None:
    """The root's `.dockyard.yml` narrows the source's configs further (its `paths` are the
    repo's); one inside a directory of the source is not its policy."""
    mono = ConfigRepo(tmp_path / "mono")
    mono.commit(
        {
            ".dockyard.yml": "project: pair\npaths: [teams/a]\n",
            "teams/b/.dockyard.yml": "project: pair\npaths: [nowhere]\n",
            "teams/a/train.dstack.yml": task("a-train"),
            "teams/b/train.dstack.yml": task("b-train"),
        },
        "a policy at the root",
    )
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "two-teams", "repo": str(mono.path), "paths": "[teams/a, teams/b]",
         "project": "pair"},
    )  # fmt: skip
    with running_server(tmp_path, None, sources_config=config, fetch_interval=3600) as server:
        wait_until(lambda: len(_settled(reconciles(server, "pair"))) == 1, 90, "the first pass")
        (first,) = reconciles(server, "pair")
        assert first["status"] == "succeeded", first
        assert _creates(first) == {"a-train"}, first["plan"]["actions"]


BAD = [
    ("[teams/a, ../etc]", "'..' leaves the repo; name a directory inside it"),
    (
        "[teams/a, /srv/x]",
        "'/srv/x' is absolute: name it relative to the repo's root, like 'srv/x'",
    ),
    ("[teams/a/, teams/b]", "'teams/a/' is not in normal form: write it 'teams/a'"),
    ("[teams/a, teams/a]", "'teams/a' is named twice: name each directory once"),
    ("[teams, teams/a]", "'teams/a' is inside 'teams': name 'teams' only"),
    ("[teams/*]", "no control characters nor any of"),
    ("[" + ", ".join(f"d{i}" for i in range(65)) + "]", "at most 64 items"),
]


@pytest.mark.parametrize(("paths", "said"), BAD)
def test_bad_paths_stop_the_start_by_file_line_and_column(
    tmp_path: Path, paths: str, said: str
) -> None:
    config = sources_file(
        tmp_path / "sources.yml",
        {"name": "team", "repo": str(tmp_path / "repo"), "project": "team", "paths": paths},
    )
    with pytest.raises(UsageError) as caught, running_server(tmp_path, None, sources_config=config):
        pass
    message = str(caught.value)
    assert f"{config}:5:12: sources[0].paths: " in message, message
    assert said in message, message


def test_bad_paths_are_refused_through_the_api(tmp_path: Path) -> None:
    with running_server(tmp_path, None, fetch_interval=3600) as server:
        body = {"name": "team", "repo": str(tmp_path / "repo"), "project": "team"}
        answer = post(server, "/api/sources/create", {**body, "paths": ["teams/a", "../etc"]})
        assert answer.status_code == 400, answer.text
        assert "paths" in answer.text and "'..' leaves the repo" in answer.text, answer.text
        assert post(server, "/api/sources/list").json() == []
        made = post(server, "/api/sources/create", {**body, "paths": ["teams/a", "teams/b"]})
        assert made.status_code == 200 and made.json()["paths"] == ["teams/a", "teams/b"]
        # the CLI takes `--path` once per directory
        code, text = dockyard(
            server, "source", "update", "team", "--path", "teams/c", "--path", "teams/d", "--json"
        )
        assert code == 0 and json.loads(text)["paths"] == ["teams/c", "teams/d"], text
        code, text = dockyard(server, "source", "update", "team", "--path", "teams/c/")
        assert code != 0 and "write it 'teams/c'" in text, text


def test_a_path_of_500_characters_is_the_most() -> None:
    spec = {"name": "team", "repo": "/srv/x", "project": "team"}
    assert SourceSpec.model_validate({**spec, "paths": ["a" * 500]}).paths == ["a" * 500]
    with pytest.raises(ValueError, match="at most 500 characters"):
        SourceSpec.model_validate({**spec, "paths": ["a" * 501]})
