"""The server on PostgreSQL: first start, webhook dedupe, isolation and secrets."""

from __future__ import annotations

import pytest

from tests.web.serving import Running
from tests.web.test_webhooks import _deliveries, _fake, _github, _push

pytestmark = pytest.mark.postgres


def test_webhook_dedupe_and_auth_on_postgres(pg_server: Running) -> None:
    assert pg_server.settings.db and pg_server.settings.db.startswith("postgresql")
    first = _github(pg_server, _push(), delivery="pg-1")
    again = _github(pg_server, _push(), delivery="pg-1")
    assert first.json()["outcome"] == "queued" and again.json()["outcome"] == "duplicate"
    assert len(_fake(pg_server).reconciles) == 1 and len(_deliveries(pg_server)) == 1
    with pg_server.client("bad") as http:
        assert http.post("/api/project/main/runs/list", json={}).status_code == 401
    with pg_server.client(pg_server.admin_token) as http:
        body = {"name": "HF_TOKEN", "value": "s3"}
        assert http.post("/api/project/main/secrets/create_or_update", json=body).status_code == 200
        got = http.post("/api/project/main/secrets/get", json={"name": "HF_TOKEN"}).json()
        assert got["value"] == "s3"
        assert http.get("/metrics").status_code == 200
