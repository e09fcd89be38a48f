"""Which instances `fleet delete -i` may take away (reconciler/core/fleet_instances.py)."""

from __future__ import annotations

import pytest

from reconciler.core.fleet_instances import InstanceView, leaving_instances
from reconciler.errors import UsageError

CLOUD = {"nodes": {"min": 2, "max": 4}, "backends": ["aws"]}


def test_cloud_fleets_give_idle_top_instances_back_down_to_their_minimum() -> None:
    views = [InstanceView(n, "idle") for n in range(4)]
    assert leaving_instances("c", CLOUD, views, [3, 2, 3]) == [2, 3]
    with pytest.raises(UsageError, match="keeps at least 2 nodes"):
        leaving_instances("c", CLOUD, views, [1, 2, 3])
    with pytest.raises(UsageError, match="instance 2 is below instance 3"):
        leaving_instances("c", CLOUD, views, [2])
    shared = [*views[:3], InstanceView(3, "idle", busy_blocks=1)]
    with pytest.raises(UsageError, match="instance 3 is busy: stop its runs first"):
        leaving_instances("c", CLOUD, shared, [3])
    gone = [*views[:3], InstanceView(3, "terminated")]
    assert leaving_instances("c", CLOUD, gone, [2]) == [2]


def test_ssh_and_local_fleets_say_what_to_do_instead() -> None:
    with pytest.raises(UsageError, match=r"remove the host from ssh_config\.hosts"):
        leaving_instances("s", {"ssh_config": {"hosts": ["a"]}}, [InstanceView(0, "idle")], [0])
    with pytest.raises(UsageError, match="the local fleet is this host"):
        leaving_instances("l", {"nodes": 1}, [InstanceView(0, "idle")], [0])
