"""A restarted server's start loads only what its runtime needs before it runs: no GitPython
(the config repo is read by the reconcile, after the start), no alembic (a database at the
shipped head has nothing to migrate: `migrating.head_revision` reads the scripts' text),
no Pulumi or Docker client, and none of the web app (FastAPI, `reconciler.web`: built by
`build_web` once the runtime runs, `serve_engine_first`). Each of these cost a restart CPU
time before any job moved again (docs/server.md, "Stopping"; bench/restart_progress.py).

The real start in a fresh interpreter: `dockyard server`'s module and `build_engine` on a
data dir whose database is at head, as a second start finds it; then `sys.modules`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from reconciler.adapters.db import Store, resolve_db_url
from reconciler.adapters.db.migrating import alembic_config, head_revision, script_revisions

HEAVY = (
    "git",
    "gitdb",
    "alembic",
    "mako",
    "pulumi",
    "docker",
    "fastapi",
    "reconciler.web",
    "lightkube",
)

START = """
import json, os, sys
from pathlib import Path
import reconciler.cli.server
from reconciler.app import build_engine
from reconciler.settings import Settings
engine = build_engine(Settings.from_env(os.environ, data_dir=Path(sys.argv[1])))
engine.store.close()
heavy = tuple(sys.argv[2:])
under = tuple(h + "." for h in heavy)
print(json.dumps(sorted(m for m in sys.modules if m in heavy or m.startswith(under))))
"""


def test_a_second_start_loads_no_git_alembic_or_web_before_its_runtime(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    Store.from_url(resolve_db_url(None, data), migrate=True).close()  # the first start's work
    env = {
        **os.environ,
        "HOME": str(tmp_path / "home"),
        "DOCKYARD_CONFIG": str(tmp_path / "home" / "config.yml"),
        "PYTHONWARNINGS": "ignore",
    }
    done = subprocess.run(
        [sys.executable, "-c", START, str(data), *HEAVY],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_the_head_read_from_the_scripts_is_alembics() -> None:
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    assert head_revision() == scripts.get_current_head()
    assert script_revisions() == {s.revision: s.down_revision for s in scripts.walk_revisions()}


def test_the_web_app_loads_no_kubernetes_client() -> None:
    """The web app (built at every start, beside the runtime's first pass) loads lightkube
    only when a Kubernetes cluster is asked (`web.clusteroffers`), not with its routes."""
    code = (
        "import sys, reconciler.web.app, reconciler.web.routes_backends;"
        " print(sorted(m for m in sys.modules if m.split('.')[0] == 'lightkube'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
