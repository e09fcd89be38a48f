"""The shared `pulumi` CLI handle: found once at start-up, cancellable per work dir.

`find_pulumi_root` looks for the CLI (a configured root, then `PATH`, then
`~/.pulumi/versions/<sdk version>`); `load_command` builds the one
`CancellablePulumiCommand` every workspace shares, or says why it cannot (the engine is
then unavailable with the exact user-facing message). It never installs the CLI.

`CancellablePulumiCommand` keeps the SDK's `run` contract but starts
each CLI process in its own session and remembers it by work dir, so `cancel(work_dir)`
can send SIGINT (the CLI's graceful cancel) to a running update of that stack.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pulumi.automation import CommandResult, PulumiCommand
from pulumi.automation.errors import InvalidVersionError, create_command_error

from stacks.protocol import PULUMI_NOT_FOUND, Availability

MIN_CLI_VERSION = (3, 181)


def find_pulumi_root(
    configured: Path | None, *, search_path: str | None, sdk_version: str
) -> Path | None:
    """The directory `X` such that `X/bin/pulumi` is the CLI to use, or None."""
    if configured is not None:
        return configured if (configured / "bin" / "pulumi").exists() else None
    found = shutil.which("pulumi", path=search_path)
    if found is not None:
        binary = Path(found).resolve()
        if binary.parent.name == "bin":
            return binary.parent.parent
    versioned = Path.home() / ".pulumi" / "versions" / sdk_version
    return versioned if (versioned / "bin" / "pulumi").exists() else None


class CancellablePulumiCommand(PulumiCommand):
    """`PulumiCommand` whose running processes can be interrupted per work dir."""

    def __init__(self, root: str) -> None:
        super().__init__(root=root)
        self._running: dict[str, subprocess.Popen[str]] = {}
        self._guard = threading.Lock()

    def cancel(self, cwd: str) -> bool:
        """Send SIGINT to the CLI running in `cwd`; False if none runs."""
        with self._guard:
            process = self._running.get(cwd)
        if process is None or process.poll() is not None:
            return False
        os.killpg(process.pid, signal.SIGINT)
        return True

    def run(
        self,
        args: list[str],
        cwd: str,
        additional_env: Mapping[str, str],
        on_output: Any = None,
        on_error: Any = None,
    ) -> CommandResult:
        if "--non-interactive" not in args:
            args.insert(0, "--non-interactive")
        env = {**os.environ, **additional_env, "PULUMI_AUTOMATION_API": "true"}
        bin_dir = os.path.dirname(self.command)
        env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
        out: list[str] = []
        err: list[str] = []
        with subprocess.Popen(
            [self.command, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            encoding="utf-8",
            start_new_session=True,
        ) as process:
            with self._guard:
                self._running[cwd] = process
            readers = [
                threading.Thread(target=_drain, args=(process.stdout, on_output, out)),
                threading.Thread(target=_drain, args=(process.stderr, on_error, err)),
            ]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()
            code = process.wait()
        with self._guard:
            self._running.pop(cwd, None)
        result = CommandResult(stdout="\n".join(out), stderr="\n".join(err), code=code)
        if code != 0:
            raise create_command_error(result)
        return result


def _drain(stream: Any, callback: Any, chunks: list[str]) -> None:
    for line in iter(stream.readline, ""):
        text = line.rstrip()
        if callback is not None:
            callback(text)
        chunks.append(text)
    stream.close()


def load_command(
    configured: Path | None, *, search_path: str | None
) -> tuple[CancellablePulumiCommand | None, Availability]:
    """Build the shared command once; never raises, never installs."""
    from pulumi._version import version as sdk_version

    root = find_pulumi_root(configured, search_path=search_path, sdk_version=str(sdk_version))
    if root is None:
        return None, Availability(False, PULUMI_NOT_FOUND)
    try:
        command = CancellablePulumiCommand(root=str(root))
    except (OSError, subprocess.CalledProcessError):
        return None, Availability(False, PULUMI_NOT_FOUND)
    except InvalidVersionError as exc:
        return None, Availability(False, f"Pulumi CLI unusable: {exc}")
    version = command.version
    if version is not None and (version.major, version.minor) < MIN_CLI_VERSION:
        needed = ".".join(map(str, MIN_CLI_VERSION))
        return None, Availability(False, f"Pulumi CLI {version} is too old: need >= {needed}")
    return command, Availability(True)
