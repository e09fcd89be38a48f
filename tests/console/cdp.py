"""A small driver for headless Chromium over the DevTools protocol (the console's tests).

`Browser` starts Debian's `chromium` headless on a free debugging port with a throwaway
profile and talks to its one page over a WebSocket: navigate and wait for the load event,
evaluate script (fill a form, click), read the DOM, take screenshots at a window width,
and collect every console error, uncaught exception and failed request the page had.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


class Browser:
    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="dockyard-chromium."))
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        port = wait_for(lambda: port_file.exists() and port_file.read_text().split("\n")[0], 30)
        pages = wait_for(lambda: _pages(int(port)), 30)
        self.socket: ClientConnection = connect(pages[0]["webSocketDebuggerUrl"], max_size=None)
        self._id = 0
        self.events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.socket.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})
            self.events.append(message)

    def _drain(self, until: Callable[[dict[str, Any]], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                message = json.loads(
                    self.socket.recv(timeout=max(deadline - time.monotonic(), 0.01))
                )
            except TimeoutError:
                break
            self.events.append(message)
            if until(message):
                return
        raise TimeoutError("the page did not finish loading")

    def go(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self._drain(lambda m: m.get("method") == "Page.loadEventFired", 30)

    def run(self, script: str) -> Any:
        answer = self.call(
            "Runtime.evaluate", expression=script, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in answer:
            raise RuntimeError(f"script failed: {answer['exceptionDetails']}")
        return answer.get("result", {}).get("value")

    def submit(self, form_selector: str) -> None:
        """Submit a form the way a click does, and wait for the next page."""
        self.run(f"document.querySelector({json.dumps(form_selector)}).requestSubmit()")
        self._drain(lambda m: m.get("method") == "Page.loadEventFired", 30)

    def wait_until(self, script: str, timeout: float = 30) -> Any:
        return wait_for(lambda: self.run(script), timeout)

    def screenshot(self, path: Path, width: int, height: int = 900) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and failed or >= 400 requests seen so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params") or {}
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails'].get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(f"console.error: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                found.append(f"request failed: {params.get('errorText')}")
            elif method == "Network.responseReceived" and params["response"]["status"] >= 400:
                found.append(f"HTTP {params['response']['status']}: {params['response']['url']}")
        return found

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def _pages(port: int) -> list[dict[str, Any]]:
    try:
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
    except httpx.HTTPError:
        return []
    return [t for t in targets if t.get("type") == "page"]


def wait_for(probe: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout} s")
