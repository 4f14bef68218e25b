"""Pod groups with kube-scheduler constraints, placed over a real gRPC socket (PlaceGang, PermitStatus).

Each member lands only where its own constraints admit it (``gang_rules.member_rules``: node selectors,
taints, hostname anti-affinity among alike members as one per node); constraints between members that the
joint planner does not model are checked on its plan member by member, and a plan that breaks one is
replaced by a member-by-member placement (``gang_rules.plan_conflict``, ``plan_in_order``). A group that
its constraints keep off the cluster says why and holds nothing.

Nodes are identical: 2 NUMA cells of 16 CPUs under single-numa-node, so a member of 12 CPUs takes a cell
and a node holds two. Without constraints the packed planner fills the lowest slots first, so the tests
put the nodes a constraint forbids first; ``in_order_calls`` tells whether the joint plan was kept or the
member-by-member fallback placed the group.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from placement.api.v1 import placement_pb2 as pb
from placement.core.constraints.constraint_types import NodeFacts, Taint, TaintEffect
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.state import gang_rules
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangCoordinator
from placement.state.gang_coordinator import planning as gang_planning
from placement.state.reservations import Reservations
from tests.gang_fixtures import FAKE_CLOCK_CONFIG, Clock
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import cpu_node, kubelet

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
DEDICATED = Taint("dedicated", TaintEffect.NO_SCHEDULE, "ml")


class Service:
    """Identical CPU nodes with labels (and taints) in the scheduling facts, a gang coordinator on a fake
    clock, the engine and a gRPC server in front."""

    def __init__(self, nodes: Mapping[str, Mapping[str, str]], taints: Mapping[str, Sequence[Taint]]) -> None:
        self.index = ClusterIndex()
        for name, labels in nodes.items():
            self.index.upsert_topology(name, cpu_node(cpus_per_cell=16, settings=kubelet("single-numa-node")))
            node_labels = {HOSTNAME: name} | dict(labels)
            self.index.facts.set_node(
                NodeFacts(name, labels=tuple(sorted(node_labels.items())), taints=tuple(taints.get(name, ())))
            )
        self.clock = Clock()
        self.reservations = Reservations(self.index, clock=self.clock)
        self.coordinator = GangCoordinator(self.index, self.reservations, config=FAKE_CLOCK_CONFIG, clock=self.clock)
        self.engine = PlacementEngine(
            index=self.index,
            reservations=self.reservations,
            gangs=CoordinatedGangs(self.coordinator, clock=self.clock),
            clock=self.clock,
        )
        self.running = RunningServer(self.engine)
        self.stub = self.running.stub
        self.zones = {name: labels.get(ZONE) for name, labels in nodes.items()}

    def place(self, name: str, members: Sequence[pb.Pod], nodes: Sequence[str] = ()) -> pb.PlaceGangResponse:
        group = pb.PodGroup(namespace="ml", name=name, members=members)
        return self.stub.PlaceGang(pb.PlaceGangRequest(group=group, node_names=nodes))

    def reserved_nodes(self) -> dict[str, str]:
        """pod name -> node, of every reservation held."""
        return {key[1]: node for key, node in self.reservations.pending().items()}


@pytest.fixture
def make() -> Iterator[Any]:
    services: list[Service] = []

    def made(nodes: Mapping[str, Mapping[str, str]], taints: Mapping[str, Sequence[Taint]] | None = None) -> Service:
        services.append(Service(nodes, taints or {}))
        return services[-1]

    yield made
    for service in services:
        service.running.close()


@pytest.fixture
def in_order_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each time the coordinator falls back to member-by-member placement, and its answer."""
    calls: list[str] = []
    real = gang_rules.plan_in_order

    def recorded(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        calls.append(type(result).__name__)
        return result

    monkeypatch.setattr(gang_planning, "plan_in_order", recorded)
    return calls


def _member(name: str, *, cpus: int = 12, labels: Mapping[str, str] | None = None, **fields: Any) -> pb.Pod:
    resources = {"cpu": str(cpus), "memory": "1Gi"}
    container = pb.Container(name="main", requests=resources, limits=resources)
    return pb.Pod(namespace="ml", name=name, labels=labels or {}, containers=[container], **fields)


def _term(key: str, **match_labels: str) -> pb.PodAffinityTerm:
    return pb.PodAffinityTerm(label_selector=pb.LabelSelector(match_labels=match_labels), topology_key=key)


def _anti_affinity(key: str, **match_labels: str) -> pb.Affinity:
    required = [_term(key, **match_labels)]
    return pb.Affinity(
        pod_anti_affinity=pb.PodAntiAffinity(required_during_scheduling_ignored_during_execution=required)
    )


def _affinity(key: str, **match_labels: str) -> pb.Affinity:
    required = [_term(key, **match_labels)]
    return pb.Affinity(pod_affinity=pb.PodAffinity(required_during_scheduling_ignored_during_execution=required))


def _nodes(answer: pb.PlaceGangResponse) -> dict[str, str]:
    return {member.pod.name: member.placement.node for member in answer.members}


def _assert_placed(answer: pb.PlaceGangResponse, count: int) -> dict[str, str]:
    assert answer.state == pb.GANG_STATE_PLACED, answer.reason
    nodes = _nodes(answer)
    assert len(nodes) == answer.placed == count
    return nodes


# --- (a) one zone, by nodeSelector ----------------------------------------------------------------------------

TWO_ZONES = {
    "a1": {ZONE: "zone-a"},
    "a2": {ZONE: "zone-a"},
    "b1": {ZONE: "zone-b"},
    "b2": {ZONE: "zone-b"},
}


def test_members_selecting_a_zone_land_only_in_that_zone(make: Any, in_order_calls: list[str]) -> None:
    service = make(TWO_ZONES)
    members = [_member(f"w{i}", node_selector={ZONE: "zone-b"}) for i in range(3)]
    nodes = _assert_placed(service.place("in-b", members), 3)
    assert {service.zones[node] for node in nodes.values()} == {"zone-b"}
    assert service.reserved_nodes() == nodes
    assert in_order_calls == []  # the joint planner kept to the zone by itself


def test_a_group_whose_zone_lacks_room_waits_and_says_why(make: Any) -> None:
    service = make(TWO_ZONES)
    # Single pods of 10 CPUs take a cell each in zone b: 6 CPUs are left per cell, a member needs 12.
    blockers = [(f"{node}-{cell}", node) for node in ("b1", "b2") for cell in range(2)]
    for name, node in blockers:
        reserved = service.stub.Reserve(pb.ReserveRequest(pod=_member(name, cpus=10), node_names=[node]))
        assert reserved.placement.node == node
    members = [_member(f"w{i}", node_selector={ZONE: "zone-b"}) for i in range(2)]
    waiting = service.place("in-b", members)
    assert waiting.state == pb.GANG_STATE_WAITING
    assert not waiting.members
    assert "2 node(s): node(s) didn't match Pod's node affinity/selector" in waiting.reason
    # Zone a had room for both: nothing was put there.
    assert set(service.reserved_nodes().values()) == {"b1", "b2"}

    # Zone b frees up: the next tick places the group there.
    for name, _ in blockers:
        assert service.stub.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name=name))).released
    service.clock.now += 1.0
    service.engine.tick()
    reserved = service.reserved_nodes()
    assert set(reserved) == {"w0", "w1"}
    assert {service.zones[node] for node in reserved.values()} == {"zone-b"}
    permit = service.stub.PermitStatus(pb.PermitStatusRequest(pod=pb.PodRef(namespace="ml", name="w0")))
    assert permit.state == pb.PERMIT_STATE_ALLOW


