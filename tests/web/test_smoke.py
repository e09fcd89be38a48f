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
