"""The value grammars: resources, durations, ranges, memory, env, ports, mounts, repos, files."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from schemas import (
    ConfigError,
    FleetConfiguration,
    InstanceMountPoint,
    PortMapping,
    ServiceConfiguration,
    TaskConfiguration,
    VolumeMountPoint,
    parse_config,
    parse_data,
)


def task(body: str) -> TaskConfiguration:
    config = parse_config(f"type: task\nname: t1\ncommands: [run]\n{body}", "t.dstack.yml")
    assert isinstance(config, TaskConfiguration)
    return config


def gpu(spec: str) -> dict[str, Any]:
    resources = task(f"resources:\n  gpu: {spec}\n").normalized()["resources"]
    return dict(resources["gpu"])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("A100:40GB:2", {"name": ["A100"], "memory": {"min": 40.0, "max": 40.0}, "count": 2}),
        ("24GB..", {"name": None, "memory": {"min": 24.0, "max": None}, "count": (1, None)}),
        ("H100,A100:8", {"name": ["H100", "A100"], "count": 8}),
        ("nvidia:2..4", {"vendor": "nvidia", "count": (2, 4)}),
        ("2:A10G", {"name": ["A10G"], "count": 2}),
        ("tpu:v5litepod-8", {"vendor": "google", "name": ["v5litepod-8"]}),
        ("tt:n150", {"vendor": "tenstorrent", "name": ["n150"]}),
        ("AMD:MI300X:8", {"vendor": "amd", "name": ["MI300X"], "count": 8}),
        ("0", {"count": 0}),
        ("40GB..80GB:4", {"memory": {"min": 40.0, "max": 80.0}, "count": 4}),
        ("{name: [A100], count: 1..2, memory: 512MB}", {"memory": {"min": 0.5, "max": 0.5}}),
        ("{compute_capability: 8.0}", {"compute_capability": [8, 0]}),
    ],
)
def test_gpu_token_grammar(spec: str, expected: dict[str, Any]) -> None:
    parsed = gpu(spec)
    for key, value in expected.items():
        if key == "count":
            low, high = value if isinstance(value, tuple) else (value, value)
            assert parsed["count"] == {"min": low, "max": high}
        else:
            assert parsed[key] == value


@pytest.mark.parametrize(
    "spec", ["A100:H100", "'2:4'", "24GB:40GB", "nvidia:amd", "A100::2", "2..1"]
)
def test_gpu_grammar_rejects_conflicts(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"resources\.gpu"):
        gpu(spec)


def test_resource_defaults_are_filled() -> None:
    resources = task("").normalized()["resources"]
    assert resources["cpu"] == {"arch": None, "count": {"min": 2, "max": None}}
    assert resources["memory"] == {"min": 8.0, "max": None}
    assert resources["disk"] == {"size": {"min": 100.0, "max": None}}
    assert resources["gpu"]["count"] == {"min": 0, "max": None}


@pytest.mark.parametrize(
    ("body", "cpu"),
    [
        ("8", {"arch": None, "count": {"min": 8, "max": 8}}),
        ("arm:8..", {"arch": "arm", "count": {"min": 8, "max": None}}),
        ("x86", {"arch": "x86", "count": {"min": 2, "max": None}}),
        ("{min: 4, max: 16}", {"arch": None, "count": {"min": 4, "max": 16}}),
        ("{arch: ARM, count: 4}", {"arch": "arm", "count": {"min": 4, "max": 4}}),
    ],
)
def test_cpu_forms(body: str, cpu: dict[str, Any]) -> None:
    assert task(f"resources:\n  cpu: {body}\n").normalized()["resources"]["cpu"] == cpu


@pytest.mark.parametrize(
    ("text", "gigabytes"),
    [("512MB", 0.5), ("1TB", 1024.0), ("24", 24.0), ("16 GB", 16.0), ("1.5GB", 1.5)],
)
def test_memory_units(text: str, gigabytes: float) -> None:
    resources = task(f"resources:\n  shm_size: {text}\n  disk: 200GB..1TB\n").resources
    assert resources.shm_size == gigabytes
    assert resources.disk is not None
    assert (resources.disk.size.min, resources.disk.size.max) == (200.0, 1024.0)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("90", 90), ("5m", 300), ("2h", 7200), ("1d", 86400), ("1w", 604800), ("off", "off")],
)
def test_durations(value: str, seconds: int | str) -> None:
    assert task(f"max_duration: {value}\n").max_duration == seconds


def test_offable_and_idle_durations() -> None:
    assert task("max_duration: false\n").max_duration == "off"
    assert task("stop_duration: true\n").stop_duration is None
    assert task("idle_duration: off\n").idle_duration == -1
    assert task("idle_duration: -1\n").idle_duration == -1
    assert task("idle_duration: 1h\n").idle_duration == 3600
    with pytest.raises(ConfigError, match="negative"):
        task("max_duration: -5\n")


def test_env_list_and_map_forms_normalize_alike() -> None:
    listed = task("env:\n  - A=1\n  - B\n  - C=x=y\n").env
    mapped = task("env:\n  A: 1\n  B: null\n  C: x=y\n").env
    assert listed == mapped == {"A": "1", "B": None, "C": "x=y"}
    with pytest.raises(ConfigError, match="duplicate environment variable"):
        task("env:\n  - A=1\n  - A=2\n")


def test_ports_forms() -> None:
    ports = task("ports: [8080, '80:8080', '*:9000']\n").ports
    assert ports == [
        PortMapping(local_port=8080, container_port=8080),
        PortMapping(local_port=80, container_port=8080),
        PortMapping(local_port=None, container_port=9000),
    ]
    with pytest.raises(ConfigError, match="ports"):
        task("ports: [70000]\n")


def test_service_port_and_model_shorthands() -> None:
    config = parse_config(
        "type: service\nname: s1\nimage: x\nport: 8000\nmodel: llama\n", "s.dstack.yml"
    )
    assert isinstance(config, ServiceConfiguration)
    assert config.port == PortMapping(local_port=80, container_port=8000)
    assert config.model is not None
    assert (config.model.name, config.model.format) == ("llama", "openai")


def test_volume_mount_forms() -> None:
    volumes = task(
        "volumes:\n  - data:/data\n  - /mnt/cache:/cache\n"
        "  - {name: [a, b], path: /x}\n  - {instance_path: /h, path: /c, optional: true}\n"
    ).volumes
    assert volumes == [
        VolumeMountPoint(name="data", path="/data"),
        InstanceMountPoint(instance_path="/mnt/cache", path="/cache"),
        VolumeMountPoint(name=["a", "b"], path="/x"),
        InstanceMountPoint(instance_path="/h", path="/c", optional=True),
    ]
    with pytest.raises(ConfigError, match=r"volumes\[0\]"):
        task("volumes:\n  - data:relative\n")


def test_repos_and_files_shorthands() -> None:
    config = task(
        "repos:\n  - .:/workflow\nfiles:\n  - ~/.ssh/id_rsa:/root/.ssh/id_rsa\n  - local.txt\n"
    )
    assert (config.repos[0].local_path, config.repos[0].path) == (".", "/workflow")
    url = task("repos: ['https://github.com/a/b.git']\n").repos[0]
    assert (url.url, url.local_path, url.path) == ("https://github.com/a/b.git", None, ".")
    assert [(f.local_path, f.path) for f in config.files] == [
        ("~/.ssh/id_rsa", "/root/.ssh/id_rsa"),
        ("local.txt", "local.txt"),
    ]
    with pytest.raises(ConfigError, match="at most one repo"):
        task("repos: [a, b]\n")


def test_retry_forms() -> None:
    assert task("retry: true\n").retry is True
    retry = task("retry:\n  on_events: [no-capacity]\n  duration: 1h\n").retry
    assert not isinstance(retry, bool) and retry is not None
    assert (retry.on_events, retry.duration) == (["no-capacity"], 3600)
    with pytest.raises(ConfigError, match="cannot be empty"):
        task("retry:\n  on_events: []\n")


def test_python_version_float_is_read_as_text() -> None:
    assert task("python: 3.10\n").python == "3.10"
    assert task("python: 3.12\n").python == "3.12"
    with pytest.raises(ConfigError, match="python"):
        task("python: 2.7\n")


def test_task_groups_are_named_by_position() -> None:
    config = parse_config(
        "type: task\nname: t1\ngroups:\n  - commands: [a]\n  - name: workers\n"
        "    nodes: 3\n    commands: [b]\n",
        "g.dstack.yml",
    )
    assert isinstance(config, TaskConfiguration) and config.groups is not None
    assert [(g.name, g.nodes) for g in config.groups] == [("0", 1), ("workers", 3)]


def test_service_replicas_scaling_and_legacy_groups() -> None:
    service = parse_config(
        "type: service\nname: s1\nimage: x\nport: 80\nreplicas: 0..4\n"
        "scaling: {metric: rps, target: 10}\n",
        "s.dstack.yml",
    )
    assert isinstance(service, ServiceConfiguration) and service.replicas is not None
    assert (service.replicas.min, service.replicas.max) == (0, 4)
    legacy = parse_config(
        "type: service\nname: s1\nport: 80\nreplicas:\n  - count: 2\n    commands: [a]\n",
        "s.dstack.yml",
    )
    assert isinstance(legacy, ServiceConfiguration) and legacy.groups is not None
    assert legacy.replicas is None
    assert (legacy.groups[0].name, legacy.groups[0].replicas.max) == ("0", 2)


def test_probes_and_rate_limits() -> None:
    service = parse_config(
        "type: service\nname: s1\nimage: x\nport: 80\n"
        "probes:\n  - {type: http, url: /health, timeout: 5s}\n"
        "rate_limits:\n  - {prefix: /api, rps: 2, key: {type: header, header: X-Key}}\n",
        "s.dstack.yml",
    )
    assert isinstance(service, ServiceConfiguration) and service.probes is not None
    assert service.probes[0].timeout == 5
    assert service.rate_limits[0].key.type == "header"


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [("2", (2, 2, 2)), ("0..4", (0, 0, 4)), ("{min: 1, target: 2}", (1, 2, None))],
)
def test_fleet_nodes(nodes: str, expected: tuple[int, int, int | None]) -> None:
    fleet = parse_config(f"type: fleet\nname: f1\nnodes: {nodes}\n", "f.dstack.yml")
    assert isinstance(fleet, FleetConfiguration) and fleet.nodes is not None
    assert (fleet.nodes.min, fleet.nodes.target, fleet.nodes.max) == expected


def test_ssh_fleet_hosts() -> None:
    fleet = parse_config(
        "type: fleet\nname: f1\nssh_config:\n  user: ubuntu\n  hosts:\n    - 10.0.0.1\n"
        "    - {hostname: 10.0.0.2, blocks: auto}\n",
        "f.dstack.yml",
    )
    assert isinstance(fleet, FleetConfiguration) and fleet.ssh_config is not None
    first, second = fleet.ssh_config.hosts
    assert first == "10.0.0.1"
    assert not isinstance(second, str) and second.blocks == "auto"


def test_fleet_needs_exactly_one_of_nodes_and_ssh_config() -> None:
    with pytest.raises(ConfigError, match="`nodes` and `ssh_config` are mutually exclusive"):
        parse_config("type: fleet\nnodes: 1\nssh_config: {hosts: [a]}\n", "f.dstack.yml")
    with pytest.raises(ConfigError, match="set `nodes`"):
        parse_config("type: fleet\nname: f1\n", "f.dstack.yml")


def test_volume_dispatches_on_backend() -> None:
    volume = parse_config(
        "type: volume\nname: v1\nbackend: aws\nregion: eu-west-1\nsize: 100GB\n", "v.dstack.yml"
    )
    assert volume.normalized()["size"] == 100.0
    k8s = parse_config("type: volume\nname: v1\nbackend: kubernetes\nsize: 10GB\n", "v.yml")
    assert k8s.normalized()["access_modes"] == ["ReadWriteOnce"]


def test_spec_hash_is_stable_and_sensitive() -> None:
    a = task("env: [A=1]\n")
    b = task("env:\n  A: '1'\n")
    c = task("env: [A=2]\n")
    assert a.spec_hash() == b.spec_hash()
    assert a.spec_hash() != c.spec_hash()
    assert len(a.spec_hash()) == 64


def test_models_are_frozen() -> None:
    config = task("")
    with pytest.raises(ValidationError, match="frozen"):
        config.name = "other"  # type: ignore[misc]


def test_server_defaults_are_filled() -> None:
    config = task("resources:\n  gpu: 2\n")
    assert (config.priority, config.nodes) == (0, 1)
    assert config.resources.gpu is not None and config.resources.gpu.vendor == "nvidia"
    assert task("resources:\n  gpu: null\n").normalized()["resources"]["gpu"]["count"] == {
        "min": 0,
        "max": None,
    }


@pytest.mark.parametrize(
    ("body", "vendor"),
    [
        ("image: rocm/pytorch\nresources:\n  gpu: MI300X:8\n", "amd"),
        ("image: x\nresources:\n  gpu: v5p-8\n", "google"),
        ("image: x\nresources:\n  gpu: 2\n", None),
        ("resources:\n  gpu: H100,MI300X\n", None),
        ("resources:\n  gpu: h100,A100:2\n", "nvidia"),
        ("resources:\n  gpu: 0\n", None),
        ("docker: true\nresources:\n  gpu: 1\n", None),
    ],
)
def test_gpu_vendor_inference(body: str, vendor: str | None) -> None:
    gpu_spec = task(body).resources.gpu
    assert gpu_spec is not None and gpu_spec.vendor == vendor


def test_group_resources_get_server_defaults() -> None:
    service = parse_config(
        "type: service\nname: s1\nport: 80\ngroups:\n  - replicas: 1\n    commands: [a]\n"
        "    resources: {gpu: A100}\n  - replicas: 1\n    image: rocm/x\n"
        "    resources: {gpu: 1}\n",
        "s.dstack.yml",
    )
    assert isinstance(service, ServiceConfiguration) and service.groups is not None
    vendors = [g.resources.gpu.vendor if g.resources.gpu else "-" for g in service.groups]
    assert vendors == ["nvidia", None]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ("ssh_config: {hosts: [a]}\nbackends: [aws]\n", "backends", "SSH fleet"),
        ("nodes: 1\nenv: [A=1]\n", "env", "SSH fleets only"),
        (
            "ssh_config:\n  network: 10.0.0.0/8\n"
            "  hosts:\n    - {hostname: a, internal_ip: 10.0.0.1}\n",
            "ssh_config.network",
            "mutually exclusive",
        ),
        (
            "ssh_config:\n  hosts:\n    - {hostname: a, internal_ip: 10.0.0.1}\n    - b\n",
            "ssh_config.hosts[1]",
            "every host",
        ),
    ],
)
def test_fleet_subtype_rules(body: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"type: fleet\nname: f1\n{body}", "f.dstack.yml")
    problem = caught.value.problems[0]
    assert problem.field == field and message in problem.message


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ("retry: {duration: -5}\n", "retry.duration", "negative"),
    ],
)
def test_cli_and_server_checks_on_runs(body: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        task(body)
    problem = caught.value.problems[0]
    assert problem.field == field and message in problem.message


def test_working_dir_may_start_with_tilde() -> None:
    assert task("working_dir: ~/work\n").working_dir == "~/work"


def test_relative_working_dir_is_accepted_as_written() -> None:
    """dstack 0.22.5 accepts it (legacy) and resolves it under /workflow at run time."""
    assert task("working_dir: relative/dir\n").working_dir == "relative/dir"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ("probes:\n" + "  - {type: http, url: /a}\n" * 11, "probes[10]", "at most 10"),
        ("probes:\n  - {type: http, timeout: 10m}\n", "probes[0].timeout", "300s"),
        ("replicas: 0..2\nscaling: {metric: rps, target: 1}\nschedule: {cron: '0 8 * * *'}\n",
         "schedule", "scales to zero"),
    ],
)  # fmt: skip
def test_service_server_limits(body: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"type: service\nname: s1\nimage: x\nport: 80\n{body}", "s.dstack.yml")
    problem = caught.value.problems[0]
    assert problem.field == field and message in problem.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("backend: lambda\nregion: r\n", "backend"),
        ("backend: azure\nregion: r\npublic_ip: false\ncertificate: null\n", "public_ip"),
        ("backend: aws\nregion: r\nreplicas: 10\ncertificate: null\n", "replicas"),
        ("backend: azure\nregion: r\nload_balancer: {type: alb}\n", "load_balancer"),
        ("backend: aws\nregion: r\nload_balancer: {type: alb}\n", "certificate"),
        ("backend: gcp\nregion: r\ncertificate: {type: acm, arn: x}\n", "certificate"),
        ("backend: gcp\nregion: r\ncertificate: {type: gcp-cm, name: x}\n", "certificate"),
        ("backend: aws\nregion: r\npublic_ip: false\n", "certificate"),
    ],
)
def test_gateway_server_rules(body: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"type: gateway\nname: g1\n{body}", "g.dstack.yml")
    assert caught.value.problems[0].field == field


def test_gateway_with_alb_and_acm_is_valid() -> None:
    config = parse_config(
        "type: gateway\nname: g1\nbackend: aws\nregion: r\nreplicas: 2\n"
        "load_balancer: {type: alb}\ncertificate: {type: acm, arn: 'arn:x'}\n",
        "g.dstack.yml",
    )
    assert config.normalized()["certificate"] == {"type": "acm", "arn": "arn:x"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("backend: aws\nregion: r\n", "size"),
        ("backend: gcp\nregion: r\nvolume_id: v-1\nauto_cleanup_duration: 1h\n",
         "auto_cleanup_duration"),
        ("backend: kubernetes\n", "size"),
    ],
)  # fmt: skip
def test_volume_server_rules(body: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"type: volume\nname: v1\n{body}", "v.dstack.yml")
    assert caught.value.problems[0].field == field


def test_external_volumes_need_no_size() -> None:
    parse_config("type: volume\nname: v1\nbackend: aws\nregion: r\nvolume_id: v-1\n", "v.yml")
    parse_config("type: volume\nname: v1\nbackend: kubernetes\nclaim_name: c\n", "v.yml")
    parse_config("type: volume\nname: v1\nbackend: daytona\n", "v.yml")


def test_spec_hash_ignores_key_order_and_shorthand_form() -> None:
    a = parse_config(
        "type: task\nname: t1\ncommands: [run]\nports: [8080]\nresources: {gpu: A100:2}\n", "a"
    )
    b = parse_config(
        "resources:\n  gpu: {name: [A100], count: 2}\nports:\n  - {local_port: 8080, "
        "container_port: 8080}\ncommands: [run]\nname: t1\ntype: task\n",
        "b",
    )
    assert a.spec_hash() == b.spec_hash()


def test_parse_data_validates_a_loaded_mapping() -> None:
    config = parse_data({"type": "task", "name": "t1", "commands": ["run"]})
    assert isinstance(config, TaskConfiguration)
    assert parse_data(config.normalized()) == config
    with pytest.raises(ConfigError, match="comands"):
        parse_data({"type": "task", "comands": ["run"]})


@pytest.mark.parametrize(
    ("cron", "valid"),
    [
        ("0 8 * * mon-fri", True),
        ("*/15 0-23 1-31 1-12 0-6", True),
        ("0 0 last * *", True),
        ("99 * * * *", False),
        ("0 0 * * 7", False),
        ("5-1 * * * *", False),
        ("*/0 * * * *", False),
        ("0 0 * *", False),
        ("@daily", False),
    ],
)
def test_schedule_cron(cron: str, valid: bool) -> None:
    body = f"schedule:\n  cron: '{cron}'\n"
    if valid:
        assert task(body).schedule is not None
    else:
        with pytest.raises(ConfigError, match=r"schedule\.cron"):
            task(body)
