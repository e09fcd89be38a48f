"""dstack 0.22.5's `offer` filters against `dockyard server`: `--cpu`, `--memory`, `--disk`
and `--fleet` narrow the local fleet's instance offers as dstack's own server does."""

from __future__ import annotations

import json

import pytest

from tests.compat.conftest import Dstack

pytestmark = pytest.mark.slow


def _offers(dstack: Dstack, *args: str) -> list[dict[str, object]]:
    answer = json.loads(dstack.ok("offer", "--json", *args))
    offers = answer["job_plans"][0]["offers"] if "job_plans" in answer else answer["offers"]
    assert isinstance(offers, list)
    return offers


def test_offer_filters_narrow_the_fleets_instances(dstack: Dstack) -> None:
    assert len(_offers(dstack)) == 1
    assert len(_offers(dstack, "--cpu", "1..")) == 1
    assert _offers(dstack, "--cpu", "512..") == []
    assert len(_offers(dstack, "--memory", "1GB..")) == 1
    assert _offers(dstack, "--memory", "100TB..") == []
    assert len(_offers(dstack, "--disk", "1GB..")) == 1
    assert _offers(dstack, "--disk", "1000TB..") == []
    assert len(_offers(dstack, "--fleet", "local")) == 1
    assert _offers(dstack, "--fleet", "elsewhere") == []
    plain = dstack.ok("offer", "--cpu", "512..")
    assert "local-0" not in plain
