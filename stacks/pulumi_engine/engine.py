"""The Pulumi engine: one Automation API stack per cloud resource.

- Stack `<project>-<kind>-<name>` in Pulumi project `dockyard`, with its own
  `LocalWorkspace` work dir `<data-dir>/pulumi/workspaces/<stack>`; state in the
  `file://<data-dir>/pulumi/state` backend unless `backend_url` says otherwise.
- One `CancellablePulumiCommand`, built at start-up by `PulumiEngine.create`; without a
  CLI the engine is unavailable ("Pulumi CLI not found: …") and every operation raises
  `StackUnavailable`; nothing else breaks and nothing is installed.
- The passphrase and any credentials go into each workspace's `env_vars` (never
  `os.environ`, never a message); `PULUMI_SKIP_UPDATE_CHECK` is set.
- Operations run through `StackRunner`: an in-process lock per stack (busy → `StackBusy`),
  at most `max_parallel` (4) stacks at once, cancellation sends SIGINT to the CLI and
  clears the stack's lock afterwards. `ConcurrentUpdateError` (another process holds the
  backend lock) → `StackBusy`; a failing program → `StackProgramError` with file and name.

The `pulumi` package is imported only when this module is, and this module only when a
cloud resource needs it (see `stacks.engines`).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Protocol, TypeVar

from pulumi import automation as auto
from pulumi.automation import errors as auto_errors

from stacks.catalog import offers_for_spec
from stacks.programs.config import ProgramSettings
from stacks.programs.registry import Program, build_program
from stacks.protocol import (
    PULUMI_NOT_FOUND,
    Availability,
    EngineName,
    StackBusy,
    StackError,
    StackFailed,
    StackOutputs,
    StackPlan,
    StackProgramError,
    StackResource,
    StackUnavailable,
)
from stacks.pulumi_engine.command import CancellablePulumiCommand, load_command
from stacks.pulumi_engine.events import StepCollector
from stacks.pulumi_engine.settings import PulumiSettings
from stacks.running import StackRunner

PROJECT = "dockyard"
T = TypeVar("T")


class ProgramBuilder(Protocol):
    """`build_program`'s signature (injectable for tests)."""

    def __call__(
        self, resource: StackResource, settings: ProgramSettings, *, nodes: int | None = None
    ) -> Program: ...


_INLINE_ERROR = "python inline source runtime error:"


def _noop_program() -> None:
    """Refresh and destroy read the state; they need no program."""


def _tail(text: str, secret: str, lines: int = 6) -> str:
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    message = " | ".join(kept)
    return message.replace(secret, "***") if secret else message


