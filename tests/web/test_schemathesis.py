"""A bounded schemathesis run over the server's OpenAPI document, against a real server.

For every operation, generated requests (a few examples each, derandomized) must never get
a 5xx with an admin token, and must get 401 without one (unless the route is open).
"""

from __future__ import annotations

import time
from typing import Any

import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.web.serving import Running

OPEN = ("/healthcheck", "/api/webhooks/")
EXAMPLES = 4
BUDGET_SECONDS = 90.0


def test_schemathesis_no_5xx_and_no_auth_bypass(server: Running) -> None:
    with server.client(server.admin_token) as http:
        raw: dict[str, Any] = http.get("/openapi.json").json()
    schema = schemathesis.openapi.from_dict(raw)
    schema.config.update(base_url=server.url)
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    started = time.monotonic()
    session = requests.Session()
    failures: list[str] = []
    operations = 0
    calls: list[int] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(
            case=st.one_of(
                operation.as_strategy(GenerationMode.POSITIVE),
                operation.as_strategy(GenerationMode.NEGATIVE),
            )
        )
        def check(case: Any) -> None:
            answer = case.call(session=session, headers=admin, timeout=10)
            calls.append(answer.status_code)
            if answer.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path}: {answer.status_code}")
            if not case.operation.path.startswith(OPEN):
                anonymous = case.call(session=session, headers={"Authorization": ""}, timeout=10)
                if anonymous.status_code != 401:
                    failures.append(
                        f"{case.method} {case.formatted_path} without token: "
                        f"{anonymous.status_code}"
                    )

        check()
        assert time.monotonic() - started < BUDGET_SECONDS, "schemathesis run over budget"
    assert operations > 40
    assert len(calls) >= operations * 2, "too few generated requests"
    assert any(code < 300 for code in calls) and any(code == 422 for code in calls)
    assert not failures, "\n".join(failures[:20])
    # the admin still works after the fuzzing (no destructive call took its token away)
    with server.client(server.admin_token) as http:
        assert http.post("/api/users/get_my_user", json={}).status_code == 200
