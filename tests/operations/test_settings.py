"""The day-two settings: flags of `dockyard server` with their defaults, variables, units."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from reconciler.cli.main import build_app
from reconciler.errors import UsageError
from reconciler.quantities import format_duration, format_size, parse_duration, parse_size
from reconciler.settings import OPERATIONS_FIELDS, Settings


def test_server_help_shows_every_retention_and_disk_setting() -> None:
    result = CliRunner().invoke(build_app(), ["server", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in OPERATIONS_FIELDS:
        assert f"--{name.replace('_', '-')}" in result.output
        assert f"DOCKYARD_{name.upper()}" in result.output
    assert "(14d)" in result.output and "(8MiB)" in result.output


def test_settings_read_units_from_flags_and_variables() -> None:
    settings = Settings.from_env(
        {"DOCKYARD_JOB_LOG_RETENTION": "36h", "DOCKYARD_EVENTS_MAX_COUNT": "5"},
        job_log_tail="1MiB",
        min_free_disk="2GB",
    )
    assert settings.job_log_retention == 36 * 3600
    assert settings.events_max_count == 5
    assert settings.job_log_tail == 2**20
    assert settings.min_free_disk == 2 * 10**9
    with pytest.raises(UsageError, match="job_log_retention"):
        Settings.from_env({}, job_log_retention="soon")


def test_quantities_round_trip() -> None:
    assert parse_size("512KiB") == 512 * 1024 and format_size(512 * 1024) == "512KiB"
    assert parse_duration("90s") == 90 and format_duration(90) == "90s"
    assert format_duration(7 * 86400) == "7d" and parse_duration("2w") == 14 * 86400
    with pytest.raises(ValueError, match="not a size"):
        parse_size("ten")
