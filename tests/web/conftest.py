"""Fixtures of the web tests: a real server (SQLite, uvicorn on loopback) with a fake runtime."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Running]:
    with running_server(tmp_path, lambda settings, store: FakeController(store)) as running:
        yield running
