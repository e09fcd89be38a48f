"""`schemas.caveats`: warnings about valid configurations, with the line they point at."""

from __future__ import annotations

import pytest

from schemas import FleetConfiguration, parse_config
from schemas.caveats import config_warnings, resolve_working_dir

SSH_FLEET = """type: fleet
name: hosts
ssh_config:
  user: ubuntu
  identity_file: ~/.ssh/id_rsa
  hosts: [10.0.0.1]
"""


def _warnings(text: str) -> list[tuple[int, int, str]]:
    config = parse_config(text, "x.dstack.yml")
    return [(w.line, w.column, w.field) for w in config_warnings(config, text, "x.dstack.yml")]


def test_relative_working_dir_warns_at_its_line() -> None:
    text = "type: task\nname: tt\ncommands: [ls]\n\nworking_dir: src/app\n"
    assert _warnings(text) == [(5, 1, "working_dir")]
    (warning,) = config_warnings(parse_config(text, "x"), text, "x")
    assert "legacy" in warning.message and "/workflow/src/app" in warning.message


@pytest.mark.parametrize("working_dir", ["/workspace", "~/work", None])
def test_absolute_or_home_working_dir_is_quiet(working_dir: str | None) -> None:
    line = f"working_dir: {working_dir}\n" if working_dir else ""
    assert _warnings(f"type: task\nname: tt\ncommands: [ls]\n{line}") == []


def test_spot_policy_on_ssh_fleet_is_accepted_ignored_and_warned() -> None:
    text = SSH_FLEET.replace("ssh_config:", "spot_policy: on-demand\nssh_config:")
    config = parse_config(text, "x.dstack.yml")
    assert isinstance(config, FleetConfiguration) and config.spot_policy == "on-demand"
    assert _warnings(text) == [(3, 1, "spot_policy")]


def test_other_provisioning_fields_on_ssh_fleet_are_still_refused() -> None:
    from schemas import ConfigError

    with pytest.raises(ConfigError, match="does not support `max_price`"):
        parse_config(SSH_FLEET + "max_price: 1.5\n", "x.dstack.yml")


def test_clean_files_have_no_warnings() -> None:
    assert _warnings(SSH_FLEET) == []
    assert _warnings("type: fleet\nname: cloud\nnodes: 1\nspot_policy: spot\n") == []


def test_resolve_working_dir() -> None:
    assert resolve_working_dir("src") == "/workflow/src"
    assert resolve_working_dir("/abs") == "/abs"
    assert resolve_working_dir("~/w") == "~/w"
    assert resolve_working_dir(None) is None