def test_a_group_larger_than_its_zone_can_never_fit(make: Any) -> None:
    """Five members of a cell each, zone b has four cells: the whole cluster (eight) would hold them."""
    service = make(TWO_ZONES)
    members = [_member(f"w{i}", node_selector={ZONE: "zone-b"}) for i in range(5)]
    answer = service.place("too-big", members)
    assert answer.state == pb.GANG_STATE_INFEASIBLE
    assert answer.reason.startswith("can never fit the cluster as it is")
    assert "2 node(s): node(s) didn't match Pod's node affinity/selector" in answer.reason
    assert not answer.members
    assert service.reserved_nodes() == {}


# --- (b) hostname anti-affinity among the members ---------------------------------------------------------------


def test_members_with_hostname_anti_affinity_on_themselves_land_on_distinct_nodes(
    make: Any, in_order_calls: list[str]
) -> None:
    service = make({f"n{i}": {} for i in range(4)})
    labels = {"app": "worker"}
    members = [
        _member(f"w{i}", cpus=2, labels=labels, affinity=_anti_affinity(HOSTNAME, app="worker")) for i in range(3)
    ]
    nodes = _assert_placed(service.place("apart", members), 3)
    assert len(set(nodes.values())) == 3
    assert in_order_calls == []  # the joint planner gave them one node each by itself
    # A fourth like them goes to the last node, a fifth finds none.
    extra = _member("w3", cpus=2, labels=labels, affinity=_anti_affinity(HOSTNAME, app="worker"))
    answer = service.stub.Reserve(pb.ReserveRequest(pod=extra))
    assert answer.placement.node not in nodes.values()