class PulumiEngine:
    """The `Engine` for aws and gcp fleets, volumes and gateways."""

    name: EngineName = "pulumi"

    def __init__(
        self,
        settings: PulumiSettings,
        command: CancellablePulumiCommand | None,
        availability: Availability,
        *,
        build: ProgramBuilder = build_program,
    ) -> None:
        self._settings = settings
        self._build = build
        self._command = command
        self._availability = availability
        self._runner = StackRunner(max_parallel=settings.max_parallel, thread_name="pulumi")

    @classmethod
    def create(
        cls, settings: PulumiSettings, *, build: ProgramBuilder = build_program
    ) -> PulumiEngine:
        """Find the CLI once; an engine without one is unavailable, not an error."""
        command, availability = load_command(settings.pulumi_root, search_path=settings.search_path)
        return cls(settings, command, availability, build=build)

    def available(self) -> Availability:
        return self._availability

    # workspace --------------------------------------------------------------------------

    def _work_dir(self, resource: StackResource) -> Path:
        return self._settings.data_dir / "pulumi" / "workspaces" / resource.stack_name

    def _options(self, resource: StackResource) -> auto.LocalWorkspaceOptions:
        work_dir = self._work_dir(resource)
        work_dir.mkdir(parents=True, exist_ok=True)
        if self._settings.backend_url is None:
            (self._settings.data_dir / "pulumi" / "state").mkdir(parents=True, exist_ok=True)
        env = {
            **self._settings.env,
            "PULUMI_CONFIG_PASSPHRASE": self._settings.passphrase,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
        }
        backend = auto.ProjectBackend(url=self._settings.state_url)
        return auto.LocalWorkspaceOptions(
            work_dir=str(work_dir),
            pulumi_command=self._command,
            project_settings=auto.ProjectSettings(name=PROJECT, runtime="python", backend=backend),
            env_vars=env,
        )

    def _stack(self, resource: StackResource, program: Program | None) -> auto.Stack:
        stack = auto.create_or_select_stack(
            stack_name=resource.stack_name,
            project_name=PROJECT,
            program=program.run if program is not None else _noop_program,
            opts=self._options(resource),
        )
        if program is not None and program.config:
            stack.set_all_config({k: auto.ConfigValue(v) for k, v in program.config.items()})
        return stack

    def _program(self, resource: StackResource) -> Program:
        if resource.kind == "fleet" and not resource.offers:
            try:
                offers = offers_for_spec(resource.spec)
            except ValueError as exc:
                raise StackProgramError(str(exc), path=resource.path, name=resource.name) from exc
            resource = replace(resource, offers=offers)
        return self._build(resource, self._settings.programs, nodes=resource.nodes)

    # running ----------------------------------------------------------------------------

    def _map_error(self, resource: StackResource, op: str, exc: Exception) -> StackError:
        secret = self._settings.passphrase
        if isinstance(exc, StackError):
            return exc
        if isinstance(exc, auto_errors.ConcurrentUpdateError):
            return StackBusy(f"stack {resource.stack_name} is locked by another update")
        if isinstance(exc, auto_errors.InlineSourceRuntimeError):
            text = str(exc)
            start = text.find(_INLINE_ERROR)
            detail = text[start + len(_INLINE_ERROR) :] if start >= 0 else text
            first = detail.strip().splitlines()[0] if detail.strip() else "program failed"
            message = first.replace(secret, "***") if secret else first
            return StackProgramError(message, path=resource.path, name=resource.name)
        if isinstance(exc, auto_errors.CommandError):
            return StackFailed(f"{resource.label}: pulumi {op} failed: {_tail(str(exc), secret)}")
        if isinstance(exc, OSError | auto_errors.InvalidVersionError):
            return StackUnavailable()
        return StackFailed(f"{resource.label}: pulumi {op} failed: {type(exc).__name__}")

    async def _run(self, resource: StackResource, op: str, work: Callable[[], T]) -> T:
        if not self._availability or self._command is None:
            raise StackUnavailable(self._availability.message or PULUMI_NOT_FOUND)
        command = self._command
        work_dir = str(self._work_dir(resource))
        cancelled = threading.Event()

        def guarded() -> T:
            try:
                return work()
            except Exception as exc:  # every failure becomes a StackError below
                if cancelled.is_set():
                    self._clear_lock(resource)
                    raise StackFailed(f"{resource.label}: pulumi {op} cancelled") from exc
                raise self._map_error(resource, op, exc) from exc

        def on_cancel() -> None:
            cancelled.set()
            command.cancel(work_dir)

        return await self._runner.run(resource.stack_name, guarded, on_cancel=on_cancel)

    def _clear_lock(self, resource: StackResource) -> None:
        try:
            self._stack(resource, None).cancel()
        except auto_errors.CommandError:
            return

    # operations -------------------------------------------------------------------------

    async def preview(self, resource: StackResource) -> StackPlan:
        def work() -> StackPlan:
            program = self._program(resource)
            collector = StepCollector()
            self._stack(resource, program).preview(on_event=collector)
            return collector.plan(resource.stack_name)

        return await self._run(resource, "preview", work)

    async def up(self, resource: StackResource) -> StackOutputs:
        def work() -> StackOutputs:
            program = self._program(resource)
            result = self._stack(resource, program).up(on_event=StepCollector())
            return {key: out.value for key, out in result.outputs.items()}

        return await self._run(resource, "up", work)

    async def refresh(self, resource: StackResource) -> StackPlan:
        def work() -> StackPlan:
            collector = StepCollector()
            self._stack(resource, None).preview_refresh(on_event=collector)
            return collector.plan(resource.stack_name)

        return await self._run(resource, "refresh", work)

    def _existing(self, resource: StackResource) -> auto.Stack | None:
        """The resource's stack, or None when it was never created (nothing to destroy)."""
        try:
            return auto.select_stack(
                stack_name=resource.stack_name,
                project_name=PROJECT,
                program=_noop_program,
                opts=self._options(resource),
            )
        except auto_errors.StackNotFoundError:
            return None

    async def preview_destroy(self, resource: StackResource) -> StackPlan:
        """`pulumi destroy --preview-only`: the resources the stack's state holds."""

        def work() -> StackPlan:
            stack = self._existing(resource)
            collector = StepCollector()
            if stack is not None:
                stack.preview_destroy(on_event=collector)
            return collector.plan(resource.stack_name)

        return await self._run(resource, "destroy preview", work)

    async def destroy(self, resource: StackResource) -> None:
        def work() -> None:
            stack = self._existing(resource)
            if stack is not None:
                stack.destroy(on_event=StepCollector(), remove=True)
            shutil.rmtree(self._work_dir(resource), ignore_errors=True)

        await self._run(resource, "destroy", work)

    async def wait_idle(self, resource: StackResource) -> None:
        """Wait until the stack's last operation (even a cancelled one) has ended."""
        await self._runner.wait_idle(resource.stack_name)

    def shutdown(self) -> None:
        self._runner.shutdown()
