"""The scheduler shim end to end against kmock's Kubernetes emulator: nodes published by the agent's own
code, pods created through the API, the real gRPC server and client between the shim and the engine.
The extender's end-to-end tests run against the real kube-scheduler in tests/cluster/test_cluster_extender.py, the
binder's against the real API server in tests/cluster/test_cluster_binder.py, the service's watches and leader election
in tests/cluster/test_cluster_service.py; the binder's and the feed's here stay on the emulator for a fault the real
server cannot be made to answer on demand (a 503 from the fourth Binding on, a 410 inside the first watch's
stream)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import connect
from kubenexus.kube.leader import LeaseConfig
from kubenexus.kube.paths import NODES_PATH
from placement.cluster.feed import ClusterFeed
from placement.core.annotations import ASSIGNED_GPUS_KEY, FIELD_MANAGER, RESERVED_NODE_KEY
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from tests.conftest import wait_until
from tests.kube_emulator import NODES
from tests.machines.node_topologies import nvswitch_node
from tests.shim_cluster import ShimEmulator, pod_object, publish_nodes, replica

pytestmark = pytest.mark.slow

GROUP = {"pod-group.scheduling.kubenexus.io/name": "train", "pod-group.scheduling.kubenexus.io/min-available": "8"}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ShimEmulator, Path]]:
    with ShimEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        publish_nodes(emulator, kubeconfig, {"h100-a": nvswitch_node(), "h100-b": nvswitch_node()})
        yield emulator, kubeconfig


def create_pods(kubeconfig: Path, pods: list[dict[str, Any]]) -> None:
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    try:
        for pod in pods:
            api.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)
    finally:
        api.close()


def gang(count: int = 8) -> list[dict[str, Any]]:
    return [pod_object(f"worker-{i}", gpus=2, labels=GROUP) for i in range(count)]


def assert_no_double_booking(emulator: ShimEmulator, names: list[str]) -> None:
    gpus: Counter[tuple[str, int]] = Counter()
    for name in names:
        pod = emulator.pod("default", name)
        node = pod["spec"]["nodeName"]
        for gpu in pod["metadata"]["annotations"][ASSIGNED_GPUS_KEY].split(","):
            gpus[(node, int(gpu))] += 1
    assert max(gpus.values()) == 1, f"a GPU handed out twice: {gpus}"
    bound = Counter((namespace, pod) for namespace, pod, _ in emulator.bindings)
    assert max(bound.values()) == 1, f"a pod bound twice: {bound}"


def test_killing_the_leader_mid_gang_lets_the_next_replica_finish_it(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    first = replica(emulator, kubeconfig, "placement-0").start()
    # The fourth binding on fails until the leader is gone: it dies with three members bound.
    emulator.refuse_binding = lambda number: number >= 3
    try:
        wait_until(first.elector.is_leader, what="the first leader")
        create_pods(kubeconfig, gang(8))
        wait_until(lambda: len(emulator.bindings) == 3, what="three bindings")
    finally:
        first.kill()
    emulator.refuse_binding = None
    bound_before = len(emulator.bindings)
    assert 3 <= bound_before < 8, "the crash was meant to land mid-gang"
    reserved = [
        f"worker-{i}"
        for i in range(8)
        if RESERVED_NODE_KEY in emulator.pod("default", f"worker-{i}")["metadata"]["annotations"]
    ]
    assert len(reserved) == 8, "every member's reservation was recorded before the first binding"

    second = replica(emulator, kubeconfig, "placement-1").start()
    try:
        wait_until(lambda: len({b[1] for b in emulator.bindings}) == 8, timeout_s=40, what="the rest of the gang")
        # The new replica rebuilt the reservations from the pods: all 16 GPUs are charged exactly once.
        wait_until(
            lambda: sum(len(second.index.busy_gpus(second.index.slot_of(n) or 0)) for n in ("h100-a", "h100-b")) == 16
        )
    finally:
        second.kill()
    assert_no_double_booking(emulator, [f"worker-{i}" for i in range(8)])


def test_a_410_error_event_in_the_watch_stream_makes_the_feed_relist(cluster: tuple[ShimEmulator, Path]) -> None:
    """The real API server answers an expired version from its watch cache with HTTP 410 before the stream
    starts (tests/cluster/test_cluster_service.py); a watch served by etcd directly (the watch cache off) reports it as
    an ERROR event inside the stream, which only a scripted answer gives on demand."""
    emulator, kubeconfig = cluster
    index = ClusterIndex()
    # The first watch of nodes answers 410 Gone at once: the feed must list again, not back off.
    emulator.kmock["watch", NODES][:1] << {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired"},
    }
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    feed = ClusterFeed(api, index, Reservations(index), watch_timeout_s=1, backoff=Backoff(0.05, 0.1))
    feed.start()
    try:
        assert feed.wait_synced(10)
        wait_until(lambda: feed.relists >= 1, what="a relist")
        assert sorted(index.node_names()) == ["h100-a", "h100-b"]
        lists = [r for r in emulator.requests() if r.url.path == NODES_PATH and "watch" not in r.url.query]
        assert len(lists) >= 2
        assert feed.synced
    finally:
        feed.stop()
        api.close()
    assert not feed.synced


def test_lease_timings_are_validated() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig(namespace="ns", name="lease", identity="me", lease_duration_s=10, renew_deadline_s=10)
    with pytest.raises(ValueError, match="POD_NAME"):
        LeaseConfig(namespace="ns", name="lease", identity="")
