"""Run a Pulumi program under recording mocks, one fresh event loop per run.

`run_program(fn)` follows the Pulumi SDK's mocks recipe: new loop, `reset_options`,
`set_mocks`, run, close the loop; it returns the resolved outputs and the recorder. Inputs
arrive in wire format (camelCase). The mocks compute a few outputs per type (public IPs, key names)
and answer the invokes the programs use with canned results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pulumi

SECRET_SIG = "4dabf18193072939515e22adb298388d"


def _unwrap(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIG) is not None and "value" in value:
            return _unwrap(value["value"])
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


@dataclass
class Recorded:
    type: str
    name: str
    inputs: dict[str, Any]


CANNED_CALLS: dict[str, dict[str, Any]] = {
    "aws:ec2/getAmi:getAmi": {"id": "ami-0123", "imageId": "ami-0123"},
    "aws:route53/getZone:getZone": {"zoneId": "Z0123", "name": "example.com"},
    "aws:ebs/getVolume:getVolume": {
        "volumeId": "vol-existing",
        "availabilityZone": "us-east-1b",
        "size": 500,
    },
    "gcp:compute/getDisk:getDisk": {"name": "disk-existing", "size": 200},
}


def _computed(typ: str, name: str, inputs: dict[str, Any], n: int) -> dict[str, Any]:
    if typ == "aws:ec2/instance:Instance":
        zone = inputs.get("availabilityZone") or "us-east-1a"
        return {"publicIp": f"203.0.113.{n}", "privateIp": f"10.0.0.{n}", "availabilityZone": zone}
    if typ == "aws:ec2/keyPair:KeyPair":
        return {"keyName": f"{name}-kp"}
    if typ == "aws:ec2/placementGroup:PlacementGroup":
        return {"name": f"{name}-physical"}
    if typ == "aws:ec2/eip:Eip":
        return {"publicIp": "198.51.100.7"}
    if typ == "gcp:compute/instance:Instance":
        nics = [
            {
                **nic,
                "accessConfigs": [{**ac, "natIp": f"203.0.113.{n}"} for ac in nic["accessConfigs"]],
            }
            for nic in inputs.get("networkInterfaces", [])
        ]
        return {"instanceId": f"{n}000", "networkInterfaces": nics}
    if typ == "gcp:compute/address:Address":
        return {"address": "198.51.100.8"}
    if typ == "gcp:compute/disk:Disk":
        return {"name": f"{name}-disk"}
    if typ == "gcp:compute/resourcePolicy:ResourcePolicy":
        return {"selfLink": f"projects/p/regions/r/resourcePolicies/{name}"}
    if typ == "gcp:compute/firewall:Firewall":
        return {"name": f"{name}-physical"}
    return {}


@dataclass
class RecordingMocks(pulumi.runtime.Mocks):
    resources: list[Recorded] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        inputs = _unwrap(dict(args.inputs))
        self.resources.append(Recorded(args.typ, args.name, inputs))
        outputs = {**inputs, **_computed(args.typ, args.name, inputs, len(self.resources))}
        return f"{args.name}-id", outputs

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        self.calls.append(args.token)
        return CANNED_CALLS.get(args.token, {}), []

    def of_type(self, suffix: str) -> list[Recorded]:
        """Resources of a type, sorted by name (they register in no fixed order)."""
        return sorted((r for r in self.resources if r.type.endswith(suffix)), key=lambda r: r.name)

    def named(self, name: str) -> Recorded:
        """The resource with this logical name (registration order is not deterministic)."""
        (found,) = [r for r in self.resources if r.name == name]
        return found

    def one(self, suffix: str) -> Recorded:
        (found,) = self.of_type(suffix)
        return found


def run_program(
    fn: Callable[[], Mapping[str, Any]], config: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], RecordingMocks]:
    """Run `fn` under fresh mocks; return its resolved outputs and the recorder."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    holder: dict[str, Any] = {}
    try:
        pulumi.runtime.reset_options()
        mocks = RecordingMocks()
        pulumi.runtime.set_mocks(mocks, project="dockyard", stack="main-fleet-x", preview=False)
        pulumi.runtime.set_all_config(dict(config or {}))

        @pulumi.runtime.test  # type: ignore[untyped-decorator]
        def run() -> Any:
            return pulumi.Output.from_input(fn()).apply(lambda v: holder.update(v))

        run()
    finally:
        loop.close()
        asyncio.set_event_loop(None)
    return holder, mocks
