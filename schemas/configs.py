"""The union of every configuration type, and the table `parse_config` dispatches on.

`type` picks the model; volumes dispatch again on `backend` (`volumes.VOLUME_MODELS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from schemas.base import ConfigModel
from schemas.fleets import FleetConfiguration
from schemas.gateways import GatewayConfiguration
from schemas.presets import PresetConfiguration
from schemas.runs import DevEnvironmentConfiguration, TaskConfiguration
from schemas.service import ServiceConfiguration
from schemas.volumes import VolumeConfiguration

RunConfiguration = DevEnvironmentConfiguration | TaskConfiguration | ServiceConfiguration
AnyConfig = (
    RunConfiguration
    | FleetConfiguration
    | VolumeConfiguration
    | GatewayConfiguration
    | PresetConfiguration
)
CONFIG_MODELS: Mapping[str, type[ConfigModel] | None] = MappingProxyType(
    {
        "dev-environment": DevEnvironmentConfiguration,
        "task": TaskConfiguration,
        "service": ServiceConfiguration,
        "fleet": FleetConfiguration,
        "volume": None,  # dispatched again on `backend`
        "gateway": GatewayConfiguration,
        "preset": PresetConfiguration,
    }
)
CONFIG_TYPES: tuple[str, ...] = tuple(CONFIG_MODELS)
