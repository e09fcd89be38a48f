"""API tokens never start with `-` (`adapters.db.accounts.new_token`): users paste them into
`dstack project add --token T` and `dockyard project add --token T`, whose parsers would
take such a token for a flag (seen: 1 in 64 compat test runs failed at `project add`)."""

from __future__ import annotations

import secrets

import pytest

from reconciler.adapters.db import accounts


def test_a_token_starting_with_a_dash_is_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = iter(["-starts-like-a-flag", "--another", "fine_token-"])
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: next(drawn))
    assert accounts.new_token() == "fine_token-"


def test_tokens_are_long_and_random() -> None:
    tokens = {accounts.new_token() for _ in range(200)}
    assert len(tokens) == 200
    assert all(len(t) >= 43 and not t.startswith("-") for t in tokens)
