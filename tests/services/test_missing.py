"""A missing real part skips a test on a developer's machine and fails it under CI=true.

tests/services/missing.py is the one place a test skips; these show each of its forms
(a call, a mark checked by tests/conftest.py, an optional import) fails under CI=true.
"""

from __future__ import annotations

import pytest

from tests.services.missing import need, need_module, skip_or_fail

pytest_plugins = ["pytester"]


def test_missing_part_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Docker engine"):
        skip_or_fail("no Docker engine answers")


def test_missing_part_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"no Docker engine answers .*CI=true"):
        skip_or_fail("no Docker engine answers")


def test_need_names_what_is_missing_and_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    need(True, "nothing", "-")
    with pytest.raises(pytest.fail.Exception, match=r"needs OpenSSH's client: apt-get install"):
        need(False, "OpenSSH's client", "apt-get install openssh-client")


def test_a_missing_module_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert need_module("json").dumps(1) == "1"
    with pytest.raises(pytest.fail.Exception, match=r"needs the Python module no_such_mod"):
        need_module("no_such_mod")


INNER = """
import pytest
from tests.services.missing import needs

@needs(False, "a thing this machine lacks", "install it")
def test_marked():
    pass
"""


@pytest.mark.parametrize(("ci", "outcome"), [("true", "errors"), ("", "skipped")])
def test_a_needs_mark_fails_the_test_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: str
) -> None:
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest("from tests.conftest import pytest_configure, pytest_runtest_setup\n")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest("-p", "no:cacheprovider", "-n", "0", "-rA")
    result.assert_outcomes(**{outcome: 1})
    result.stdout.fnmatch_lines(["*needs a thing this machine lacks: install it*"])
