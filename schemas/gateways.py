"""`type: gateway`: an ingress for services (domain, TLS certificate, load balancer).

Field names and defaults are dstack 0.22.5's. The checks dstack's server
makes before it creates a gateway (backend support, private gateways, ALB and certificate
combinations, at most 9 replicas) are made here at parse time.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import Field, model_validator

from schemas.base import ConfigModel, FieldConflict, StrictModel
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

    @model_validator(mode="after")
    def _server_rules(self) -> GatewayConfiguration:
        check_gateway(self)
        return self


_GATEWAY_BACKENDS = ("aws", "azure", "gcp", "kubernetes")
_PRIVATE_GATEWAY_BACKENDS = ("aws", "gcp")
_ALB_CERTIFICATES: Mapping[str, str] = MappingProxyType({"aws": "acm", "gcp": "gcp-cm"})
MAX_GATEWAY_REPLICAS = 9  # dstack server default (DSTACK_SERVER_GATEWAY_MAX_REPLICAS)


def check_gateway(gateway: GatewayConfiguration) -> None:
    """dstack's server-side gateway rules, as `FieldConflict`s on the field to change."""
    if gateway.backend not in _GATEWAY_BACKENDS:
        raise FieldConflict("backend", f"gateways run on {', '.join(_GATEWAY_BACKENDS)} only")
    if not gateway.public_ip and gateway.backend not in _PRIVATE_GATEWAY_BACKENDS:
        raise FieldConflict("public_ip", "private gateways are supported on aws and gcp only")
    replicas = gateway.replicas or 1
    if replicas > MAX_GATEWAY_REPLICAS:
        raise FieldConflict("replicas", f"at most {MAX_GATEWAY_REPLICAS} gateway replicas")
    certificate = gateway.certificate.type if gateway.certificate is not None else None
    if gateway.load_balancer is not None:
        wanted = _ALB_CERTIFICATES.get(gateway.backend)
        if wanted is None:
            raise FieldConflict("load_balancer", "an ALB is supported on aws and gcp only")
        if certificate not in (None, wanted):
            raise FieldConflict(
                "certificate", f"with an ALB use `certificate: null` or `{{type: {wanted}}}`"
            )
    if certificate == "acm" and gateway.backend != "aws":
        raise FieldConflict("certificate", "`acm` certificates are for aws only")
    if certificate == "gcp-cm":
        if gateway.backend != "gcp":
            raise FieldConflict("certificate", "`gcp-cm` certificates are for gcp only")
        if gateway.load_balancer is None:
            raise FieldConflict("certificate", "`gcp-cm` needs `load_balancer: {type: alb}`")
    if certificate == "lets-encrypt" and not gateway.public_ip:
        raise FieldConflict(
            "certificate", "a Let's Encrypt certificate does not work for a private gateway"
        )
