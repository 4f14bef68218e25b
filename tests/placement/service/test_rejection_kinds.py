"""Every rejection kind, from where its reason arises in the core to the wire: one test per kind.

The kind is set where the reason is written (``placement.core``, the engine for unknown and held nodes)
and carried unchanged to ``NodeRejection.kind`` / ``Rejections.kind``; nothing reads the message to
classify it. Each test makes one node fail for one reason and reads the kind off a real gRPC answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from kubenexus.topology.model import KubeletSettings
from placement.api.codec import KIND_TO_PB
from placement.api.v1 import placement_pb2 as pb
from placement.core.constraints.constraint_types import HostPort, NodeFacts, PlacedPod
from placement.core.vocabulary import RejectionKind
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangCoordinator
from placement.state.reservations import Reservations
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import cpu_node, kubelet

SINGLE = kubelet("single-numa-node", "pod")
LENIENT = kubelet("best-effort", "pod")


def _pod(name: str = "p", *, cpus: int = 4, annotations: dict[str, str] | None = None) -> pb.Pod:
    resources = {"cpu": str(cpus), "memory": "1Gi"}
    return pb.Pod(
        namespace="ml",
        name=name,
        annotations=annotations or {},
        containers=[pb.Container(name="main", requests=resources, limits=resources)],
    )


class HoldingGangs(CoordinatedGangs):
    """The real adapter, with a head gang that has starved and holds ``held``."""

    def __init__(self, index: ClusterIndex, reservations: Reservations, held: frozenset[str]) -> None:
        super().__init__(GangCoordinator(index, reservations))
        self.held = held

    def open_to_backfill(self, nodes: Sequence[str]) -> list[str]:
        return [node for node in nodes if node not in self.held]


@pytest.fixture
def serve() -> Iterator[list[RunningServer]]:
    servers: list[RunningServer] = []
    yield servers
    for server in servers:
        server.close()


def _running(serve: list[RunningServer], index: ClusterIndex, *, held: frozenset[str] = frozenset()) -> RunningServer:
    reservations = Reservations(index)
    engine = PlacementEngine(index=index, reservations=reservations, gangs=HoldingGangs(index, reservations, held))
    serve.append(RunningServer(engine))
    return serve[-1]


def _one_node(settings: KubeletSettings = SINGLE, cells: int = 2) -> ClusterIndex:
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node(cells=cells, cpus_per_cell=16, settings=settings))
    return index


def _filtered(server: RunningServer, pod: pb.Pod, nodes: Sequence[str] = ("n",)) -> pb.Rejections:
    (group,) = server.stub.Filter(pb.FilterRequest(pod=pod, node_names=nodes)).rejected
    return group


def test_every_kind_has_its_own_wire_value() -> None:
    assert set(KIND_TO_PB) == set(RejectionKind)
    assert len(set(KIND_TO_PB.values())) == len(RejectionKind)
    assert pb.REJECTION_KIND_UNSPECIFIED not in KIND_TO_PB.values()
    assert set(pb.RejectionKind.values()) == {pb.REJECTION_KIND_UNSPECIFIED, *KIND_TO_PB.values()}


def test_unknown_node(serve: list[RunningServer]) -> None:
    group = _filtered(_running(serve, _one_node()), _pod(), ("ghost",))
    assert (group.kind, list(group.nodes)) == (pb.REJECTION_KIND_UNKNOWN_NODE, ["ghost"])
    assert "no topology report" in group.reason


def test_no_topology(serve: list[RunningServer]) -> None:
    group = _filtered(_running(serve, _one_node(cells=0)), _pod())
    assert (group.kind, group.reason) == (pb.REJECTION_KIND_NO_TOPOLOGY, "node has no published topology")


def test_insufficient_resources(serve: list[RunningServer]) -> None:
    group = _filtered(_running(serve, _one_node()), _pod(cpus=64))
    assert (group.kind, group.reason) == (pb.REJECTION_KIND_INSUFFICIENT_RESOURCES, "Insufficient cpu")


def test_kubelet_topology(serve: list[RunningServer]) -> None:
    """24 exclusive CPUs fit the node (32) but no one cell (16): single-numa-node refuses them."""
    group = _filtered(_running(serve, _one_node()), _pod(cpus=24))
    assert group.kind == pb.REJECTION_KIND_KUBELET_TOPOLOGY
    assert group.reason.startswith("kubelet single-numa-node")


def test_intent(serve: list[RunningServer]) -> None:
    """The kubelet would spread 24 CPUs over both cells (best-effort); the pod asked for one."""
    single_numa = {"numa.scheduling.kubenexus.io/policy": "single-numa"}
    group = _filtered(_running(serve, _one_node(LENIENT)), _pod(cpus=24, annotations=single_numa))
    assert group.kind == pb.REJECTION_KIND_INTENT
    assert group.reason.startswith("intent single-numa")


def test_isolation(serve: list[RunningServer]) -> None:
    """An isolated pod holds cell 0; the kubelet would put the next pod there too."""
    server = _running(serve, _one_node())
    isolated = {"numa.scheduling.kubenexus.io/policy": "isolated"}
    assert server.stub.Reserve(pb.ReserveRequest(pod=_pod("a", cpus=12, annotations=isolated))).reserved
    assert server.stub.Reserve(pb.ReserveRequest(pod=_pod("b", cpus=8, annotations=isolated))).reserved
    answer = server.stub.Reserve(pb.ReserveRequest(pod=_pod("c", cpus=2)))
    assert not answer.reserved
    (group,) = answer.rejected
    assert (group.kind, group.reason) == (pb.REJECTION_KIND_ISOLATION, "NUMA cells [0] are held by an isolated pod")


def test_held_for_gang(serve: list[RunningServer]) -> None:
    """A node kept for a starving pod group is held, not a kubelet topology refusal."""
    index = _one_node()
    index.upsert_topology("m", cpu_node(cells=2, cpus_per_cell=16, settings=SINGLE))
    server = _running(serve, index, held=frozenset({"n"}))
    answer = server.stub.Reserve(pb.ReserveRequest(pod=_pod()))
    assert answer.placement.node == "m"
    (group,) = answer.rejected
    assert (group.kind, list(group.nodes)) == (pb.REJECTION_KIND_HELD_FOR_GANG, ["n"])
    assert group.reason == "held for a waiting pod group (starvation prevention)"


def test_node_constraint(serve: list[RunningServer]) -> None:
    """The node's own labels refuse the pod (nodeSelector): kube-scheduler's NodeAffinity words, unresolvable."""
    index = _one_node()
    index.facts.set_node(NodeFacts("n", labels=(("topology.kubernetes.io/zone", "zone-a"),)))
    pod = _pod()
    pod.node_selector["topology.kubernetes.io/zone"] = "zone-b"
    group = _filtered(_running(serve, index), pod)
    assert (group.kind, group.reason) == (
        pb.REJECTION_KIND_NODE_CONSTRAINT,
        "node(s) didn't match Pod's node affinity/selector",
    )


def test_pod_constraint(serve: list[RunningServer]) -> None:
    """A pod placed on the node holds the host port the new pod asks for (NodePorts): resolvable by eviction."""
    index = _one_node()
    index.facts.put_pod(PlacedPod("web", "ingress", "n", host_ports=(HostPort(8080),)))
    pod = _pod()
    pod.containers[0].ports.add(container_port=80, host_port=8080)
    group = _filtered(_running(serve, index), pod)
    assert (group.kind, group.reason) == (
        pb.REJECTION_KIND_POD_CONSTRAINT,
        "node(s) didn't have free ports for the requested pod ports",
    )
