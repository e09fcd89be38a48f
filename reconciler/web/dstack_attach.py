"""What dstack's `attach` reads from the server: the caller's key pair and where jobs are.

dstack's client (`Run.attach`) compares the run's `run_spec.ssh_key_pub` with the key pair
`users/get_my_user` gave it, then opens `ssh -N -L … root@<run>`. Local jobs are presented as
"dockerized", so dstack writes two aliases: `Host <run>-host` (the local agent's embedded SSH
server, user = the job's id) and `Host <run>` (`localhost:<job_runtime_data.ports[10022]>`
through `ProxyJump <run>-host`, user = the run name). Both hops land on the local agent: the
first says which job, the second is tied to it (`agent.ssh.jump`), so its sessions are the
job's and its forward of dstack-runner's port 10999 streams the job's log (attached `apply`,
`attach --logs`, `Run.logs()`; `agent.ssh.runner_api`). Called by routes_core (get_my_user)
and the run answers (routes_runs, routes_dstack).
"""

from __future__ import annotations

import asyncio

from agent.local import local_agent_ssh_port
from reconciler.adapters.user_keys import UserKeyPair, UserKeys
from reconciler.api import models as wire
from reconciler.domain.principals import Principal
from reconciler.web.context import WebContext
from reconciler.web.queries_accounts import list_projects, list_users

LOCAL_HOST = "127.0.0.1"
DSTACK_RUNNER_SSH_PORT = 10022  # the job's SSH port dstack's client hops to (its constant)


async def caller_key_pair(context: WebContext, principal: Principal) -> UserKeyPair:
    """The caller's own SSH key pair (generated on first use)."""
    keys = UserKeys(context.settings.data_dir, context.secrets)
    projects = [p.project_name for p in await context.db.read(list_projects, principal)]
    return await asyncio.to_thread(keys.pair, principal.user_id, principal.username, projects)


async def sync_user_keys(context: WebContext) -> None:
    """After a membership, project or user change: users' keys on the local agent follow
    their projects now (a removed member loses the project's jobs at once)."""
    projects: dict[str, list[str]] = {}
    for user in await context.db.read(list_users):
        who = Principal(user.id, user.username, user.global_role)
        projects[user.id] = [p.project_name for p in await context.db.read(list_projects, who)]
    keys = UserKeys(context.settings.data_dir, context.secrets)
    await asyncio.to_thread(keys.sync, projects)


async def attachable(context: WebContext, principal: Principal, run: wire.Run) -> wire.Run:
    """`run` with the caller's public key as `ssh_key_pub` and its local jobs' SSH endpoint."""
    pair = await caller_key_pair(context, principal)
    port = local_agent_ssh_port(context.settings.data_dir.expanduser())
    return with_attach_fields(run, pair.public_key, port)


def with_attach_fields(run: wire.Run, public_key: str, local_ssh_port: int | None) -> wire.Run:
    """Pure: fill dstack's attach fields of `run` (local jobs get the agent's SSH port)."""
    jobs = [
        job.model_copy(
            update={
                "job_submissions": [
                    _submission(run.run_spec.get("run_name") or "", s, local_ssh_port)
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
    run_name: str, submission: wire.JobSubmission, local_ssh_port: int | None
) -> wire.JobSubmission:
    data = submission.job_provisioning_data
    if data is None or data.get("dockyard_backend") != "local" or local_ssh_port is None:
        return submission
    provisioning = {
        **data,
        "hostname": LOCAL_HOST,
        "ssh_port": local_ssh_port,
        "username": submission.id,  # the hop's user name: which job (agent.ssh.jump)
        "dockerized": True,
    }
    runtime = {
        "network_mode": "host",
        "username": run_name,
        "ports": {DSTACK_RUNNER_SSH_PORT: local_ssh_port},  # the second hop: the agent again
    }
    return submission.model_copy(
        update={"job_provisioning_data": provisioning, "job_runtime_data": runtime}
    )
