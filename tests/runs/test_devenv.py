"""IDE links of dev environments (reconciler.core.devenv)."""

from __future__ import annotations

from reconciler.cli.attach import ide_line
from reconciler.core.devenv import ide_link


def test_links_per_ide() -> None:
    assert ide_link({"ide": "vscode"}, "dev", "/w") == "vscode://vscode-remote/ssh-remote+dev/w"
    assert ide_link({"ide": "cursor"}, "dev", "/w") == "cursor://vscode-remote/ssh-remote+dev/w"
    assert ide_link({"ide": "windsurf", "working_dir": "/src"}, "dev") == (
        "windsurf://vscode-remote/ssh-remote+dev/src"
    )


def test_no_ide_no_link() -> None:
    assert ide_link({}, "dev") is None
    assert ide_link({"ide": "zed"}, "dev") is None


def test_ide_link_resolves_a_relative_working_dir_under_workflow() -> None:
    assert ide_link({"ide": "vscode", "working_dir": "src"}, "dev") == (
        "vscode://vscode-remote/ssh-remote+dev/workflow/src"
    )


def test_attach_prints_the_link_of_the_dev_environments_ide() -> None:
    """`dockyard attach`'s line: the run's IDE and working dir, none without an IDE link."""
    dev = {"type": "dev-environment", "ide": "cursor"}
    assert ide_line({"configuration": dev, "working_dir": "/src"}, "dev") == (
        "To open in Cursor: cursor://vscode-remote/ssh-remote+dev/src"
    )
    assert ide_line({"configuration": {**dev, "ide": "vscode"}}, "dev") == (
        "To open in VS Code Desktop: vscode://vscode-remote/ssh-remote+dev/workflow"
    )
    assert ide_line({"configuration": {"type": "dev-environment"}}, "dev") is None
    assert ide_line({"configuration": {"type": "task", "ide": "vscode"}}, "dev") is None
