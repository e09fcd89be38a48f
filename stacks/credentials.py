"""Whether this host has credentials for a cloud, before a stack is previewed on it.

`missing_credentials(backend, probe)` is pure: it looks for the places the AWS and Google
Cloud SDKs (hence the Pulumi providers) take credentials from — variables, the shared
config files, and the metadata of a VM of that cloud (an instance role / service account)
— through a `CredentialProbe`, and answers None (found) or the message a plan shows on the
blocked action, with the fix. `HostProbe` is the probe over this process's environment and
file system. The reconciler's previewer calls it (`reconciler.engine.previewing`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

AWS_VARIABLES: tuple[str, ...] = (
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)
GCP_VARIABLES: tuple[str, ...] = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CREDENTIALS",
    "CLOUDSDK_CONFIG",
)
AWS_FILES: tuple[str, ...] = (".aws/credentials", ".aws/config")
GCP_FILES: tuple[str, ...] = (".config/gcloud/application_default_credentials.json",)
AWS_VM = ("/sys/devices/virtual/dmi/id/board_vendor", "Amazon EC2")
GCP_VM = ("/sys/devices/virtual/dmi/id/product_name", "Google Compute Engine")

MISSING = {
    "aws": (
        "no AWS credentials on this server: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or "
        "AWS_PROFILE (or ~/.aws/credentials) for the server, or run it on EC2 with an "
        "instance role"
    ),
    "gcp": (
        "no Google Cloud credentials on this server: set GOOGLE_APPLICATION_CREDENTIALS to a "
        "service account key (or `gcloud auth application-default login`), or run it on "
        "Compute Engine with a service account"
    ),
}


@dataclass(frozen=True, slots=True)
class CredentialProbe:
    """What the check may look at: variables, whether a home-relative file exists, and the
    first line of a system file ('' when it cannot be read)."""

    environ: Mapping[str, str]
    home_file: Callable[[str], bool]
    system_line: Callable[[str], str]


def missing_credentials(backend: str, probe: CredentialProbe) -> str | None:
    """None when `backend` (aws, gcp) has credentials here, else the blocked message."""
    if backend == "aws":
        variables, files, (vm_file, vm_name) = AWS_VARIABLES, AWS_FILES, AWS_VM
    elif backend == "gcp":
        variables, files, (vm_file, vm_name) = GCP_VARIABLES, GCP_FILES, GCP_VM
    else:
        return None
    if any(probe.environ.get(name) for name in variables):
        return None
    if any(probe.home_file(name) for name in files):
        return None
    if probe.system_line(vm_file).startswith(vm_name):
        return None
    return MISSING[backend]


def host_probe(environ: Mapping[str, str], home: Path) -> CredentialProbe:
    """The probe over this host: `environ`, files under `home`, `/sys` files."""

    def home_file(name: str) -> bool:
        return (home / name).is_file()

    def system_line(path: str) -> str:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.readline(200).strip()
        except OSError:
            return ""

    return CredentialProbe(environ, home_file, system_line)
