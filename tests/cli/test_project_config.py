"""`dockyard project add -y|-n` and `project delete`, as dstack's (a real server checks tokens)."""

from __future__ import annotations

import json

from tests.cli.conftest import Cli


def _defaults(cli: Cli) -> dict[str, bool]:
    listed = json.loads(cli("project", "list", "--json").stdout)
    return {p["name"]: p["default"] for p in listed}


def _add(cli: Cli, name: str, *flags: str) -> int:
    args = ["--name", name, "--url", cli.server.url, "--token", cli.server.admin_token]
    return cli("project", "add", *args, "--no-check", *flags).exit_code


def test_add_yes_no_and_no_terminal(cli: Cli) -> None:
    assert _add(cli, "second", "-y") == 0
    assert _defaults(cli) == {"main": False, "second": True}
    assert _add(cli, "third", "-n") == 0
    assert _add(cli, "fourth") == 0  # no terminal: no question, the default stays
    assert _defaults(cli) == {"main": False, "second": True, "third": False, "fourth": False}
    both = cli("project", "add", "--name", "x", "--url", "u", "--token", "t", "-y", "-n")
    assert both.exit_code == 2 and "-y and -n" in both.stderr


def test_delete_moves_the_default(cli: Cli) -> None:
    assert _add(cli, "second", "--yes") == 0
    assert cli("project", "delete", "second", "-y").exit_code == 0
    assert _defaults(cli) == {"main": True}
    missing = cli("project", "delete", "nope", "-y")
    assert missing.exit_code == 2 and "nope" in missing.stderr
    kept = cli("project", "delete", "main", input="n\n")
    assert kept.exit_code == 0 and "Cancelled" in kept.stdout and _defaults(cli) == {"main": True}
