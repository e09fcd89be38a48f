"""The venv the tests run in is exactly the lock (scripts/setup.sh installs
requirements/dev.txt with hashes), so what CI tested is what a fresh machine gets.

Also: the runtime lock agrees with the dev lock on every package they share, so the quick
start's venv runs the versions the tests ran."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)\s*(?:;\s*([^\\]+?))?\s*\\?$")


def _pins(lock: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        found = PIN.match(line)
        if not found:
            continue
        name, version, marker = found.groups()
        if marker and not Marker(marker).evaluate():
            continue  # another platform's or Python's pin
        pins[canonicalize_name(name.split("[")[0])] = version
    return pins


def test_the_venv_holds_exactly_the_dev_lock() -> None:
    # setup.sh installs with uv, itself pinned in lock-tools.txt
    pins = (
        _pins(ROOT / "requirements" / "dev.txt")
        | _pins(ROOT / "requirements" / "build.txt")
        | _pins(ROOT / "requirements" / "lock-tools.txt")
    )
    installed = {
        canonicalize_name(dist.metadata["Name"]): dist.version
        for dist in importlib.metadata.distributions()
    }
    installed.pop("dockyard", None)  # the project itself, editable
    assert len(pins) > 100
    wrong = {
        name: (pins[name], installed.get(name))
        for name in pins
        if installed.get(name) != pins[name]
    }
    extra = sorted(set(installed) - set(pins))
    assert not wrong, f"installed versions differ from the lock (lock, installed): {wrong}"
    assert not extra, f"installed but not in the lock: {extra}"


def test_the_runtime_lock_is_a_part_of_the_dev_lock() -> None:
    dev = _pins(ROOT / "requirements" / "dev.txt")
    runtime = _pins(ROOT / "requirements" / "runtime.txt")
    assert {name: dev.get(name) for name in runtime} == runtime
