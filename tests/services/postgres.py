"""A throwaway PostgreSQL cluster for the tests, or an existing server if one is given.

`postgres_server` (session scope) starts a private cluster: `initdb` and `pg_ctl` from
``/usr/lib/postgresql/*/bin`` (the newest version found), run as the ``postgres`` OS user when
the tests run as root (initdb refuses root), data and unix socket in a temp dir, listening on
a free 127.0.0.1 port, with durability off (fsync, synchronous_commit) for speed. It is
stopped and removed at the end of the session; clusters left behind by a killed test run
(its `owner.pid` no longer alive) are removed when the next one starts. If
``DOCKYARD_TEST_POSTGRES_URL`` is set (a URL whose user may ``CREATE DATABASE``), that server
is used instead and nothing is started. Without binaries or that variable, tests using it
skip and say why.

Use it from any conftest::

    from tests.services.postgres import postgres_server, postgres_url  # noqa: F401

- `postgres_url` (session): one fresh database for the session, as a
  ``postgresql+psycopg://`` URL.
- `postgres_server.create_database()`: another fresh database (per test, per module...).

One cluster serves the whole session even when several conftests import the fixture.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.services.missing import skip_or_fail

ENV_URL = "DOCKYARD_TEST_POSTGRES_URL"
_RUN_AS = "postgres"
_PREFIX = "dockyard-pg-"
_OWNER_FILE = "owner.pid"  # pid of the test process that started the cluster
_SERVER_OPTIONS = (
    "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
    "-c max_connections=300 -c shared_buffers=64MB"
)


@dataclass(frozen=True)
class PostgresServer:
    """A reachable server: `admin_url` may create and drop databases."""

    admin_url: str

    def _connect_admin(self) -> psycopg.Connection[tuple[object, ...]]:
        url = make_url(self.admin_url)
        return psycopg.connect(
            host=url.host,
            port=url.port,
            user=url.username,
            password=url.password,
            dbname=url.database or "postgres",
            autocommit=True,
        )

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database; returns its `postgresql+psycopg://` URL."""
        name = name or f"dockyard_test_{uuid.uuid4().hex[:12]}"
        with self._connect_admin() as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        url = make_url(self.admin_url).set(drivername="postgresql+psycopg", database=name)
        return url.render_as_string(hide_password=False)

    def drop_database(self, name: str) -> None:
        with self._connect_admin() as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def find_postgres_bin() -> Path | None:
    """The bin dir of the newest PostgreSQL installed under /usr/lib/postgresql, if any."""
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not found:
        return None

    def version(path: str) -> float:
        try:
            return float(Path(path).parent.parent.name)
        except ValueError:
            return 0.0

    return Path(max(found, key=version)).parent


def postgres_unavailable_reason() -> str | None:
    if os.environ.get(ENV_URL):
        return None
    if find_postgres_bin() is None:
        return (
            "PostgreSQL binaries not found in /usr/lib/postgresql/*/bin "
            f"(apt-get install postgresql, or set {ENV_URL})"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(_RUN_AS)
        except KeyError:
            return f"running as root and there is no {_RUN_AS!r} OS user to run initdb as"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_owner(args: list[str]) -> list[str]:
    return ["runuser", "-u", _RUN_AS, "--", *args] if os.geteuid() == 0 else args


def _run(args: list[str], what: str) -> None:
    result = subprocess.run(_as_owner(args), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed ({result.returncode}): {result.stderr[-2000:]}")


def _reap_orphans(bin_dir: Path, parent: Path) -> None:
    """Stop and delete clusters left by test runs that were killed (their owner is gone)."""
    for owner_file in parent.glob(f"{_PREFIX}*/{_OWNER_FILE}"):
        try:
            os.kill(int(owner_file.read_text()), 0)
            continue  # the run that started it is still alive
        except ProcessLookupError:
            pass
        except (ValueError, OSError):
            continue
        data = owner_file.parent / "data"
        subprocess.run(
            _as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(owner_file.parent, ignore_errors=True)


@contextlib.contextmanager
def start_postgres(bin_dir: Path) -> Iterator[PostgresServer]:
    """Start a private cluster with the binaries in `bin_dir`; stop and delete it after."""
    # as root, the cluster's owner must reach the dir: /tmp, not a private TMPDIR
    parent = "/tmp" if os.geteuid() == 0 and os.path.isdir("/tmp") else None
    _reap_orphans(bin_dir, Path(parent or tempfile.gettempdir()))
    root = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=parent))
    (root / _OWNER_FILE).write_text(str(os.getpid()))
    if os.geteuid() == 0:
        owner = pwd.getpwnam(_RUN_AS)
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data = root / "data"
    initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "dockyard", "-A", "trust"]
    _run([*initdb, "-E", "UTF8", "--no-sync", "--no-instructions"], "initdb")
    pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log")]
    port = 0
    try:
        for attempt in range(3):
            port = _free_port()
            options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} {_SERVER_OPTIONS}"
            try:
                _run([*pg_ctl, "-w", "-t", "60", "-o", options, "start"], "pg_ctl start")
                break
            except RuntimeError:
                if attempt == 2:
                    log = root / "server.log"
                    raise RuntimeError(
                        "PostgreSQL did not start: "
                        + (log.read_text()[-2000:] if log.exists() else "no log")
                    ) from None
        yield PostgresServer(f"postgresql+psycopg://dockyard@127.0.0.1:{port}/postgres")
    finally:
        subprocess.run(
            _as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(root, ignore_errors=True)


_SERVER_KEY = pytest.StashKey[PostgresServer]()


@pytest.fixture(scope="session")
def postgres_server(request: pytest.FixtureRequest) -> PostgresServer:
    """A PostgreSQL server for the whole session (see the module docstring).

    Kept in the pytest config's stash, so conftests in several test packages that import
    this fixture share one cluster; it is stopped when the session ends.
    """
    config = request.config
    server = config.stash.get(_SERVER_KEY, None)
    if server is not None:
        return server
    existing = os.environ.get(ENV_URL)
    if existing:
        server = PostgresServer(existing)
    else:
        reason = postgres_unavailable_reason()
        if reason is not None:
            skip_or_fail(reason)
        bin_dir = find_postgres_bin()
        assert bin_dir is not None
        stack = contextlib.ExitStack()
        config.add_cleanup(stack.close)
        server = stack.enter_context(start_postgres(bin_dir))
    config.stash[_SERVER_KEY] = server
    return server


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database for the session (no schema: run migrations yourself)."""
    return postgres_server.create_database()
