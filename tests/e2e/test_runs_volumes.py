"""A run's instance volumes on the local fleet: mounted in the process job's sandbox, or
refused with the volume and the setting, never silently dropped.

The local agent is started as the server starts it (`ensure_local_agent`, `--job-user
auto`: a root server's process jobs run in bubblewrap), with its `--volume-root` from the
server's `DOCKYARD_LOCAL_VOLUME_ROOTS`; the runs and jobs workers submit the run to it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from agent.local import ensure_client_key, ensure_local_agent
from agent.tunnel import TunnelPool
from reconciler.adapters.db.models import Run, Volume
from reconciler.settings import Settings
from tests.e2e.runs_harness import AgentEnv, Harness, close_harness, make_harness, stop_agent_env
from tests.security.local_users import need_root
from tests.services.missing import needs

pytestmark = [
    pytest.mark.timeout(120),
    needs(
        shutil.which("bwrap") is not None,
        "bubblewrap (bwrap), the process jobs' sandbox",
        "apt-get install bubblewrap (scripts/setup.sh installs it)",
    ),
]

TASK = """
type: task
name: {name}
volumes: [{volume}]
commands:
  - cat /data/input.txt
  - echo "written by the job" > /data/output.txt
"""


@pytest.fixture(scope="module")
def volume_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's allowed root: a directory the job's own uid may write to."""
    root = tmp_path_factory.mktemp("volumes").resolve()
    root.chmod(0o755)
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def agent_env(
    tmp_path_factory: pytest.TempPathFactory, volume_root: Path
) -> AsyncIterator[AgentEnv]:
    """The local agent as a root server starts it, with the server's volume roots."""
    need_root()
    root = tmp_path_factory.mktemp("agent")
    settings = Settings.from_env(
        {"DOCKYARD_LOCAL_VOLUME_ROOTS": str(volume_root)}, data_dir=root / "server"
    )
    pool = TunnelPool()
    key = ensure_client_key(root / "ssh" / "id_ed25519")
    local = await ensure_local_agent(root, key, pool, volume_roots=settings.local_volume_roots)
    await pool.close()
    env = AgentEnv(root, key, local)
    yield env
    stop_agent_env(env)


@pytest.fixture
async def h(tmp_path: Path, agent_env: AgentEnv) -> AsyncIterator[Harness]:
    harness = await make_harness(tmp_path, agent_env)
    yield harness
    await close_harness(harness)


def _status(h: Harness, run: Run) -> str:
    return h.run(run.id).status


async def test_an_instance_volume_is_mounted_read_write(h: Harness, volume_root: Path) -> None:
    data = volume_root / "mounted"
    data.mkdir()
    data.chmod(0o777)  # the sandboxed job runs as a uid of its own
    (data / "input.txt").write_text("from the host\n")
    run = h.submit(TASK.format(name="vol-ok", volume=f"{data}:/data"))
    await h.until(lambda: _status(h, run) in ("done", "failed"), within=60)
    text = h.log_text(run)
    assert _status(h, run) == "done", text + h.describe()
    assert "from the host" in text
    assert (data / "output.txt").read_text() == "written by the job\n"
    assert (data / "output.txt").stat().st_uid != os.geteuid(), "written as the job's uid"


async def test_a_system_directory_fails_the_run_naming_the_volume_and_setting(
    h: Harness,
) -> None:
    run = h.submit(TASK.format(name="vol-etc", volume="/etc:/data"))
    await h.until(lambda: _status(h, run) in ("done", "failed"), within=60)
    assert _status(h, run) == "failed", h.describe()
    [job] = h.jobs_of(run.id)
    message = str(job.status_message)
    assert "/etc" in message and "DOCKYARD_LOCAL_VOLUME_ROOTS" in message, h.describe()
    assert "from the host" not in h.log_text(run)


async def test_an_unknown_network_volume_fails_the_run_naming_it(h: Harness) -> None:
    run = h.submit(TASK.format(name="vol-net", volume="my-vol:/data"))
    await h.until(lambda: _status(h, run) in ("done", "failed"), within=60)
    assert _status(h, run) == "failed", h.describe()
    [job] = h.jobs_of(run.id)
    assert "network volume 'my-vol'" in str(job.status_message), h.describe()


async def test_a_local_volume_is_mounted_by_name(h: Harness, agent_env: AgentEnv) -> None:
    # where the local engine keeps the server's volumes: the agent's --volume-dir
    data = agent_env.root / "volumes" / "main" / "shared"
    data.mkdir(parents=True)
    data.chmod(0o777)
    (data / "input.txt").write_text("from the local volume\n")
    outputs = {"volume_id": str(data), "path": str(data), "backend": "local", "size": None}
    h.store.add(
        Volume(
            project_id=h.project.id,
            name="shared",
            spec={"type": "volume", "name": "shared"},
            status="active",
            created_at=h.store.now(),
            outputs=outputs,
        )
    )
    run = h.submit(TASK.format(name="vol-named", volume="shared:/data"))
    await h.until(lambda: _status(h, run) in ("done", "failed"), within=60)
    text = h.log_text(run)
    assert _status(h, run) == "done", text + h.describe()
    assert "from the local volume" in text
    assert (data / "output.txt").read_text() == "written by the job\n"


async def test_a_missing_host_directory_fails_the_run_saying_so(
    h: Harness, volume_root: Path
) -> None:
    missing = volume_root / "never-made"
    run = h.submit(TASK.format(name="vol-missing", volume=f"{missing}:/data"))
    await h.until(lambda: _status(h, run) in ("done", "failed"), within=60)
    assert _status(h, run) == "failed", h.describe()
    [job] = h.jobs_of(run.id)
    assert f"{missing} does not exist" in str(job.status_message), h.describe()
