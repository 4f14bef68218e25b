"""kube-scheduler's constraints as a scheduler sees them over a real gRPC socket: Filter, Score, Reserve,
Unreserve, Explain and PlaceGang with node facts and placed pods set on the index.

Reasons are kube-scheduler's own words (``pkg/scheduler/framework/plugins/*``: ``ErrReason...``), score
components are the upstream plugins' normalised scores at the default profile's weights next to the
topology score, and the answers to a pod sent as the ``Pod`` message and as ``pod_json`` are the same.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc
import pytest

from placement.api.v1 import placement_pb2 as pb
from placement.core.constraints.constraint_types import HostPort, NodeFacts, PlacedPod, Taint, TaintEffect
from placement.core.constraints.context import PLUGIN_WEIGHTS
from placement.core.scoring import CONSTRAINT_COMPONENTS, TOPOLOGY_WEIGHT, ScoringWeights
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangConfig, GangCoordinator
from placement.state.reservations import Reservations
from tests.gang_fixtures import Clock
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import cpu_node, kubelet

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
TOPOLOGY_COMPONENTS = frozenset(ScoringWeights().as_dict())
GPU_TAINT = Taint("nvidia.com/gpu", TaintEffect.NO_SCHEDULE, "present")


def _facts(name: str, *, zone: str = "zone-a", **fields: Any) -> NodeFacts:
    labels = {HOSTNAME: name, ZONE: zone} | fields.pop("labels", {})
    return NodeFacts(name, labels=tuple(sorted(labels.items())), **fields)


def _pod(name: str = "p", *, cpus: int = 2, labels: Mapping[str, str] | None = None, **fields: Any) -> pb.Pod:
    resources = {"cpu": str(cpus), "memory": "1Gi"}
    container = pb.Container(name="main", requests=resources, limits=resources, ports=fields.pop("ports", ()))
    return pb.Pod(namespace="ml", name=name, labels=labels or {}, containers=[container], **fields)


def _hostname_anti_affinity(**match_labels: str) -> pb.Affinity:
    term = pb.PodAffinityTerm(label_selector=pb.LabelSelector(match_labels=match_labels), topology_key=HOSTNAME)
    return pb.Affinity(pod_anti_affinity=pb.PodAntiAffinity(required_during_scheduling_ignored_during_execution=[term]))


def _preferred_zone(zone: str, weight: int = 50) -> pb.Affinity:
    preference = pb.NodeSelectorTerm(
        match_expressions=[pb.NodeSelectorRequirement(key=ZONE, operator="In", values=[zone])]
    )
    preferred = pb.PreferredSchedulingTerm(weight=weight, preference=preference)
    return pb.Affinity(node_affinity=pb.NodeAffinity(preferred_during_scheduling_ignored_during_execution=[preferred]))


class Service:
    """Identical CPU nodes with the given facts, an engine over them and a gRPC server in front."""

    def __init__(self, facts: Sequence[NodeFacts], *, clock: Clock | None = None) -> None:
        self.index = ClusterIndex()
        for node in facts:
            self.index.upsert_topology(node.name, cpu_node(cpus_per_cell=16, settings=kubelet("single-numa-node")))
            self.index.facts.set_node(node)
        self.clock = clock or Clock()
        reservations = Reservations(self.index, clock=self.clock)
        # Starvation never reorders the queue here: only priority and age do.
        config = GangConfig(starvation_after_s=1e9, slow_plan_s=math.inf)
        coordinator = GangCoordinator(self.index, reservations, config=config, clock=self.clock)
        self.engine = PlacementEngine(
            index=self.index,
            reservations=reservations,
            gangs=CoordinatedGangs(coordinator, clock=self.clock),
            clock=self.clock,
        )
        self.running = RunningServer(self.engine)
        self.stub = self.running.stub

    def filter(self, pod: pb.Pod, nodes: Sequence[str] = ()) -> pb.FilterResponse:
        return self.stub.Filter(pb.FilterRequest(pod=pod, node_names=nodes))

    def score(self, pod: pb.Pod, nodes: Sequence[str] = ()) -> pb.ScoreResponse:
        return self.stub.Score(pb.ScoreRequest(pod=pod, node_names=nodes))

    def reserve(self, pod: pb.Pod, nodes: Sequence[str] = ()) -> pb.ReserveResponse:
        return self.stub.Reserve(pb.ReserveRequest(pod=pod, node_names=nodes))


@pytest.fixture
def serve() -> Iterator[list[Service]]:
    services: list[Service] = []
    yield services
    for service in services:
        service.running.close()


@pytest.fixture
def make(serve: list[Service]) -> Any:
    def made(facts: Sequence[NodeFacts], *, clock: Clock | None = None) -> Service:
        serve.append(Service(facts, clock=clock))
        return serve[-1]

    return made


def _reasons(rejected: Sequence[pb.Rejections]) -> dict[str, tuple[str, int]]:
    """node -> (reason, kind)."""
    return {node: (group.reason, group.kind) for group in rejected for node in group.nodes}


def _breakdown(scored: pb.ScoreResponse) -> dict[str, pb.ScoreComponent]:
    return {component.name: component for component in scored.breakdown}


def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    return error.code(), error.details()


# --- the node's own facts: taints, cordon, readiness, labels ------------------------------------------------


def test_a_no_schedule_taint_refuses_the_pod_unless_it_tolerates_it(make: Any) -> None:
    service = make([_facts("a", taints=(GPU_TAINT,)), _facts("b"), _facts("c")])
    untolerated = ("node(s) had untolerated taint(s)", pb.REJECTION_KIND_NODE_CONSTRAINT)

    plain = service.filter(_pod())
    assert list(plain.feasible_nodes) == ["b", "c"]
    assert _reasons(plain.rejected) == {"a": untolerated}
    wrong_value = pb.Toleration(key="nvidia.com/gpu", operator="Equal", value="absent", effect="NoSchedule")
    assert _reasons(service.filter(_pod(tolerations=[wrong_value])).rejected) == {"a": untolerated}
    # Reserve and Explain judge the same way: the tainted node alone places nothing.
    refused = service.reserve(_pod(), ["a"])
    assert not refused.reserved
    assert _reasons(refused.rejected) == {"a": untolerated}
    explained = service.stub.Explain(pb.ExplainRequest(pod=_pod(), node="a"))
    assert not explained.placeable
    assert (explained.rejection.reason, explained.rejection.kind) == untolerated

    for toleration in (
        pb.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
        pb.Toleration(key="nvidia.com/gpu", operator="Equal", value="present"),  # every effect
        pb.Toleration(operator="Exists"),  # every taint
    ):
        tolerant = _pod(tolerations=[toleration])
        answer = service.filter(tolerant)
        assert (list(answer.feasible_nodes), list(answer.rejected)) == (["a", "b", "c"], [])
        assert service.reserve(tolerant, ["a"]).placement.node == "a"
        assert service.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="p"))).released


def test_a_cordoned_node_is_refused(make: Any) -> None:
    service = make([_facts("a"), _facts("b", unschedulable=True), _facts("c")])
    answer = service.filter(_pod())
    assert list(answer.feasible_nodes) == ["a", "c"]
    assert _reasons(answer.rejected) == {"b": ("node(s) were unschedulable", pb.REJECTION_KIND_NODE_CONSTRAINT)}
    assert not service.reserve(_pod(), ["b"]).reserved
    # NodeUnschedulable lets through a pod that tolerates the unschedulable taint (as DaemonSet pods do).
    cordon = pb.Toleration(key="node.kubernetes.io/unschedulable", operator="Exists", effect="NoSchedule")
    assert list(service.filter(_pod(tolerations=[cordon])).feasible_nodes) == ["a", "b", "c"]
    # Uncordoned, the node takes pods again.
    service.index.facts.set_node(_facts("b"))
    assert list(service.filter(_pod()).feasible_nodes) == ["a", "b", "c"]


def test_a_not_ready_node_is_refused_by_its_taint_unless_the_pod_tolerates_it(make: Any) -> None:
    """Issue #28: readiness is judged by the node lifecycle controller's taint alone, as kube-scheduler does."""
    not_ready = Taint("node.kubernetes.io/not-ready", TaintEffect.NO_SCHEDULE)
    service = make([_facts("a", taints=(not_ready,)), _facts("b"), _facts("c")])
    answer = service.filter(_pod())
    assert list(answer.feasible_nodes) == ["b", "c"]
    assert _reasons(answer.rejected) == {"a": ("node(s) had untolerated taint(s)", pb.REJECTION_KIND_NODE_CONSTRAINT)}
    tolerates = pb.Toleration(key="node.kubernetes.io/not-ready", operator="Exists", effect="NoSchedule")
    assert list(service.filter(_pod(tolerations=[tolerates])).feasible_nodes) == ["a", "b", "c"]


