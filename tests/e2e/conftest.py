"""Fixtures of the runs e2e tests: one local agent per module, a fresh harness per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.runs_harness import (
    AgentEnv,
    Harness,
    close_harness,
    make_harness,
    start_agent_env,
    stop_agent_env,
)
from tests.services.docker import docker_engine  # noqa: F401


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent_env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[AgentEnv]:
    """A real local agent shared by a module's tests (starting one takes seconds)."""
    env = await start_agent_env(tmp_path_factory.mktemp("agent"))
    yield env
    stop_agent_env(env)


@pytest.fixture
async def h(tmp_path: Path, agent_env: AgentEnv) -> AsyncIterator[Harness]:
    """Workers, store and the module's agent as the `local` fleet, fresh per test."""
    harness = await make_harness(tmp_path, agent_env)
    yield harness
    await close_harness(harness)
