"""Where dstack's client is told to attach (`web.dstack_attach.with_attach_fields`, pure) and
the `--attach-host` setting that moves it off 127.0.0.1 (`Settings.attach_host`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reconciler.api import models as wire
from reconciler.errors import UsageError
from reconciler.settings import Settings
from reconciler.web.dstack_attach import with_attach_fields

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def _run(*backends: str) -> wire.Run:
    jobs = [
        wire.JobInfo(
            job_spec={},
            job_submissions=[
                wire.JobSubmission(
                    id=f"job-{n}",
                    submission_num=0,
                    deployment_num=0,
                    submitted_at=NOW,
                    last_processed_at=NOW,
                    status="running",
                    status_message="running",
                    termination_reason=None,
                    exit_status=None,
                    job_provisioning_data={
                        "dockyard_backend": backend,
                        "instance_id": f"i-{n}",
                        "hostname": "gpu-7.internal",
                        "ssh_port": 22,
                    },
                )
            ],
        )
        for n, backend in enumerate(backends)
    ]
    return wire.Run(
        id="r",
        project_name="main",
        user="admin",
        submitted_at=NOW,
        last_processed_at=NOW,
        status="running",
        status_message="running",
        termination_reason=None,
        run_spec={"run_name": "far"},
        jobs=jobs,
        latest_job_submission=None,
    )


def _data(run: wire.Run, n: int) -> tuple[dict[str, object], dict[str, object]]:
    sub = run.jobs[n].job_submissions[-1]
    assert sub.job_provisioning_data is not None and sub.job_runtime_data is not None
    return sub.job_provisioning_data, sub.job_runtime_data


def test_by_default_jobs_are_presented_on_loopback_at_the_agents_own_port() -> None:
    run = with_attach_fields(_run("local"), "ssh-ed25519 AAA", 2222)
    data, runtime = _data(run, 0)
    assert (data["hostname"], data["ssh_port"], data["username"]) == ("127.0.0.1", 2222, "job-0")
    assert runtime["ports"] == {10022: 2222}


def test_with_an_attach_host_jobs_are_presented_there_at_the_listeners() -> None:
    run = with_attach_fields(
        _run("local", "ssh"), "k", (4100, 2222), {"i-1": (4200, 10997)}, host="10.0.0.5"
    )
    local, local_runtime = _data(run, 0)
    assert (local["hostname"], local["ssh_port"]) == ("10.0.0.5", 4100)
    assert local_runtime["ports"] == {10022: 2222}  # the second hop: the agent, as it sees itself
    ssh, ssh_runtime = _data(run, 1)
    assert (ssh["hostname"], ssh["ssh_port"]) == ("10.0.0.5", 4200)
    assert (ssh["ssh_hostname"], ssh["ssh_host_port"]) == ("gpu-7.internal", 22)
    assert ssh_runtime["ports"] == {10022: 10997}


def test_attach_host_is_an_address_clients_can_reach() -> None:
    assert Settings.from_env({"DOCKYARD_ATTACH_HOST": "10.0.0.5"}).attach_host == "10.0.0.5"
    assert Settings.from_env({}, attach_host="fd00::5").attach_host == "fd00::5"
    assert Settings.from_env({}).attach_host is None
    for bad in ("0.0.0.0", "::", "gpu-box", "10.0.0.5:22", "10.0.0.5 -oProxyCommand=x"):
        with pytest.raises(UsageError, match="attach_host"):
            Settings.from_env({}, attach_host=bad)


def test_attach_ports_is_a_bounded_range() -> None:
    settings = Settings.from_env({"DOCKYARD_ATTACH_PORTS": "41000-41009"})
    assert settings.attach_port_range == range(41000, 41010)
    assert Settings.from_env({}).attach_port_range is None
    for bad in ("80-90", "41000", "41009-41000", "41000-70000", "a-b", "41000-41009-1", "9" * 20):
        with pytest.raises(UsageError, match="attach_ports"):
            Settings.from_env({}, attach_ports=bad)