def test_node_selector_and_required_node_affinity(make: Any) -> None:
    service = make([_facts("a", zone="zone-a"), _facts("b", zone="zone-b"), _facts("c", zone="zone-c")])
    mismatch = ("node(s) didn't match Pod's node affinity/selector", pb.REJECTION_KIND_NODE_CONSTRAINT)

    selected = service.filter(_pod(node_selector={ZONE: "zone-b"}))
    assert list(selected.feasible_nodes) == ["b"]
    assert _reasons(selected.rejected) == {"a": mismatch, "c": mismatch}
    assert service.reserve(_pod(node_selector={ZONE: "zone-b"})).placement.node == "b"

    def required(*terms: pb.NodeSelectorTerm) -> pb.Affinity:
        selector = pb.NodeSelector(node_selector_terms=terms)
        return pb.Affinity(node_affinity=pb.NodeAffinity(required_during_scheduling_ignored_during_execution=selector))

    zones = pb.NodeSelectorRequirement(key=ZONE, operator="In", values=["zone-a", "zone-c"])
    answer = service.filter(_pod("q", affinity=required(pb.NodeSelectorTerm(match_expressions=[zones]))))
    assert (list(answer.feasible_nodes), _reasons(answer.rejected)) == (["a", "c"], {"b": mismatch})
    # Terms are ORed; expressions and fields within one term are ANDed.
    not_c = pb.NodeSelectorRequirement(key="metadata.name", operator="NotIn", values=["c"])
    zone_b = pb.NodeSelectorRequirement(key=ZONE, operator="In", values=["zone-b"])
    terms = (
        pb.NodeSelectorTerm(match_expressions=[zones], match_fields=[not_c]),
        pb.NodeSelectorTerm(match_expressions=[zone_b]),
    )
    assert list(service.filter(_pod("q", affinity=required(*terms))).feasible_nodes) == ["a", "b"]
    # The selector and the affinity must both hold.
    both = service.filter(_pod("q", node_selector={ZONE: "zone-b"}, affinity=required(terms[0])))
    assert (list(both.feasible_nodes), set(_reasons(both.rejected))) == ([], {"a", "b", "c"})
    # A node relabelled is judged by its new labels.
    service.index.facts.set_node(_facts("c", zone="zone-b"))
    assert list(service.filter(_pod(node_selector={ZONE: "zone-b"})).feasible_nodes) == ["b", "c"]


