"""`type: gateway`: an ingress for services (domain, TLS certificate, load balancer).

Field names and defaults are dstack 0.22.5's (reference §1.7).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.base import ConfigModel, StrictModel
from schemas.profile import Backend
from schemas.scalars import ResourceName, Tags


class LetsEncryptCertificate(StrictModel):
    type: Literal["lets-encrypt"] = "lets-encrypt"


class ACMCertificate(StrictModel):
    type: Literal["acm"] = "acm"
    arn: str


class GCPCertificateManagerCertificate(StrictModel):
    type: Literal["gcp-cm"] = "gcp-cm"
    name: str


class ALBLoadBalancer(StrictModel):
    type: Literal["alb"] = "alb"


Certificate = Annotated[
    LetsEncryptCertificate | ACMCertificate | GCPCertificateManagerCertificate,
    Field(discriminator="type"),
]


class GatewayConfiguration(ConfigModel):
    """`type: gateway`."""

    type: Literal["gateway"] = "gateway"
    name: ResourceName | None = None
    """The gateway name."""
    default: bool | None = None
    """Make it the project's default gateway."""
    backend: Backend
    """Backend to create the gateway in (aws, azure, gcp, kubernetes)."""
    region: str
    """Region to create the gateway in."""
    instance_type: Annotated[str | None, Field(min_length=1)] = None
    """Instance type."""
    domain: str | None = None
    """Wildcard domain of the services, e.g. `example.com`."""
    public_ip: bool = True
    """Allocate a public IP (default `true`)."""
    load_balancer: ALBLoadBalancer | None = None
    """Put a load balancer in front (`{type: alb}`)."""
    certificate: Certificate | None = LetsEncryptCertificate()
    """TLS certificate (default Let's Encrypt; `null` to disable)."""
    replicas: Annotated[int | None, Field(ge=1)] = None
    """Number of gateway instances (default 1)."""
    tags: Tags = None
    """Tags copied to cloud resources."""
