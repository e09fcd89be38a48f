"""The configuration contract: dstack's `.dstack.yml` language as immutable pydantic models.

Everything that reads a user's configuration goes through `parse_config`; the reconciler,
the stacks engines and the agent import models from here and nothing else of ours is
imported by this package (checked by import-linter).
"""

from schemas.base import ConfigModel, EntityReference
from schemas.configs import CONFIG_TYPES, AnyConfig, RunConfiguration
from schemas.discovery import is_config_path, select_config_paths
from schemas.fleets import FleetConfiguration, FleetNodesSpec, SSHHostParams, SSHParams
from schemas.gateways import GatewayConfiguration
from schemas.mounts import InstanceMountPoint, PortMapping, RepoSpec, VolumeMountPoint
from schemas.parsing import parse_config, parse_data, peek_kind
from schemas.presets import PresetConfiguration
from schemas.problems import ConfigError, Problem
from schemas.resources import CPUSpec, DiskSpec, GPUSpec, ResourcesSpec
from schemas.runs import DevEnvironmentConfiguration, NodeGroup, TaskConfiguration
from schemas.scalars import IntRange, MemoryRange
from schemas.service import ServiceConfiguration
from schemas.service_parts import ProbeConfig, ReplicaGroup, ScalingSpec
from schemas.volumes import BaseVolumeConfiguration, VolumeConfiguration

__all__ = [
    "CONFIG_TYPES",
    "AnyConfig",
    "BaseVolumeConfiguration",
    "CPUSpec",
    "ConfigError",
    "ConfigModel",
    "DevEnvironmentConfiguration",
    "DiskSpec",
    "EntityReference",
    "FleetConfiguration",
    "FleetNodesSpec",
    "GPUSpec",
    "GatewayConfiguration",
    "InstanceMountPoint",
    "IntRange",
    "MemoryRange",
    "NodeGroup",
    "PortMapping",
    "PresetConfiguration",
    "ProbeConfig",
    "Problem",
    "ReplicaGroup",
    "RepoSpec",
    "ResourcesSpec",
    "RunConfiguration",
    "SSHHostParams",
    "SSHParams",
    "ScalingSpec",
    "ServiceConfiguration",
    "TaskConfiguration",
    "VolumeConfiguration",
    "VolumeMountPoint",
    "is_config_path",
    "parse_config",
    "parse_data",
    "peek_kind",
    "select_config_paths",
]
