"""The offers of a project's Slurm and Kubernetes clusters, read from them now, as catalog offers.

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

Kubernetes clusters (`reconciler.adapters.kubeapi.read_project_kube`) are read the same way:
each node shape of a node pool is a row of backend `kubernetes` (region = the kubeconfig's
cluster, the pool as its zone, $0, no spot), its GPU memory the `nvidia.com/gpu.memory`
label's where the node has it, else the catalog's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.adapters.slurm_login import read_project_clusters
from reconciler.core.clusterbackends import ServerBackends
from reconciler.core.kube_nodes import KubeOffer
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


def kube_rows(offers: Sequence[KubeOffer], catalog: Sequence[CatalogRow]) -> tuple[CatalogRow, ...]:
    """Pure: Kubernetes node shapes as catalog rows (see the module docstring)."""
    return tuple(
        CatalogRow(
            backend="kubernetes",
            region=offer.cluster,
            zones=(offer.pool,),
            instance_type=offer.instance_type,
            gpu_vendor=offer.gpu_vendor,
            gpu_name=offer.gpu_name or "",
            gpu_count=offer.gpu_count,
            gpu_memory_gib=(
                round(offer.gpu_memory_mib / 1024, 1)
                if offer.gpu_memory_mib
                else _memory_of(offer.gpu_name, catalog)
                if offer.gpu_name
                else 0.0
            ),
            cpus=offer.cpus,
            memory_gib=round(offer.memory_mib / 1024, 2),
            price_on_demand=0.0,
            price_spot=None,
        )
        for offer in offers
    )


async def _read_kube(
    clusters: ServerBackends, project: str, gpus: Sequence[str]
) -> tuple[tuple[KubeOffer, ...], tuple[str, ...]]:
    # lightkube (about 0.4 s of CPU to import) loads only when a Kubernetes cluster is
    # asked, not with the web app at every start (tests/operations/test_start_imports.py)
    from reconciler.adapters.kubeapi import read_project_kube

    return await read_project_kube(clusters, project, gpus)


async def _none() -> tuple[tuple[Any, ...], tuple[str, ...]]:
    return (), ()


async def cluster_offers(
    clusters: ServerBackends,
    project: str,
    spec: Mapping[str, Any],
    catalog: Sequence[CatalogRow],
) -> tuple[list[dict[str, Any]], list[str]]:
    """(offers as `Offer.to_json`, errors) of `project`'s clusters of the backends `spec`
    names (`slurm`, `kubernetes`) matching `spec`."""
    wanted = requirements_from_spec(spec)  # a malformed spec fails before any login
    named = spec.get("backends") or ("slurm",)
    gpus = sorted({row.gpu_name for row in catalog if row.gpu_name})
    (slurm, slurm_errors), (kube, kube_errors) = await asyncio.gather(
        read_project_clusters(clusters, project) if "slurm" in named else _none(),
        _read_kube(clusters, project, gpus) if "kubernetes" in named else _none(),
    )
    rows = catalog_rows(slurm, catalog) + kube_rows(kube, catalog)
    offers = find_offers(wanted, rows)
    return [offer.to_json() for offer in offers], [*slurm_errors, *kube_errors]
