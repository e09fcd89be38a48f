"""The offers of a project's Slurm clusters, read from the clusters now, as catalog offers.

Called by `POST …/backends/offers` (`reconciler.web.routes_backends`), which `dockyard
offer` asks beside the plan's instance offers. Every Slurm cluster of the project's entry
in the server's backends file is read at once over SSH on its login node
(`reconciler.adapters.slurm_login.read_project_clusters`); each node shape of a configured
partition becomes a `stacks.catalog.CatalogRow` (backend `slurm`, region = the cluster,
on-demand at the cluster's `price`, no spot) and the request's requirements are matched
against them by the catalog's own matcher, so `--gpu`, `--cpu`, `--memory`, `-r`,
`--max-price` and `--spot-policy` mean what they mean for cloud offers. A GPU's memory is
what the built-in catalog knows of its model (0 when it does not: Slurm does not say). A
cluster that cannot be read adds its one-line reason to `errors`, never fails the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.adapters.slurm_login import read_project_clusters
from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.slurm_nodes import ClusterOffer
from stacks.catalog import CatalogRow, find_offers, requirements_from_spec


def _memory_of(gpu: str, catalog: Sequence[CatalogRow]) -> float:
    sizes = [row.gpu_memory_gib for row in catalog if row.gpu_name.upper() == gpu.upper()]
    return max(sizes) if sizes else 0.0


def catalog_rows(
    offers: Sequence[ClusterOffer], catalog: Sequence[CatalogRow]
) -> tuple[CatalogRow, ...]:
    """Pure: the clusters' offers as catalog rows (see the module docstring)."""
    return tuple(
        CatalogRow(
            backend="slurm",
            region=offer.cluster,
            zones=(offer.partition,),
            instance_type=offer.instance_type,
            gpu_vendor="nvidia" if offer.gpu_name else "",
            gpu_name=offer.gpu_name or "",
            gpu_count=offer.gpu_count,
            gpu_memory_gib=_memory_of(offer.gpu_name, catalog) if offer.gpu_name else 0.0,
            cpus=offer.cpus,
            memory_gib=round(offer.memory_mib / 1024, 2),
            price_on_demand=offer.price,
            price_spot=None,
        )
        for offer in offers
    )


async def cluster_offers(
    clusters: ServerBackends,
    project: str,
    spec: Mapping[str, Any],
    catalog: Sequence[CatalogRow],
) -> tuple[list[dict[str, Any]], list[str]]:
    """(offers as `Offer.to_json`, errors) of `project`'s Slurm clusters matching `spec`."""
    wanted = requirements_from_spec(spec)  # a malformed spec fails before any login
    found, errors = await read_project_clusters(clusters, project)
    offers = find_offers(wanted, catalog_rows(found, catalog))
    return [offer.to_json() for offer in offers], list(errors)