# --- Score ------------------------------------------------------------------------------------------------


def test_score_carries_the_constraint_components_next_to_the_topology_score(make: Any) -> None:
    """Identical nodes, a preferred zone: NodeAffinity's normalised score at its default weight (2) against
    the topology score's (``TOPOLOGY_WEIGHT``) orders the preferred node first."""
    service = make([_facts("a", zone="zone-a"), _facts("b", zone="zone-b"), _facts("c", zone="zone-c")])

    neutral = service.score(_pod())
    assert set(_breakdown(neutral)) == TOPOLOGY_COMPONENTS  # a pod preferring nothing: no constraint component
    assert len(set(neutral.scores)) == 1  # identical nodes, identical scores

    scored = service.score(_pod(affinity=_preferred_zone("zone-b")))
    components = _breakdown(scored)
    name = CONSTRAINT_COMPONENTS["NodeAffinity"]
    assert set(components) == TOPOLOGY_COMPONENTS | {name}
    plugin_weight = PLUGIN_WEIGHTS["NodeAffinity"]
    assert components[name].weight == pytest.approx(100.0 * plugin_weight / (TOPOLOGY_WEIGHT + plugin_weight))
    assert sum(c.weight for c in scored.breakdown) == pytest.approx(100.0)
    # The topology components keep their proportions, scaled to what is left of the 100 points.
    scale = TOPOLOGY_WEIGHT / (TOPOLOGY_WEIGHT + plugin_weight)
    for topology_name, share in ScoringWeights().shares.items():
        assert components[topology_name].weight == pytest.approx(share * scale)
    for position, total in enumerate(scored.scores):
        assert total == pytest.approx(sum(c.points[position] for c in scored.breakdown))

    assert scored.nodes[0] == "b"
    affinity_points = dict(zip(scored.nodes, components[name].points, strict=True))
    assert affinity_points == {"b": pytest.approx(components[name].weight), "a": 0.0, "c": 0.0}
    totals = dict(zip(scored.nodes, scored.scores, strict=True))
    assert totals["b"] > totals["a"] == pytest.approx(totals["c"])

    reserved = service.reserve(_pod(affinity=_preferred_zone("zone-b")))
    assert reserved.placement.node == "b"
    assert reserved.placement.breakdown[name] == pytest.approx(components[name].weight)


