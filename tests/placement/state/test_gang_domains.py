"""Gangs that require, or prefer, one topology domain, through the coordinator and over a real gRPC socket.

Nodes are H100 machines (8 GPUs, 4 per NUMA cell, single-numa-node). Racks are arranged so that the
packed planner on its own would span racks (the fewest nodes are in two racks): a test that passes only
because packed already prefers one rack proves nothing, so each such test also checks the gang without
the constraint. Node labels reach the coordinator as the feed delivers them (``observe_node``); a node
label key used as a level of its own, and a nodeSelector, are read from the Node labels the scheduling
facts keep.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc
import pytest

from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import GROUP_NAME_KEY, PREFERRED_TOPOLOGY_KEY, REQUIRED_TOPOLOGY_KEY
from placement.core.constraints.constraint_types import NodeFacts
from placement.core.domains import (
    DEFAULT_LEVELS,
    RACK_KEY,
    TOPOGRAPH_BLOCK_KEY,
    TOPOGRAPH_LEAF_KEY,
    parse_topology_levels,
)
from placement.core.pods import PendingPod
from placement.main import build_parser, main, topology_levels
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangConfig, GangCoordinator, GangPhase, GangPlacement, GangStatus
from placement.state.reservations import Reservations
from tests.gang_fixtures import (
    FAKE_CLOCK_CONFIG,
    Clock,
    Cluster,
    assert_admitted_in_order,
    assert_no_overcommit,
    member,
    pod,
)
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import nvswitch_node

RACK_KEYS = f"{RACK_KEY}, {TOPOGRAPH_LEAF_KEY}, {TOPOGRAPH_BLOCK_KEY}"
MEMBER = "8 CPUs, 64 GiB memory"


def _cluster(racks: Mapping[str, str | None]) -> Cluster:
    labels = {name: {RACK_KEY: rack} if rack else {} for name, rack in racks.items()}
    return Cluster({name: nvswitch_node() for name in racks}, labels)


def _occupy(cluster: Cluster, name: str, node: str, gpus: int) -> None:
    """A pod placed on its own and bound: it stays until deleted."""
    decision = cluster.reservations.decide(PendingPod("ns", name, pod(gpus=gpus)), [node])
    assert decision.node == node
    entry = cluster.index.pod("ns", name)
    assert entry is not None
    cluster.reservations.observe_pod(entry[0])


def _fragmented() -> Cluster:
    """r1: three nodes with 6 free GPUs each (room for 3 two-GPU members each); r2, r3: one free node each
    (room for 4). Packed alone takes the two free nodes, in two racks."""
    cluster = _cluster({"a1": "r1", "a2": "r1", "a3": "r1", "b1": "r2", "c1": "r3"})
    for node in ("a1", "a2", "a3"):
        _occupy(cluster, f"busy-{node}", node, gpus=2)
    return cluster


def _gang(group: str, size: int, *, gpus: int, labels: Mapping[str, str] | None = None) -> list[PendingPod]:
    members = [member(f"{group}-{i}", group, size, gpus=gpus) for i in range(size)]
    return [PendingPod(m.namespace, m.name, m.pod, labels={**m.labels, **(labels or {})}) for m in members]


def _place(cluster: Cluster, members: list[PendingPod]) -> GangPlacement | GangStatus:
    for m in members:
        cluster.gangs.add_member(m)
    return cluster.gangs.place("ns", members[0].labels[GROUP_NAME_KEY])


def _nodes(placement: GangPlacement | GangStatus) -> set[str]:
    assert isinstance(placement, GangPlacement), placement
    return {p.node for p in placement.members}


def test_packed_alone_spans_racks_here() -> None:
    cluster = _fragmented()
    assert _nodes(_place(cluster, _gang("free", 8, gpus=2))) == {"b1", "c1"}


def test_a_gang_requiring_one_rack_lands_in_one_rack_and_passes_the_kubelet_model() -> None:
    cluster = _fragmented()
    members = _gang("train", 8, gpus=2, labels={REQUIRED_TOPOLOGY_KEY: "rack"})
    placement = _place(cluster, members)
    assert _nodes(placement) == {"a1", "a2", "a3"}
    assert isinstance(placement, GangPlacement)
    assert placement.status.phase is GangPhase.RESERVED
    assert placement.status.message.startswith("placed 8 member(s) on 3 node(s) in rack r1 (packed)")
    assert all(len(p.cells) == 1 and len(p.gpus) == 2 for p in placement.members)
    assert_admitted_in_order(cluster, [m.key for m in members], {m.key: m.pod for m in members})
    assert_no_overcommit(cluster)


def test_a_gang_preferring_one_rack_spans_the_fewest_racks() -> None:
    cluster = _fragmented()
    one = _place(cluster, _gang("one", 8, gpus=2, labels={PREFERRED_TOPOLOGY_KEY: "rack"}))
    assert _nodes(one) == {"a1", "a2", "a3"}  # one rack, though two nodes elsewhere would do
    cluster = _fragmented()
    # 12 members: no rack holds them (r1 has room for 9); r1 and one more rack, never all three.
    two = _place(cluster, _gang("two", 12, gpus=2, labels={PREFERRED_TOPOLOGY_KEY: "rack"}))
    assert _nodes(two) == {"a1", "a2", "a3", "b1"}
    assert_no_overcommit(cluster)


def test_a_gang_no_rack_can_hold_now_waits_with_the_reason_and_lands_when_room_frees() -> None:
    cluster = _cluster({"a1": "r1", "a2": "r1", "b1": "r2", "b2": "r2"})
    for node in ("a1", "b1"):  # whole nodes: a pod per NUMA cell (single-numa-node)
        _occupy(cluster, f"busy-{node}-0", node, gpus=4)
        _occupy(cluster, f"busy-{node}-1", node, gpus=4)
    members = _gang("train", 4, gpus=4, labels={REQUIRED_TOPOLOGY_KEY: "rack"})  # two whole nodes
    status = _place(cluster, members)
    assert isinstance(status, GangStatus)
    assert status.phase is GangPhase.WAITING_FOR_CAPACITY  # an emptied rack holds it: it waits
    assert status.message == (
        f"requires every member in one rack ({RACK_KEYS}): no rack has room for 4 member(s) of {MEMBER}, "
        "4 nvidia.com/gpu; the largest holds 2"
    )
    assert cluster.reservations.pending() == {}
    cluster.reservations.observe_pod_deleted("ns", "busy-b1-0")
    cluster.reservations.observe_pod_deleted("ns", "busy-b1-1")
    cluster.gangs.tick()
    placed = cluster.gangs.status("ns", "train")
    assert placed is not None
    assert placed.phase is GangPhase.RESERVED
    assert set(cluster.reservations.pending().values()) == {"b1", "b2"}


def test_a_gang_no_rack_could_ever_hold_is_unschedulable_and_holds_nothing() -> None:
    cluster = _cluster({"a1": "r1", "b1": "r2", "c1": "r3"})
    status = _place(cluster, _gang("big", 3, gpus=4, labels={REQUIRED_TOPOLOGY_KEY: "rack"}))
    assert isinstance(status, GangStatus)
    assert status.phase is GangPhase.UNSCHEDULABLE
    assert status.message == (
        f"can never fit the cluster as it is: requires every member in one rack ({RACK_KEYS}): no rack has "
        f"room for 3 member(s) of {MEMBER}, 4 nvidia.com/gpu; the largest holds 2"
    )
    assert cluster.reservations.pending() == {}
    assert isinstance(_place(cluster, _gang("loose", 3, gpus=4)), GangPlacement)  # the cluster has the room


def test_nodes_without_a_rack_label_are_never_used_under_required() -> None:
    cluster = _cluster({"x1": None, "x2": None, "a1": "r1"})
    status = _place(cluster, _gang("train", 4, gpus=4, labels={REQUIRED_TOPOLOGY_KEY: "rack"}))
    assert isinstance(status, GangStatus)
    assert status.phase is GangPhase.UNSCHEDULABLE
    assert status.message.endswith("the largest holds 2; 2 node(s) have no rack label")
    assert cluster.pods() == []


def test_topology_labels_name_a_configured_level_and_every_member_agrees() -> None:
    cluster = _cluster({"a1": "r1"})
    bad = _gang("bad", 2, gpus=1, labels={REQUIRED_TOPOLOGY_KEY: "row"})
    status = cluster.gangs.add_member(bad[0])
    assert status is not None
    assert status.phase is GangPhase.INVALID
    assert status.message == (
        f"pod ns/bad-0: invalid value 'row' for {REQUIRED_TOPOLOGY_KEY} (not a configured topology level); "
        "accepted: a topology level: nvlink | rack | block | zone"
    )
    first, second = _gang("split", 2, gpus=1, labels={REQUIRED_TOPOLOGY_KEY: "rack"})
    cluster.gangs.add_member(first)
    other = PendingPod("ns", second.name, second.pod, labels={**second.labels, REQUIRED_TOPOLOGY_KEY: "zone"})
    status = cluster.gangs.add_member(other)
    assert status is not None
    assert status.phase is GangPhase.INVALID
    assert status.message == (
        f"pod ns/split-1: invalid value 'zone' for {REQUIRED_TOPOLOGY_KEY} (members disagree: the other members "
        "of ns/split say rack); accepted: the same level on every member, or none on any"
    )


def test_configured_levels_replace_the_defaults() -> None:
    levels = parse_topology_levels("pod=example.com/pod;zone=topology.kubernetes.io/zone")
    nodes = {"a1": "p1", "a2": "p1", "a3": "p1", "b1": "p2", "c1": "p3"}
    labels = {name: {"example.com/pod": value} for name, value in nodes.items()}
    cluster = Cluster({name: nvswitch_node() for name in nodes}, labels, config=GangConfig(levels=levels))
    for node in ("a1", "a2", "a3"):
        _occupy(cluster, f"busy-{node}", node, gpus=2)
    placement = _place(cluster, _gang("train", 8, gpus=2, labels={REQUIRED_TOPOLOGY_KEY: "pod"}))
    assert _nodes(placement) == {"a1", "a2", "a3"}
    status = cluster.gangs.add_member(_gang("old", 1, gpus=1, labels={REQUIRED_TOPOLOGY_KEY: "rack"})[0])
    assert status is not None
    assert status.phase is GangPhase.INVALID
    assert status.message.endswith("accepted: a topology level: pod | zone")


# --- over gRPC: a group object's topology key, and Kueue's nodeSelector ---------------------------------------

BLOCK = "cloud.google.com/gce-topology-block"


class Service:
    """H100 nodes whose labels are in the scheduling facts and in the coordinator, the engine, a gRPC server."""

    def __init__(self, nodes: Mapping[str, Mapping[str, str]]) -> None:
        self.index = ClusterIndex()
        topology = nvswitch_node()
        for name in nodes:
            self.index.upsert_topology(name, topology)
        self.clock = Clock()
        self.reservations = Reservations(self.index, clock=self.clock)
        self.coordinator = GangCoordinator(self.index, self.reservations, config=FAKE_CLOCK_CONFIG, clock=self.clock)
        for name, labels in nodes.items():
            node_labels = {"kubernetes.io/hostname": name} | dict(labels)
            self.index.facts.set_node(NodeFacts(name, labels=tuple(sorted(node_labels.items()))))
            self.coordinator.observe_node(name, node_labels, topology)
        self.engine = PlacementEngine(
            index=self.index,
            reservations=self.reservations,
            gangs=CoordinatedGangs(self.coordinator, clock=self.clock),
            clock=self.clock,
        )
        self.running = RunningServer(self.engine)

    def place(
        self, name: str, members: Sequence[pb.Pod], topology: Sequence[pb.TopologyConstraint] = ()
    ) -> pb.PlaceGangResponse:
        group = pb.PodGroup(namespace="ml", name=name, members=members, topology=topology)
        return self.running.stub.PlaceGang(pb.PlaceGangRequest(group=group))


@pytest.fixture
def service() -> Iterator[Any]:
    services: list[Service] = []

    def made(nodes: Mapping[str, Mapping[str, str]]) -> Service:
        services.append(Service(nodes))
        return services[-1]

    yield made
    for running in services:
        running.running.close()


def _member(name: str, *, gpus: int, node_selector: Mapping[str, str] | None = None) -> pb.Pod:
    resources = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}
    container = pb.Container(name="main", requests=resources, limits=resources)
    return pb.Pod(namespace="ml", name=name, containers=[container], node_selector=node_selector or {})


def _placed_nodes(answer: pb.PlaceGangResponse) -> set[str]:
    assert answer.state == pb.GANG_STATE_PLACED, answer.reason
    return {m.placement.node for m in answer.members}


# Blocks b1 (the lowest slots, which packed fills first) and b2, two nodes each.
TWO_BLOCKS = {"n1": {BLOCK: "b1"}, "n2": {BLOCK: "b1"}, "n3": {BLOCK: "b2"}, "n4": {BLOCK: "b2"}}


def test_a_group_objects_topology_key_is_a_level_of_its_own(service: Any) -> None:
    blocks = {"n1": "b1", "n2": "b2", "n3": "b3", "n4": "b3", "n5": "b2"}
    nodes = {name: {BLOCK: block} for name, block in blocks.items()}
    # Without the constraint, two whole nodes go to the lowest slots: two blocks.
    assert _placed_nodes(service(nodes).place("loose", [_member(f"l{i}", gpus=4) for i in range(4)])) == {"n1", "n2"}
    running = service(nodes)
    # Three whole nodes (two members a node, one per NUMA cell): no block holds them.
    required = [pb.TopologyConstraint(level=BLOCK, required=True)]
    answer = running.place("wide", [_member(f"w{i}", gpus=4) for i in range(6)], required)
    assert answer.state == pb.GANG_STATE_INFEASIBLE
    assert answer.reason == (
        f"can never fit the cluster as it is: requires every member in one {BLOCK} domain: no {BLOCK} domain "
        f"has room for 6 member(s) of {MEMBER}, 4 nvidia.com/gpu; the largest holds 4"
    )
    # Two whole nodes: one block, the tightest (b2 and b3 tie: the first by name).
    pair = _placed_nodes(running.place("pair", [_member(f"p{i}", gpus=4) for i in range(4)], required))
    assert pair == {"n2", "n5"}
    with pytest.raises(grpc.RpcError) as refused:
        running.place("bad", [_member("x0", gpus=1)], [pb.TopologyConstraint(level="two words", required=True)])
    error: Any = refused.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "pod group ml/bad: invalid topology level 'two words'; accepted: a configured level (nvlink, rack, "
        "block, zone) or a node label key, e.g. topology.kubernetes.io/zone"
    )
    assert ("ml", "x0") not in running.reservations.pending()
    assert running.coordinator.status("ml", "bad") is None  # refused whole: nothing recorded


def test_a_constraint_must_say_whether_it_is_required(service: Any) -> None:
    """{"level": "rack"} alone is refused: read as a preference, a gang meant to stay in one rack would spread."""
    running = service(TWO_BLOCKS)
    with pytest.raises(grpc.RpcError) as refused:
        running.place("unsaid", [_member("u0", gpus=1)], [pb.TopologyConstraint(level=BLOCK)])
    error: Any = refused.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        f"pod group ml/unsaid: topology[0] (level '{BLOCK}') does not say `required`; accepted: true (every "
        "member in one domain, or wait) or false (the fewest domains)"
    )
    assert running.coordinator.status("ml", "unsaid") is None  # refused whole: nothing recorded
    said = running.place("said", [_member("s0", gpus=1)], [pb.TopologyConstraint(level=BLOCK, required=False)])
    assert said.state == pb.GANG_STATE_PLACED  # false, said: the fewest domains


def test_kueue_topology_admission_node_selectors_keep_members_in_their_block(service: Any) -> None:
    running = service(TWO_BLOCKS)
    # Kueue's topology-aware admission writes the chosen domain into every member's nodeSelector.
    members = [_member(f"k{i}", gpus=4, node_selector={BLOCK: "b2"}) for i in range(4)]
    nodes = _placed_nodes(running.place("kueue", members))
    assert nodes == {"n3", "n4"}
    # The same members without it go where packed puts them: the lowest slots, in b1.
    free = _placed_nodes(running.place("free", [_member(f"f{i}", gpus=4) for i in range(4)]))
    assert free == {"n1", "n2"}


# --- the serve flag ----------------------------------------------------------------------------------------


def test_serve_takes_topology_levels_and_refuses_a_bad_value_with_one_sentence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert topology_levels(build_parser().parse_args(["serve"]).topology_levels) == DEFAULT_LEVELS
    assert topology_levels("pod=example.com/pod").names == ("pod",)
    assert main(["serve", "--kubeconfig", "/nonexistent", "--topology-levels", "rack;zone=z"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(
        "kubenexus-placement: --topology-levels: invalid topology levels 'rack;zone=z': entry 'rack' has no '='; "
        "accepted: 'name=label-key[,label-key...]' entries separated by ';'"
    )
    assert "\n" not in error
    assert "Traceback" not in error
