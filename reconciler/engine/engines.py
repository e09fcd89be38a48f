"""The stacks engines of a server, from its settings.

`server_engines` builds the local engine (always) and the Pulumi engine when the server has
a passphrase for stack state (`DOCKYARD_PULUMI_PASSPHRASE`); without one, cloud resources
are planned `blocked` with the engine's own message; `slurm`, the Slurm engine
`build_controller` makes when the backends file has a Slurm backend. Called by
`build_controller`.
"""

from __future__ import annotations

import getpass
from pathlib import Path

from reconciler.settings import Settings
from stacks.engines import Engines, build_engines
from stacks.local import LocalSettings
from stacks.programs.config import ProgramSettings
from stacks.protocol import Engine
from stacks.pulumi_engine.settings import PulumiSettings


def server_engines(
    settings: Settings,
    *,
    server_key: Path | None = None,
    slurm: Engine | None = None,
    kubernetes: Engine | None = None,
) -> Engines:
    local = LocalSettings(
        data_dir=settings.data_dir,
        user=getpass.getuser(),
        # what users are shown (a gateway's URL): the address they reach, when it is set
        proxy_url=f"{(settings.external_url or settings.public_url).rstrip('/')}/proxy/services",
    )
    if settings.pulumi_passphrase is None:
        return build_engines(local, None, slurm, kubernetes)
    public_key = ""
    if server_key is not None:
        pub = Path(f"{server_key}.pub")
        public_key = pub.read_text().strip() if pub.exists() else ""
    programs = ProgramSettings(
        ssh_public_key=public_key,
        server_url=settings.external_url or settings.public_url,
        gcp_project=settings.gcp_project,
    )
    pulumi = PulumiSettings(
        data_dir=settings.data_dir,
        programs=programs,
        passphrase=settings.pulumi_passphrase.get_secret_value(),
        backend_url=settings.pulumi_backend,
    )
    return build_engines(local, pulumi, slurm, kubernetes)
