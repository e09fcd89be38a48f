"""The server starts, creates the admin on first start and answers with a token."""

from __future__ import annotations

import stat

from tests.web.serving import Running


def test_first_start_writes_admin_token_and_cli_config(server: Running) -> None:
    token_file = server.settings.admin_token_path
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    config = server.settings.cli_config.read_text()
    assert server.admin_token in config and server.url in config
    assert stat.S_IMODE(server.settings.cli_config.stat().st_mode) == 0o600
    with server.client(server.admin_token) as http:
        me = http.post("/api/users/get_my_user", json={}).json()
        assert me["username"] == "admin" and me["global_role"] == "admin"
        projects = http.post("/api/projects/list", json={}).json()
        assert [p["project_name"] for p in projects] == ["main"]


def test_tokens_are_stored_hashed(server: Running) -> None:
    with server.client(server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": "alice"}).json()
        assert http.post("/api/users/refresh_token", json={"username": "alice"}).status_code == 200
    with server.client(made["token"]) as http:  # the refreshed-away token no longer works
        assert http.post("/api/users/get_my_user", json={}).status_code == 401
    db_files = list(server.settings.data_dir.glob("dockyard.db*"))
    raw = b"".join(path.read_bytes() for path in db_files)
    assert db_files and server.admin_token.encode() not in raw
