"""The agent bundle: what the server copies to an SSH host to run the agent there, offline.

A bundle is a ``.tar.gz`` holding one ``site/`` directory: our ``agent`` and ``schemas``
packages, a ``dockyard-<version>.dist-info`` (so the agent reports the server's version),
and every third-party distribution the agent imports (the closure of `AGENT_REQUIREMENTS`
over installed metadata), copied file by file from the server's own environment, bytecode
included so that the first start on a host does not compile. On the host it runs as
``PYTHONPATH=<dir>/site python3 -s -m agent serve``: no pip, no venv module, no network
(Debian's python3 ships neither pip nor venv by default).

The price: compiled dependencies (pydantic-core, cryptography) are the server's builds, so
the host's Python must have the same ``cache_tag`` (e.g. cpython-311) and machine (e.g.
x86_64) and a glibc at least as new. `agent.deploy` checks this and says so when it does
not hold. The bundle id is a fingerprint of every file (path, size, mtime), so a changed
checkout gives a new id and a re-deploy even when the version string did not move.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import platform
import re
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from agent.protocol import agent_version

AGENT_REQUIREMENTS = ("pydantic", "fastapi", "uvicorn", "asyncssh", "docker", "httpx", "websockets")
OUR_PACKAGES = ("agent", "schemas")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class Bundle:
    """A built bundle file and what a host needs to run it."""

    path: Path
    bundle_id: str
    version: str
    cache_tag: str
    machine: str
    unpacked_bytes: int


def _requirement_names(dist: metadata.Distribution) -> Iterator[str]:
    for requirement in dist.requires or []:
        name, _, marker = requirement.partition(";")
        if "extra" in marker:
            continue
        match = _NAME.match(name)
        if match:
            yield match.group(1)


def dependency_closure(roots: tuple[str, ...]) -> list[metadata.Distribution]:
    """Installed distributions needed by `roots` (missing optional ones are skipped)."""
    found: dict[str, metadata.Distribution] = {}
    pending = list(roots)
    while pending:
        name = pending.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[key] = dist
        pending.extend(_requirement_names(dist))
    return [found[key] for key in sorted(found)]


def _is_wanted(parts: tuple[str, ...]) -> bool:
    """Sources and data, plus bytecode of this interpreter (the host's must match it)."""
    if parts[0] == "..":
        return False
    if "__pycache__" not in parts:
        return True
    name = parts[-1]
    return name.endswith(f".{sys.implementation.cache_tag}.pyc") and ".opt-" not in name


def _bundle_files() -> list[tuple[str, Path]]:
    """(name in the bundle, source path) of every file, sorted."""
    files: list[tuple[str, Path]] = []
    for dist in dependency_closure(AGENT_REQUIREMENTS):
        for entry in dist.files or []:
            if not _is_wanted(entry.parts):
                continue
            source = Path(str(entry.locate()))
            if source.is_file():
                files.append((f"site/{entry.as_posix()}", source))
    for package in OUR_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"package {package} not importable; cannot build the agent bundle")
        root = Path(spec.origin).parent
        for source in sorted(root.rglob("*")):
            if source.is_file() and _is_wanted(source.relative_to(root).parts):
                files.append((f"site/{package}/{source.relative_to(root).as_posix()}", source))
    return sorted(files)


def _fingerprint(files: list[tuple[str, Path]], version: str) -> str:
    digest = hashlib.sha256(f"{version} {sys.implementation.cache_tag}".encode())
    for name, source in files:
        stat = source.stat()
        digest.update(f"{name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _metadata_text(version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: dockyard\nVersion: {version}\n".encode()


def build_bundle(cache_dir: Path) -> Bundle:
    """The bundle of the running code, built into `cache_dir` unless already there."""
    version = agent_version()
    files = _bundle_files()
    bundle_id = _fingerprint(files, version)
    cache_tag = sys.implementation.cache_tag or "unknown"
    machine = platform.machine()
    unpacked = sum(source.stat().st_size for _, source in files)
    path = cache_dir / f"dockyard-agent-{version}-{cache_tag}-{machine}-{bundle_id}.tar.gz"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
            for name, source in files:
                tar.add(source, arcname=name, recursive=False)
            info = tarfile.TarInfo(f"site/dockyard-{version}.dist-info/METADATA")
            text = _metadata_text(version)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
        partial.rename(path)
    return Bundle(path, bundle_id, version, cache_tag, machine, unpacked)
