"""The consistency window of follower reads, end to end against kmock's Kubernetes emulator.

Two placement replicas (each its own cluster feed, engine and gRPC server; one Lease decides the leader)
and the extender as deployed: its Filter calls answered by the follower, its bind's Reserve by the
leader. The follower's pod watch is held back, so its cache lags the leader's: its Filter still lists a
node the leader has filled, the leader's Reserve refuses that node, and once the watch delivers, the
follower's Filter drops it. No pod is ever bound where it does not fit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from kubenexus.kube.client import Json, KubeClient, connect
from kubenexus.kube.paths import PODS_PATH
from placement.core.annotations import FIELD_MANAGER
from placement.shim.client import PlacementClient
from placement.shim.extender import Extender
from tests.conftest import wait_until
from tests.machines.node_topologies import nvswitch_node
from tests.shim_cluster import Replica, ShimEmulator, pod_object, publish_nodes, replica

pytestmark = pytest.mark.slow

NODE = "h100-a"
WHOLE_NODE = 8  # GPUs of nvswitch_node: one pod asking for all of them fills it


class LaggingPodWatch(KubeClient):
    """An API connection whose pod watch delivers nothing while ``held``: the stream stays open (the feed
    counts as synced, as a watch that is merely slow does), and its events arrive, in order, on release."""

    def __init__(self, kubeconfig: Path) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.retries = 0
        super().__init__(client.ApiClient(configuration), field_manager=FIELD_MANAGER)
        self._flowing = threading.Event()
        self._flowing.set()

    def hold(self) -> None:
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def watch(
        self, path: str, *, resource_version: str, timeout_s: float, query: Mapping[str, str] | None = None
    ) -> Iterator[Json]:
        events = super().watch(path, resource_version=resource_version, timeout_s=timeout_s, query=query)
        return self._when_released(events) if path == PODS_PATH else events

    def _when_released(self, events: Iterator[Json]) -> Iterator[Json]:
        for event in events:
            self._flowing.wait()
            yield event


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ShimEmulator, Path]]:
    with ShimEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        publish_nodes(emulator, kubeconfig, {NODE: nvswitch_node(cells=1)})
        yield emulator, kubeconfig


def _extender_args(pod: Json) -> Json:
    return {"Pod": pod, "NodeNames": [NODE]}


def _binding_args(pod: Json) -> Json:
    metadata: dict[str, Any] = pod["metadata"]
    return {"PodName": metadata["name"], "PodNamespace": "default", "PodUID": metadata["uid"], "Node": NODE}


def test_a_lagging_follower_lists_a_full_node_the_leader_refuses_until_its_watch_catches_up(
    cluster: tuple[ShimEmulator, Path],
) -> None:
    emulator, kubeconfig = cluster
    leader = replica(emulator, kubeconfig, "placement-0").start(binder=False)
    lagging = LaggingPodWatch(kubeconfig)
    follower: Replica | None = None
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    try:
        wait_until(lambda: leader.feed.synced and leader.elector.is_leader(), what="a synced leader")
        follower = Replica(
            api=lagging,
            binder_api=connect(str(kubeconfig), field_manager=FIELD_MANAGER),
            identity="placement-1",
            lease=replace(leader.lease, identity="placement-1"),
        ).start(binder=False)
        wait_until(lambda: follower is not None and follower.feed.synced, what="a synced follower")
        assert not follower.elector.is_leader()
        # The extender as deployed: decisions to the leader, reads to a replica (here: the follower).
        shim = PlacementClient.connect(f"127.0.0.1:{leader.port}", read_address=f"127.0.0.1:{follower.port}")
        extender = Extender(api, shim)
        first, second = pod_object("first", gpus=WHOLE_NODE), pod_object("second", gpus=WHOLE_NODE)
        for pod in (first, second):
            api.create("/api/v1/namespaces/default/pods", pod)
        # Reads reach the follower once its health check says SERVING (polled each second after it synced).
        wait_until(lambda: not extender.filter(_extender_args(first))["Error"], what="the follower to serve reads")
        lagging.hold()

        assert extender.filter(_extender_args(first))["NodeNames"] == [NODE]
        assert extender.bind(_binding_args(first)) == {"Error": ""}
        assert emulator.bindings == [("default", "first", NODE)]
        wait_until(lambda: NODE not in leader.client.filter(second, [NODE]).feasible_nodes, what="the leader's view")

        # The window: the follower has not heard of the binding, and still lists the node for the next pod.
        assert extender.filter(_extender_args(second))["NodeNames"] == [NODE]
        refused = extender.bind(_binding_args(second))["Error"]
        assert refused.startswith(f"node {NODE} cannot hold pod default/second: ")
        assert "nvidia.com/gpu" in refused
        assert emulator.bindings == [("default", "first", NODE)], "a pod was bound onto a full node"
        assert "nodeName" not in emulator.pod("default", "second")["spec"]

        # The window closes as the follower's watch delivers: its Filter drops the node by itself.
        lagging.release()
        wait_until(lambda: extender.filter(_extender_args(second))["NodeNames"] == [], what="the follower to catch up")
        failed = extender.filter(_extender_args(second))["FailedNodes"]
        assert "nvidia.com/gpu" in failed[NODE]
        shim.close()
    finally:
        lagging.release()
        if follower is not None:
            follower.kill()
        leader.kill()
        api.close()
