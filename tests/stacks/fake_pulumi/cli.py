"""A fake `pulumi` CLI for driver tests: not the engine, its contract.

Run as `<root>/bin/pulumi`: a shell wrapper runs `python -m tests.stacks.fake_pulumi.cli`.
It implements the subset of the CLI the Automation API calls: `version`, `stack
init/select/ls/rm/output/history`, `config set-all`, `preview`, `up`, `refresh`,
`destroy`, `cancel`. For `preview`/`up` it serves a `ResourceMonitor` over gRPC and calls
`LanguageRuntime.Run` at `--client`, so the real inline program runs in the caller's
process; it diffs registered inputs against a JSON state per stack, writes real engine
events to `--event-log` (the JSON-lines path of CLIs <= 3.205), keeps a DIY-style lock
file, and maps errors to the texts the SDK recognises.

Knobs (environment): FAKE_PULUMI_DRIFT (JSON {name: null | {key: value}}, applied by
refresh), FAKE_PULUMI_HANG_FIFO (up writes "started" there, then waits for SIGINT),
FAKE_PULUMI_LOG (append each argv as a JSON line), FAKE_PULUMI_FAIL (that command fails
with a message that leaks the passphrase, to check it is masked).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from tests.stacks.fake_pulumi.state import (
    VERSION,
    Events,
    Fail,
    Store,
    parse,
    record_history,
    snapshot,
)


def refresh(store: Store, stack: str, flags: dict[str, list[str]], events: Events) -> None:
    state = store.load(stack)
    preview = "--preview-only" in flags
    lock = None if preview else store.lock(stack)
    drift = json.loads(os.environ.get("FAKE_PULUMI_DRIFT") or "{}")
    counts: dict[str, int] = {}
    for urn, res in sorted(state["resources"].items()):
        change = drift.get(res["name"], {})
        new = None if change is None else {**snapshot(res), "outputs": {**res["outputs"], **change}}
        diffs = sorted(change) if change else []
        op = "delete" if new is None else "update" if diffs else "same"
        counts[op] = counts.get(op, 0) + 1
        # like the engine: the step is announced before the read (no diffs known yet) and
        # its result (gone, or the changed keys) comes with the outputs event
        events.step("refresh", res, snapshot(res), snapshot(res), [], [], preview)
        events.outputs("refresh", res, snapshot(res), new, diffs)
        if not preview and new is None:
            del state["resources"][urn]
    events.close(counts)
    if lock is not None:
        record_history(state, "refresh", counts)
        store.save(stack, state)
        lock.unlink()


def destroy(store: Store, stack: str, flags: dict[str, list[str]], events: Events) -> None:
    state = store.load(stack)
    preview = "--preview-only" in flags
    lock = None if preview else store.lock(stack)
    for res in state["resources"].values():
        events.step("delete", res, snapshot(res), None, [], [], preview)
    counts = {"delete": len(state["resources"])}
    events.close(counts)
    if lock is None:
        return
    state["resources"], state["outputs"] = {}, {}
    record_history(state, "destroy", counts)
    store.save(stack, state)
    lock.unlink()


def stack_command(store: Store, words: list[str], flags: dict[str, list[str]]) -> None:
    sub = words[1] if len(words) > 1 else "select"
    stack = (flags.get("--stack") or [words[-1]])[0]
    if sub == "init":
        if not os.environ.get("PULUMI_CONFIG_PASSPHRASE"):
            raise Fail("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE")
        if store.path(stack).exists():
            raise Fail(f"error: stack '{stack}' already exists")
        store.save(stack, {"resources": {}, "outputs": {}, "history": [], "config": {}})
    elif sub == "select":
        store.load(stack)
    elif sub == "rm":
        if store.load(stack)["resources"]:
            raise Fail(f"error: '{stack}' still has resources; removal rejected")
        store.path(stack).unlink()
    elif sub == "output":
        print(json.dumps(store.load(stack)["outputs"]))
    elif sub == "history":
        history = store.load(stack)["history"]
        print(json.dumps(history[: int((flags.get("--page-size") or ["100"])[0])]))
    elif sub == "ls":
        names = sorted(p.stem for p in store.dir.glob("*.json")) if store.dir.exists() else []
        print(json.dumps([{"name": n, "current": False} for n in names]))


def dispatch(words: list[str], flags: dict[str, list[str]], events: Events) -> None:
    if words == ["version"]:
        print(f"v{VERSION}")
        return
    if words and words[0] != "stack" and not os.environ.get("PULUMI_CONFIG_PASSPHRASE"):
        raise Fail("error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE")
    if words and os.environ.get("FAKE_PULUMI_FAIL") == words[0]:
        secret = os.environ["PULUMI_CONFIG_PASSPHRASE"]
        raise Fail(f"error: InvalidParameter: the cloud refused (debug: passphrase {secret})")
    store = Store(Path.cwd())
    stack = (flags.get("--stack") or [""])[0]
    if words[0] == "stack":
        stack_command(store, words, flags)
    elif words[:2] == ["config", "set-all"]:
        state = store.load(stack)
        for pair in flags.get("--plaintext", []) + flags.get("--secret", []):
            key, _, value = pair.partition("=")
            state["config"][key] = value
        store.save(stack, state)
    elif words[0] in ("preview", "up"):
        from tests.stacks.fake_pulumi.running import run_program

        run_program(store, stack, flags, events, preview=words[0] == "preview")
    elif words[0] == "refresh":
        refresh(store, stack, flags, events)
    elif words[0] == "destroy":
        destroy(store, stack, flags, events)
    elif words[0] == "cancel":
        folder = store.lock_dir(stack)
        for lock in folder.glob("*.json") if folder.exists() else ():
            lock.unlink()
    else:
        raise Fail(f"error: fake pulumi does not implement {' '.join(words)}")


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_PULUMI_LOG"):
        with open(os.environ["FAKE_PULUMI_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps([round(time.time() % 1000, 2), *argv[1:4]]) + "\n")
    words, flags = parse([a for a in argv if a != "--non-interactive"])
    events = Events(flags["--event-log"][0] if "--event-log" in flags else None)
    try:
        dispatch(words, flags, events)
    except Fail as exc:
        if exc.stdout:
            print(exc.stdout)
        print(str(exc), file=sys.stderr)
        return 255
    except KeyboardInterrupt:
        print("error: update canceled", file=sys.stderr)
        return 2
    finally:
        events.close({})
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main(sys.argv[1:]))