def test_a_prefer_no_schedule_taint_orders_the_node_last(make: Any) -> None:
    soft = Taint("maintenance", TaintEffect.PREFER_NO_SCHEDULE, "soon")
    service = make([_facts("a", taints=(soft,)), _facts("b"), _facts("c")])
    name = CONSTRAINT_COMPONENTS["TaintToleration"]

    # PreferNoSchedule filters nothing; it scores.
    assert list(service.filter(_pod()).feasible_nodes) == ["a", "b", "c"]
    scored = service.score(_pod())
    components = _breakdown(scored)
    plugin_weight = PLUGIN_WEIGHTS["TaintToleration"]
    assert components[name].weight == pytest.approx(100.0 * plugin_weight / (TOPOLOGY_WEIGHT + plugin_weight))
    assert scored.nodes[-1] == "a"
    points = dict(zip(scored.nodes, components[name].points, strict=True))
    assert points == {
        "a": 0.0,
        "b": pytest.approx(components[name].weight),
        "c": pytest.approx(components[name].weight),
    }

    # Tolerated, the taint no longer sets the node apart.
    tolerant = _pod("t", tolerations=[pb.Toleration(key="maintenance", operator="Exists")])
    even = service.score(tolerant)
    assert name not in _breakdown(even)
    assert len(set(even.scores)) == 1
    assert service.reserve(_pod()).placement.node != "a"


# --- placed pods: Reserve records them, Unreserve removes them -----------------------------------------------


def test_reserve_records_the_pod_for_the_next_decision_and_unreserve_removes_it(make: Any) -> None:
    service = make([_facts("a"), _facts("b")])
    first = service.reserve(_pod("first", labels={"app": "web"}), ["a"])
    assert first.placement.node == "a"

    apart = _pod("second", labels={"app": "api"}, affinity=_hostname_anti_affinity(app="web"))
    anti = ("node(s) didn't match pod anti-affinity rules", pb.REJECTION_KIND_POD_CONSTRAINT)
    assert _reasons(service.filter(apart).rejected) == {"a": anti}
    second = service.reserve(apart, ["a", "b"])
    assert second.placement.node == "b"
    assert _reasons(second.rejected) == {"a": anti}

    assert service.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="first"))).released
    answer = service.filter(apart, ["a"])
    assert (list(answer.feasible_nodes), list(answer.rejected)) == (["a"], [])


def test_a_reserved_pods_anti_affinity_keeps_matching_pods_off_its_node(make: Any) -> None:
    """The symmetric rule: the placed pod's own required anti-affinity refuses pods it selects."""
    service = make([_facts("a"), _facts("b")])
    loner = _pod("loner", labels={"app": "db"}, affinity=_hostname_anti_affinity(app="batch"))
    assert service.reserve(loner, ["a"]).placement.node == "a"
    batch = service.filter(_pod("job", labels={"app": "batch"}))
    assert list(batch.feasible_nodes) == ["b"]
    assert _reasons(batch.rejected) == {
        "a": ("node(s) didn't satisfy existing pods anti-affinity rules", pb.REJECTION_KIND_POD_CONSTRAINT)
    }
    assert list(service.filter(_pod("web", labels={"app": "web"})).feasible_nodes) == ["a", "b"]


def test_host_ports_of_a_reserved_pod_and_of_a_bound_one(make: Any) -> None:
    service = make([_facts("a"), _facts("b"), _facts("c")])
    service.index.facts.put_pod(PlacedPod("web", "ingress", "c", host_ports=(HostPort(8080),)))

    def server(name: str) -> pb.Pod:
        return _pod(name, ports=[pb.ContainerPort(container_port=80, host_port=8080)])

    assert service.reserve(server("one"), ["a"]).placement.node == "a"
    answer = service.filter(server("two"))
    ports = ("node(s) didn't have free ports for the requested pod ports", pb.REJECTION_KIND_POD_CONSTRAINT)
    assert (list(answer.feasible_nodes), _reasons(answer.rejected)) == (["b"], {"a": ports, "c": ports})
    # Another protocol on the same port does not conflict.
    udp = _pod("dns", ports=[pb.ContainerPort(container_port=53, host_port=8080, protocol="UDP")])
    assert list(service.filter(udp).feasible_nodes) == ["a", "b", "c"]


