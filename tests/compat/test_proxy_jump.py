"""An SSH fleet whose host is reachable only through a jump host (`ssh_config.proxy_jump`).

Two OpenSSH sshd: the jump host in one network namespace, reachable from the server's; the
fleet's host in another, reachable only from the jump host's (`netns.jump_network`: the
server's namespace has no route to it). A real `dockyard server` deploys its agent to the
host through the jump host, and dstack 0.22.5's CLI runs a task there: the run's log comes
back (an attached `dstack apply` streams it, `dstack logs` prints it), `dstack attach`
forwards the job's port and `ssh <run>` (dstack's alias) runs in the job: every byte through
the jump host. Drop the jump on the server's way (the fleets worker or the instance's record)
and the fleet never becomes ready.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.compat.conftest import Dstack, _real, free_port, short_home
from tests.compat.farclient import attached, attached_apply_streams, task
from tests.compat.netns import jump_network
from tests.compat.sshfleet import free_port_pair, stop_deployed_agent
from tests.services.missing import needs_ssh_client, skip_or_fail
from tests.services.sshd import make_client_key, sshd_unavailable_reason, start_sshd
from tests.web.serving import running_server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600), needs_ssh_client()]

FLEET = """type: fleet
name: behind
ssh_config:
  user: root
  identity_file: {key}
  proxy_jump: {{hostname: "{jump}", port: 22, user: root, identity_file: {key}}}
  hosts:
    - {target}
"""


def _connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def test_a_fleet_behind_a_jump_host_deploys_and_runs_a_task(tmp_path: Path) -> None:
    reason = sshd_unavailable_reason()
    if reason:
        skip_or_fail(reason)
    with jump_network() as net:
        key = make_client_key(tmp_path / "client")
        jump = start_sshd(tmp_path / "jump", key, listen=net.jump_ip, port=22,
                          prefix=net.jump.prefix)  # fmt: skip
        target = start_sshd(tmp_path / "target", key, listen=net.target_ip, port=22,
                            prefix=net.target.prefix)  # fmt: skip
        agent_dir = tmp_path / "agent"
        settings = {
            "ssh_agent_dir": str(agent_dir),
            "ssh_agent_port": free_port_pair(),
            "key_dirs": str(key.parent),
        }
        try:
            assert _connects(net.jump_ip, 22)
            assert not _connects(net.target_ip, 22), "the server reaches the host directly"
            workdir = tmp_path / "work"
            workdir.mkdir()
            with (
                short_home(tmp_path / "home") as home,
                running_server(tmp_path, _real, **settings) as server,
            ):
                dstack = Dstack(server, home, workdir)
                _runs_a_task_behind_the_jump(dstack, net.jump_ip, net.target_ip, key)
        finally:
            stop_deployed_agent(agent_dir)
            target.stop()
            jump.stop()


def _runs_a_task_behind_the_jump(dstack: Dstack, jump: str, target: str, key: Path) -> None:
    server = dstack.server
    dstack.ok("project", "add", "--name", "main", "--url", server.url,
              "--token", server.admin_token, "-y")  # fmt: skip
    fleet = FLEET.format(key=key, jump=jump, target=target)
    with server.client(server.admin_token) as http:
        applied = http.post(
            "/api/project/main/fleets/apply", json={"text": fleet, "path": "behind.yml"}
        )
        assert applied.status_code == 200, applied.text
    try:
        wait_until(lambda: dstack.fleet_ready("behind"), timeout=240, what="the fleet")
    except AssertionError:
        with server.client(server.admin_token) as http:
            got = http.post("/api/project/main/fleets/get", json={"name": "behind"}).json()
        raise AssertionError(f"the fleet behind the jump is not ready: {got}") from None
    attached_apply_streams(dstack, "jumpstream")  # its log streams back through the jump
    assert "last-line-of-jumpstream" in dstack.ok("logs", "jumpstream")
    port, local = free_port(), free_port()
    dstack.write("jumped.dstack.yml", task("jumped", port))
    dstack.ok("apply", "-f", "jumped.dstack.yml", "-y", "-d")
    dstack.wait_status("jumped", "running", timeout=180)
    with attached(dstack, None, "jumped", local, port):  # its port, and `ssh jumped`
        pass
    dstack.ok("stop", "jumped", "-x", "-y")
