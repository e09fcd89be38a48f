"""`fleet delete -i` (dstack's `fleets/delete_instances`) on an elastic cloud fleet, through
the fleets worker: the instance the route marks (`leave_fleet_instances`, what
`reconciler.core.fleet_instances` allows) leaves the stack at the next fleet pass, as an idle
scale-down's does (a cloud double stands in for Pulumi)."""

from __future__ import annotations

from reconciler.adapters.db.dstack_lookups import fleet_instances, leave_fleet_instances
from reconciler.core.fleet_instances import LEAVING_REASON, InstanceView, leaving_instances
from tests.engine.test_workers_elastic import Rig, rig  # noqa: F401 (the fixture)


async def test_a_deleted_top_instance_leaves_the_stack(rig: Rig) -> None:  # noqa: F811
    await rig.fleet_pass()
    one, two = rig.submit("one"), rig.submit("two")
    await rig.job_pass(one)
    await rig.job_pass(two)
    await rig.fleet_pass()
    rig.ready("gpu-0")
    rig.ready("gpu-1")
    await rig.job_pass(one)
    await rig.job_pass(two)
    rig.finish(one)
    rig.finish(two)
    assert rig.cloud.ups == [0, 2]

    with rig.store.reading() as session:
        found = fleet_instances(session, rig.project.id, "gpu")
    assert found is not None
    spec, rows = found
    nums = leaving_instances("gpu", spec, [InstanceView(*row) for row in rows], [1])
    with rig.store.writing() as session:
        assert leave_fleet_instances(session, rig.project.id, "gpu", nums, LEAVING_REASON) == 1
    await rig.fleet_pass()
    assert rig.cloud.ups == [0, 2, 1]
    assert [i.name for i in rig.instances()] == ["gpu-0"]
