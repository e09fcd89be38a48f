"""The throwaway PostgreSQL of the tests: a cluster whose test run was killed is reaped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.services.missing import needs
from tests.services.postgres import (
    _reap_orphans,
    find_postgres_bin,
    postgres_unavailable_reason,
)

ROOT = Path(__file__).resolve().parents[2]
_HOLDER = """
import sys
from tests.services.postgres import find_postgres_bin, start_postgres
cm = start_postgres(find_postgres_bin())
server = cm.__enter__()
print(server.admin_url, flush=True)
sys.stdin.read()  # held until killed
"""


@needs(
    postgres_unavailable_reason() is None and find_postgres_bin() is not None,
    "PostgreSQL's server binaries",
    f"{postgres_unavailable_reason()}: apt-get install postgresql (scripts/setup.sh --dev)",
)
def test_cluster_of_a_killed_run_is_reaped_by_the_next_start() -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    url = make_url(holder.stdout.readline().strip())
    connect = {"host": url.host, "port": url.port, "user": url.username, "dbname": "postgres"}
    with psycopg.connect(**connect) as connection:  # type: ignore[arg-type]
        directory = Path(
            str(connection.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
        ).parent
    holder.kill()
    holder.wait(timeout=30)
    assert directory.exists()
    bin_dir = find_postgres_bin()
    assert bin_dir is not None
    _reap_orphans(bin_dir, directory.parent)
    assert not directory.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(**connect, connect_timeout=5)  # type: ignore[arg-type]
