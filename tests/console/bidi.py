"""A small driver for headless Firefox over WebDriver BiDi (the console's tests).

The same calls as `cdp.Browser` (go, run, submit, wait_until, screenshot, problems,
close), so one test drives both browsers. Firefox (Debian's `firefox-esr`) starts headless
with a throwaway profile and `--remote-debugging-port 0`; the port is read from the
profile's `WebDriverBiDiServer.json`. Problems are console errors and uncaught
exceptions (`log.entryAdded` at level error), failed requests and answers of 400 or more.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

from tests.console.cdp import wait_for

FIREFOX = shutil.which("firefox-esr") or shutil.which("firefox") or "/usr/bin/firefox-esr"
EVENTS = [
    "browsingContext.navigationStarted",
    "browsingContext.load",
    "log.entryAdded",
    "network.responseCompleted",
    "network.fetchError",
]


class Firefox:
    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="dockyard-firefox."))
        self.process = subprocess.Popen(
            [
                FIREFOX,
                "--headless",
                "--no-remote",
                "--profile",
                str(self.profile),
                "--remote-debugging-port",
                "0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        info = self.profile / "WebDriverBiDiServer.json"
        port = wait_for(
            lambda: info.exists() and json.loads(info.read_text() or "{}").get("ws_port"), 60
        )
        self.socket: ClientConnection = connect(f"ws://127.0.0.1:{port}/session", max_size=None)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.call("session.new", capabilities={})
        self.context = self.call("browsingContext.getTree")["contexts"][0]["context"]
        self.call("session.subscribe", events=EVENTS)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.socket.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self._id:
                if message.get("type") == "error":
                    raise RuntimeError(f"{method}: {message.get('message')}")
                return dict(message.get("result") or {})
            self.events.append(message)

    def go(self, url: str) -> None:
        self.call("browsingContext.navigate", context=self.context, url=url, wait="complete")

    def run(self, script: str) -> Any:
        answer = self.call(
            "script.evaluate",
            expression=script,
            target={"context": self.context},
            awaitPromise=True,
        )
        if answer.get("type") == "exception":
            raise RuntimeError(f"script failed: {answer.get('exceptionDetails')}")
        return _value(answer.get("result") or {})

    def submit(self, form_selector: str) -> None:
        """Submit the form and wait for the navigation it starts in this tab to load.

        Only this top-level context's navigation counts: a frame's load, or a load event of
        the page before (it may arrive after `go` returned), is another navigation."""
        self._pump()
        start = len(self.events)
        self.run(f"document.querySelector({json.dumps(form_selector)}).requestSubmit()")

        def loaded() -> bool:
            self._pump()
            mine = [
                (e.get("method"), e["params"].get("navigation"))
                for e in self.events[start:]
                if (e.get("params") or {}).get("context") == self.context
            ]
            started = {nav for method, nav in mine if method == "browsingContext.navigationStarted"}
            return any(m == "browsingContext.load" and nav in started for m, nav in mine)

        wait_for(loaded, 30)
        self.wait_until("document.readyState === 'complete'")

    def _pump(self) -> None:
        try:
            while True:
                self.events.append(json.loads(self.socket.recv(timeout=0.05)))
        except TimeoutError:
            return

    def wait_until(self, script: str, timeout: float = 30) -> Any:
        return wait_for(lambda: self.run(script), timeout)

    def screenshot(self, path: Path, width: int, height: int = 900) -> None:
        self.call(
            "browsingContext.setViewport",
            context=self.context,
            viewport={"width": width, "height": height},
        )
        shot = self.call(
            "browsingContext.captureScreenshot", context=self.context, origin="document"
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def problems(self) -> list[str]:
        self._pump()
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params") or {}
            if method == "log.entryAdded" and params.get("level") == "error":
                found.append(f"log: {params.get('text')}")
            elif method == "network.fetchError" and "NS_BINDING_ABORTED" not in str(
                params.get("errorText")
            ):  # aborted: a fetch in flight when the page was left (Chromium's `canceled`)
                found.append(
                    f"request failed: {params.get('errorText')} {params['request']['url']}"
                )
            elif method == "network.responseCompleted" and params["response"]["status"] >= 400:
                found.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        return found

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError):
            self.call("browser.close")
        self.socket.close()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def _value(result: dict[str, Any]) -> Any:
    """A BiDi remote value as Python (strings, numbers, booleans, null, arrays)."""
    kind = result.get("type")
    if kind in ("string", "number", "boolean"):
        return result.get("value")
    if kind == "array":
        return [_value(item) for item in result.get("value") or ()]
    return None
