"""The GitOps loop brings `repos` and `files` of the reconciled commit to the job."""

from __future__ import annotations

from pathlib import Path

from tests.engine.fixtures import LiveLoop

TASK = """type: task
name: train
repos: [".."]
files: ["params.txt:conf/params.txt"]
commands:
  - cat README.md conf/params.txt
  - echo {marker}
"""


async def test_each_run_gets_the_repo_at_its_own_commit(tmp_path: Path) -> None:
    async with LiveLoop(tmp_path) as loop:
        loop.repo.commit(
            {
                "README.md": "the config repo\n",
                "jobs/params.txt": "lr=0.1\n",
                "jobs/train.dstack.yml": TASK.format(marker="first"),
            }
        )
        assert (await loop.reconcile()).status == "succeeded"
        await loop.until(lambda: [r.status for r in loop.runs("train")] in (["done"], ["failed"]))
        first = loop.logs(loop.runs("train")[0])
        assert "the config repo\nlr=0.1\nfirst" in first, first

        loop.repo.commit(
            {"jobs/params.txt": "lr=0.2\n", "jobs/train.dstack.yml": TASK.format(marker="second")}
        )
        assert (await loop.reconcile()).status == "succeeded"
        await loop.until(lambda: [r.status for r in loop.runs("train")] == ["done", "done"])
        second = loop.logs(loop.runs("train")[1])
        assert "lr=0.2\nsecond" in second and "lr=0.1" not in second, second
