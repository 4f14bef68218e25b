"""The CheckEviction RPC: does a pod fit a node once the victims kube-scheduler chose there are gone, judged by
the kubelet's NUMA admission and the device plugin's GPU choice. A real server on a loopback socket over a
static index; the extender's verb over it is in tests/placement/shim/test_extender_preempt.py."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import grpc
import pytest

from placement.api.v1 import placement_pb2 as pb
from placement.core.constraints.constraint_types import PlacedPod
from placement.core.dra.claims import parse_resource_claim
from placement.core.pods import PodUsage
from placement.core.vocabulary import demand_of
from placement.service.engine import PlacementEngine
from placement.state.cluster_index import ClusterIndex
from tests.dra_cluster import gpu_claim
from tests.dra_victims import allocated_claim, dra_index, place_claiming
from tests.gang_fixtures import pod
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import kubelet, nvswitch_node

LOW, HIGH = 1, 1000


def place(
    index: ClusterIndex, name: str, node: str, gpus: Sequence[int], *, priority: int, kueue: bool = False
) -> None:
    """A running pod that holds ``gpus`` (known by index), with uid ``uid-<name>``; ``kueue``: Kueue admitted it."""
    demand = demand_of(pod(cpus=8, memory_gib=32, gpus=len(gpus)))
    index.upsert_pod(PodUsage("ml", name, node, demand, gpus=tuple(gpus)))
    index.facts.put_pod(PlacedPod("ml", name, node, priority=priority, uid=f"uid-{name}", kueue_admitted=kueue))


def cluster() -> ClusterIndex:
    """Two single-numa-node H100 nodes, GPUs 0-3 on cell 0 and 4-7 on cell 1, every GPU held.

    * ``split``: the low-priority pods hold two GPUs of each cell; evicting them frees 4 GPUs, 2 per cell.
    * ``whole``: the low-priority pods hold all of cell 0.
    """
    index = ClusterIndex()
    for node in ("split", "whole"):
        index.upsert_topology(node, nvswitch_node(cells=2, settings=kubelet("single-numa-node")))
    place(index, "split-low-0", "split", (0, 1), priority=LOW)
    place(index, "split-low-1", "split", (4, 5), priority=LOW)
    place(index, "split-high-0", "split", (2, 3), priority=HIGH)
    place(index, "split-high-1", "split", (6, 7), priority=HIGH)
    place(index, "whole-low-0", "whole", (0, 1), priority=LOW)
    place(index, "whole-low-1", "whole", (2, 3), priority=LOW)
    place(index, "whole-high", "whole", (4, 5, 6, 7), priority=HIGH)
    return index


class Follower:
    """Leader election as a replica that is not the leader sees it."""

    def is_leader(self) -> bool:
        return False

    def leader_identity(self) -> str:
        return "placement-0"


def _serving_as_follower(index: ClusterIndex) -> Iterator[RunningServer]:
    """The service over ``index`` as a follower (CheckEviction is a read-only answer: any replica gives it)."""
    engine = PlacementEngine.over(index)
    engine.leadership = Follower()
    server = RunningServer(engine)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def running() -> Iterator[RunningServer]:
    yield from _serving_as_follower(cluster())


def preemptor(gpus: int = 4) -> pb.Pod:
    resources = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": str(gpus)}
    return pb.Pod(
        namespace="ml",
        name="big",
        containers=[pb.Container(name="main", requests=resources, limits=resources)],
        priority=HIGH,
    )


def check(server: RunningServer, *candidates: pb.EvictionCandidate) -> list[pb.EvictionVerdict]:
    answer = server.stub.CheckEviction(pb.CheckEvictionRequest(pod=preemptor(), candidates=candidates), timeout=10)
    return list(answer.verdicts)


def test_freed_room_split_over_numa_cells_is_refused_with_the_kubelets_reason(running: RunningServer) -> None:
    (verdict,) = check(running, pb.EvictionCandidate(node="split", victim_uids=["uid-split-low-0", "uid-split-low-1"]))
    assert verdict.node == "split"
    assert not verdict.fits
    assert verdict.kind == pb.REJECTION_KIND_KUBELET_TOPOLOGY
    assert verdict.reason.startswith("even with 2 victim(s) evicted, kubelet single-numa-node")
    # 4 GPUs freed: enough for node-level requests (kube-scheduler's model), but 2 per cell.
    assert verdict.reason.endswith("no single NUMA cell is preferred by every resource")


def test_a_node_where_the_victims_free_a_whole_cell_is_kept(running: RunningServer) -> None:
    by_uid = pb.EvictionCandidate(node="whole", victim_uids=["uid-whole-low-0", "uid-whole-low-1"])
    by_name = pb.EvictionCandidate(
        node="whole",
        victims=[pb.PodRef(namespace="ml", name="whole-low-0"), pb.PodRef(namespace="ml", name="whole-low-1")],
    )
    mixed = pb.EvictionCandidate(
        node="whole", victims=[pb.PodRef(namespace="ml", name="whole-low-0")], victim_uids=["uid-whole-low-1"]
    )
    verdicts = check(running, by_uid, by_name, mixed)
    assert [(v.node, v.fits, v.reason) for v in verdicts] == [("whole", True, "")] * 3


def test_too_few_victims_refuse_the_node_and_unknown_victims_are_named(running: RunningServer) -> None:
    one = pb.EvictionCandidate(node="whole", victim_uids=["uid-whole-low-0", "uid-not-here", "uid-split-low-1"])
    (verdict,) = check(running, one)
    assert not verdict.fits
    assert verdict.kind == pb.REJECTION_KIND_INSUFFICIENT_RESOURCES
    # A victim on another node, or none the service knows, frees nothing on this one.
    assert verdict.reason.startswith("even with 1 victim(s) evicted, ")
    assert "2 victim(s) are not pods the placement service knows on this node" in verdict.reason


def test_every_candidate_gets_a_verdict_in_request_order(running: RunningServer) -> None:
    verdicts = check(
        running,
        pb.EvictionCandidate(node="no-agent", victim_uids=["uid-x"]),
        pb.EvictionCandidate(node="split", victim_uids=["uid-split-low-0", "uid-split-low-1"]),
        pb.EvictionCandidate(node="whole", victim_uids=["uid-whole-low-0", "uid-whole-low-1"]),
    )
    assert [(v.node, v.fits, v.kind) for v in verdicts] == [
        ("no-agent", False, pb.REJECTION_KIND_UNKNOWN_NODE),
        ("split", False, pb.REJECTION_KIND_KUBELET_TOPOLOGY),
        ("whole", True, pb.REJECTION_KIND_UNSPECIFIED),
    ]
    assert verdicts[0].reason == "node unknown to the placement service (no topology report)"


@pytest.fixture
def kueue_running() -> Iterator[RunningServer]:
    """``cluster()`` and node ``queued`` like ``whole``: cell 0 held by two low-priority pods, one admitted by
    Kueue (only Kueue evicts it), cell 1 by a high-priority pod."""
    index = cluster()
    index.upsert_topology("queued", nvswitch_node(cells=2, settings=kubelet("single-numa-node")))
    place(index, "queued-low-0", "queued", (0, 1), priority=LOW, kueue=True)
    place(index, "queued-low-1", "queued", (2, 3), priority=LOW)
    place(index, "queued-high", "queued", (4, 5, 6, 7), priority=HIGH)
    yield from _serving_as_follower(index)


def test_a_candidate_evicting_a_pod_kueue_admitted_is_refused_naming_it(kueue_running: RunningServer) -> None:
    verdicts = check(
        kueue_running,
        pb.EvictionCandidate(node="queued", victim_uids=["uid-queued-low-0", "uid-queued-low-1"]),
        pb.EvictionCandidate(node="whole", victim_uids=["uid-whole-low-0", "uid-whole-low-1"]),
    )
    assert [(v.node, v.fits, v.kind) for v in verdicts] == [
        ("queued", False, pb.REJECTION_KIND_POD_CONSTRAINT),
        ("whole", True, pb.REJECTION_KIND_UNSPECIFIED),
    ]
    # The room is there (cell 0 whole, as on node whole): only who may evict the pod refuses it.
    assert verdicts[0].reason == (
        "victim(s) ml/queued-low-0 were admitted by Kueue: pods admitted by Kueue are evicted by Kueue only"
    )


def test_the_check_changes_nothing(running: RunningServer) -> None:
    before = running.stub.GetNodeTopology(pb.GetNodeTopologyRequest(node="whole"), timeout=10)
    check(running, pb.EvictionCandidate(node="whole", victim_uids=["uid-whole-low-0", "uid-whole-low-1"]))
    after = running.stub.GetNodeTopology(pb.GetNodeTopologyRequest(node="whole"), timeout=10)
    assert after == before
    assert sum(gpu.busy for gpu in after.gpus) == 8


def test_a_candidate_without_a_node_or_a_victim_without_a_name_is_refused(running: RunningServer) -> None:
    for candidate, message in (
        (pb.EvictionCandidate(victim_uids=["uid-x"]), "every eviction candidate needs a node name"),
        (
            pb.EvictionCandidate(node="whole", victims=[pb.PodRef(namespace="ml")]),
            "a victim on node whole has no name and no uid; give one of them",
        ),
        (
            pb.EvictionCandidate(node="whole", victim_uids=[""]),
            "a victim on node whole has no name and no uid; give one of them",
        ),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            check(running, candidate)
        error = caught.value
        assert isinstance(error, grpc.Call)
        assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_the_pod_may_come_as_pod_json(running: RunningServer) -> None:
    as_json = (
        '{"metadata":{"name":"big","namespace":"ml"},"spec":{"priority":1000,"containers":[{"name":"main",'
        '"resources":{"limits":{"cpu":"8","memory":"32Gi","nvidia.com/gpu":"4"}}}]}}'
    )
    candidate = pb.EvictionCandidate(node="split", victim_uids=["uid-split-low-0", "uid-split-low-1"])
    request = pb.CheckEvictionRequest(pod_json=as_json, candidates=[candidate])
    (verdict,) = running.stub.CheckEviction(request, timeout=10).verdicts
    assert (verdict.fits, verdict.kind) == (False, pb.REJECTION_KIND_KUBELET_TOPOLOGY)


@pytest.fixture
def dra_running() -> Iterator[RunningServer]:
    """Node ``a``: ``low`` holds GPUs 0-3 through its own claim; ``shared-low`` and ``keeper`` (high priority)
    share a claim on GPUs 4-7. The preemptor's claim ``big-gpus`` asks for 4 GPUs, unallocated."""
    index = dra_index("a")
    place_claiming(index, "low", "a", gpus=(0, 1, 2, 3), priority=LOW, namespace="ml")
    place_claiming(index, "shared-low", "a", priority=LOW, namespace="ml")
    place_claiming(index, "keeper", "a", priority=HIGH, namespace="ml")
    shared = allocated_claim("shared", "a", (4, 5, 6, 7), namespace="ml", reserved_for=["shared-low", "keeper"])
    index.dra.set_claim(parse_resource_claim(shared))
    index.dra.set_claim(parse_resource_claim(gpu_claim("big-gpus", 4, namespace="ml")))
    yield from _serving_as_follower(index)