# --- priority classes -----------------------------------------------------------------------------------------


def test_an_unknown_priority_class_is_refused_as_admission_refuses_it(make: Any) -> None:
    service = make([_facts("a"), _facts("b")])
    gold = _pod(priority_class_name="gold")
    refusal = (grpc.StatusCode.INVALID_ARGUMENT, "pod ml/p: no PriorityClass with name gold was found")
    assert _code(lambda: service.filter(gold)) == refusal
    assert _code(lambda: service.score(gold)) == refusal
    assert _code(lambda: service.reserve(gold)) == refusal
    assert _code(lambda: service.stub.Explain(pb.ExplainRequest(pod=gold, node="a"))) == refusal
    group = pb.PodGroup(namespace="ml", name="g", members=[gold])
    assert _code(lambda: service.stub.PlaceGang(pb.PlaceGangRequest(group=group))) == refusal
    assert service.engine.reservations.pending() == {}
    assert service.engine.gangs_waiting() == 0

    service.index.facts.set_priority_class("gold", 1000, global_default=False)
    assert list(service.filter(gold).feasible_nodes) == ["a", "b"]
    # A pod whose priority admission already set keeps it, whatever its class name.
    assert list(service.filter(_pod(priority=7, priority_class_name="silver")).feasible_nodes) == ["a", "b"]
    service.index.facts.remove_priority_class("gold")
    assert _code(lambda: service.filter(gold)) == refusal


def test_the_priority_class_orders_waiting_gangs(make: Any) -> None:
    """Two groups wait for the one node; the younger names the higher PriorityClass and goes first when the
    node frees (without it, the older group would)."""
    clock = Clock()
    service = make([_facts("a")], clock=clock)
    service.index.facts.set_priority_class("low", 10, global_default=True)
    service.index.facts.set_priority_class("high", 1000, global_default=False)
    blocker = service.reserve(_pod("blocker", cpus=16))
    assert blocker.placement.node == "a"

    def group(name: str, priority_class: str) -> pb.PodGroup:
        members = [_pod(f"{name}-{i}", cpus=12, priority_class_name=priority_class) for i in range(2)]
        return pb.PodGroup(namespace="ml", name=name, members=members)

    older = service.stub.PlaceGang(pb.PlaceGangRequest(group=group("older", "")))  # the default class: low
    younger = service.stub.PlaceGang(pb.PlaceGangRequest(group=group("younger", "high")))
    assert older.state == younger.state == pb.GANG_STATE_WAITING
    assert service.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="blocker"))).released
    clock.now += 1.0
    service.engine.tick()

    def permit(name: str) -> int:
        return int(service.stub.PermitStatus(pb.PermitStatusRequest(pod=pb.PodRef(namespace="ml", name=name))).state)

    assert (permit("younger-0"), permit("younger-1")) == (pb.PERMIT_STATE_ALLOW, pb.PERMIT_STATE_ALLOW)
    assert (permit("older-0"), permit("older-1")) == (pb.PERMIT_STATE_WAIT, pb.PERMIT_STATE_WAIT)


# --- scheduling gates, pod_json ---------------------------------------------------------------------------------


def test_a_gated_pod_is_not_scheduled_anywhere(make: Any) -> None:
    service = make([_facts("a"), _facts("b")])
    gates = [pb.PodSchedulingGate(name="example.com/quota"), pb.PodSchedulingGate(name="example.com/images")]
    gated = _pod(scheduling_gates=gates)
    answer = service.filter(gated)
    assert list(answer.feasible_nodes) == []
    (group,) = answer.rejected
    assert (group.reason, group.kind, list(group.nodes)) == (
        "waiting for scheduling gates: [example.com/quota example.com/images]",
        pb.REJECTION_KIND_NODE_CONSTRAINT,
        ["a", "b"],
    )
    assert list(service.score(gated).nodes) == []
    reserved = service.reserve(gated)
    assert not reserved.reserved
    assert service.engine.reservations.pending() == {}
    # The same pod with its gates removed is scheduled.
    assert service.reserve(_pod()).reserved


