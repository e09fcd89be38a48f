"""Order from references: infrastructure before the runs that use it, deletes in reverse."""

from __future__ import annotations

from reconciler.core.ordering import references
from reconciler.core.planning import plan
from reconciler.domain.kinds import Kind, ResourceKey
from reconciler.domain.observed import ObservedState
from reconciler.domain.plan import ActionKind
from tests.planning.factories import POLICY, deployed, live, policy, resource, state

APP = resource(
    """
    type: service
    name: app
    image: nginx
    port: 80
    gateway: gw
    fleets: [gpu, other/remote]
    volumes: ["data:/data", "/mnt/cache:/cache"]
    """
)
BATCH = resource("type: task\nname: batch\ncommands: [run]\nvolumes: ['data:/data']\n")
ALPHA = resource("type: task\nname: alpha\ncommands: [run]\n")
DATA = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 10GB\n")
GPU = resource("type: fleet\nname: gpu\nnodes: 1\nbackends: [aws]\n")
GW = resource("type: gateway\nname: gw\nbackend: aws\nregion: us-east-1\ndomain: a.io\n")


def _order(result: object) -> list[tuple[str, str, str]]:
    return [(a.action.value, a.kind.value, a.name) for a in result.actions]  # type: ignore[attr-defined]


def test_references_name_volumes_fleets_and_gateway_of_the_same_project() -> None:
    assert references(Kind.SERVICE, APP.spec, "main") == (
        ResourceKey("main", Kind.VOLUME, "data"),
        ResourceKey("main", Kind.FLEET, "gpu"),
        ResourceKey("main", Kind.GATEWAY, "gw"),
    )
    assert references(Kind.FLEET, GPU.spec, "main") == ()


def test_infrastructure_is_created_before_the_runs_that_use_it() -> None:
    result = plan(state(APP, BATCH, ALPHA, GW, GPU, DATA), ObservedState("main"), POLICY)
    assert _order(result) == [
        ("create", "volume", "data"),
        ("create", "fleet", "gpu"),
        ("create", "gateway", "gw"),
        ("create", "service", "app"),
        ("create", "task", "alpha"),
        ("create", "task", "batch"),
    ]
    assert {k.name for k in result.actions[3].depends_on} == {"data", "gpu", "gw"}


def test_deletes_go_in_reverse_runs_first_and_unchanged_last() -> None:
    everything = live(*(deployed(r) for r in (APP, BATCH, GW, GPU, DATA)))
    result = plan(state(ALPHA, files=1), everything, policy(volumes="delete"))
    assert _order(result) == [
        ("delete", "service", "app"),
        ("delete", "task", "batch"),
        ("create", "task", "alpha"),
        ("delete", "gateway", "gw"),
        ("delete", "fleet", "gpu"),
        ("delete", "volume", "data"),
    ]


def test_a_replaced_volume_comes_before_the_service_updated_to_use_it() -> None:
    bigger = resource("type: volume\nname: data\nbackend: aws\nregion: us-east-1\nsize: 20GB\n")
    app2 = resource("type: service\nname: app\nimage: nginx:2\nport: 80\nvolumes: ['data:/data']\n")
    app1 = resource("type: service\nname: app\nimage: nginx\nport: 80\nvolumes: ['data:/data']\n")
    result = plan(state(app2, bigger), live(deployed(app1), deployed(DATA)), POLICY)
    assert _order(result) == [("replace", "volume", "data"), ("update", "service", "app")]


def test_order_does_not_depend_on_input_order() -> None:
    resources = (APP, BATCH, ALPHA, GW, GPU, DATA)
    observed = live(deployed(GPU))
    first = plan(state(*resources), observed, POLICY)
    second = plan(state(*reversed(resources)), observed, POLICY)
    assert first == second
    assert [a.action for a in first.actions][-1] is ActionKind.NOOP
