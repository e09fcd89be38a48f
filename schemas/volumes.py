"""`type: volume`: network volumes, dispatched a second time on `backend`.

Backends with volumes: aws, gcp, runpod, kubernetes, daytona, lium (dstack 0.22.5).
`parsing` picks the model from `VOLUME_MODELS` by `backend`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from pydantic import Field, model_validator

from schemas.base import ConfigModel, FieldConflict
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

    @model_validator(mode="after")
    def _server_rules(self) -> BaseVolumeConfiguration:
        """dstack's server checks before it creates or registers a volume."""
        external = self.external_id()
        sized = "size" in type(self).model_fields
        if sized and external is None and getattr(self, "size", None) is None:
            raise FieldConflict(
                "size", "set `size` to create a volume, or the id of an existing one"
            )
        cleanup = self.auto_cleanup_duration
        if external is not None and cleanup is not None and cleanup > 0:
            raise FieldConflict(
                "auto_cleanup_duration", "an existing (external) volume is never cleaned up"
            )
        return self

    def external_id(self) -> str | None:
        """The id of an existing volume to register (`volume_id`, or `claim_name` on k8s)."""
        value = getattr(self, "volume_id", None)
        return value if isinstance(value, str) else None


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

    def external_id(self) -> str | None:
        return self.claim_name


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