# --- (c) members that differ ---------------------------------------------------------------------------------


def test_members_with_different_tolerations_land_only_on_their_own_allowed_nodes(
    make: Any, in_order_calls: list[str]
) -> None:
    """The tainted node is the only one the special member selects; the plain members do not tolerate it."""
    service = make({"t1": {"pool": "special"}, "n1": {}, "n2": {}}, taints={"t1": [DEDICATED]})
    toleration = pb.Toleration(key="dedicated", operator="Equal", value="ml", effect="NoSchedule")
    special = _member("special", cpus=2, node_selector={"pool": "special"}, tolerations=[toleration])
    plain = [_member(f"plain-{i}", cpus=2) for i in range(2)]
    nodes = _assert_placed(service.place("mixed", [special, *plain]), 3)
    assert nodes["special"] == "t1"
    assert nodes["plain-0"] != "t1"
    assert nodes["plain-1"] != "t1"
    assert in_order_calls == []


# --- (d) constraints between members: the plan checked in order, else member by member -----------------------


def test_zone_anti_affinity_between_members_is_met_member_by_member(make: Any, in_order_calls: list[str]) -> None:
    """The planner packs both members on the first node (it models one-per-node on the hostname only); the
    plan breaks the anti-affinity on the zone, and member by member each gets its own zone."""
    service = make({"x1": {ZONE: "zone-x"}, "x2": {ZONE: "zone-x"}, "y1": {ZONE: "zone-y"}})
    labels = {"app": "ps"}
    members = [_member(f"ps-{i}", cpus=2, labels=labels, affinity=_anti_affinity(ZONE, app="ps")) for i in range(2)]
    nodes = _assert_placed(service.place("zones", members), 2)
    assert in_order_calls == ["GangPlan"]
    assert {service.zones[node] for node in nodes.values()} == {"zone-x", "zone-y"}


def test_hostname_anti_affinity_between_members_of_different_shapes(make: Any, in_order_calls: list[str]) -> None:
    """Two members of different shapes and labels, each refusing the other's node: the planner keeps apart
    only members alike, the check in order catches the shared node."""
    service = make({"n1": {}, "n2": {}})
    big = _member("big", cpus=4, labels={"app": "db", "role": "primary"}, affinity=_anti_affinity(HOSTNAME, app="db"))
    small = _member(
        "small", cpus=2, labels={"app": "db", "role": "replica"}, affinity=_anti_affinity(HOSTNAME, app="db")
    )
    nodes = _assert_placed(service.place("db", [big, small]), 2)
    assert in_order_calls == ["GangPlan"]
    assert nodes["big"] != nodes["small"]


def test_pod_affinity_between_members_places_them_together(make: Any, in_order_calls: list[str]) -> None:
    """Workers require the parameter server's node; no such pod runs yet. kube-scheduler places the server,
    then the workers next to it: the group is placed the same way."""
    service = make({"n1": {}, "n2": {}, "n3": {}})
    server = _member("ps", cpus=12, labels={"role": "ps"})
    workers = [
        _member(f"worker-{i}", cpus=2, labels={"role": "worker"}, affinity=_affinity(HOSTNAME, role="ps"))
        for i in range(2)
    ]
    nodes = _assert_placed(service.place("train", [server, *workers]), 3)
    assert nodes["worker-0"] == nodes["worker-1"] == nodes["ps"]
    assert in_order_calls == []  # the joint plan, workers packed next to the server, holds in order


