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
    default: bool | None = None
    backend: Backend
    region: str
    instance_type: Annotated[str | None, Field(min_length=1)] = None
    domain: str | None = None
    public_ip: bool = True
    load_balancer: ALBLoadBalancer | None = None
    certificate: Certificate | None = LetsEncryptCertificate()
    replicas: Annotated[int | None, Field(ge=1)] = None
    tags: Tags = None
