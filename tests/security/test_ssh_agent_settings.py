"""The server's settings for the agents it deploys to SSH hosts: each a `dockyard server` flag
and a variable; an image name or job user that could break out of the remote shell command
is refused when the settings are read, and again when the command is made."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.remote_scripts import AgentOptions, parse_probe, start_script
from reconciler.cli.main import build_app
from reconciler.engine.controller import ssh_agent_options
from reconciler.errors import UsageError
from reconciler.settings import SSH_AGENT_FIELDS, Settings

HOSTILE_IMAGES = [
    "busybox; rm -rf ~",
    "busybox$(id)",
    "busybox`id`",
    "busybox' --allow-root-jobs '",
    "busybox\n--allow-root-jobs",
    "--allow-root-jobs",
    "-busybox",
    "busybox --allow-root-jobs",
    "Busybox",  # Docker refuses uppercase repositories
    "a" * 256,
    "registry.example:5000/" + "a/" * 200 + "x",
]
GOOD_IMAGES = [
    "dstackai/base:0.11-base-ubuntu22.04",
    "busybox",
    "registry.example.com:5000/team/image:v1.2",
    "localhost/x__y-z.w:latest",
    "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64,
]


def test_every_ssh_agent_setting_is_a_server_flag_with_its_variable() -> None:
    result = CliRunner().invoke(build_app(), ["server", "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0
    for name in SSH_AGENT_FIELDS:
        assert f"--{name.replace('_', '-')}" in result.stdout, name
        assert f"DOCKYARD_{name.upper()}" in result.stdout, name


@pytest.mark.parametrize("image", HOSTILE_IMAGES)
def test_a_hostile_image_name_is_refused_at_settings_time(image: str) -> None:
    with pytest.raises(UsageError, match="ssh_default_image"):
        Settings.from_env({"DOCKYARD_SSH_DEFAULT_IMAGE": image})
    with pytest.raises(UsageError, match="local_default_image"):
        Settings.from_env({"DOCKYARD_LOCAL_DEFAULT_IMAGE": image})
    with pytest.raises(ValueError, match="image"):
        AgentOptions(default_image=image)  # and by the deployer itself


@pytest.mark.parametrize("image", GOOD_IMAGES)
def test_image_references_pass_and_reach_the_command_quoted(image: str) -> None:
    settings = Settings.from_env({"DOCKYARD_SSH_DEFAULT_IMAGE": image})
    script = start_script("~/.dockyard/agent", "/usr/bin/python3", 10998, None,
                          ssh_agent_options(settings))  # fmt: skip
    assert f"--default-image {shlex.quote(image)} " in script


@pytest.mark.parametrize("user", ["root;id", "$(id)", "-x", "Admin", "a" * 33, ""])
def test_a_hostile_job_user_is_refused(user: str) -> None:
    with pytest.raises(UsageError, match="ssh_job_user"):
        Settings.from_env({}, ssh_job_user=user or " ")
    with pytest.raises(ValueError, match="job user"):
        AgentOptions(job_user=user)


def test_the_settings_become_the_agents_flags_and_their_digest() -> None:
    env = {
        "DOCKYARD_SSH_JOB_ISOLATION": "process",
        "DOCKYARD_SSH_JOB_USER": "builder",
        "DOCKYARD_SSH_ALLOW_ROOT_JOBS": "true",
        "DOCKYARD_SSH_MIN_FREE_DISK": "2GiB",
    }
    options = ssh_agent_options(Settings.from_env(env))
    assert options.args() == (
        "--job-isolation", "process", "--job-user", "builder",
        "--allow-root-jobs", "--min-free-disk", str(2 * 2**30),
    )  # fmt: skip
    default = ssh_agent_options(Settings.from_env({}))
    assert default.args() == (
        "--job-isolation", "auto", "--job-user", "auto", "--min-free-disk", str(2**30),
    )  # fmt: skip
    assert options.digest() != default.digest()
    assert ssh_agent_options(Settings.from_env(env)).digest() == options.digest()
    with pytest.raises(UsageError, match="ssh_job_isolation"):
        Settings.from_env({"DOCKYARD_SSH_JOB_ISOLATION": "vm"})

    script = start_script("agent dir", "/usr/bin/python3", 10998, None, options)
    assert "--job-isolation process --job-user builder --allow-root-jobs" in script
    line = f"OPTIONS {options.digest()} {shlex.join(options.args())}"
    assert (
        f"echo {options.digest()} {shlex.quote(shlex.join(options.args()))} > agent.options"
        in script
    )
    probe = parse_probe(f"HOME /root\n{line}\nPID 7\nALIVE\n")
    assert probe.options == options.digest()
    assert AgentOptions.from_args(probe.options_args) == options  # what a rollback starts
    assert parse_probe("HOME /root\nOPTIONS \nPID 7\n").options is None
    assert parse_probe("HOME /root\nOPTIONS 'unclosed\n").options is None


@pytest.mark.parametrize(
    "args",
    [
        ("--job-isolation", "vm"),
        ("--job-user",),
        ("--default-image", "x;id"),
        ("--protect", "/"),
        ("--min-free-disk", "lots"),
    ],
)
def test_options_read_back_from_a_host_are_checked(args: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        AgentOptions.from_args(args)


def test_the_server_refuses_a_hostile_image_flag_before_starting(tmp_path: Path) -> None:
    args = ["server", "--data-dir", str(tmp_path), "--ssh-default-image", "x;id"]
    result = CliRunner().invoke(build_app(), args, env={"COLUMNS": "250"})
    assert result.exit_code != 0
    said = result.output + str(result.exception)  # the CLI's main prints a UsageError
    assert "invalid server setting ssh_default_image" in said
    assert "'x;id' is not an image name" in said
    assert not (tmp_path / "admin-token").exists(), "refused before anything started"


def test_ssh_hosts_get_the_job_user_list_and_the_unsandboxed_opt_in() -> None:
    env = {
        "DOCKYARD_SSH_ALLOW_JOB_USERS": "builder, nobody",
        "DOCKYARD_SSH_UNSANDBOXED_PROCESS_JOBS": "true",
    }
    options = ssh_agent_options(Settings.from_env(env))
    args = options.args()
    assert args[-5:] == (
        "--unsandboxed-process-jobs", "--allow-job-user", "builder", "--allow-job-user", "nobody",
    )  # fmt: skip
    assert AgentOptions.from_args(args) == options  # read back from a host: the same
    plain = ssh_agent_options(Settings.from_env({})).args()
    assert "--allow-job-user" not in plain and "--unsandboxed-process-jobs" not in plain


@pytest.mark.parametrize("names", ["root;id", "$(id)", "builder,-x", "auto", "a,self", "Admin"])
def test_a_hostile_job_user_list_is_refused(names: str) -> None:
    with pytest.raises(UsageError, match="ssh_allow_job_users"):
        Settings.from_env({"DOCKYARD_SSH_ALLOW_JOB_USERS": names})
    with pytest.raises(ValueError, match=r"job user|account"):
        AgentOptions(allow_job_users=names)  # and by the deployer itself
