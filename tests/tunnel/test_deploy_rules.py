"""The pure parts of deploying: reading the probe, choosing a Python, naming failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.bundle import Bundle
from agent.remote_scripts import (
    DeployError,
    DeployFailure,
    choose_python,
    classify_output,
    parse_probe,
)

BUNDLE = Bundle(Path("/b.tar.gz"), "abc", "0.1.0", "cpython-311", "x86_64", 1)
PROBE = """HOME /home/ubuntu
PY /usr/bin/python3.11 cpython-311 x86_64 3.11.2
PY /usr/bin/python3 cpython-311 x86_64 3.11.2
PY /opt/py312/bin/python3.12 cpython-312 x86_64 3.12.1
BUNDLE bundle-abc
PID 4242
ALIVE
DF 1048576
"""


def test_probe_output_is_read() -> None:
    probe = parse_probe(PROBE)
    assert probe.home == "/home/ubuntu"
    assert [p.executable for p in probe.pythons] == [
        "/usr/bin/python3.11",
        "/usr/bin/python3",
        "/opt/py312/bin/python3.12",
    ]
    assert (probe.bundle_id, probe.agent_pid, probe.agent_alive, probe.free_kib) == (
        "abc",
        4242,
        True,
        1048576,
    )


def test_empty_fields_mean_nothing_installed() -> None:
    probe = parse_probe("HOME /root\nBUNDLE \nPID \nDF \n")
    assert (probe.bundle_id, probe.agent_pid, probe.agent_alive, probe.free_kib) == (
        None,
        None,
        False,
        None,
    )


def test_the_first_python_matching_the_bundle_is_chosen() -> None:
    assert choose_python("h", parse_probe(PROBE), BUNDLE).executable == "/usr/bin/python3.11"


def test_only_a_python_of_another_abi_names_what_to_install() -> None:
    probe = parse_probe("PY /usr/bin/python3 cpython-312 x86_64 3.12.3\n")
    with pytest.raises(DeployError) as info:
        choose_python("root@gpu-1:22", probe, BUNDLE)
    assert info.value.failure is DeployFailure.no_python
    assert "host root@gpu-1:22" in str(info.value) and "python3.11" in str(info.value)


def test_an_old_python_is_no_python() -> None:
    probe = parse_probe("PY /usr/bin/python3 cpython-39 x86_64 3.9.2\n")
    with pytest.raises(DeployError, match=r"no Python ≥ 3\.11 on PATH \(found: /usr/bin/python3"):
        choose_python("h", probe, BUNDLE)


@pytest.mark.parametrize(
    ("output", "failure"),
    [
        ("tar: site/x: Cannot write: No space left on device", DeployFailure.disk_full),
        ("OSError: [Errno 98] Address already in use", DeployFailure.port_in_use),
        ("Traceback: something else", None),
    ],
)
def test_failures_are_recognised_in_output(output: str, failure: DeployFailure | None) -> None:
    assert classify_output(output) is failure


def test_the_session_port_is_read_back() -> None:
    assert parse_probe("SESSION 2201\n").session_port == 2201
    assert parse_probe("SESSION \n").session_port is None
