"""A Docker engine for the tests, and a tiny test image made without a registry.

`docker_engine` (session scope) uses the engine that answers on ``DOCKER_HOST`` or
``/var/run/docker.sock``. If none answers and the tests run as root with ``dockerd``
installed (``docker.io`` from Debian), it starts ``containerd`` on its default socket
(unless one answers there) and then ``dockerd --storage-driver=vfs --iptables=false
--containerd=...`` (default data root and socket, logs in a temp dir), polling each until
it answers. containerd is started apart, as Debian's units do, because dockerd gives the
containerd it starts itself a fixed time to come up, and on a loaded CI machine that time
ran out once (dockerd then exits); started apart it gets our deadline, and a containerd
that never answers is named as the cause. The engine is left running after the session:
other test sessions on the machine may be using it. Otherwise the tests that need it skip
(fail under ``CI=true``) and say why.

The test image ``dockyard-test/busybox:1`` is built with ``docker import`` (the SDK's
``import_image_from_data``) from a rootfs tarball made at test time: ``/bin/busybox``
(Debian's ``busybox-static``, statically linked) with a symlink per applet, ``/etc/passwd``
and the usual empty dirs. No registry is needed.

Use it from any conftest::

    from tests.services.docker import docker_engine  # noqa: F401
"""

from __future__ import annotations

import io
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import pytest
import requests.exceptions

from tests.services.missing import skip_or_fail

TEST_IMAGE = "dockyard-test/busybox:1"
DEFAULT_SOCKET = "unix:///var/run/docker.sock"
BUSYBOX = Path("/bin/busybox")
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
START_DEADLINE = 120.0


@dataclass(frozen=True)
class DockerEngine:
    base_url: str
    image: str

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.base_url, timeout=60)


def _answers(base_url: str) -> bool:
    try:
        client = docker.DockerClient(base_url=base_url, timeout=5)
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False
    finally:
        client.close()


def _containerd_answers() -> bool:
    """True when something accepts connections on containerd's default socket."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(CONTAINERD_SOCKET)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _start_and_wait(argv: list[str], log_path: Path, answers: Callable[[], bool]) -> str | None:
    """Start ``argv`` in its own session; None once ``answers()``, else why not."""
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + START_DEADLINE
    died_at: float | None = None
    while time.monotonic() < deadline:
        if answers():
            return None
        if died_at is None and process.poll() is not None:
            died_at = time.monotonic()  # another session's daemon may be coming up: wait a bit
        if died_at is not None and time.monotonic() - died_at > 10:
            break
        time.sleep(0.2)
    tail = log_path.read_text(errors="replace")[-2000:]
    return f"{argv[0]} did not answer within {START_DEADLINE:.0f}s; its log ends with:\n{tail}"


def _start_engine(log_dir: Path) -> str | None:
    """Start containerd (unless one answers) and dockerd on it; None when both answer."""
    if not _containerd_answers():
        problem = _start_and_wait(
            ["containerd", "--address", CONTAINERD_SOCKET],
            log_dir / "containerd.log",
            _containerd_answers,
        )
        if problem is not None:
            return problem
    return _start_and_wait(
        [
            "dockerd",
            "--storage-driver=vfs",
            "--iptables=false",
            f"--containerd={CONTAINERD_SOCKET}",
        ],
        log_dir / "dockerd.log",
        lambda: _answers(DEFAULT_SOCKET),
    )


def rootfs_tarball(extra_files: dict[str, bytes] | None = None) -> bytes:
    """A tar of ``/bin/busybox`` with a symlink per applet, a few dirs, ``extra_files``."""
    applets = subprocess.run(
        [str(BUSYBOX), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("bin", "etc", "tmp", "proc", "sys", "dev", "root", "work"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        tar.add(str(BUSYBOX), arcname="bin/busybox")
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname = tarfile.SYMTYPE, "busybox"
                tar.addfile(link)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
        for path, content in {"etc/passwd": passwd, **(extra_files or {})}.items():
            info = tarfile.TarInfo(path)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def ensure_test_image(client: docker.DockerClient) -> str:
    try:
        client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        repository, tag = TEST_IMAGE.split(":")
        client.api.import_image_from_data(
            rootfs_tarball(), repository=repository, tag=tag, changes=["ENV PATH=/bin"]
        )
    return TEST_IMAGE


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[DockerEngine]:
    base_url = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    if not _answers(base_url):
        if os.environ.get("DOCKER_HOST"):
            skip_or_fail(f"no Docker engine answers on DOCKER_HOST={base_url}")
        if os.geteuid() != 0 or not (shutil.which("dockerd") and shutil.which("containerd")):
            skip_or_fail(
                "no Docker engine answers, and dockerd cannot be started"
                " (needs root, dockerd and containerd: apt-get install docker.io)"
            )
        problem = _start_engine(Path(tempfile.mkdtemp(prefix="dockyard-dockerd-")))
        if problem is not None:
            skip_or_fail(problem)
    if not BUSYBOX.is_file():
        skip_or_fail(f"{BUSYBOX} is missing: apt-get install busybox-static (for the test image)")
    client = docker.DockerClient(base_url=base_url, timeout=60)
    try:
        image = ensure_test_image(client)
    finally:
        client.close()
    yield DockerEngine(base_url=base_url, image=image)
