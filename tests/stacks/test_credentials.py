"""Cloud credentials on this host (`stacks.credentials`, pure over a probe)."""

from __future__ import annotations

from pathlib import Path

from stacks.credentials import MISSING, CredentialProbe, host_probe, missing_credentials


def probe(
    environ: dict[str, str] | None = None,
    files: frozenset[str] | set[str] = frozenset(),
    vm: str = "",
) -> CredentialProbe:
    return CredentialProbe(environ or {}, lambda name: name in files, lambda path: vm)


def test_no_credentials_says_how_to_give_some() -> None:
    assert missing_credentials("aws", probe()) == MISSING["aws"]
    assert "AWS_PROFILE" in MISSING["aws"] and "instance role" in MISSING["aws"]
    assert missing_credentials("gcp", probe()) == MISSING["gcp"]


def test_variables_files_and_cloud_vms_count() -> None:
    assert missing_credentials("aws", probe({"AWS_PROFILE": "ci"})) is None
    assert missing_credentials("aws", probe(files={".aws/credentials"})) is None
    assert missing_credentials("aws", probe(vm="Amazon EC2")) is None
    assert missing_credentials("gcp", probe({"GOOGLE_APPLICATION_CREDENTIALS": "/k.json"})) is None
    assert missing_credentials("gcp", probe(vm="Google Compute Engine")) is None
    assert missing_credentials("gcp", probe({"AWS_PROFILE": "ci"})) == MISSING["gcp"]
    assert missing_credentials("local", probe()) is None


def test_the_host_probe_reads_the_home_directory(tmp_path: Path) -> None:
    assert missing_credentials("aws", host_probe({}, tmp_path)) in (None, MISSING["aws"])
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\n")
    assert missing_credentials("aws", host_probe({}, tmp_path)) is None
