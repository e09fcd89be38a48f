"""Pure helpers for dev environments: the IDE link a user opens the run with.

`dockyard attach` shows the link (`reconciler.cli.attach.ide_line`); the SSH alias is the
run's name, written to `~/.dockyard/ssh/config` by `attach`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.caveats import resolve_working_dir

_IDE_SCHEMES = {"vscode": "vscode", "cursor": "cursor", "windsurf": "windsurf"}
DEFAULT_WORKING_DIR = "/workflow"


def ide_link(spec: Mapping[str, Any], run_name: str, working_dir: str | None = None) -> str | None:
    """`vscode://vscode-remote/ssh-remote+<run>/<working_dir>` (likewise cursor, windsurf).

    None when the dev environment has no `ide` (SSH only) or an IDE without such links.
    """
    scheme = _IDE_SCHEMES.get(str(spec.get("ide") or ""))
    if scheme is None:
        return None
    path = (
        working_dir
        or resolve_working_dir(str(spec.get("working_dir") or "") or None)
        or DEFAULT_WORKING_DIR
    )
    if not path.startswith("/"):
        path = "/" + path
    return f"{scheme}://vscode-remote/ssh-remote+{run_name}{path}"
