"""`policy.approvers` of `.dockyard.yml`: validated with its line, compared case-insensitively."""

from __future__ import annotations

from reconciler.core.policy import RepoPolicy, parse_policy


def test_approvers_are_logins_validated_with_their_line() -> None:
    good = parse_policy("policy:\n  approvers: [Alice, bob.smith]\n")
    assert isinstance(good, RepoPolicy)
    assert good.policy.approvers == ("Alice", "bob.smith")
    assert good.policy.may_approve("alice") and good.policy.may_approve("bob.smith")
    assert not good.policy.may_approve("mallory")
    bad = parse_policy("project: main\npolicy:\n  approvers:\n    - alice\n    - 'evil user'\n")
    assert isinstance(bad, list)
    assert (bad[0].path, bad[0].line, bad[0].field) == (".dockyard.yml", 5, "policy.approvers.1")
    assert "pattern" in bad[0].message


def test_no_approvers_means_nobody_may_approve() -> None:
    policy = parse_policy("policy:\n  runs: {max_gpus: 1}\n")
    assert isinstance(policy, RepoPolicy) and not policy.policy.may_approve("alice")