@pytest.mark.parametrize("servers_first", [True, False])
def test_pod_affinity_between_members_holds_whatever_the_members_order(make: Any, servers_first: bool) -> None:
    """Workers listed before the server they require: kube-scheduler would refuse them at first and place
    them once the server is there; the plan check and the member-by-member fallback retry them likewise."""
    service = make({"n1": {}, "n2": {}, "n3": {}})
    server = _member("ps", cpus=4, labels={"role": "ps"}, affinity=_anti_affinity(HOSTNAME, role="ps"))
    workers = [
        _member(f"worker-{i}", cpus=4, labels={"role": "worker"}, affinity=_affinity(HOSTNAME, role="ps"))
        for i in range(3)
    ]
    members = [server, *workers] if servers_first else [*workers, server]
    nodes = _assert_placed(service.place("train", members), 4)
    assert {nodes[f"worker-{i}"] for i in range(3)} == {nodes["ps"]}


# --- (e) a group its constraints keep off the cluster ------------------------------------------------------------


def test_more_members_apart_than_nodes_wait_and_hold_nothing(make: Any) -> None:
    service = make({"n1": {}, "n2": {}})
    members = [
        _member(f"w{i}", cpus=2, labels={"app": "w"}, affinity=_anti_affinity(HOSTNAME, app="w")) for i in range(3)
    ]
    answer = service.place("apart", members)
    # One node a member even on an emptied cluster: it can never fit two nodes.
    assert answer.state == pb.GANG_STATE_INFEASIBLE
    assert answer.reason.startswith("can never fit the cluster as it is")
    assert "the 2 node(s) that admit one have room for 2 (largest node 1)" in answer.reason
    assert not answer.members
    assert service.reserved_nodes() == {}
    permit = service.stub.PermitStatus(pb.PermitStatusRequest(pod=pb.PodRef(namespace="ml", name="w0")))
    assert permit.state == pb.PERMIT_STATE_WAIT


def test_zone_anti_affinity_with_more_members_than_zones_says_which_member_fits_nowhere(
    make: Any, in_order_calls: list[str]
) -> None:
    service = make({"x1": {ZONE: "zone-x"}, "y1": {ZONE: "zone-y"}})
    members = [
        _member(f"ps-{i}", cpus=2, labels={"app": "ps"}, affinity=_anti_affinity(ZONE, app="ps")) for i in range(3)
    ]
    answer = service.place("zones", members)
    assert answer.state == pb.GANG_STATE_WAITING
    assert in_order_calls == ["GangUnplaceable"]
    assert "the plan breaks a constraint between members" in answer.reason
    assert "node(s) didn't match pod anti-affinity rules" in answer.reason
    assert "placed member by member, 2 of 3 placed; member ml/ps-2 fits no node" in answer.reason
    assert not answer.members
    assert service.reserved_nodes() == {}


def test_pod_affinity_that_no_pod_and_no_member_meets_waits(make: Any) -> None:
    """The term selects a role no member has and no pod runs: refused everywhere, as kube-scheduler refuses."""
    service = make({"n1": {}, "n2": {}})
    server = _member("ps", cpus=2, labels={"role": "ps"})
    worker = _member("worker", cpus=2, labels={"role": "worker"}, affinity=_affinity(HOSTNAME, role="cache"))
    answer = service.place("train", [server, worker])
    assert answer.state == pb.GANG_STATE_WAITING
    assert "2 node(s): node(s) didn't match pod affinity rules" in answer.reason
    assert not answer.members
    assert service.reserved_nodes() == {}


def test_members_whose_taint_no_node_tolerates_are_not_placed_on_tainted_nodes(make: Any) -> None:
    service = make({"t1": {}, "t2": {}}, taints={"t1": [DEDICATED], "t2": [DEDICATED]})
    answer = service.place("plain", [_member(f"w{i}", cpus=2) for i in range(2)])
    assert answer.state == pb.GANG_STATE_INFEASIBLE
    assert "2 node(s): node(s) had untolerated taint(s)" in answer.reason
    assert not answer.members
    assert service.reserved_nodes() == {}