def test_a_pod_whose_claim_is_not_created_yet_waits_as_kube_scheduler_has_it_wait(make: Any) -> None:
    """A template's claim that the claim controller has not made yet stops the pod on every node with
    upstream's words (``resourceclaim.Name``: ErrClaimNotFound); Reserve reserves nothing."""
    service = make([_facts("a")])
    pod: dict[str, Any] = {
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "2"}}}],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "four-gpus"}],
        },
    }
    text = json.dumps(pod)
    answer = service.stub.Filter(pb.FilterRequest(pod_json=text))
    assert list(answer.feasible_nodes) == []
    assert [(r.reason, list(r.nodes)) for r in answer.rejected] == [
        ('pod "ml/trainer": ResourceClaim not created yet', ["a"])
    ]
    assert not service.stub.Reserve(pb.ReserveRequest(pod_json=text)).reserved
    assert service.engine.reservations.pending() == {}
    pod["spec"].pop("resourceClaims")
    assert service.stub.Reserve(pb.ReserveRequest(pod_json=json.dumps(pod))).reserved


def test_the_same_pod_as_pod_json_gets_the_same_answers(make: Any) -> None:
    dedicated = Taint("dedicated", TaintEffect.NO_SCHEDULE, "ml")
    service = make(
        [
            _facts("a", zone="zone-a", labels={"pool": "general"}),
            _facts("b", zone="zone-b", labels={"pool": "general"}, taints=(dedicated,)),
            _facts("c", zone="zone-c", labels={"pool": "gpu"}),
            _facts("d", zone="zone-b", labels={"pool": "general"}),
            _facts("e", zone="zone-a", labels={"pool": "general"}),
            _facts("f", zone="zone-a", labels={"pool": "general"}, taints=(GPU_TAINT,)),
            _facts("g", zone="zone-c", labels={"pool": "general"}),
        ]
    )
    service.index.facts.put_pod(PlacedPod("ml", "db", "d", labels=(("app", "db"),)))
    service.index.facts.put_pod(PlacedPod("ml", "proxy", "e", host_ports=(HostPort(8080),)))
    resources = {"cpu": "2", "memory": "1Gi"}
    document = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": "twin", "labels": {"app": "web"}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": resources, "limits": resources},
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                }
            ],
            "nodeSelector": {"pool": "general"},
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-c"]}]},
                        }
                    ]
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}
                    ]
                },
            },
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        },
    }
    affinity = _preferred_zone("zone-c")
    term = pb.PodAffinityTerm(label_selector=pb.LabelSelector(match_labels={"app": "db"}), topology_key=ZONE)
    affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution.append(term)
    message = _pod(
        "twin",
        labels={"app": "web"},
        ports=[pb.ContainerPort(container_port=80, host_port=8080)],
        node_selector={"pool": "general"},
        affinity=affinity,
        tolerations=[pb.Toleration(key="dedicated", operator="Equal", value="ml", effect="NoSchedule")],
    )
    text = json.dumps(document)

    filtered = service.stub.Filter(pb.FilterRequest(pod=message))
    assert service.stub.Filter(pb.FilterRequest(pod_json=text)) == filtered
    # Not a trivial answer: every constraint the pod states refuses a node of its own.
    assert list(filtered.feasible_nodes) == ["a", "g"]
    assert {reason for reason, _ in _reasons(filtered.rejected).values()} == {
        "node(s) didn't match Pod's node affinity/selector",  # c
        "node(s) didn't match pod anti-affinity rules",  # b and d: zone-b holds the db pod
        "node(s) didn't have free ports for the requested pod ports",  # e
        "node(s) had untolerated taint(s)",  # f
    }

    scored = service.stub.Score(pb.ScoreRequest(pod=message))
    assert service.stub.Score(pb.ScoreRequest(pod_json=text)) == scored
    assert list(scored.nodes) == ["g", "a"]  # g is in the preferred zone
    for node in ("a", "b", "c"):
        explained = service.stub.Explain(pb.ExplainRequest(pod=message, node=node))
        assert service.stub.Explain(pb.ExplainRequest(pod_json=text, node=node)) == explained
    reserved = service.stub.Reserve(pb.ReserveRequest(pod_json=text))
    assert reserved.placement.node == "g"
    assert service.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="twin"))).released
    assert service.stub.Reserve(pb.ReserveRequest(pod=message)) == reserved
