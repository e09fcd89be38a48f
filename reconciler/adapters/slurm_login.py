"""A Slurm cluster's login node, over SSH: what the cluster has, read from the cluster.

As dstack's Slurm backend does it: the server logs in to each cluster's login node
(`hostname`, `port`, `user`, `private_key` of the backends file's cluster entry, through
`proxy_jump` when set) and runs Slurm's own commands there. `read_cluster` runs
`scontrol show node --oneliner` and `sinfo` and hands their text to the pure parsers
(`reconciler.core.slurm_nodes`), which make the cluster's offers under its
`gpu_partitions`/`cpu_partitions`. Called by the server for `dockyard offer` and the plan
(the next slice wires it there) and by tests against a real one-node cluster.

Errors are `SlurmUnavailable`, one line naming the cluster, the login node and what failed
(connect, a command's exit status and stderr, text the parsers refuse): the plan shows it.
Host keys are checked against `known_hosts` when given (None: not checked, as SSH fleets).
"""

from __future__ import annotations

import asyncio
import os
from contextlib import AsyncExitStack

import asyncssh

from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.slurm_nodes import (
    ClusterOffer,
    SlurmParseError,
    cluster_offers,
    parse_nodes,
    parse_partitions,
)
from schemas.serverbackends import PrivateKey, ProxyJump, SlurmBackend, SlurmCluster

NODES_COMMAND = "scontrol show node --oneliner"
PARTITIONS_COMMAND = "sinfo --noheader --format='%R|%a'"
MAX_OUTPUT = 16 * 1024 * 1024  # a 10,000-node cluster prints ~8 MB of node lines


class SlurmUnavailable(Exception):  # noqa: N818 - a state of the cluster, as StackUnavailable
    """The cluster could not be read; the message is the line the plan and CLI show."""


def _client_keys(key: PrivateKey | None) -> list[asyncssh.SSHKey] | None:
    if key is None:
        return None
    if key.content is not None:
        return [asyncssh.import_private_key(key.content)]
    assert key.path is not None
    return [asyncssh.read_private_key(os.path.expanduser(key.path))]


async def _connect(
    stack: AsyncExitStack, cluster: SlurmCluster, known_hosts: str | None, limit_s: float
) -> asyncssh.SSHClientConnection:
    tunnel: asyncssh.SSHClientConnection | None = None
    jump: ProxyJump | None = cluster.proxy_jump
    if jump is not None:
        tunnel = await stack.enter_async_context(
            asyncssh.connect(
                jump.hostname,
                jump.port,
                username=jump.user or cluster.user,
                client_keys=_client_keys(jump.private_key or cluster.private_key),
                known_hosts=known_hosts,
                config=None,
                agent_path=None,
                connect_timeout=limit_s,
            )
        )
    return await stack.enter_async_context(
        asyncssh.connect(
            cluster.hostname,
            cluster.port,
            username=cluster.user,
            client_keys=_client_keys(cluster.private_key),
            known_hosts=known_hosts,
            tunnel=tunnel or (),
            config=None,
            agent_path=None,
            connect_timeout=limit_s,
        )
    )


async def _bounded(reader: asyncssh.SSHReader[str], limit: int) -> tuple[str, bool]:
    """What `reader` gives until EOF, at most `limit` characters kept; (text, cut short)."""
    kept: list[str] = []
    size = 0
    while chunk := str(await reader.read(65536)):
        if size + len(chunk) > limit:
            kept.append(chunk[: limit - size])
            return "".join(kept), True
        kept.append(chunk)
        size += len(chunk)
    return "".join(kept), False


async def run_command(
    conn: asyncssh.SSHClientConnection,
    command: str,
    limit_s: float,
    max_output: int,
    *,
    stdin: str | None = None,
) -> str:
    """`command`'s output (`stdin` written to it first); its size is bounded while it is
    read, not after (a login node that prints without end costs `max_output` bytes of
    memory, then the channel closes). Also the Slurm engine's (`engine.slurmengine`)."""
    try:
        async with (
            asyncio.timeout(limit_s),
            conn.create_process(command, encoding="utf-8", errors="replace") as proc,
        ):
            if stdin is not None:
                proc.stdin.write(stdin)
                proc.stdin.write_eof()
            out, too_long = await _bounded(proc.stdout, max_output)
            if too_long:  # leaving the block closes the channel: the rest is never read
                raise SlurmUnavailable(f"`{command}` printed more than {max_output} bytes")
            err, _ = await _bounded(proc.stderr, 4096)
            await proc.wait(check=False)
            status = proc.exit_status
    except TimeoutError:
        raise SlurmUnavailable(f"`{command}` did not finish in {limit_s:g} s") from None
    if status != 0:
        raise SlurmUnavailable(
            f"`{command}` exited with {status}: {err.strip()[:500] or out[:500]}"
        )
    return out


async def read_cluster(
    cluster: SlurmCluster,
    *,
    known_hosts: str | None = None,
    limit_s: float = 30.0,
    max_output: int = MAX_OUTPUT,
) -> tuple[ClusterOffer, ...]:
    """The cluster's offers, read on its login node (see the module docstring); `limit_s`
    bounds the login and each command, `max_output` what one command may print."""
    login = f"{cluster.user}@{cluster.hostname}:{cluster.port}"
    where = f"Slurm cluster `{cluster.name}` (login node {login})"
    try:
        async with AsyncExitStack() as stack:
            conn = await _connect(stack, cluster, known_hosts, limit_s)
            nodes_text = await run_command(conn, NODES_COMMAND, limit_s, max_output)
            partitions_text = await run_command(conn, PARTITIONS_COMMAND, limit_s, max_output)
        nodes = parse_nodes(nodes_text)
        partitions = parse_partitions(partitions_text)
    except SlurmUnavailable as exc:
        raise SlurmUnavailable(f"{where}: {exc}") from None
    except SlurmParseError as exc:
        raise SlurmUnavailable(f"{where}: Slurm printed what Dockyard cannot read: {exc}") from None
    except (TimeoutError, OSError, asyncssh.Error, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
        raise SlurmUnavailable(f"{where}: cannot log in: {reason}") from None
    return cluster_offers(
        cluster.name,
        nodes,
        partitions,
        gpu_partitions={entry.gpu: entry.partitions for entry in cluster.gpu_partitions},
        cpu_partitions=cluster.cpu_partitions,
        price=cluster.price,
    )


async def read_project_clusters(
    clusters: ServerBackends, project: str, *, limit_s: float = 15.0
) -> tuple[tuple[ClusterOffer, ...], tuple[str, ...]]:
    """(offers, errors) of every Slurm cluster of `project`, read at once; a cluster that
    cannot be read is its `SlurmUnavailable` line in errors, the others still count."""
    entries = [
        cluster
        for backend in clusters.config.backends_of(project)
        if isinstance(backend, SlurmBackend)
        for cluster in backend.clusters
    ]
    answers = await asyncio.gather(
        *(read_cluster(c, limit_s=limit_s) for c in entries), return_exceptions=True
    )
    offers: list[ClusterOffer] = []
    errors: list[str] = []
    for answer in answers:
        if isinstance(answer, SlurmUnavailable):
            errors.append(str(answer))
        elif isinstance(answer, BaseException):
            raise answer
        else:
            offers.extend(answer)
    return tuple(offers), tuple(errors)
