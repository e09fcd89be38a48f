"""The embedded SSH server as an agent service (``python -m agent serve --ssh-port …``).

`ssh_server_service` plugs into the agent's composition root (``agent.server.serving``,
an ``AgentService``): it starts `agent.ssh.server` once the HTTP port is bound and stops
it when the agent leaves. What the server allows is read live from the `JobManager`:

- forwarding to the agent's HTTP port (control-plane keys only) and to the host ports of
  jobs that run (any key), each only while the job holds the port (`port_check`);
- a session for user ``<job id>`` or ``<run name>`` (the newest running job of that run
  among the jobs of the key's projects: another project's run of the same name is never
  looked at);
- dstack's attach (`job_access`): the hop to the agent's own SSH server for a job named by
  id or run name (any status), and that job's log for the runner's log stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Callable, Iterator

from agent.jobevents import MAX_WAIT_SECONDS, JobEventKind
from agent.protocol import ExecutorKind, JobState, JobStatus
from agent.server.archives import resolve_path_env
from agent.server.errors import AgentError
from agent.server.executors.process import ProcessExecutor, job_environment, wait_job_leader
from agent.server.jobaccount import JobAccount
from agent.server.portholders import PortHolders
from agent.server.serving import AgentContext, AgentService
from agent.ssh.joblogs import KeptLogs
from agent.ssh.jump import JobAccess, JobLink
from agent.ssh.runner_api import CHUNK, LogPiece, LogReader
from agent.ssh.server import ActivityWatch, ForwardPolicy, SSHServerOptions, start_ssh_server
from agent.ssh.sessions import JobSession, SessionResolver
from agent.ssh.watchedforward import PortCheck

ACTIVE = (JobStatus.RUNNING, JobStatus.PULLING, JobStatus.PENDING)
FINISHED = frozenset(s.value for s in JobStatus if s.is_finished())
PROJECT_LABEL = "dockyard.project"


def forward_policy(context: AgentContext) -> ForwardPolicy:
    def allowed(port: int, by_user: bool) -> bool:
        if port == context.http_port:
            return not by_user  # the agent's API is for the control plane only
        return any(
            mapping.host_port == port
            for state in context.manager.list()
            if state.status == JobStatus.RUNNING
            for mapping in state.ports
        )

    return allowed


def watched_owner(context: AgentContext) -> Callable[[int], str | None]:
    """The id of the running job with ``watch_connections`` that has host port ``port``."""

    def owner(port: int) -> str | None:
        for state in context.manager.list():
            if state.status == JobStatus.RUNNING and any(
                mapping.host_port == port for mapping in state.ports
            ):
                return state.id if context.manager.spec(state.id).watch_connections else None
        return None

    return owner


def port_project(context: AgentContext) -> Callable[[int], str | None]:
    """The project label of the running job that has host port ``port``."""

    def project(port: int) -> str | None:
        for state in context.manager.list():
            if state.status == JobStatus.RUNNING and any(
                mapping.host_port == port for mapping in state.ports
            ):
                return context.manager.spec(state.id).labels.get(PROJECT_LABEL)
        return None

    return project


def port_check(context: AgentContext, holders: PortHolders) -> PortCheck:
    """Why a forward to host port ``port`` would not reach the running job that declares
    it (`PortHolders.job_port_problem`), or None: also for a port no job has (the agent's,
    which the forward policy allows to the control plane only)."""
    manager = context.manager

    async def check(port: int) -> str | None:
        states = manager.list()
        return await asyncio.to_thread(holders.job_port_problem, states, manager.spec, port)

    return check


def find_job(
    states: list[JobState], run_names: dict[str, str], name: str, *, finished: bool = False
) -> JobState | None:
    """Pure: the job a session user name means (an id, else the newest running job of a run;
    with `finished`, else the newest job of that run that has ended)."""
    for state in states:
        if state.id == name:
            return state
    candidates = [
        s for s in states if run_names.get(s.id) == name and (s.status in ACTIVE or finished)
    ]
    candidates.sort(
        key=lambda s: (s.status in ACTIVE, s.status == JobStatus.RUNNING, s.started_at or 0.0)
    )
    return candidates[-1] if candidates else None


def session_resolver(context: AgentContext) -> SessionResolver:
    manager = context.manager

    async def resolve(name: str, projects: frozenset[str] | None) -> JobSession | None:
        states = [
            state
            for state in manager.list()
            if projects is None or _project(context, state.id) in projects
        ]
        run_names = {state.id: manager.spec(state.id).run_name for state in states}
        state = find_job(states, run_names, name)
        if state is None or state.status != JobStatus.RUNNING:
            return None
        spec = manager.spec(state.id)
        project = spec.labels.get(PROJECT_LABEL)
        if spec.executor == ExecutorKind.DOCKER:
            return JobSession(
                state.id, "docker", spec.working_dir, {}, state.container_id, project=project
            )
        process = context.executors.get(ExecutorKind.PROCESS)
        account = process.account if isinstance(process, ProcessExecutor) else JobAccount()
        files = manager.files(state.id)
        try:  # as the job's own account, in its working dir, with its environment
            owner = account.owner(spec, files.root)
        except (KeyError, OSError):
            return None
        work_dir = account.view_work_dir(spec, files.work_dir)
        base = account.base_environment(spec, os.environ, work_dir, owner[0] if owner else None)
        env = job_environment(spec, base) | resolve_path_env(spec.path_env, work_dir)
        enter: tuple[str, ...] = ()
        if account.sandbox is not None and owner is not None:
            leader = await wait_job_leader(files)
            if leader is None:
                return None
            enter = tuple(account.sandbox.enter_argv(leader, owner))
        return JobSession(
            state.id, "process", work_dir, env, owner=owner, project=project, enter=enter
        )

    return resolve


def job_access(context: AgentContext, kept: KeptLogs) -> JobAccess:
    """dstack's attach through the agent: jobs of the key's projects by outer user name
    (live ones, else those whose logs are kept after removal), and their logs."""
    manager = context.manager

    def find(name: str, projects: frozenset[str] | None) -> JobLink | None:
        states = [
            state
            for state in manager.list()
            if projects is None or _project(context, state.id) in projects
        ]
        run_names = {state.id: manager.spec(state.id).run_name for state in states}
        state = find_job(states, run_names, name, finished=True)
        if state is None:
            return kept.find(name, projects)
        _keep(context, kept, state.id)  # attached: its log outlives the job's removal
        return kept.find(state.id) or JobLink(state.id, _project(context, state.id))

    def log(job_id: str) -> LogReader:
        def read(offset: int) -> LogPiece:
            try:  # before reading: no byte can follow what is read after the end
                finished = manager.get(job_id).status.is_finished()
            except AgentError:
                finished = True
            data = kept.read(job_id, offset, CHUNK)
            if data is not None:
                return LogPiece(data, offset + len(data), finished)
            try:
                chunk = manager.read_logs(job_id, offset=offset, limit=CHUNK)
            except AgentError:  # removed, and its log was not kept
                return LogPiece(b"", offset, True)
            return LogPiece(chunk.data, chunk.next_offset, chunk.finished)

        return read

    def ended_at(job_id: str) -> float | None:
        try:
            return manager.get(job_id).finished_at
        except AgentError:  # removed: as it was kept
            return kept.ended_at(job_id)

    return JobAccess(find, log, ended_at)


def _project(context: AgentContext, job_id: str) -> str | None:
    return context.manager.spec(job_id).labels.get(PROJECT_LABEL)


def _keep(context: AgentContext, kept: KeptLogs, job_id: str) -> None:
    manager = context.manager
    try:
        spec, log = manager.spec(job_id), manager.files(job_id).log
        ended_at = manager.get(job_id).finished_at
    except AgentError:
        return
    kept.keep(JobLink(job_id, spec.labels.get(PROJECT_LABEL)), spec.run_name, log, ended_at)


async def keep_ended_logs(
    context: AgentContext, kept: KeptLogs, stopping: asyncio.Event | None = None
) -> None:
    """Follow the job events: each job that ends has its log kept (`KeptLogs`), until
    `stopping` is set. (Cancelling alone may not stop it: on Python 3.11
    `asyncio.wait_for` swallows a cancel that comes as the awaited event fires, and the
    agent's leaving publishes events; `stopping` is checked after each page.)"""
    seq, epoch = 0, ""
    while stopping is None or not stopping.is_set():
        page = await context.manager.events.wait(seq, epoch, MAX_WAIT_SECONDS, linger=0.0)
        ended = [
            event.job_id
            for event in page.events
            if event.kind == JobEventKind.STATE and event.status in FINISHED
        ]
        if page.reset:
            ended = [s.id for s in context.manager.list() if s.status.is_finished()]
        for job_id in ended:
            _keep(context, kept, job_id)
        seq, epoch = page.seq, page.epoch


@contextlib.contextmanager
def keep_before_removal(context: AgentContext, kept: KeptLogs) -> Iterator[None]:
    """While open, a finished job's log is kept just before the job is removed: the
    server's removal, which follows the end event, can come before `keep_ended_logs`
    has seen that event, and a late `attach` would then find nothing."""
    keep_first = functools.partial(_keep, context, kept)
    context.manager.before_remove.append(keep_first)
    try:
        yield
    finally:
        context.manager.before_remove.remove(keep_first)


def ssh_server_service(options: SSHServerOptions) -> AgentService:
    """An ``AgentService`` running the embedded SSH server with `options`."""

    @contextlib.asynccontextmanager
    async def service(context: AgentContext) -> AsyncIterator[None]:
        watch = ActivityWatch(context.manager.activity, watched_owner(context))
        kept, stopping = KeptLogs(), asyncio.Event()
        keeper = asyncio.create_task(keep_ended_logs(context, kept, stopping), name="kept-job-logs")
        with keep_before_removal(context, kept):
            acceptor = await start_ssh_server(
                options,
                policy=forward_policy(context),
                sessions=session_resolver(context),
                watch=watch,
                port_project=port_project(context),
                access=job_access(context, kept),
                port_check=port_check(context, PortHolders()),
            )
            context.manager.activity.watch()
            try:
                yield
            finally:
                acceptor.close()
                await acceptor.wait_closed()
                stopping.set()
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
                kept.close()

    return service
