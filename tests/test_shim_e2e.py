"""The scheduler shim end to end against kmock's Kubernetes emulator: nodes published by the agent's own
code, pods created through the API, the real gRPC server and client between the shim and the engine."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import connect
from kubenexus.kube.leader import LeaderElector, LeaseConfig
from kubenexus.kube.paths import NODES_PATH
from placement.cluster.feed import ClusterFeed
from placement.core.annotations import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY, FIELD_MANAGER, RESERVED_NODE_KEY
from placement.shim.extender import Extender, serve
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from tests.conftest import wait_until
from tests.kube_emulator import NODES
from tests.machines.node_topologies import nvswitch_node
from tests.shim_cluster import LEASES, ShimEmulator, pod_object, publish_nodes, replica

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


def test_the_binder_binds_a_gang_all_at_once_numa_aligned(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    leader = replica(emulator, kubeconfig, "placement-0").start()
    try:
        create_pods(kubeconfig, gang(7))
        waiting = "waiting for pod group default/train: 7/8 members"
        wait_until(lambda: waiting in [e["message"] for e in emulator.events("worker-6")], what="the waiting event")
        assert emulator.bindings == [], "a partial gang was bound"
        assert {e["reason"] for e in emulator.events("worker-6")} == {"WaitingForPodGroup"}
        create_pods(kubeconfig, [pod_object("worker-7", gpus=2, labels=GROUP)])
        wait_until(lambda: len(emulator.bindings) == 8, what="eight bindings")
    finally:
        leader.kill()
    names = [f"worker-{i}" for i in range(8)]
    assert_no_double_booking(emulator, names)
    for name in names:
        pod = emulator.pod("default", name)
        annotations = pod["metadata"]["annotations"]
        cells = annotations[ASSIGNED_CELLS_KEY].split(",")
        assert len(cells) == 1, "a member spans NUMA cells"
        assert annotations[RESERVED_NODE_KEY] == pod["spec"]["nodeName"]
        gpus = [int(g) for g in annotations[ASSIGNED_GPUS_KEY].split(",")]
        assert len(gpus) == 2
        assert {g // 4 for g in gpus} == {int(cells[0])}, "GPUs not on the member's NUMA cell"
        scheduled = [e for e in emulator.events(name) if e["reason"] == "Scheduled"]
        assert len(scheduled) == 1
        assert scheduled[0]["message"].startswith(f"Successfully assigned default/{name} to {pod['spec']['nodeName']}")
        assert "NUMA cells" in scheduled[0]["message"]


def test_a_pod_with_an_invalid_policy_gets_an_event_and_stays_pending(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    leader = replica(emulator, kubeconfig, "placement-0").start()
    try:
        bad = pod_object("bad", gpus=1, annotations={"numa.scheduling.kubenexus.io/policy": "tightest"})
        huge = pod_object("huge", gpus=16)
        create_pods(kubeconfig, [bad, pod_object("good", gpus=1), huge])
        wait_until(
            lambda: emulator.events("bad") and emulator.events("huge") and len(emulator.bindings) == 1,
            what="the events and one binding",
        )
    finally:
        leader.kill()
    # No node holds it: kube-scheduler's message shape, a count per reason.
    # Then why no preemption helps, as kube-scheduler appends " preemption: ..." to the message.
    assert emulator.events("huge")[0]["message"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: pod default/huge (priority 0) fits "
        "on no node even with every lower-priority pod evicted: too few resources in all"
    )
    (event,) = emulator.events("bad")
    assert (event["type"], event["reason"]) == ("Warning", "FailedScheduling")
    assert "'tightest'" in event["message"]
    assert "numa.scheduling.kubenexus.io/policy" in event["message"]
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "default",
        "name": "bad",
        "uid": "uid-bad",
        "resourceVersion": emulator.pod("default", "bad")["metadata"]["resourceVersion"],  # the version it saw
    }
    assert "nodeName" not in emulator.pod("default", "bad")["spec"]
    assert [b[1] for b in emulator.bindings] == ["good"]


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


def test_a_reservation_that_cannot_be_read_is_cleared_and_planned_anew(cluster: tuple[ShimEmulator, Path]) -> None:
    """A pod carries a reservation whose GPU list is garbled: the binder does not bind it blind to that node,
    it clears the reservation and places the pod afresh (the service never charged what it could not read)."""
    emulator, kubeconfig = cluster
    garbled = {RESERVED_NODE_KEY: "h100-a", ASSIGNED_CELLS_KEY: "0", ASSIGNED_GPUS_KEY: "zero,one"}
    create_pods(kubeconfig, [pod_object("restored", gpus=2, annotations=garbled)])
    leader = replica(emulator, kubeconfig, "placement-0").start()
    try:
        wait_until(lambda: len(emulator.bindings) == 1, what="the binding")
    finally:
        leader.kill()
    annotations = emulator.pod("default", "restored")["metadata"]["annotations"]
    gpus = [int(gpu) for gpu in annotations[ASSIGNED_GPUS_KEY].split(",")]
    assert len(gpus) == 2
    assert annotations[RESERVED_NODE_KEY] == emulator.pod("default", "restored")["spec"]["nodeName"]


def test_watches_resume_and_relist_after_410(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    listed = str(emulator.kmock.resource_version)  # nothing is written from here on: every list answers this
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
        # After the stream's idle timeout the watch resumes from the list's version, without a list.
        watches_before = len([r for r in emulator.requests() if r.url.path == NODES_PATH and r.url.query.get("watch")])
        wait_until(
            lambda: (
                len([r for r in emulator.requests() if r.url.path == NODES_PATH and r.url.query.get("watch")])
                > watches_before
            ),
            timeout_s=10,
            what="a resumed watch",
        )
        resumed = [r for r in emulator.requests() if r.url.path == NODES_PATH and r.url.query.get("watch")][-1]
        assert resumed.url.query.get("resourceVersion") == listed
        assert feed.synced
    finally:
        feed.stop()
        api.close()
    assert not feed.synced


def test_the_extender_answers_kube_schedulers_requests(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    service = replica(emulator, kubeconfig, "placement-0").start(binder=False)  # kube-scheduler binds here
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    server = serve(Extender(api, service.client, gang_timeout_s=2), ("127.0.0.1", 0), prefix="/scheduler")
    base = f"http://127.0.0.1:{server.server_address[1]}/scheduler"
    nodes = ["h100-a", "h100-b", "no-agent-node"]
    try:
        create_pods(kubeconfig, [pod_object("single", gpus=2)])
        wait_until(lambda: service.feed.synced and service.elector.is_leader(), what="a synced leader")
        pod = emulator.pod("default", "single")

        too_wide = pod_object("wide", gpus=8, cpus=8)
        filtered = post(f"{base}/filter", {"Pod": too_wide, "Nodes": None, "NodeNames": nodes})
        assert filtered["NodeNames"] == [], "8 GPUs over two NUMA cells cannot be single-NUMA"
        assert set(filtered["FailedAndUnresolvableNodes"]) == set(nodes)
        assert (filtered["Nodes"], filtered["Error"]) == (None, "")

        filtered = post(f"{base}/filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
        assert filtered["NodeNames"] == ["h100-a", "h100-b"]
        assert filtered["FailedAndUnresolvableNodes"] == {
            "no-agent-node": "node unknown to the placement service (no topology report)"
        }
        assert filtered["FailedNodes"] == {}
        priorities = post(f"{base}/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": ["h100-a", "h100-b"]})
        assert [p["Host"] for p in priorities] == ["h100-a", "h100-b"]
        assert all(isinstance(p["Score"], int) and 0 <= p["Score"] <= 10 for p in priorities)

        binding = {"PodName": "single", "PodNamespace": "default", "PodUID": "uid-single", "Node": "h100-b"}
        assert post(f"{base}/bind", binding) == {"Error": ""}
        assert emulator.bindings == [("default", "single", "h100-b")]
        annotations = emulator.pod("default", "single")["metadata"]["annotations"]
        assert len(annotations[ASSIGNED_GPUS_KEY].split(",")) == 2
        assert annotations[RESERVED_NODE_KEY] == "h100-b"

        with pytest.raises(urllib.error.HTTPError) as error:
            post(f"{base}/filter", {"Pod": "not a pod", "NodeNames": nodes})
        error.value.close()
        assert error.value.code == 400
    finally:
        server.shutdown()
        server.server_close()
        api.close()
        service.kill()


def test_the_extender_binds_a_group_only_when_it_is_complete(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    service = replica(emulator, kubeconfig, "placement-0").start(binder=False)
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    extender = Extender(api, service.client, gang_timeout_s=5)
    labels = {"pod-group.scheduling.kubenexus.io/name": "pair", "pod-group.scheduling.kubenexus.io/min-available": "2"}
    try:
        create_pods(kubeconfig, [pod_object(f"member-{i}", gpus=1, labels=labels) for i in range(2)])
        wait_until(lambda: service.feed.synced and service.elector.is_leader(), what="a synced leader")
        results: dict[str, Any] = {}

        def bind(name: str) -> None:
            results[name] = extender.bind({"PodName": name, "PodNamespace": "default", "PodUID": "", "Node": "h100-a"})

        first = threading.Thread(target=bind, args=("member-0",))
        first.start()
        time.sleep(0.5)
        assert emulator.bindings == [], "a member bound before its group was complete"
        bind("member-1")
        first.join(10)
        assert results == {"member-0": {"Error": ""}, "member-1": {"Error": ""}}
        assert sorted(b[1] for b in emulator.bindings) == ["member-0", "member-1"]
    finally:
        api.close()
        service.kill()


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_leader_election_hands_the_lease_over(cluster: tuple[ShimEmulator, Path]) -> None:
    emulator, kubeconfig = cluster
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    config = LeaseConfig(
        namespace="kubenexus-system",
        name="kubenexus-placement",
        identity="placement-0",
        lease_duration_s=3.0,
        renew_deadline_s=2.0,
        retry_period_s=0.1,
    )
    first = LeaderElector(api, config)
    second = LeaderElector(api, replace(config, identity="placement-1"))
    try:
        first.start()
        wait_until(first.is_leader, what="the first leader")
        second.start()
        wait_until(lambda: second.leader_identity() == "placement-0", what="the follower to see the leader")
        time.sleep(0.5)
        assert not second.is_leader()
        started = time.monotonic()
        first.stop()  # a clean stop releases the Lease: no waiting out its 3 s
        wait_until(second.is_leader, what="the takeover")
        assert time.monotonic() - started < 2.0
        assert not first.is_leader()
        lease = emulator.kmock.objects[LEASES, "kubenexus-system", "kubenexus-placement"].raw
        assert lease["spec"]["holderIdentity"] == "placement-1"
        assert lease["spec"]["leaseTransitions"] == 1
    finally:
        first.stop()
        second.stop()
        api.close()


def test_lease_timings_are_validated() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig(namespace="ns", name="lease", identity="me", lease_duration_s=10, renew_deadline_s=10)
    with pytest.raises(ValueError, match="POD_NAME"):
        LeaseConfig(namespace="ns", name="lease", identity="")
