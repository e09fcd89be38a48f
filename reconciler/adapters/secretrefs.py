"""Reading what a source's secret reference points at (`env:NAME`, `file:PATH`).

Called by the webhooks for each delivery (`reconciler.web.hookrouting`), so a secret
changed in the environment file or on disk is used at once. Nothing read is logged; a
reference that cannot be read is None (the source then verifies no delivery).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from reconciler.core.sources import parse_ref

log = logging.getLogger(__name__)
MAX_SECRET_BYTES = 4096


def read_ref(ref: str, environ: Mapping[str, str]) -> str | None:
    """The secret `ref` names, stripped; None when unset, empty or unreadable."""
    kind, name = parse_ref(ref)
    if kind == "env":
        return environ.get(name, "").strip() or None
    try:
        with Path(name).open("rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        log.warning("secret file %s cannot be read: %s", name, exc.strerror or exc)
        return None
    if len(data) > MAX_SECRET_BYTES:
        log.warning("secret file %s is over %d bytes: not used", name, MAX_SECRET_BYTES)
        return None
    return data.decode("utf-8", "replace").strip() or None
