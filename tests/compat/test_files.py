"""dstack 0.22.5's `files:` against `dockyard server`: the client uploads each entry as a
multipart tar (`/api/files/upload_archive`, answered with a UUID id), names them in the run
spec, and the job finds them at their paths (a directory and a single file)."""

from __future__ import annotations

import pytest

from tests.compat.conftest import Dstack

pytestmark = pytest.mark.slow

FILES = """type: task
name: withfiles
files:
  - data
  - one.txt:renamed.txt
commands:
  - cat data/hello.txt data/sub/deep.txt renamed.txt
"""


def test_files_reach_the_job_at_their_paths(dstack: Dstack) -> None:
    project = dstack.workdir / "filesproject"
    (project / "data" / "sub").mkdir(parents=True)
    (project / "data" / "hello.txt").write_text("hello from a directory\n")
    (project / "data" / "sub" / "deep.txt").write_text("deep inside\n")
    (project / "one.txt").write_text("a single file\n")
    dstack.write("files.dstack.yml", FILES, where=project)
    dstack.ok("apply", "-f", "files.dstack.yml", "-y", "-d", cwd=project)
    dstack.wait_status("withfiles", "done", "failed")
    logs = dstack.ok("logs", "withfiles")
    assert dstack.run_status("withfiles") == "done", logs
    assert logs.split("\n")[:3] == ["hello from a directory", "deep inside", "a single file"]
