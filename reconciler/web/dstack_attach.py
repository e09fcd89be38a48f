"""What dstack's `attach` reads from the server: the caller's key pair and where jobs are.

dstack's client (`Run.attach`) compares the run's `run_spec.ssh_key_pub` with the key pair
`users/get_my_user` gave it, then opens `ssh -N -L … root@<run>`. Local jobs are presented as
"dockerized", so dstack writes two aliases: `Host <run>-host` (the local agent's embedded SSH
server, user = the job's id) and `Host <run>` (`localhost:<job_runtime_data.ports[10022]>`
through `ProxyJump <run>-host`, user = the run name). Both hops land on the local agent: the
first says which job, the second is tied to it (`agent.ssh.jump`), so its sessions are the
job's and its forward of dstack-runner's port 10999 streams the job's log (attached `apply`,
`attach --logs`, `Run.logs()`; `agent.ssh.runner_api`). Jobs on SSH hosts are presented the
same way, with the first hop at the server's loopback listener to the host agent's SSH
server (`controller.session_forward`, `engine.sessionforwards`) and the second at that
server's own port on the host. With `--attach-host` (`settings.attach_host`) jobs are
presented at that address instead of 127.0.0.1, and the local agent's first hop goes
through a listener there too (`controller.local_session_forward`), so a dstack client on
another machine attaches. Called by routes_core (get_my_user) and the run answers
(routes_runs, routes_dstack).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from agent.local import local_agent_ssh_port
from reconciler.adapters.db.readmodels.accounts import list_projects, list_users
from reconciler.adapters.db.readmodels.capacity import wake_ssh_fleets
from reconciler.adapters.user_keys import UserKeyPair, UserKeys
from reconciler.api import models as wire
from reconciler.domain.principals import Principal
from reconciler.web.context import WebContext

log = logging.getLogger(__name__)

LOCAL_HOST = "127.0.0.1"
PUSH_WAIT = 20.0  # seconds a new key pair waits for SSH hosts' key files (then: next pass)
DSTACK_RUNNER_SSH_PORT = 10022  # the job's SSH port dstack's client hops to (its constant)


async def caller_key_pair(context: WebContext, principal: Principal) -> UserKeyPair:
    """The caller's own SSH key pair (generated on first use)."""
    keys = UserKeys(context.settings.data_dir, context.secrets)
    projects = [p.project_name for p in await context.db.read(list_projects, principal)]
    new = not await asyncio.to_thread(keys.has_pair, principal.user_id)
    pair = await asyncio.to_thread(keys.pair, principal.user_id, principal.username, projects)
    push = getattr(context.controller, "push_host_keys", None)
    if new and push is not None:  # SSH hosts' agents know the new key before it is used
        try:
            await asyncio.wait_for(push(), PUSH_WAIT)
        except TimeoutError:
            log.warning("new key of %s: SSH hosts not all updated yet", principal.username)
    return pair


async def sync_user_keys(context: WebContext) -> None:
    """After a membership, project or user change: users' keys on the local agent follow
    their projects now (a removed member loses the project's jobs at once); SSH hosts'
    agents follow at their fleet's next pass, made due now (the fleets worker writes their
    key files when what they should hold changed: no SSH from the web)."""
    projects: dict[str, list[str]] = {}
    for user in await context.db.read(list_users):
        who = Principal(user.id, user.username, user.global_role)
        projects[user.id] = [p.project_name for p in await context.db.read(list_projects, who)]
    keys = UserKeys(context.settings.data_dir, context.secrets)
    await asyncio.to_thread(keys.sync, projects)
    if await context.db.write(wake_ssh_fleets):
        context.controller.hint("fleets")


async def attachable(context: WebContext, principal: Principal, run: wire.Run) -> wire.Run:
    """`run` with the caller's public key as `ssh_key_pub` and its jobs' SSH endpoints."""
    pair = await caller_key_pair(context, principal)
    port = local_agent_ssh_port(context.settings.data_dir.expanduser())
    local = None if port is None else (await _local_listener(context, port) or port, port)
    host = context.settings.attach_host or LOCAL_HOST
    endpoints = await _ssh_endpoints(context, run)
    return with_attach_fields(run, pair.public_key, local, endpoints, host=host)


