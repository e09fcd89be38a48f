"""Remote repos: mirror clone and fetch, a corrupt mirror, unreachable remotes, refused auth."""

from __future__ import annotations

import base64
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from reconciler.adapters.gitsource import (
    AuthRefusedError,
    CorruptMirrorError,
    UnreachableRemoteError,
    location_from_env,
)
from reconciler.adapters.gitsource.remotes import RepoLocation
from tests.gitsource.conftest import TASK, ConfigRepo, make_source


def _url(repo: ConfigRepo) -> str:
    return f"file://{repo.path}"


def test_a_url_is_mirrored_in_the_data_dir_and_fetch_sees_new_commits(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    config_repo.write("a.dstack.yml", TASK.format(name="alpha", command="a"))
    first = config_repo.commit()
    source = make_source(_url(config_repo), data_dir)
    assert source.fetch() == first
    mirror = source.mirror.path
    assert mirror.parent == data_dir / "git" and (mirror / "HEAD").is_file()
    config_repo.write("b.dstack.yml", TASK.format(name="beta", command="b"))
    second = config_repo.commit()
    assert source.resolve() == first  # not fetched yet
    assert source.fetch() == second
    assert sorted(source.snapshot(second).files) == ["a.dstack.yml", "b.dstack.yml"]
    again = make_source(_url(config_repo), data_dir)  # a new process reuses the mirror
    assert again.fetch() == second
    assert again.mirror.path == mirror


def test_a_corrupt_mirror_is_cloned_again_once(config_repo: ConfigRepo, data_dir: Path) -> None:
    config_repo.write("a.dstack.yml", TASK.format(name="alpha", command="a"))
    head = config_repo.commit()
    source = make_source(_url(config_repo), data_dir)
    source.fetch()
    mirror = source.mirror.path
    shutil.rmtree(mirror / "objects")
    (mirror / "HEAD").write_text("garbage\n")
    fresh = make_source(_url(config_repo), data_dir)
    assert fresh.fetch() == head
    assert fresh.load(fresh.snapshot(head)).desired.ok


def test_a_mirror_that_cannot_be_replaced_is_reported(
    config_repo: ConfigRepo, data_dir: Path
) -> None:
    config_repo.write("a.dstack.yml", TASK.format(name="alpha", command="a"))
    config_repo.commit()
    source = make_source(_url(config_repo), data_dir)
    source.mirror.path.parent.mkdir(parents=True)
    source.mirror.path.write_text("not a repository")
    with pytest.raises(CorruptMirrorError, match="corrupt"):
        source.fetch()


def test_unreachable_remotes(tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(UnreachableRemoteError, match="cannot reach the config repo file://"):
        make_source(f"file://{tmp_path}/missing.git", data_dir).fetch()
    with pytest.raises(UnreachableRemoteError, match="cannot reach"):
        make_source("http://127.0.0.1:9/repo.git", data_dir).fetch()
    with pytest.raises(UnreachableRemoteError, match="not a git repository"):
        make_source(tmp_path / "nowhere", data_dir).fetch()


class _Refusing(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization"))
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="git"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def refusing_server() -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []
    handler = type("Handler", (_Refusing,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/configs.git", seen
    server.shutdown()
    server.server_close()
    thread.join()


def test_refused_credentials_say_so_without_leaking_the_token(
    refusing_server: tuple[str, list[str | None]], data_dir: Path
) -> None:
    url, seen = refusing_server
    with pytest.raises(AuthRefusedError, match="refused our credentials"):
        make_source(url, data_dir).fetch()
    token = "s3cr3t-token"
    location = location_from_env(url, environ={"DOCKYARD_GIT_TOKEN": token})
    source = make_source(url, data_dir, token=location.token)
    with pytest.raises(AuthRefusedError) as refused:
        source.fetch()
    assert token not in str(refused.value)
    expected = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
    assert expected in seen
    assert not (data_dir / "git").exists() or not any(
        token in p.read_text(errors="ignore") for p in (data_dir / "git").rglob("config")
    )


def test_ssh_locations_use_the_key_file_non_interactively() -> None:
    location = RepoLocation("git@github.com:acme/configs.git", ssh_key=Path("/keys/id ed"))
    assert location.scheme == "ssh"
    env = location.git_env()
    assert env["GIT_SSH_COMMAND"] == (
        "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new "
        "-i '/keys/id ed' -o IdentitiesOnly=yes"
    )
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert RepoLocation("ssh://git@host/r.git").scheme == "ssh"
    assert RepoLocation("https://h/r.git").scheme == "https"
    assert RepoLocation("./configs").scheme == "local"
