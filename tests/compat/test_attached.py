"""dstack 0.22.5 attached: `dstack apply` without `-d` streams the job's output until the run
ends and exits with the run's end; Ctrl-C detaches and leaves the run running; `dstack attach
--logs` and the Python API's `Run.attach()` + `Run.logs()` read the same stream. All of them
read dstack-runner's `/logs_ws` through the SSH tunnel, which the local agent serves
(agent/ssh/runner_api.py) on the connection dstack's second hop ties to the job.
"""

from __future__ import annotations

import signal
import subprocess
import threading

import pytest

from tests.compat.conftest import DSTACK, Dstack, free_port
from tests.services.missing import needs_ssh_client
from tests.web.serving import wait_until

pytestmark = [
    pytest.mark.slow,
    needs_ssh_client(),
]

STREAMED = """type: task
name: {name}
commands:
  - echo first-line-of-{name}
  - sleep {pause}
  - echo last-line-of-{name}
  - exit {code}
"""


class Output:
    """A process's merged output, read as it comes."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._thread.join(timeout=10)
        return code


def _start(dstack: Dstack, *args: str) -> Output:
    process = subprocess.Popen(
        [DSTACK, *args],
        cwd=dstack.workdir,
        env=dstack.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return Output(process)


def test_attached_apply_streams_the_output_and_exits_with_the_run(dstack: Dstack) -> None:
    dstack.write("streamed.dstack.yml", STREAMED.format(name="streamed", pause=4, code=0))
    done = dstack("apply", "-f", "streamed.dstack.yml", "-y", timeout=240)
    assert done.returncode == 0, (done.stdout, done.stderr)
    first = done.stdout.index("first-line-of-streamed")
    assert done.stdout.index("last-line-of-streamed") > first, done.stdout
    assert dstack.run_status("streamed") == "done"

    dstack.write("broken.dstack.yml", STREAMED.format(name="broken", pause=1, code=3))
    failed = dstack("apply", "-f", "broken.dstack.yml", "-y", timeout=240)
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    assert "last-line-of-broken" in failed.stdout, failed.stdout
    assert dstack.run_status("broken") == "failed"


def test_ctrl_c_detaches_and_leaves_the_run_running(dstack: Dstack) -> None:
    dstack.write("long.dstack.yml", STREAMED.format(name="long", pause=600, code=0))
    attached = _start(dstack, "apply", "-f", "long.dstack.yml", "-y")
    try:
        wait_until(
            lambda: "first-line-of-long" in attached.text or attached.process.poll() is not None,
            timeout=180,
            what="the job's first line through the attached stream",
        )
        assert attached.process.poll() is None, attached.text
        attached.process.send_signal(signal.SIGINT)
        assert attached.wait(timeout=60) == 0, attached.text
        assert "Detached" in attached.text, attached.text
        assert dstack.run_status("long") == "running"

        logs = _start(dstack, "attach", "long", "--logs")
        wait_until(
            lambda: "first-line-of-long" in logs.text or logs.process.poll() is not None,
            timeout=120,
            what="`dstack attach --logs` to print the job's output",
        )
        assert logs.process.poll() is None, logs.text
        logs.process.send_signal(signal.SIGINT)
        logs.wait(timeout=60)
        assert dstack.run_status("long") == "running"
    finally:
        for process in (attached.process,):
            if process.poll() is None:
                process.kill()
        dstack.ok("stop", "long", "-x", "-y")


RUN_LOGS = """
import json
from dstack.api import Client

run = Client.from_config().runs.get("pyattached")
assert run.attach()
try:
    text = b"".join(run.logs()).decode()
finally:
    run.detach()
run.refresh()
print(json.dumps({"text": text, "status": run.status.value}))
"""


def test_python_api_logs_while_attached_even_after_the_job_ended(dstack: Dstack) -> None:
    """The run is done (so the server has removed its job from the agent) before dstack
    attaches: the agent kept the ended job's log, and the stream gives all of it."""
    dstack.write("pyattached.dstack.yml", STREAMED.format(name="pyattached", pause=1, code=0))
    dstack.ok("apply", "-f", "pyattached.dstack.yml", "-y", "-d")
    dstack.wait_status("pyattached", "done")
    answer = dstack.python(RUN_LOGS, timeout=180)
    assert isinstance(answer, dict)
    text = answer["text"]
    assert text.index("first-line-of-pyattached") < text.index("last-line-of-pyattached")
    assert answer["status"] == "done"


SERVICE = """type: service
name: attsvc
port: {port}
auth: false
commands:
  - echo service-started
  - python3 -m http.server {port}
"""


def test_attached_service_streams_until_ctrl_c(dstack: Dstack) -> None:
    dstack.write("attsvc.dstack.yml", SERVICE.format(port=free_port()))
    attached = _start(dstack, "apply", "-f", "attsvc.dstack.yml", "-y")
    try:
        wait_until(
            lambda: "service-started" in attached.text or attached.process.poll() is not None,
            timeout=180,
            what="the service's first line through the attached stream",
        )
        assert attached.process.poll() is None, attached.text
        assert "/proxy/services/main/attsvc/" in attached.text, attached.text
        attached.process.send_signal(signal.SIGINT)
        assert attached.wait(timeout=60) == 0, attached.text
        assert dstack.run_status("attsvc") == "running"
    finally:
        if attached.process.poll() is None:
            attached.process.kill()
        dstack.ok("stop", "attsvc", "-x", "-y")


DEV = """type: dev-environment
name: attdev
ide: vscode
init:
  - echo dev-environment-ready
"""


def test_attached_dev_environment_streams_and_its_ssh_alias_opens_it(dstack: Dstack) -> None:
    dstack.write("attdev.dstack.yml", DEV)
    attached = _start(dstack, "apply", "-f", "attdev.dstack.yml", "-y")
    try:
        wait_until(
            lambda: "dev-environment-ready" in attached.text or attached.process.poll() is not None,
            timeout=180,
            what="the dev environment's init output through the attached stream",
        )
        assert attached.process.poll() is None, attached.text
        config = dstack.home / ".dstack" / "ssh" / "config"
        shell = subprocess.run(
            ["ssh", "-F", str(config), "-o", "BatchMode=yes", "attdev", "echo", "inside"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shell.returncode == 0 and shell.stdout.strip() == "inside", shell.stderr
        attached.process.send_signal(signal.SIGINT)
        assert attached.wait(timeout=60) == 0, attached.text
        assert dstack.run_status("attdev") == "running"
    finally:
        if attached.process.poll() is None:
            attached.process.kill()
        dstack.ok("stop", "attdev", "-x", "-y")