async def _local_listener(context: WebContext, ssh_port: int) -> int | None:
    """The listener on the attach host to the local agent's SSH server (None: no attach
    host, or a runtime without one; clients then use `ssh_port` on 127.0.0.1)."""
    forward = getattr(context.controller, "local_session_forward", None)
    if forward is None or context.settings.attach_host is None:
        return None
    try:
        port = await forward(ssh_port)
    except OSError as exc:  # e.g. --attach-ports all taken: presented on loopback
        log.warning("no attach listener to the local agent: %s", exc)
        return None
    return None if port is None else int(port)


async def _ssh_endpoints(context: WebContext, run: wire.Run) -> dict[str, tuple[int, int]]:
    """For the run's jobs on SSH hosts, by instance id: the server's listener to the host
    agent's SSH server and that server's port on the host (`controller.session_forward`)."""
    forward = getattr(context.controller, "session_forward", None)
    if forward is None:  # a runtime without SSH hosts (tests' doubles)
        return {}
    wanted = {
        str(s.job_provisioning_data["instance_id"])
        for job in run.jobs
        for s in job.job_submissions[-1:]
        if s.job_provisioning_data
        and s.job_provisioning_data.get("dockyard_backend") == "ssh"
        and s.job_provisioning_data.get("instance_id")
    }
    endpoints: dict[str, tuple[int, int]] = {}
    for instance_id in sorted(wanted):
        try:
            found = await forward(instance_id)
        except OSError as exc:  # e.g. --attach-ports all taken: not attachable now
            log.warning("no attach listener to instance %s: %s", instance_id, exc)
            continue
        if found is not None:
            endpoints[instance_id] = found
    return endpoints


def with_attach_fields(
    run: wire.Run,
    public_key: str,
    local: int | tuple[int, int] | None,
    ssh_endpoints: Mapping[str, tuple[int, int]] | None = None,
    *,
    host: str = LOCAL_HOST,
) -> wire.Run:
    """Pure: fill dstack's attach fields of `run`, jobs presented at `host`: local jobs get
    `local` (the first hop's port, the local agent's SSH port; one int: both the same),
    jobs on SSH hosts (by instance id) the server's listener to the host agent's."""
    pair = (local, local) if isinstance(local, int) else local
    name = run.run_spec.get("run_name") or ""
    jobs = [
        job.model_copy(
            update={
                "job_submissions": [
                    _submission(name, s, pair, ssh_endpoints or {}, host)
                    for s in job.job_submissions
                ]
            }
        )
        for job in run.jobs
    ]
    latest = jobs[0].job_submissions[-1] if jobs and jobs[0].job_submissions else None
    return run.model_copy(
        update={
            "run_spec": {**run.run_spec, "ssh_key_pub": public_key},
            "jobs": jobs,
            "latest_job_submission": latest or run.latest_job_submission,
        }
    )


def _submission(
    run_name: str,
    submission: wire.JobSubmission,
    local: tuple[int, int] | None,
    ssh_endpoints: Mapping[str, tuple[int, int]],
    host: str,
) -> wire.JobSubmission:
    data = submission.job_provisioning_data
    if data is None:
        return submission
    if data.get("dockyard_backend") == "local" and local is not None:
        first, second = local  # the second hop: the agent's own port, as it sees itself
    elif data.get("dockyard_backend") == "ssh" and str(data.get("instance_id")) in ssh_endpoints:
        # the first hop: the server's listener to the host agent's SSH server; the second:
        # `localhost:<its port>` as the host agent sees it, i.e. itself again. The host's
        # own sshd stays in our fields (`dockyard attach`'s alias logs in there).
        first, second = ssh_endpoints[str(data.get("instance_id"))]
        data = {**data, "ssh_hostname": data.get("hostname"), "ssh_host_port": data.get("ssh_port")}
    else:
        return submission
    provisioning = {
        **data,
        "hostname": host,
        "ssh_port": first,
        "username": submission.id,  # the hop's user name: which job (agent.ssh.jump)
        "dockerized": True,
    }
    runtime = {
        "network_mode": "host",
        "username": run_name,
        "ports": {DSTACK_RUNNER_SSH_PORT: second},  # the second hop: the same agent again
    }
    return submission.model_copy(
        update={"job_provisioning_data": provisioning, "job_runtime_data": runtime}
    )
