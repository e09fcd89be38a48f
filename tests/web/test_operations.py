"""Day two through the API: capped logs say what was dropped; /healthcheck and /metrics
report a nearly full data dir (a real tmpfs filled by the test) and its recovery."""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path

import httpx

from reconciler.adapters.db.models import Job, Run
from reconciler.engine.joblogs import LogCap, job_log_path, write_chunk
from reconciler.engine.retention import RetentionPolicy, RetentionSweeper
from tests.operations.tmpfs import fill, tmpfs
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server


def _job_with_log(server: Running, output: bytes, cap: LogCap) -> None:
    store = server.server.store
    project = store.get_or_create_project("main")
    now = store.now()
    run = store.add(Run(project_id=project.id, run_name="chatty", run_type="task", spec={},
                        spec_hash="h", status="done", submitted_at=now))  # fmt: skip
    job = store.add(Job(run_id=run.id, status="done", job_spec={}, submitted_at=now,
                        finished_at=now))  # fmt: skip
    path = job_log_path(server.settings.data_dir, "main", "chatty", job.id)
    offset = 0
    while offset < len(output):
        offset = write_chunk(path, offset, output[offset : offset + 777], cap)


def test_logs_poll_and_stream_say_how_much_the_cap_dropped(server: Running) -> None:
    output = b"".join(b"line %05d\n" % i for i in range(5000))  # 55,000 bytes
    _job_with_log(server, output, LogCap(head=1100, tail=2200))
    http = server.client(server.admin_token)
    body = {"run_name": "chatty", "offset": 0, "limit": 1_000_000}
    text, dropped, offset = b"", 0, 0
    while True:
        chunk = http.post("/api/project/main/logs/poll", json=body | {"offset": offset}).json()
        text += base64.b64decode(chunk["data"])
        dropped += chunk["dropped_bytes"]
        offset = chunk["next_offset"]
        if chunk["finished"]:
            break
    assert offset == len(output)
    assert text.startswith(output[:1100])
    assert 0 < dropped <= len(output) - 1100 - 2200
    assert text.endswith(output[-2200:])
    assert f"[dockyard: {dropped} bytes of this log were dropped here".encode() in text
    streamed = http.post("/api/project/main/logs/stream", json=body).read()
    assert streamed == text


def test_healthcheck_and_metrics_report_a_full_data_dir_until_space_returns(
    tmp_path: Path,
) -> None:
    with (
        tmpfs(tmp_path / "small", 24) as mount,
        running_server(
            tmp_path, lambda s, store: FakeController(store), data_dir=mount / "data",
            min_free_disk=8 * 2**20,
        ) as server,
    ):  # fmt: skip
        http = server.client(server.admin_token)
        assert http.get("/healthcheck").json()["status"] == "ok"
        filler = fill(mount, leave_mib=2)
        health = http.get("/healthcheck").json()
        assert health["status"] == "disk_low"
        assert "disk almost full" in health["disk"]["problem"]
        metrics = http.get("/metrics").text
        assert "dockyard_disk_low 1.0" in metrics
        assert 'dockyard_disk_free_bytes{path="data dir"}' in metrics
        filler.unlink()
        assert http.get("/healthcheck").json()["status"] == "ok"
        assert "dockyard_disk_low 0.0" in http.get("/metrics").text


def test_pruned_runs_answer_as_unknown_ones_and_their_names_show_the_newest(
    server: Running,
) -> None:
    store = server.server.store
    project = store.get_or_create_project("main")
    now = store.now()

    def nightly(days_ago: float) -> tuple[str, str]:
        at = now - timedelta(days=days_ago)
        run = store.add(Run(project_id=project.id, run_name="nightly", run_type="task", spec={},
                            spec_hash="h", status="done", submitted_at=at))  # fmt: skip
        job = store.add(Job(run_id=run.id, status="done", job_spec={}, submitted_at=at,
                            finished_at=at))  # fmt: skip
        return run.id, job.id

    (old, old_job), (new, _) = nightly(40), nightly(35)
    http = server.client(server.admin_token)
    runs = "/api/project/main/runs"
    unknown = http.post(f"{runs}/get", json={"id": "0" * 36})
    assert unknown.status_code >= 400
    by_id = http.post(f"{runs}/get", json={"id": old})
    assert (by_id.status_code, by_id.json()["id"]) == (200, old)  # that run, not its name's newest

    policy = RetentionPolicy.from_settings(server.settings)
    counts = RetentionSweeper(store, server.settings.data_dir, policy, "test").sweep_once()
    assert counts is not None and counts["runs"] == 1  # 30 days by default; the newest stays

    gone = http.post(f"{runs}/get", json={"id": old})
    assert (gone.status_code, gone.json()) == (
        unknown.status_code,
        {"detail": [{**unknown.json()["detail"][0], "msg": f"run {old} not found"}]},
    )
    assert http.post(f"{runs}/get", json={"run_name": "nightly"}).json()["id"] == new
    listed = http.post(f"{runs}/list", json={"all": True}).json()
    assert [r["id"] for r in listed] == [new]
    paged = http.post("/api/runs/list", json={"prev_run_id": old,
                                               "prev_submitted_at": now.isoformat()})  # fmt: skip
    assert [r["id"] for r in paged.json()] == [new]  # a pruned run still pages
    polled = http.post("/api/project/main/logs/poll",
                       json={"run_name": "nightly", "job_submission_id": old_job})  # fmt: skip
    assert polled.status_code == 200 and polled.json()["logs"] == []
    console = httpx.Client(base_url=server.url, timeout=30)
    signed = console.post("/console/login", data={"token": server.admin_token, "next": "/"})
    assert signed.status_code == 303
    assert console.get("/console/p/main/runs/nightly").status_code == 200
    assert console.get("/console/p/main/runs").status_code == 200
