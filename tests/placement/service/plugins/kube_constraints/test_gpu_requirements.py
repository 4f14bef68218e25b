"""GPU memory and model requirements (``gpu.scheduling.kubenexus.io/min-memory`` and ``.../models``) over a
real gRPC socket, judged on the labels NVIDIA GPU Feature Discovery publishes on nodes.

The nodes are identical 8-GPU machines; only their GFD labels differ, so every refusal here comes from the
requirements. Real GFD values: an H100 80GB HBM3 reports 81559 MiB (less than 80Gi = 81920 MiB), an A100
SXM4 40GB 40960 MiB.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc
import pytest

from placement.api.v1 import placement_pb2 as pb
from placement.core.constraints import reference
from placement.core.constraints.constraint_types import (
    GpuRequirements,
    LabelSelector,
    NodeFacts,
    PlacedPod,
    PodConstraints,
    TopologySpreadConstraint,
    WhenUnsatisfiable,
)
from placement.core.constraints.filtering import constraint_filter
from placement.core.constraints.terms import IncomingPod
from placement.core.pods import ContainerSpec, PodParseError, PodSpec, validate_pod
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangCoordinator
from placement.state.reservations import Reservations
from tests.constraint_cluster import ListCluster
from tests.gang_fixtures import FAKE_CLOCK_CONFIG, Clock
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import nvswitch_node

MIN_MEMORY = "gpu.scheduling.kubenexus.io/min-memory"
MODELS = "gpu.scheduling.kubenexus.io/models"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.memory": "40960"}
NODE = pb.REJECTION_KIND_NODE_CONSTRAINT
UNKNOWN_MEMORY = (
    "node(s) had no nvidia.com/gpu.memory label (NVIDIA GPU Feature Discovery): their GPUs' memory is unknown"
)
UNKNOWN_MODEL = "node(s) had no nvidia.com/gpu.product label (NVIDIA GPU Feature Discovery): their GPU model is unknown"


def _memory_refusal(written: str, mib: int) -> tuple[str, int]:
    return (f"node(s) had GPUs with less memory than the pod's {MIN_MEMORY} ({written} = {mib} MiB)", NODE)


class Service:
    """GPU nodes named by their GFD labels (``None``: no GFD labels), an engine and a gRPC server."""

    def __init__(self, nodes: Mapping[str, Mapping[str, str] | None]) -> None:
        self.index = ClusterIndex()
        for name, gfd in nodes.items():
            self.index.upsert_topology(name, nvswitch_node())
            labels = {"kubernetes.io/hostname": name} | dict(gfd or {})
            self.index.facts.set_node(NodeFacts(name, labels=tuple(sorted(labels.items()))))
        clock = Clock()
        reservations = Reservations(self.index, clock=clock)
        gangs = CoordinatedGangs(
            GangCoordinator(self.index, reservations, config=FAKE_CLOCK_CONFIG, clock=clock), clock=clock
        )
        self.engine = PlacementEngine(index=self.index, reservations=reservations, gangs=gangs, clock=clock)
        self.running = RunningServer(self.engine)
        self.stub = self.running.stub

    def filter(self, pod: pb.Pod | str) -> pb.FilterResponse:
        request = pb.FilterRequest(pod_json=pod) if isinstance(pod, str) else pb.FilterRequest(pod=pod)
        return self.stub.Filter(request)

    def reserve(self, pod: pb.Pod | str) -> pb.ReserveResponse:
        request = pb.ReserveRequest(pod_json=pod) if isinstance(pod, str) else pb.ReserveRequest(pod=pod)
        return self.stub.Reserve(request)


@pytest.fixture
def make() -> Iterator[Any]:
    services: list[Service] = []

    def made(nodes: Mapping[str, Mapping[str, str] | None]) -> Service:
        services.append(Service(nodes))
        return services[-1]

    yield made
    for service in services:
        service.running.close()


CLUSTER = {"h100-a": H100, "a100-a": A100, "h100-b": H100, "a100-b": A100, "bare": None}


def _resources(gpus: int) -> dict[str, str]:
    return {"cpu": "2", "memory": "1Gi"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})


def _pod(annotations: Mapping[str, str], *, gpus: int = 1, name: str = "p") -> pb.Pod:
    """A pod of namespace ml with one container asking for ``gpus`` GPUs (none: a CPU pod)."""
    resources = _resources(gpus)
    container = pb.Container(name="main", requests=resources, limits=resources)
    return pb.Pod(namespace="ml", name=name, annotations=annotations, containers=[container])


def _pod_json(annotations: Mapping[str, str], *, gpus: int = 1, name: str = "p") -> str:
    resources = _resources(gpus)
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": "ml", "name": name, "annotations": dict(annotations)},
            "spec": {"containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}]},
        }
    )


def test_a_gang_is_placed_only_where_every_member_s_gpus_qualify(make: Any) -> None:
    """Four members of 4 GPUs (one NUMA cell's worth) fill the two H100 nodes; a fifth cannot go to the
    A100s, so a gang of five can never fit, and the reason says which nodes' GPUs fell short."""
    service = make(CLUSTER)

    def gang(name: str, size: int) -> pb.PodGroup:
        members = [_pod({MIN_MEMORY: "80G"}, gpus=4, name=f"{name}-{i}") for i in range(size)]
        return pb.PodGroup(namespace="ml", name=name, members=members)

    refused = service.stub.PlaceGang(pb.PlaceGangRequest(group=gang("five", 5)))
    assert refused.state == pb.GANG_STATE_INFEASIBLE, refused.reason
    assert "2 node(s): " + _memory_refusal("80G", 76294)[0] in refused.reason
    placed = service.stub.PlaceGang(pb.PlaceGangRequest(group=gang("four", 4)))
    assert placed.state == pb.GANG_STATE_PLACED, placed.reason
    assert sorted(m.placement.node for m in placed.members) == ["h100-a", "h100-a", "h100-b", "h100-b"]


def _reasons(rejected: Sequence[pb.Rejections]) -> dict[str, tuple[str, int]]:
    return {node: (group.reason, group.kind) for group in rejected for node in group.nodes}


def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    return error.code(), error.details()


@pytest.mark.parametrize("as_json", [False, True], ids=["Pod", "pod_json"])
def test_a_min_memory_places_the_pod_only_on_gpus_that_report_that_much(make: Any, as_json: bool) -> None:
    service = make(CLUSTER)
    # 80G (decimal), as an "80 GB" card is sold: the H100's 81559 MiB exceed its 76294 MiB.
    annotations = {MIN_MEMORY: "80G"}
    pod = _pod_json(annotations) if as_json else _pod(annotations)

    filtered = service.filter(pod)
    assert sorted(filtered.feasible_nodes) == ["h100-a", "h100-b"]
    assert _reasons(filtered.rejected) == {
        "a100-a": _memory_refusal("80G", 76294),
        "a100-b": _memory_refusal("80G", 76294),
        "bare": (UNKNOWN_MEMORY, NODE),
    }
    assert service.reserve(pod).placement.node in ("h100-a", "h100-b")


def test_min_memory_compares_with_what_the_gpu_reports_not_with_its_name(make: Any) -> None:
    """80Gi is 81920 MiB: more than an H100 80GB reports. The refusal shows both figures' source."""
    service = make({"h100": H100, "a100": A100})
    filtered = service.filter(_pod({MIN_MEMORY: "80Gi"}))
    assert list(filtered.feasible_nodes) == []
    assert _reasons(filtered.rejected) == {
        "h100": _memory_refusal("80Gi", 81920),
        "a100": _memory_refusal("80Gi", 81920),
    }
    assert not service.reserve(_pod({MIN_MEMORY: "80Gi"})).reserved
    # At or under what the GPU reports, it fits: 81559Mi exactly, and 40Gi fits both.
    assert list(service.filter(_pod({MIN_MEMORY: "81559Mi"})).feasible_nodes) == ["h100"]
    assert sorted(service.filter(_pod({MIN_MEMORY: "40Gi"})).feasible_nodes) == ["a100", "h100"]
    assert list(service.filter(_pod({MIN_MEMORY: "40961Mi"})).feasible_nodes) == ["h100"]


@pytest.mark.parametrize("as_json", [False, True], ids=["Pod", "pod_json"])
def test_a_models_list_places_the_pod_only_on_the_models_it_names(make: Any, as_json: bool) -> None:
    service = make(CLUSTER)
    annotations = {MODELS: "NVIDIA-A100-SXM4-40GB, NVIDIA-H200"}
    pod = _pod_json(annotations) if as_json else _pod(annotations)

    filtered = service.filter(pod)
    assert sorted(filtered.feasible_nodes) == ["a100-a", "a100-b"]
    refused = ("node(s) had no GPU model the pod accepts (" + MODELS + ": NVIDIA-A100-SXM4-40GB,NVIDIA-H200)", NODE)
    assert _reasons(filtered.rejected) == {"h100-a": refused, "h100-b": refused, "bare": (UNKNOWN_MODEL, NODE)}
    assert service.reserve(pod).placement.node in ("a100-a", "a100-b")


def test_memory_and_models_together_must_both_hold(make: Any) -> None:
    service = make(CLUSTER)
    both = _pod({MIN_MEMORY: "40Gi", MODELS: "NVIDIA-A100-SXM4-40GB"})
    assert sorted(service.filter(both).feasible_nodes) == ["a100-a", "a100-b"]
    neither = _pod({MIN_MEMORY: "80G", MODELS: "NVIDIA-A100-SXM4-40GB"})
    filtered = service.filter(neither)
    assert list(filtered.feasible_nodes) == []
    # Memory is judged first: the A100s are refused for it, the H100s for their model.
    reasons = _reasons(filtered.rejected)
    assert reasons["a100-a"] == _memory_refusal("80G", 76294)
    assert reasons["h100-a"][0].startswith("node(s) had no GPU model the pod accepts")


def test_a_node_with_a_malformed_memory_label_is_refused_as_unknown(make: Any) -> None:
    service = make({"odd": {"nvidia.com/gpu.memory": "lots", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}})
    assert _reasons(service.filter(_pod({MIN_MEMORY: "1Gi"})).rejected) == {"odd": (UNKNOWN_MEMORY, NODE)}
    # Only what the pod asks is read: its model label is fine.
    assert list(service.filter(_pod({MODELS: "NVIDIA-H100-80GB-HBM3"})).feasible_nodes) == ["odd"]


@pytest.mark.parametrize("as_json", [False, True], ids=["Pod", "pod_json"])
def test_a_pod_without_gpus_is_not_held_to_its_gpu_annotations(make: Any, as_json: bool) -> None:
    service = make(CLUSTER)
    annotations = {MIN_MEMORY: "80Gi", MODELS: "NVIDIA-H200"}
    pod = _pod_json(annotations, gpus=0) if as_json else _pod(annotations, gpus=0)
    filtered = service.filter(pod)
    assert sorted(filtered.feasible_nodes) == sorted(CLUSTER)
    assert list(filtered.rejected) == []


@pytest.mark.parametrize(
    ("annotations", "detail"),
    [
        ({MIN_MEMORY: "lots"}, f"invalid value 'lots' for {MIN_MEMORY} (not a Kubernetes quantity)"),
        ({MIN_MEMORY: "-40Gi"}, f"invalid value '-40Gi' for {MIN_MEMORY} (must be positive)"),
        ({MIN_MEMORY: "0"}, f"invalid value '0' for {MIN_MEMORY} (must be positive)"),
        ({MIN_MEMORY: "80Ti"}, f"invalid value '80Ti' for {MIN_MEMORY} (more than any GPU holds)"),
        ({MIN_MEMORY: "1e9999999999999999999"}, f"invalid value '1e9999999999999999999' for {MIN_MEMORY} (not a"),
        ({MODELS: "NVIDIA-H100,,NVIDIA-A100"}, f"invalid value 'NVIDIA-H100,,NVIDIA-A100' for {MODELS} (empty entry)"),
        ({MODELS: "NVIDIA H100"}, f"invalid value 'NVIDIA H100' for {MODELS} ('NVIDIA H100' is not a label value)"),
    ],
)
@pytest.mark.parametrize("gpus", [1, 0], ids=["gpu-pod", "cpu-pod"])
def test_an_invalid_gpu_annotation_is_refused_naming_the_key(
    make: Any, annotations: dict[str, str], detail: str, gpus: int
) -> None:
    """Refused on every pod, with or without GPUs: a typo must not pass silently."""
    service = make({"h100": H100})
    for pod in (_pod(annotations, gpus=gpus), _pod_json(annotations, gpus=gpus)):
        code, message = _code(lambda pod=pod: service.filter(pod))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert message.startswith(f"pod ml/p: {detail}"), message
        assert "accepted: " in message
        code, _ = _code(lambda pod=pod: service.reserve(pod))
        assert code == grpc.StatusCode.INVALID_ARGUMENT


def _spec(annotations: Mapping[str, str], requests: Mapping[str, str], **fields: Any) -> PodSpec:
    container = ContainerSpec(name="main", requests=dict(requests), limits=dict(requests))
    return PodSpec(namespace="ml", name="p", containers=(container,), annotations=dict(annotations), **fields)


def test_the_requirements_are_a_constraint_even_on_a_pod_that_states_no_other() -> None:
    """``validate_pod`` takes a pod without scheduling fields for one that constrains nothing; the GPU
    requirements must survive that shortcut, or the plugins' fast path would skip them."""
    gpu_pod = validate_pod(_spec({MIN_MEMORY: "40Gi"}, {"nvidia.com/gpu": "1"}))
    assert gpu_pod.constraints.gpu == GpuRequirements(min_memory="40Gi", min_memory_mib=40960)
    assert not gpu_pod.constraints.constrains_nothing()
    # With other fields set too, and for a share of a GPU.
    selected = validate_pod(_spec({MODELS: "Tesla-T4"}, {"nvidia.com/gpu": "2"}, node_selector={"pool": "gpu"}))
    assert selected.constraints.gpu == GpuRequirements(models=("Tesla-T4",))
    shared = validate_pod(_spec({MODELS: "Tesla-T4"}, {"alibabacloud.com/gpu-milli": "500"}))
    assert shared.constraints.gpu == GpuRequirements(models=("Tesla-T4",))
    # A pod asking for no GPU, or for none of them (0), is not held to them.
    for requests in ({"cpu": "1"}, {"nvidia.com/gpu": "0"}):
        plain = validate_pod(_spec({MIN_MEMORY: "40Gi"}, requests))
        assert plain.constraints.gpu is None
        assert plain.constraints.constrains_nothing()


def test_topology_spread_counts_only_the_nodes_whose_gpus_qualify() -> None:
    """With nodeAffinityPolicy Honor (the default), the GPU requirements narrow the spread's domains as the
    pod's node affinity does: an A100 zone without replicas must not hold the H100 zone's skew down."""
    zone = "topology.kubernetes.io/zone"
    nodes = [
        NodeFacts("h100", labels=tuple(sorted((H100 | {zone: "a"}).items()))),
        NodeFacts("a100", labels=tuple(sorted((A100 | {zone: "b"}).items()))),
    ]
    cluster = ListCluster.of(nodes, [PlacedPod("ml", "replica-0", "h100", labels=(("app", "llm"),))])
    spread = TopologySpreadConstraint(
        max_skew=1,
        topology_key=zone,
        when_unsatisfiable=WhenUnsatisfiable.DO_NOT_SCHEDULE,
        label_selector=LabelSelector(match_labels=(("app", "llm"),)),
    )
    labels = (("app", "llm"),)
    facts = cluster.facts()
    for gpu, h100_verdict in (
        (GpuRequirements("80G", 76294), None),  # zone b is not the pod's: zone a alone, skew 1
        (None, "node(s) didn't match pod topology spread constraints"),  # zone b counts: skew 2
    ):
        pod = IncomingPod("ml", labels, PodConstraints(topology_spread=(spread,), gpu=gpu))
        verdict = constraint_filter(cluster, cluster.rows(), "ml", labels, pod.constraints)
        got = verdict.rejected(0)
        assert (None if got is None else got.message) == h100_verdict
        judged = reference.filter_node(facts, pod, "h100")
        assert (None if judged is None else judged[1].message) == h100_verdict


def test_a_quantity_beyond_the_exponent_range_is_refused_not_raised_as_an_overflow() -> None:
    """The quantity reader shared with the resources (``placement.core.quantity``): an exponent beyond
    int64 (``ParseQuantity`` reads it with ParseInt) is "not a quantity", in an annotation or a request,
    never an exception from the arithmetic; one within int64 is capped at 2^63-1 and refused as too large."""
    with pytest.raises(PodParseError, match="is not a Kubernetes quantity"):
        validate_pod(_spec({}, {"cpu": "1e9999999999999999999"}))
    with pytest.raises(PodParseError, match="is too large"):
        validate_pod(_spec({}, {"cpu": "1e999999999999999999"}))
