"""The `.dockyard.yml` repo policy: defaults, validation with line numbers, config paths."""

from __future__ import annotations

from reconciler.core.policy import RepoPolicy, parse_policy


def test_empty_or_missing_policy_gives_the_defaults() -> None:
    policy = parse_policy(b"")
    assert policy == RepoPolicy()
    assert isinstance(policy, RepoPolicy)
    assert (policy.project, policy.paths, policy.fetch_interval) == ("main", (".",), 60)
    assert policy.retains_volumes and not policy.allow_empty and policy.default_fleet is None


def test_every_field_is_read() -> None:
    text = (
        "project: ml\npaths: [configs, teams/a]\nprune:\n  volumes: delete\n  allow_empty: true\n"
        "default_fleet: gpu\nfetch_interval: 5m\n"
    )
    policy = parse_policy(text)
    assert isinstance(policy, RepoPolicy)
    assert policy.project == "ml"
    assert policy.paths == ("configs", "teams/a")
    assert not policy.retains_volumes and policy.allow_empty
    assert (policy.default_fleet, policy.fetch_interval) == ("gpu", 300)


def test_invalid_values_and_unknown_keys_are_issues_with_lines() -> None:
    issues = parse_policy("project: ml\nprune:\n  volumes: keep\nextra: 1\n", ".dockyard.yml")
    assert isinstance(issues, list)
    by_field = {i.field: i for i in issues}
    assert by_field["prune.volumes"].line == 3
    assert by_field["extra"].line == 4


def test_broken_yaml_is_an_issue_not_an_exception() -> None:
    issues = parse_policy("paths: [\n")
    assert isinstance(issues, list)
    assert issues[0].message.startswith("invalid YAML")


def test_config_paths_follow_suffixes_and_directories() -> None:
    policy = RepoPolicy(paths=("configs", "./teams/a/"))
    assert policy.is_config_path("configs/x.dstack.yml")
    assert policy.is_config_path("teams/a/deep/y.dstack.yaml")
    assert not policy.is_config_path("teams/b/y.dstack.yml")
    assert not policy.is_config_path("configs/x.yml")
    assert RepoPolicy().is_config_path(".dstack.yml")
