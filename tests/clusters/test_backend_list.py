"""The server's backends file at start, `backends/list` and `dockyard backend list`, against
a real server on loopback (tests/web/serving.py; the backends file passed explicitly)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from reconciler.app import build_server
from reconciler.errors import UsageError
from reconciler.settings import Settings
from tests.cli.conftest import Cli
from tests.web.fakes import FakeController
from tests.web.serving import Running, running_server


def _backends_file(tmp_path: Path) -> tuple[Path, str, str]:
    """A file with an inline private key and an inline kubeconfig: (path, key, kubeconfig)."""
    key = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    kubeconfig = "apiVersion: v1\nusers:\n- name: u\n  user: {token: kube-s3cr3t-t0ken}\n"
    other = tmp_path / "other.key"  # the other project's key file: only its name is read
    other.write_text("-\n")
    indented_key = "\n".join("          " + line for line in key.splitlines())
    indented_kube = "\n".join("        " + line for line in kubeconfig.splitlines())
    text = (
        "projects:\n- name: main\n  backends:\n  - type: slurm\n    clusters:\n"
        "    - name: hpc1\n      hostname: login.example.com\n      port: 2222\n"
        "      user: alice\n      private_key:\n        content: |\n"
        f"{indented_key}\n"
        "      gpu_partitions:\n      - {gpu: H100, partitions: [gpu, gpu-long]}\n"
        "      cpu_partitions: [cpu]\n"
        "  - type: kubernetes\n    kubeconfig:\n      data: |\n"
        f"{indented_kube}\n"
        "- name: other\n  backends:\n  - type: slurm\n    clusters:\n"
        f"    - {{name: secret-cluster, hostname: h, user: u, private_key: {{path: {other}}}}}\n"
    )
    path = tmp_path / "backends.yml"
    path.write_text(text)
    return path, key, kubeconfig


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Cli, str, str]]:
    path, key, kubeconfig = _backends_file(tmp_path)
    factory = lambda settings, store: FakeController(store)  # noqa: E731
    with running_server(tmp_path, factory, backends_config=path) as server:
        env = {
            "DOCKYARD_CONFIG": str(server.settings.cli_config),
            "HOME": str(tmp_path / "home"),
            "DOCKYARD_PROJECT": "",
            "COLUMNS": "200",
        }
        yield Cli(server, env), key, kubeconfig


def _secret_parts(key: str, kubeconfig: str) -> list[str]:
    body = [line for line in key.splitlines() if "PRIVATE KEY" not in line]
    return [*body, "kube-s3cr3t-t0ken", kubeconfig]


def test_backend_list_shows_the_clusters_and_never_a_secret(
    served: tuple[Cli, str, str],
) -> None:
    cli, key, kubeconfig = served
    shown = cli("backend", "list")
    assert shown.exit_code == 0, shown.stderr
    assert "hpc1" in shown.stdout and "alice@login.example.com:2222" in shown.stdout
    assert "H100: gpu,gpu-long; cpu: cpu" in shown.stdout and "kubeconfig inline" in shown.stdout
    assert "secret-cluster" not in shown.stdout  # another project's cluster
    data = json.loads(cli("backend", "list", "--json").stdout)
    slurm, kube = data["backends"]
    assert data["file"].endswith("backends.yml")
    assert slurm["clusters"][0]["private_key"] == "inline"
    assert slurm["clusters"][0]["gpu_partitions"] == {"H100": ["gpu", "gpu-long"]}
    assert kube == {"type": "kubernetes", "kubeconfig": "inline", "proxy_jump": None}
    with cli.server.client(cli.server.admin_token) as http:
        raw = http.post("/api/project/main/backends/list", json={}).text
    for part in _secret_parts(key, kubeconfig):
        for text in (shown.stdout, json.dumps(data), raw):
            assert part not in text


def test_only_members_see_a_project_s_backends(served: tuple[Cli, str, str]) -> None:
    server: Running = served[0].server
    with server.client(server.admin_token) as http:
        made = http.post("/api/users/create", json={"username": "outsider"}).json()
    with server.client(made["token"]) as http:
        refused = http.post("/api/project/main/backends/list", json={})
    assert refused.status_code in (403, 404) and "hpc1" not in refused.text
    with server.client() as http:
        assert http.post("/api/project/main/backends/list", json={}).status_code == 401


def test_a_bad_backends_file_stops_the_start_with_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "backends.yml"
    bad.write_text("projects:\n- name: main\n  backends:\n  - type: slurm\n    clusters: []\n")
    settings = Settings(data_dir=tmp_path / "data", cli_config=tmp_path / "c.yml",
                        backends_config=bad)  # fmt: skip
    with pytest.raises(UsageError) as caught:
        build_server(settings, controller_factory=lambda s, store: FakeController(store))
    assert f"{bad}:5:15: projects[0].backends[0].clusters: " in str(caught.value)
    missing = Settings(data_dir=tmp_path / "d2", cli_config=tmp_path / "c.yml",
                       backends_config=tmp_path / "nope.yml")  # fmt: skip
    with pytest.raises(UsageError, match=r"nope\.yml: cannot read it"):
        build_server(missing, controller_factory=lambda s, store: FakeController(store))


def test_the_file_is_found_by_the_documented_order(tmp_path: Path) -> None:
    from reconciler.adapters.backendsfile import load_server_backends

    data, dstack = tmp_path / "data", tmp_path / "dstack" / "config.yml"
    data.mkdir()
    none = load_server_backends(None, data, dstack)
    assert (none.path, none.found) == (str(data / "backends.yml"), False)
    dstack.parent.mkdir()
    dstack.write_text("projects: [{name: main, backends: [{type: aws, creds: {}}]}]\n")
    assert load_server_backends(None, data, dstack).path == str(dstack)
    (data / "backends.yml").write_text("projects: []\n")
    assert load_server_backends(None, data, dstack).path == str(data / "backends.yml")


def test_a_credential_file_the_server_cannot_read_stops_the_start_at_its_line(
    tmp_path: Path,
) -> None:
    key = tmp_path / "hpc.key"
    key.write_text("not checked here: only that the server can read it\n")
    bad = tmp_path / "backends.yml"
    bad.write_text(
        "projects:\n- name: main\n  backends:\n  - type: slurm\n    clusters:\n"
        f"    - {{name: ca, hostname: h, user: u, private_key: {{path: {key}}}}}\n"
        f"    - {{name: cb, hostname: h, user: u, private_key: {{path: {tmp_path}/gone}}}}\n"
        f"  - type: kubernetes\n    kubeconfig:\n      filename: {tmp_path}/kube\n"
    )
    settings = Settings(data_dir=tmp_path / "data", cli_config=tmp_path / "c.yml",
                        backends_config=bad)  # fmt: skip
    with pytest.raises(UsageError) as caught:
        build_server(settings, controller_factory=lambda s, store: FakeController(store))
    lines = str(caught.value).splitlines()[1:]
    assert lines == [
        f"{bad}:7:60: projects[0].backends[0].clusters[1].private_key.path: {tmp_path}/gone: "
        "No such file or directory (the server reads credentials from this file)",
        f"{bad}:10:17: projects[0].backends[1].kubeconfig.filename: {tmp_path}/kube: "
        "No such file or directory (the server reads credentials from this file)",
    ]
