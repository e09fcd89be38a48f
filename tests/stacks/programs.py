"""Builders of program inputs shared by the program and driver tests."""

from __future__ import annotations

from typing import Any

from stacks.catalog import find_offers, load_catalog, requirements_from_spec
from stacks.programs.config import ProgramSettings
from stacks.protocol import StackResource

SETTINGS = ProgramSettings(
    ssh_public_key="ssh-ed25519 AAAATESTKEY dockyard-server",
    server_url="https://dockyard.example.com",
    agent_package="dockyard==0.1.0",
    gcp_project="proj-1",
)


def fleet(name: str, spec: dict[str, Any], *, project: str = "main") -> StackResource:
    offers = find_offers(requirements_from_spec(spec), load_catalog())
    return StackResource(project, "fleet", name, f"fleets/{name}.dstack.yml", spec, offers)


def resource(kind: Any, name: str, spec: dict[str, Any]) -> StackResource:
    return StackResource("main", kind, name, f"{kind}s/{name}.dstack.yml", spec)
