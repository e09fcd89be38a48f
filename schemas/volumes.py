"""`type: volume`: network volumes, dispatched a second time on `backend`.

Backends with volumes: aws, gcp, runpod, kubernetes, daytona, lium (dstack 0.22.5,
reference §1.6). `parsing` picks the model from `VOLUME_MODELS` by `backend`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from pydantic import Field

from schemas.base import ConfigModel
from schemas.scalars import IdleDuration, Memory, ResourceName, Tags


class BaseVolumeConfiguration(ConfigModel):
    """Fields every volume has."""

    type: Literal["volume"] = "volume"
    backend: str
    """Backend of the volume: aws, gcp, runpod, kubernetes, daytona, lium."""
    name: ResourceName | None = None
    """The volume name."""
    auto_cleanup_duration: IdleDuration = None
    """Delete the volume after it is unused this long; `off` never."""
    tags: Tags = None
    """Tags copied to cloud resources."""


class AWSVolumeConfiguration(BaseVolumeConfiguration):
    backend: Literal["aws"] = "aws"
    region: str
    availability_zone: str | None = None
    volume_id: str | None = None
    size: Memory | None = None


class GCPVolumeConfiguration(BaseVolumeConfiguration):
    backend: Literal["gcp"] = "gcp"
    region: str
    availability_zone: str | None = None
    volume_id: str | None = None
    size: Memory | None = None


class RunpodVolumeConfiguration(BaseVolumeConfiguration):
    backend: Literal["runpod"] = "runpod"
    region: str
    availability_zone: str | None = None
    volume_id: str | None = None
    size: Memory | None = None


class KubernetesVolumeConfiguration(BaseVolumeConfiguration):
    backend: Literal["kubernetes"] = "kubernetes"
    region: str = ""
    size: Memory | None = None
    claim_name: str | None = None
    storage_class_name: str | None = None
    access_modes: list[str] = Field(default_factory=lambda: ["ReadWriteOnce"])
    read_only: bool = False


class DaytonaVolumeConfiguration(BaseVolumeConfiguration):
    backend: Literal["daytona"] = "daytona"
    volume_id: str | None = None


class LiumVolumeConfiguration(BaseVolumeConfiguration):
    backend: Literal["lium"] = "lium"
    volume_id: str | None = None


VolumeConfiguration = (
    AWSVolumeConfiguration
    | GCPVolumeConfiguration
    | RunpodVolumeConfiguration
    | KubernetesVolumeConfiguration
    | DaytonaVolumeConfiguration
    | LiumVolumeConfiguration
)
VOLUME_MODELS: Mapping[str, type[BaseVolumeConfiguration]] = MappingProxyType(
    {
        "aws": AWSVolumeConfiguration,
        "gcp": GCPVolumeConfiguration,
        "runpod": RunpodVolumeConfiguration,
        "kubernetes": KubernetesVolumeConfiguration,
        "daytona": DaytonaVolumeConfiguration,
        "lium": LiumVolumeConfiguration,
    }
)