def claiming_preemptor_json() -> str:
    resources = {"cpu": "8", "memory": "32Gi"}
    return json.dumps(
        {
            "metadata": {"name": "big", "namespace": "ml", "uid": "uid-big"},
            "spec": {
                "priority": HIGH,
                "containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}],
                "resourceClaims": [{"name": "gpus", "resourceClaimName": "big-gpus"}],
            },
        }
    )


def test_the_devices_a_victims_claim_holds_are_freed_for_the_pods_claims(dra_running: RunningServer) -> None:
    frees = pb.EvictionCandidate(node="a", victim_uids=["uid-low"])
    shared_only = pb.EvictionCandidate(node="a", victim_uids=["uid-shared-low"])
    request = pb.CheckEvictionRequest(pod_json=claiming_preemptor_json(), candidates=[frees, shared_only])
    kept, refused = dra_running.stub.CheckEviction(request, timeout=10).verdicts
    assert (kept.node, kept.fits, kept.reason) == ("a", True, "")
    # The shared claim stays with "keeper", which is not a victim: its devices are not freed.
    assert not refused.fits
    assert refused.kind == pb.REJECTION_KIND_POD_CONSTRAINT  # the claims' words: cannot allocate all claims
    assert refused.reason.startswith("even with 1 victim(s) evicted, its ResourceClaims: cannot allocate all claims")
