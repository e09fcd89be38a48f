"""The server's backends file (`schemas.serverbackends`): dstack's shape, errors by line."""

from __future__ import annotations

import pytest

from schemas.problems import ConfigError
from schemas.serverbackends import (
    KubernetesBackend,
    OtherBackend,
    SlurmBackend,
    parse_backends_config,
)

GOOD = """\
encryption:
  keys: []
projects:
- name: main
  backends:
  - type: aws
    creds: {type: default}
  - type: slurm
    clusters:
    - name: hpc1
      hostname: login.example.com
      user: alice
      private_key:
        path: /srv/keys/hpc1
      gpu_partitions:
      - gpu: H100
        partitions: [gpu]
      cpu_partitions: [cpu]
  - type: kubernetes
    kubeconfig:
      filename: /srv/kube/config
    proxy_jump:
      hostname: 10.0.0.1
      port: 32000
- name: research
"""


def test_dstack_shape_parses_and_keeps_other_backends_as_their_type() -> None:
    config = parse_backends_config(GOOD, "backends.yml")
    main = config.projects[0]
    assert [b.type for b in main.backends] == ["aws", "slurm", "kubernetes"]
    assert isinstance(main.backends[0], OtherBackend)
    slurm, kube = config.backends_of("main")
    assert isinstance(slurm, SlurmBackend) and isinstance(kube, KubernetesBackend)
    cluster = slurm.clusters[0]
    assert (cluster.hostname, cluster.port, cluster.user) == ("login.example.com", 22, "alice")
    assert cluster.gpu_partitions[0].gpu == "H100" and cluster.cpu_partitions == ["cpu"]
    assert cluster.price == 0.0
    assert kube.proxy_jump is not None and kube.proxy_jump.port == 32000
    assert config.backends_of("research") == ()
    assert config.backends_of("nobody") == ()


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_backends_config(text, "/etc/dockyard/backends.yml")
    return [p.format() for p in caught.value.problems]


def test_every_problem_names_file_line_and_field() -> None:
    text = (
        GOOD.replace("      user: alice\n", "")
        .replace("path: /srv/keys/hpc1", "path: /k\n        content: KEY")
        .replace("filename: /srv/kube/config", "filenam: /srv/kube/config")
        .replace("hostname: login.example.com", "hostname: login\n      port: 0")
    )
    assert _problems(text) == [
        "/etc/dockyard/backends.yml:10:7: projects[0].backends[1].clusters[0].user: "
        "missing required field `user`",
        "/etc/dockyard/backends.yml:12:13: projects[0].backends[1].clusters[0].port: "
        "input should be greater than or equal to 1",
        "/etc/dockyard/backends.yml:14:9: projects[0].backends[1].clusters[0].private_key: "
        "set exactly one of `path` (a key file) or `content` (the key)",
        "/etc/dockyard/backends.yml:22:7: projects[0].backends[2].kubeconfig.filenam: "
        "unknown field `filenam` (did you mean `filename`?)",
    ]


def test_duplicates_are_refused_where_they_are() -> None:
    assert _problems(GOOD.replace("- name: research", "- name: main")) == [
        "/etc/dockyard/backends.yml:25:9: projects[1].name: project `main` twice"
    ]
    twice = GOOD.replace(
        "  - type: aws\n    creds: {type: default}\n",
        "  - type: kubernetes\n    kubeconfig: {data: x}\n",
    )
    assert _problems(twice)[0].startswith(
        "/etc/dockyard/backends.yml:19:11: projects[0].backends[2].type: backend `kubernetes` twice"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a\n", "the backends file must be a mapping"),
        ("projects: [\n", "invalid YAML"),
        ("projects:\n- name: a\n  name: b\n", "duplicate key `name`"),
    ],
)
def test_bad_files(text: str, message: str) -> None:
    (problem,) = _problems(text)
    assert message in problem


def test_an_empty_file_has_no_backends() -> None:
    assert parse_backends_config("", "b.yml").projects == []
