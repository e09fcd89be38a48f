"""A missing real part skips a test on a developer's machine and fails it under CI=true."""

from __future__ import annotations

import pytest

from tests.services.missing import skip_or_fail


def test_missing_part_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Docker engine"):
        skip_or_fail("no Docker engine answers")


def test_missing_part_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"no Docker engine answers .*CI=true"):
        skip_or_fail("no Docker engine answers")
