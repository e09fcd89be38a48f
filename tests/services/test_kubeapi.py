"""The Kubernetes API emulator (tests/services/kubeapi.py) speaks the wire protocol its
users rely on, seen through lightkube (the client Dockyard uses): a token it does not know
is refused with a `Status`, a name taken is 409, a watch streams changes from a
resourceVersion and ends at `timeoutSeconds`, a followed pod log streams lines until the
pod ends, and `go_down` makes the port refuse until `come_back`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path

import httpx
import pytest
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from tests.services.kubeapi import KubeApi, kube_api


@pytest.fixture
def api() -> Iterator[KubeApi]:
    with kube_api() as emulator:
        yield emulator


def _client(api: KubeApi, tmp_path: Path, token: str | None = None) -> AsyncClient:
    config = KubeConfig.from_file(api.kubeconfig(tmp_path / "kubeconfig", token=token))
    return AsyncClient(config, trust_env=False)


def _pod(name: str) -> Pod:
    spec = PodSpec(containers=[Container(name="main", image="busybox")])
    return Pod(metadata=ObjectMeta(name=name, labels={"app": "x"}), spec=spec)


async def _deadline(it: AsyncIterator[str], limit: float = 20.0) -> str:
    return await asyncio.wait_for(anext(it), limit)


async def test_an_unknown_token_is_refused_and_a_taken_name_conflicts(
    api: KubeApi, tmp_path: Path
) -> None:
    stranger = _client(api, tmp_path, token="guess")
    with pytest.raises(ApiError) as refused:
        await stranger.get(Pod, "p", namespace="default")
    assert refused.value.status.code == 401
    await stranger.close()
    client = _client(api, tmp_path)
    await client.create(_pod("p"))
    with pytest.raises(ApiError) as taken:
        await client.create(_pod("p"))
    assert (taken.value.status.code, taken.value.status.reason) == (409, "AlreadyExists")
    with pytest.raises(ApiError) as missing:
        await client.get(Pod, "nope", namespace="default")
    assert missing.value.status.code == 404
    await client.close()


async def test_a_watch_streams_changes_and_ends_at_its_timeout(
    api: KubeApi, tmp_path: Path
) -> None:
    client = _client(api, tmp_path)
    created = await client.create(_pod("w"))
    assert created.metadata is not None and created.metadata.resourceVersion
    events = client.watch(
        Pod,
        namespace="default",
        labels={"app": "x"},
        resource_version=created.metadata.resourceVersion,
    )
    async with aclosing(events):  # type: ignore[type-var]
        api.set_phase("w", "Running")
        kind, pod = await asyncio.wait_for(anext(aiter(events)), 20)
        assert kind == "MODIFIED" and pod.status is not None and pod.status.phase == "Running"
        api.remove_pod("w")
        kind, _ = await asyncio.wait_for(anext(aiter(events)), 20)
        assert kind == "DELETED"
    # a raw watch with timeoutSeconds ends by itself
    async with httpx.AsyncClient(
        base_url=api.url, headers={"Authorization": f"Bearer {api.token}"}
    ) as http:
        answer = await asyncio.wait_for(
            http.get(
                "/api/v1/namespaces/default/pods", params={"watch": "true", "timeoutSeconds": "1"}
            ),
            20,
        )
    assert answer.status_code == 200 and answer.text == ""
    await client.close()


async def test_a_followed_log_streams_until_the_pod_ends(api: KubeApi, tmp_path: Path) -> None:
    client = _client(api, tmp_path)
    await client.create(_pod("l"))
    api.set_phase("l", "Running")
    api.append_log("l", "first\n")
    lines = aiter(client.log("l", namespace="default", follow=True))
    assert await _deadline(lines) == "first\n"
    api.append_log("l", "second\n")
    assert await _deadline(lines) == "second\n"
    api.set_phase("l", "Succeeded")
    with pytest.raises(StopAsyncIteration):
        await _deadline(lines)
    await client.close()


async def test_the_api_server_goes_down_and_comes_back(api: KubeApi, tmp_path: Path) -> None:
    client = _client(api, tmp_path)
    await client.create(_pod("d"))
    await asyncio.to_thread(api.go_down)
    with pytest.raises(httpx.ConnectError):
        await client.get(Pod, "d", namespace="default")
    await asyncio.to_thread(api.come_back)
    assert (await client.get(Pod, "d", namespace="default")).metadata is not None
    await client.close()
