"""The placement service over a real gRPC socket on 127.0.0.1: every RPC, errors, health, fuzzing, deadlines;
and the engine's Filter passing exactly the nodes its Reserve takes for a pod with a NUMA intent."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import generate_latest

from placement.api import codec
from placement.api.interceptor import SERVICE_NAME
from placement.api.server import ServerOptions
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
)
from placement.core.pods import PodSpec
from placement.core.scoring import ScoringWeights
from placement.service.engine import PlacementEngine
from placement.service.results import FilterOutcome
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import cpu_node, kubelet, l40s_node, nvswitch_node

NODES = ("cpu-a", "h100-b", "l40s-c")


def _cluster() -> ClusterIndex:
    index = ClusterIndex()
    single = kubelet("single-numa-node", "pod")
    index.upsert_topology("cpu-a", cpu_node(cpus_per_cell=32, settings=single))
    index.upsert_topology("h100-b", nvswitch_node(cells=2, settings=kubelet("best-effort", "pod")))
    index.upsert_topology("l40s-c", l40s_node(settings=kubelet("restricted", "pod")))
    return index


def _pod(
    name: str = "p", *, cpu: str = "4", memory: str = "8Gi", gpus: int = 0, annotations: dict[str, str] | None = None
) -> pb.Pod:
    resources = {"cpu": cpu, "memory": memory} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    return pb.Pod(
        namespace="ml",
        name=name,
        annotations=annotations or {},
        containers=[pb.Container(name="main", requests=resources, limits=resources)],
    )


@dataclass
class Service:
    running: RunningServer
    engine: PlacementEngine
    stub: Any
    synced: threading.Event


@pytest.fixture
def service() -> Iterator[Service]:
    synced = threading.Event()
    synced.set()
    index = _cluster()
    engine = PlacementEngine.over(index, synced=synced.is_set)
    running = RunningServer(engine)
    try:
        yield Service(running, engine, running.stub, synced)
    finally:
        running.close()


def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    return error.code(), error.details()


def test_filter_and_score_explain_every_candidate(service: Service) -> None:
    gpu_pod = _pod(gpus=2)
    filtered = service.stub.Filter(pb.FilterRequest(pod=gpu_pod, node_names=[*NODES, "ghost"]))
    assert list(filtered.feasible_nodes) == ["h100-b", "l40s-c"]
    reasons = {node: group for group in filtered.rejected for node in group.nodes}
    assert reasons["cpu-a"].kind == pb.REJECTION_KIND_INSUFFICIENT_RESOURCES
    assert reasons["cpu-a"].reason == "Insufficient nvidia.com/gpu"
    assert reasons["ghost"].kind == pb.REJECTION_KIND_UNKNOWN_NODE

    scored = service.stub.Score(pb.ScoreRequest(pod=gpu_pod, node_names=NODES))
    assert sorted(scored.nodes) == ["h100-b", "l40s-c"]
    assert list(scored.scores) == sorted(scored.scores, reverse=True)  # best first
    components = {component.name: component for component in scored.breakdown}
    assert set(components) == set(ScoringWeights().as_dict())
    assert sum(component.weight for component in scored.breakdown) == pytest.approx(100.0)
    for position, total in enumerate(scored.scores):
        parts = [component.points[position] for component in scored.breakdown]
        assert total == pytest.approx(sum(parts))
        weights = [component.weight for component in scored.breakdown]
        assert all(0 <= part <= weight + 1e-9 for part, weight in zip(parts, weights, strict=True))
        assert 0 <= total <= 100
    assert all(cell >= 0 for cell in scored.numa_cells)  # a 2-GPU pod lands in one cell on both GPU nodes
    rejected = [(group.reason, list(group.nodes)) for group in scored.rejected]
    assert rejected == [("Insufficient nvidia.com/gpu", ["cpu-a"])]

    ranking = service.stub.Score(pb.ScoreRequest(pod=gpu_pod, node_names=NODES, without_breakdown=True))
    assert not ranking.breakdown  # the ranking only, as the extender asks for it
    assert (list(ranking.nodes), list(ranking.scores)) == (list(scored.nodes), list(scored.scores))
    assert (list(ranking.numa_cells), list(ranking.rejected)) == (list(scored.numa_cells), list(scored.rejected))


def test_repeated_calls_judge_again_only_the_nodes_that_changed(service: Service) -> None:
    """Verdicts are kept per node and pod shape: a Score after its Filter, or another pod of the same shape,
    judges nothing afresh; a reservation in between has its node judged again, and Score sees it."""
    cache = service.engine.verdicts
    pod = _pod("reuse", gpus=8, cpu="16", memory="64Gi")
    assert list(service.stub.Filter(pb.FilterRequest(pod=pod, node_names=NODES)).feasible_nodes) == ["h100-b"]
    assert cache.judged == 3
    assert list(service.stub.Score(pb.ScoreRequest(pod=pod, node_names=["h100-b"])).nodes) == ["h100-b"]
    replica = _pod("reuse-2", gpus=8, cpu="16", memory="64Gi")
    assert list(service.stub.Filter(pb.FilterRequest(pod=replica, node_names=NODES)).feasible_nodes) == ["h100-b"]
    assert cache.judged == 3
    # A pod of another shape is judged on its own.
    service.stub.Score(pb.ScoreRequest(pod=_pod("other", gpus=1), node_names=["h100-b"]))
    assert cache.judged == 4
    # Another pod takes the node's GPUs between this pod's Filter and Score: Score must see it.
    taker = service.stub.Reserve(pb.ReserveRequest(pod=_pod("taker", gpus=8, cpu="16", memory="64Gi")))
    assert taker.placement.node == "h100-b"
    try:
        rescored = service.stub.Score(pb.ScoreRequest(pod=pod, node_names=["h100-b"]))
        assert cache.judged == 5
        assert list(rescored.nodes) == []
        assert [list(group.nodes) for group in rescored.rejected] == [["h100-b"]]
    finally:
        service.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="taker")))
    # The release changes the node again: it is judged again, and fits again.
    assert list(service.stub.Filter(pb.FilterRequest(pod=pod, node_names=NODES)).feasible_nodes) == ["h100-b"]
    assert cache.judged == 6


def test_empty_node_list_means_every_node(service: Service) -> None:
    filtered = service.stub.Filter(pb.FilterRequest(pod=_pod(cpu="2", memory="1Gi")))
    assert sorted(filtered.feasible_nodes) == sorted(NODES)


def test_reserve_then_unreserve_releases_the_gpus(service: Service) -> None:
    eight = _pod("trainer", gpus=8, cpu="16", memory="64Gi")
    reserved = service.stub.Reserve(pb.ReserveRequest(pod=eight, node_names=NODES))
    assert reserved.reserved
    placement = reserved.placement
    assert placement.node == "h100-b"
    assert list(placement.gpu_ids) == list(range(8))
    assert placement.reservation_ttl_seconds > 0
    assert placement.annotations[ASSIGNED_GPUS_KEY] == "0,1,2,3,4,5,6,7"
    assert placement.annotations[ASSIGNED_CELLS_KEY] == ",".join(str(c) for c in placement.numa_cells)
    # The node's GPUs are held: a second 8-GPU pod has nowhere to go, and says why per node.
    again = service.stub.Reserve(pb.ReserveRequest(pod=_pod("second", gpus=8, cpu="16", memory="64Gi")))
    assert not again.reserved
    assert {node for group in again.rejected for node in group.nodes} == set(NODES)
    topology = service.stub.GetNodeTopology(pb.GetNodeTopologyRequest(node="h100-b"))
    assert all(g.busy for g in topology.gpus)
    assert [(p.pod.name, p.bound) for p in topology.pods] == [("trainer", False)]

    released = service.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="trainer")))
    assert released.released
    assert not service.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="trainer"))).released
    assert service.stub.Reserve(pb.ReserveRequest(pod=_pod("second", gpus=8, cpu="16", memory="64Gi"))).reserved


def test_a_reserve_of_one_named_node_runs_on_the_loop_and_a_choice_among_candidates_on_the_pool(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    reserve = service.engine.reserve

    def recording(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return reserve(*args, **kwargs)

    monkeypatch.setattr(service.engine, "reserve", recording)
    one = service.stub.Reserve(pb.ReserveRequest(pod=_pod("chosen", gpus=1), node_names=["h100-b"]))
    among = service.stub.Reserve(pb.ReserveRequest(pod=_pod("choose", gpus=1), node_names=NODES))
    assert one.reserved
    assert one.placement.node == "h100-b"
    assert among.reserved
    loop, pool = threads
    assert not loop.startswith("placement")
    assert pool.startswith("placement")


def test_the_same_pod_json_is_decoded_once_and_a_changed_one_afresh(service: Service) -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "twice", "namespace": "ml"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]},
    }
    text = json.dumps(pod)
    first = codec.decode_pod(pb.ScoreRequest(pod_json=text))
    assert codec.decode_pod(pb.ReserveRequest(pod_json="".join(text))) is first  # equal text, another string
    pod["metadata"]["name"] = "changed"
    assert codec.decode_pod(pb.ReserveRequest(pod_json=json.dumps(pod))).name == "changed"
    pod["metadata"]["annotations"] = {"note": "x" * (64 * 1024)}  # a large pod is decoded each time, not kept
    large = json.dumps(pod)
    assert codec.decode_pod(pb.ScoreRequest(pod_json=large)) is not codec.decode_pod(pb.ScoreRequest(pod_json=large))
    reserved = service.stub.Reserve(pb.ReserveRequest(pod_json=text, node_names=["cpu-a"]))
    assert reserved.reserved
    assert reserved.placement.node == "cpu-a"
    with pytest.raises(grpc.RpcError) as refused:  # an invalid text is refused each time, never kept
        service.stub.Reserve(pb.ReserveRequest(pod_json=text[:-1], node_names=["cpu-a"]))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError):
        service.stub.Reserve(pb.ReserveRequest(pod_json=text[:-1], node_names=["cpu-a"]))


def test_pod_json_is_accepted_like_the_message(service: Service) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "from-json", "namespace": "ml", "annotations": {}},
        "spec": {
            "containers": [
                {"name": "main", "resources": {"limits": {"cpu": 4, "memory": "8Gi", "nvidia.com/gpu": "1"}}}
            ]
        },
    }
    as_json = service.stub.Filter(pb.FilterRequest(pod_json=json.dumps(pod), node_names=NODES))
    as_message = service.stub.Filter(pb.FilterRequest(pod=_pod(gpus=1), node_names=NODES))
    assert as_json.feasible_nodes == as_message.feasible_nodes
    assert as_json.rejected == as_message.rejected


def test_get_node_topology_and_list_nodes(service: Service) -> None:
    topology = service.stub.GetNodeTopology(pb.GetNodeTopologyRequest(node="h100-b"))
    assert topology.kubelet.topology_manager_policy == "best-effort"
    assert [c.id for c in topology.cells] == [0, 1]
    gpu_cells = {g.index: g.numa_cell for g in topology.gpus}
    assert sorted(gpu_cells) == list(range(8))
    assert len(topology.gpu_links) == 28
    assert {link.kind for link in topology.gpu_links} == {"NV18"}
    cell0 = {r.name: r for r in topology.cells[0].resources}
    assert (cell0["nvidia.com/gpu"].total, cell0["nvidia.com/gpu"].free) == ("4", "4")
    assert cell0["memory"].total == "1Ti"  # bytes as Kubernetes prints them
    assert topology.cells[0].local_distance == 10

    listed = service.stub.ListNodes(pb.ListNodesRequest())
    assert [n.name for n in listed.nodes] == sorted(NODES)
    h100 = next(n for n in listed.nodes if n.name == "h100-b")
    assert (h100.gpus, h100.free_gpus, h100.numa_cells) == (8, 8, 2)
    assert h100.allocatable_memory == "2Ti"


def test_explain_says_why_and_where(service: Service) -> None:
    placeable = service.stub.Explain(pb.ExplainRequest(pod=_pod(gpus=1), node="l40s-c"))
    assert placeable.placeable
    assert placeable.qos_class == "Guaranteed"
    assert placeable.exclusive_cpus == 4
    assert placeable.placement.node == "l40s-c"
    assert len(placeable.placement.gpu_ids) == 1
    assert placeable.placement.reservation_ttl_seconds == 0  # Explain reserves nothing
    # Explain reserved nothing: the GPU is still free.
    assert all(not g.busy for g in service.stub.GetNodeTopology(pb.GetNodeTopologyRequest(node="l40s-c")).gpus)

    isolated = _pod("hpc", cpu="40", memory="8Gi", annotations={"numa.scheduling.kubenexus.io/policy": "single-numa"})
    refused = service.stub.Explain(pb.ExplainRequest(pod=isolated, node="cpu-a"))
    assert not refused.placeable
    assert refused.numa_intent == "single-numa"
    assert refused.rejection.kind in (pb.REJECTION_KIND_KUBELET_TOPOLOGY, pb.REJECTION_KIND_INTENT)
    assert refused.rejection.reason


def test_place_gang_all_at_once_then_permit(service: Service) -> None:
    members = [_pod(f"worker-{i}", gpus=4, cpu="8", memory="32Gi") for i in range(2)]
    group = pb.PodGroup(namespace="ml", name="train", min_member=2, members=members)
    placed = service.stub.PlaceGang(pb.PlaceGangRequest(group=group, node_names=NODES))
    assert placed.state == pb.GANG_STATE_PLACED, placed.reason
    assert (placed.placed, placed.min_member) == (2, 2)
    assert sorted(m.pod.name for m in placed.members) == ["worker-0", "worker-1"]
    gpus = [(m.placement.node, g) for m in placed.members for g in m.placement.gpu_ids]
    assert len(gpus) == len(set(gpus)) == 8  # no GPU handed out twice
    permit = service.stub.PermitStatus(pb.PermitStatusRequest(pod=pb.PodRef(namespace="ml", name="worker-0")))
    assert permit.state == pb.PERMIT_STATE_ALLOW
    assert permit.pod_group == "ml/train"
    # A group that cannot fit holds nothing and says why it waits.
    too_big = [_pod(f"big-{i}", gpus=8, cpu="8", memory="32Gi") for i in range(3)]
    waiting = service.stub.PlaceGang(
        pb.PlaceGangRequest(group=pb.PodGroup(namespace="ml", name="big", members=too_big), node_names=NODES)
    )
    assert waiting.state in (pb.GANG_STATE_WAITING, pb.GANG_STATE_INFEASIBLE)
    assert waiting.reason
    assert not waiting.members
    outside = service.stub.PermitStatus(pb.PermitStatusRequest(pod=pb.PodRef(namespace="ml", name="alone")))
    assert outside.state == pb.PERMIT_STATE_ALLOW
    assert outside.pod_group == ""
    code, details = _code(
        lambda: service.stub.PlaceGang(pb.PlaceGangRequest(group=pb.PodGroup(namespace="ml", name="empty")))
    )
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "pod group ml/empty has no members")


def test_gang_rpcs_answer_unimplemented_without_a_coordinator() -> None:
    index = _cluster()
    running = RunningServer(PlacementEngine(index=index, reservations=Reservations(index)))
    try:
        group = pb.PodGroup(namespace="ml", name="g", members=[_pod("m0"), _pod("m1")])
        code, details = _code(lambda: running.stub.PlaceGang(pb.PlaceGangRequest(group=group)))
        assert (code, details) == (
            grpc.StatusCode.UNIMPLEMENTED,
            "gang scheduling is not configured in this placement service",
        )
        code, _ = _code(lambda: running.stub.PermitStatus(pb.PermitStatusRequest(pod=pb.PodRef(name="m0"))))
        assert code == grpc.StatusCode.UNIMPLEMENTED
    finally:
        running.close()


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        (
            _pod(annotations={"numa.scheduling.kubenexus.io/policy": "numa-please"}),
            "pod ml/p: invalid value 'numa-please' for numa.scheduling.kubenexus.io/policy; "
            "accepted: best-effort | restricted | single-numa | isolated",
        ),
        (_pod(cpu="-2"), "pod ml/p container main: limits.cpu must not be negative, got '-2'"),
        (_pod(memory="lots"), "pod ml/p container main: limits.memory: 'lots' is not a Kubernetes quantity"),
        (pb.Pod(name="p"), "pod default/p: at least one container is required"),
        (pb.Pod(containers=[pb.Container(name="c")]), "pod name is required"),
        (
            pb.Pod(name="p", containers=[pb.Container(name="c", requests={"cpu": "2"}, limits={"cpu": "1"})]),
            "pod default/p container c: requests.cpu 2 exceeds limits.cpu 1",
        ),
        (
            pb.Pod(name="p", containers=[pb.Container(name="c", requests={"nvidia.com/gpu": "0.5"})]),
            "pod default/p container c: requests.nvidia.com/gpu must be a whole number, got '0.5'",
        ),
    ],
)
def test_bad_pods_are_invalid_argument_with_a_precise_message(service: Service, pod: pb.Pod, message: str) -> None:
    code, details = _code(lambda: service.stub.Filter(pb.FilterRequest(pod=pod, node_names=NODES)))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_bad_requests_and_unknown_nodes(service: Service) -> None:
    assert _code(lambda: service.stub.Filter(pb.FilterRequest(node_names=NODES))) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "a pod is required: set `pod` or `pod_json`",
    )
    code, details = _code(lambda: service.stub.Filter(pb.FilterRequest(pod_json="{not json")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("pod_json is not valid JSON")
    code, details = _code(lambda: service.stub.Filter(pb.FilterRequest(pod_json='{"spec": {"containers": 3}}')))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "spec.containers must be a list")
    assert _code(lambda: service.stub.GetNodeTopology(pb.GetNodeTopologyRequest(node="ghost"))) == (
        grpc.StatusCode.NOT_FOUND,
        "node 'ghost' is not known to the placement service (no topology report)",
    )
    code, _ = _code(lambda: service.stub.Explain(pb.ExplainRequest(pod=_pod(), node="ghost")))
    assert code == grpc.StatusCode.NOT_FOUND
    code, details = _code(lambda: service.stub.Filter(pb.FilterRequest(pod=_pod(), node_names=["a", ""])))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "node names must not be empty")


def test_health_is_serving_only_while_the_cache_is_synced(service: Service) -> None:
    health: Any = health_pb2_grpc.HealthStub(service.running.channel)  # the stubs omit its methods

    def status() -> int:
        return int(health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME)).status)

    def eventually(expected: int) -> None:
        deadline = time.monotonic() + 5
        while status() != expected and time.monotonic() < deadline:
            time.sleep(0.02)
        assert status() == expected

    eventually(health_pb2.HealthCheckResponse.SERVING)
    service.synced.clear()
    eventually(health_pb2.HealthCheckResponse.NOT_SERVING)
    assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.NOT_SERVING
    code, details = _code(lambda: service.stub.Filter(pb.FilterRequest(pod=_pod(), node_names=NODES)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "not synced" in details
    # A bad request is still the caller's to fix, whatever the cache's state.
    code, _ = _code(lambda: service.stub.Filter(pb.FilterRequest(node_names=NODES)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    service.synced.set()
    eventually(health_pb2.HealthCheckResponse.SERVING)
    assert service.stub.Filter(pb.FilterRequest(pod=_pod(), node_names=NODES)).feasible_nodes


def _raw_filter(service: Service) -> Any:
    return service.running.channel.unary_unary(
        f"/{SERVICE_NAME}/Filter", request_serializer=None, response_deserializer=pb.FilterResponse.FromString
    )


def test_fuzzed_bytes_get_clear_errors_and_the_service_stays_up(service: Service) -> None:
    raw = _raw_filter(service)
    valid = pb.FilterRequest(pod=_pod(gpus=1), node_names=NODES).SerializeToString()
    rng = random.Random(7)
    inputs = [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200))) for _ in range(150)]
    inputs += [valid[:cut] for cut in range(1, len(valid), 7)]  # truncated messages
    outcomes: list[tuple[grpc.StatusCode, str]] = []
    for data in inputs:
        try:
            raw(data, timeout=5)
            outcomes.append((grpc.StatusCode.OK, ""))
        except grpc.RpcError as error:
            failed: Any = error
            outcomes.append((failed.code(), failed.details()))
    # Random bytes often parse as a message of unknown fields only: then the pod is missing. Never INTERNAL.
    assert {code for code, _ in outcomes} <= {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}
    assert all(details for code, details in outcomes if code != grpc.StatusCode.OK)
    assert sum(code == grpc.StatusCode.INVALID_ARGUMENT for code, _ in outcomes) > 100
    code, details = _code(lambda: raw(b"\xff\xff\xff", timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("the request is not a valid kubenexus.placement.v1.FilterRequest message")
    assert service.stub.Filter(pb.FilterRequest(pod=_pod(gpus=1), node_names=NODES)).feasible_nodes


def test_unknown_fields_are_ignored(service: Service) -> None:
    valid = pb.FilterRequest(pod=_pod(gpus=1), node_names=NODES).SerializeToString()
    unknown = bytes([0xF8, 0x3E, 0x2A]) + bytes([0x82, 0x3F, 0x03]) + b"abc"  # fields 999 (varint), 1008 (bytes)
    answer = _raw_filter(service)(valid + unknown, timeout=5)
    assert list(answer.feasible_nodes) == ["h100-b", "l40s-c"]


def test_huge_lists(service: Service) -> None:
    many = [f"node-{i}" for i in range(50_000)] + list(NODES)
    answer = service.stub.Filter(pb.FilterRequest(pod=_pod(), node_names=many), timeout=30)
    assert sorted(answer.feasible_nodes) == sorted(NODES)
    assert [len(group.nodes) for group in answer.rejected] == [50_000]
    too_many = [f"n{i}" for i in range(100_001)]
    code, details = _code(lambda: service.stub.Filter(pb.FilterRequest(pod=_pod(), node_names=too_many), timeout=30))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "100001 node names, more than the 100000 accepted")
    many_containers = pb.Pod(name="p", containers=[pb.Container(name=f"c{i}") for i in range(300)])
    code, details = _code(lambda: service.stub.Filter(pb.FilterRequest(pod=many_containers)))
    assert (code, details) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "pod default/p: 300 containers, more than the 256 accepted",
    )
    # Beyond the message size limit: refused by gRPC itself, and the server carries on.
    huge = pb.FilterRequest(pod=_pod(), node_names=["x" * 1000] * 20_000)
    code, _ = _code(lambda: service.stub.Filter(huge, timeout=30))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert service.stub.Filter(pb.FilterRequest(pod=_pod(), node_names=NODES)).feasible_nodes


class SlowEngine(PlacementEngine):
    """Filter takes long enough for a client deadline to pass while it runs; counts the filters started."""

    started = 0

    def filter(self, spec: PodSpec, nodes: Any = (), *, names_key: bytes | None = None) -> FilterOutcome:
        SlowEngine.started += 1
        time.sleep(0.3)
        return super().filter(spec, nodes, names_key=names_key)


def test_deadline_exceeded_and_the_service_carries_on() -> None:
    index = _cluster()
    running = RunningServer(SlowEngine(index=index, reservations=Reservations(index)))
    try:
        request = pb.FilterRequest(pod=_pod(), node_names=NODES)
        code, _ = _code(lambda: running.stub.Filter(request, timeout=0.05))
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        # Calls queued behind a slow one whose deadline passes are dropped, not run.
        time.sleep(0.3)
        SlowEngine.started = 0
        futures = [running.stub.Filter.future(request, timeout=0.1) for _ in range(12)]
        assert all(f.exception() is not None for f in futures)
        time.sleep(0.3)
        assert SlowEngine.started <= 2
        assert running.stub.Filter(request, timeout=5).feasible_nodes
        samples = generate_latest(running.server.metrics.registry).decode()
        dropped = [
            f'kubenexus_placement_rpc_duration_seconds_count{{code="{code}",method="Filter"}}' in samples
            for code in ("CANCELLED", "DEADLINE_EXCEEDED")
        ]
        assert any(dropped), samples
    finally:
        running.close()


def test_metrics_count_latency_and_rejections(service: Service) -> None:
    service.stub.Filter(pb.FilterRequest(pod=_pod(gpus=1), node_names=NODES))
    _code(lambda: service.stub.Filter(pb.FilterRequest(node_names=NODES)))
    registry = service.running.server.metrics.registry
    # The interceptor records a failed call just after the client has its status: give it a moment.
    deadline = time.monotonic() + 5
    while 'code="INVALID_ARGUMENT"' not in generate_latest(registry).decode() and time.monotonic() < deadline:
        time.sleep(0.01)
    samples = generate_latest(registry).decode()
    assert 'kubenexus_placement_rpc_duration_seconds_count{code="OK",method="Filter"} 1.0' in samples
    assert 'kubenexus_placement_rpc_duration_seconds_count{code="INVALID_ARGUMENT",method="Filter"} 1.0' in samples
    assert 'kubenexus_placement_rejections_total{kind="insufficient-resources"} 1.0' in samples
    assert "kubenexus_placement_cache_age_seconds 0.0" in samples
    assert "kubenexus_placement_cache_synced 1.0" in samples
    assert "kubenexus_placement_gangs_waiting 0.0" in samples
    assert 'kubenexus_placement_node_verdicts_total{source="judged"} 3.0' in samples
    assert 'kubenexus_placement_node_verdicts_total{source="kept"} 0.0' in samples
    service.stub.Filter(pb.FilterRequest(pod=_pod("replica", gpus=1), node_names=NODES))
    samples = generate_latest(registry).decode()
    assert 'kubenexus_placement_node_verdicts_total{source="kept"} 3.0' in samples


def test_scheduling_fields_are_refused_alike_from_the_message_and_pod_json(service: Service) -> None:
    message = _pod()
    message.tolerations.add(key="example.com/gpu", operator="Exists", value="yes")
    as_json = {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"cpu": "4", "memory": "8Gi"}}}],
            "tolerations": [{"key": "example.com/gpu", "operator": "Exists", "value": "yes"}],
        },
    }
    refused = (
        grpc.StatusCode.INVALID_ARGUMENT,
        "pod ml/p: spec.tolerations[0].value: must be empty when `operator` is 'Exists'",
    )
    assert _code(lambda: service.stub.Filter(pb.FilterRequest(pod=message, node_names=NODES))) == refused
    assert _code(lambda: service.stub.Filter(pb.FilterRequest(pod_json=json.dumps(as_json)))) == refused


def test_the_pods_overhead_is_in_its_requests_and_its_fit(service: Service) -> None:
    message = _pod(cpu="4", memory="8Gi")
    message.overhead.update({"cpu": "250m", "memory": "128Mi"})
    explained = service.stub.Explain(pb.ExplainRequest(pod=message, node="cpu-a"))
    assert {r.name: r.total for r in explained.requests} == {"cpu": "4250m", "memory": "8320Mi"}
    assert explained.exclusive_cpus == 4  # the CPU manager pins the container's CPUs, not the overhead

    node = next(n for n in service.stub.ListNodes(pb.ListNodesRequest()).nodes if n.name == "cpu-a")
    all_free = pb.Pod(
        namespace="ml", name="filler", containers=[pb.Container(name="c", requests={"cpu": node.free_cpus})]
    )
    assert list(service.stub.Filter(pb.FilterRequest(pod=all_free, node_names=["cpu-a"])).feasible_nodes) == ["cpu-a"]
    all_free.overhead["cpu"] = "100m"
    answer = service.stub.Filter(pb.FilterRequest(pod=all_free, node_names=["cpu-a"]))
    assert not answer.feasible_nodes
    assert [(group.reason, list(group.nodes)) for group in answer.rejected] == [("Insufficient cpu", ["cpu-a"])]


def test_connections_end_after_their_maximum_age_and_calls_carry_on() -> None:
    """The server ends a connection past ``max_connection_age_s`` (a GOAWAY), so a client that balances over a
    headless Service reconnects and re-reads its DNS; calls made across the reconnection all succeed."""
    options = ServerOptions(listen="127.0.0.1:0", health_interval_s=0.05, grace_s=1.0, max_connection_age_s=0.3)
    running = RunningServer(PlacementEngine.over(_cluster()), options)
    channel = grpc.insecure_channel(running.address)
    states: list[grpc.ChannelConnectivity] = []
    channel.subscribe(states.append, try_to_connect=False)
    try:
        stub: Any = placement_pb2_grpc.PlacementStub(channel)
        request = pb.FilterRequest(pod=_pod("p", cpu="1"), node_names=["cpu-a"])
        for _ in range(20):
            assert list(stub.Filter(request, timeout=5).feasible_nodes) == ["cpu-a"]
            time.sleep(0.05)
        ready = grpc.ChannelConnectivity.READY
        assert states.count(ready) >= 2, states  # connected, ended by the server, connected again
    finally:
        channel.unsubscribe(states.append)
        channel.close()
        running.close()
