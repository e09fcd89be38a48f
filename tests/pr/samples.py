"""A representative pull request of a config repo, planned with the real parser and planner.

Base: an SSH fleet `lab`, a service `llm` and a task `train` on it, a volume `data`.
Head: a new cloud fleet `gpu`, `llm` gets a new image (rolling update in place), `train`
gets new commands and moves to `gpu` (replaced), the volume's file is removed (retained),
and a new `notebook.dstack.yml` is invalid.
"""

from __future__ import annotations

import json
from typing import Any

from reconciler.domain.observed import ObservedState
from reconciler.pr.document import report_to_json
from reconciler.pr.reviewing import PlanReport, load_files, review
from schemas import parse_config
from stacks.catalog import load_catalog

BASE_SHA = "18c1932ed449c97b89d90c11acb18c690a873a33"
HEAD_SHA = "ea2a8facc2016491eab1820cf08eccc65a365a86"

LAB = b"type: fleet\nname: lab\nssh_config:\n  user: ubuntu\n  hosts: [10.0.0.5]\n"
GPU = (
    b"type: fleet\nname: gpu\nnodes: 0..2\nbackends: [aws]\nregions: [us-east-1]\n"
    b"spot_policy: on-demand\nresources:\n  gpu: A10G\n"
)
LLM_OLD = (
    b"type: service\nname: llm\nimage: vllm/vllm-openai:v0.6.0\nport: 8000\n"
    b"fleets: [lab]\nresources:\n  gpu: 24GB\ncommands: [vllm serve]\n"
)
LLM_NEW = LLM_OLD.replace(b"v0.6.0", b"v0.6.3")
TRAIN_OLD = (
    b"type: task\nname: train\nfleets: [lab]\nresources:\n  gpu: A10G\n"
    b"commands: [python train.py]\n"
)
TRAIN_NEW = (
    b"type: task\nname: train\nfleets: [gpu]\nresources:\n  gpu: A10G\n"
    b"commands: [python train.py --epochs 3]\n"
)
DATA = b"type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 100GB\n"
NOTEBOOK = (
    b"type: dev-environment\nname: notebook\nide: vscode\nresources:\n  gpu: A100:80GB:many\n"
)

BASE_FILES = {
    "fleets/lab.dstack.yml": LAB,
    "services/llm.dstack.yml": LLM_OLD,
    "tasks/train.dstack.yml": TRAIN_OLD,
    "volumes/data.dstack.yml": DATA,
}
HEAD_FILES = {
    "fleets/lab.dstack.yml": LAB,
    "fleets/gpu.dstack.yml": GPU,
    "services/llm.dstack.yml": LLM_NEW,
    "tasks/train.dstack.yml": TRAIN_NEW,
    "notebook.dstack.yml": NOTEBOOK,
}


def representative_report() -> PlanReport:
    base = load_files(BASE_FILES, commit=BASE_SHA, parse=parse_config)
    head = load_files(HEAD_FILES, commit=HEAD_SHA, parse=parse_config)
    observed = ObservedState.from_desired(base.desired)
    return review(head, observed, base=BASE_SHA, catalog=load_catalog())


def representative_json() -> dict[str, Any]:
    return report_to_json(representative_report())


def clean_json() -> dict[str, Any]:
    """The same PR without the invalid file: a plan without errors."""
    files = {p: t for p, t in HEAD_FILES.items() if p != "notebook.dstack.yml"}
    head = load_files(files, commit=HEAD_SHA, parse=parse_config)
    base = load_files(BASE_FILES, commit=BASE_SHA, parse=parse_config)
    report = review(
        head, ObservedState.from_desired(base.desired), base=BASE_SHA, catalog=load_catalog()
    )
    return report_to_json(report)


if __name__ == "__main__":
    print(json.dumps(representative_json(), indent=2))
