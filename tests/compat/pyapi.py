"""Scripts the compat tests run through dstack's own Python API (`DstackCLI.python`).

Used by test_attach.py (local fleet) and test_attach_ssh.py (SSH fleet): the same
`Run.attach()` check on either kind of host.
"""

from __future__ import annotations

_ATTACH = """
import json, urllib.request
from dstack.api import Client
from dstack._internal.core.models.configurations import PortMapping

run = Client.from_config().runs.get({run!r})
assert run.attach(ports_overrides=[PortMapping(local_port={local}, container_port={port})])
try:
    status = 0
    for _ in range({tries}):
        try:
            status = urllib.request.urlopen("http://127.0.0.1:{local}/", timeout=5).status
            break
        except OSError:
            run.refresh()
finally:
    run.detach()
print(json.dumps(status))
"""


def attach_script(run: str, *, local: int, port: int, tries: int) -> str:
    """A script that attaches to `run` with dstack's `Run.attach()`, forwarding local port
    `local` to the job's `port`, and prints the HTTP status the forward answered (0: none)."""
    return _ATTACH.format(run=run, local=local, port=port, tries=tries)
