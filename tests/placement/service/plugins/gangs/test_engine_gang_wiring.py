"""The engine's gang wiring: backfill holds keep single pods off held nodes, and the periodic tick runs
only on a synced leader; the feed hands node labels and topologies to the gang coordinator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kubenexus.topology.labels import encode_node_metadata
from kubenexus.topology.model import NodeTopology
from placement.cluster.feed import ClusterFeed
from placement.core.domains import DEFAULT_LEVELS, TopologyLevels
from placement.core.pods import ContainerSpec, PendingPod, PodSpec
from placement.service.engine import PlacementEngine
from placement.service.gang_port import GangCounts
from placement.service.results import GangOutcome, GangSpec, PermitOutcome
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from tests.machines.node_topologies import cpu_node, kubelet


@dataclass
class HoldingGangs:
    """A GangPort whose head gang holds ``held`` nodes, counting ticks."""

    held: frozenset[str]
    ticks: int = 0

    def place(self, group: GangSpec, members: Sequence[PendingPod], nodes: Sequence[str] | None) -> GangOutcome:
        raise AssertionError("not used here")

    def permit(self, namespace: str, name: str) -> PermitOutcome:
        raise AssertionError("not used here")

    def unreserve(self, namespace: str, name: str) -> bool:
        return False

    def waiting(self) -> int:
        return 1

    def open_to_backfill(self, nodes: Sequence[str]) -> list[str]:
        return [node for node in nodes if node not in self.held]

    def tick(self) -> None:
        self.ticks += 1

    def counts(self) -> GangCounts:
        return GangCounts(permit_timeouts=0, members_dropped=0)

    @property
    def levels(self) -> TopologyLevels:
        return DEFAULT_LEVELS


@dataclass
class Leadership:
    leader: bool

    def is_leader(self) -> bool:
        return self.leader

    def leader_identity(self) -> str:
        return "other-replica"


def _engine(gangs: HoldingGangs, *, synced: bool = True, leader: bool = True) -> PlacementEngine:
    index = ClusterIndex()
    for name in ("a", "b", "c"):
        index.upsert_topology(name, cpu_node(cpus_per_cell=16, settings=kubelet("single-numa-node", "pod")))
    return PlacementEngine(
        index=index,
        reservations=Reservations(index),
        gangs=gangs,
        synced=lambda: synced,
        leadership=Leadership(leader),
    )


def _pod() -> PodSpec:
    resources = {"cpu": "2", "memory": "1Gi"}
    return PodSpec("ml", "single", (ContainerSpec("main", resources, resources),))


def test_single_pods_do_not_take_nodes_held_for_a_starving_gang() -> None:
    engine = _engine(HoldingGangs(held=frozenset({"a", "b"})))
    outcome = engine.reserve(_pod())
    assert outcome.placement is not None
    assert outcome.placement.node == "c"
    held = {node: group.reason for group in outcome.rejected for node in group.nodes}
    assert set(held) >= {"a", "b"}
    assert "held for a waiting pod group" in held["a"]


def test_with_every_node_held_the_single_pod_waits() -> None:
    engine = _engine(HoldingGangs(held=frozenset({"a", "b", "c"})))
    assert engine.reserve(_pod()).placement is None


def test_tick_runs_only_on_a_synced_leader() -> None:
    gangs = HoldingGangs(held=frozenset())
    _engine(gangs).tick()
    assert gangs.ticks == 1
    _engine(gangs, leader=False).tick()
    _engine(gangs, synced=False).tick()
    assert gangs.ticks == 1


@dataclass
class NodeRecorder:
    seen: list[tuple[str, dict[str, str], NodeTopology | None]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def observe(self, name: str, labels: Mapping[str, str], topology: NodeTopology | None) -> None:
        self.seen.append((name, dict(labels), topology))


def test_the_feed_hands_locality_labels_and_topology_to_the_gang_coordinator() -> None:
    index = ClusterIndex()
    recorder = NodeRecorder()
    feed = ClusterFeed(
        api=None,  # type: ignore[arg-type]  # the handlers under test never call the API
        index=index,
        reservations=Reservations(index),
        on_node=recorder.observe,
        on_node_removed=recorder.removed.append,
    )
    topology = cpu_node(cpus_per_cell=8, settings=kubelet())
    metadata = encode_node_metadata(topology)
    labels = metadata.labels | {"topology.kubernetes.io/zone": "zone-a"}
    node = {"metadata": {"name": "n1", "labels": labels, "annotations": metadata.annotations}}
    handler = feed._topology  # the watch events' entry point, without a watch
    handler.nodes.apply("ADDED", node)
    assert index.slot_of("n1") is not None
    assert [(name, seen_labels["topology.kubernetes.io/zone"]) for name, seen_labels, _ in recorder.seen] == [
        ("n1", "zone-a"),
        ("n1", "zone-a"),
    ]
    assert recorder.seen[-1][2] == topology  # decoded once, with the model
    zone_b = labels | {"topology.kubernetes.io/zone": "zone-b"}
    relabelled = {"metadata": {"name": "n1", "labels": zone_b, "annotations": metadata.annotations}}
    handler.nodes.apply("MODIFIED", relabelled)
    assert recorder.seen[-1][1]["topology.kubernetes.io/zone"] == "zone-b"
    assert recorder.seen[-1][2] is None  # the model did not change: not decoded again
    handler.nodes.apply("DELETED", relabelled)
    assert recorder.removed == ["n1"]
    assert index.slot_of("n1") is None


def test_the_feed_hands_parsed_pod_changes_to_the_gang_coordinator() -> None:
    """Bound, finished and deleted pods arrive parsed; a pod gone from a relist counts as deleted."""
    index = ClusterIndex()
    index.upsert_topology("n1", cpu_node(cpus_per_cell=8, settings=kubelet()))
    changes: list[tuple[tuple[str, str], str | None, bool]] = []
    feed = ClusterFeed(
        api=None,  # type: ignore[arg-type]  # the handlers under test never call the API
        index=index,
        reservations=Reservations(index),
        on_pod=lambda key, usage, gone: changes.append((key, None if usage is None else usage.node, gone)),
    )
    resources = {"cpu": "1", "memory": "1Gi"}
    pod = {
        "metadata": {"namespace": "ml", "name": "a"},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "resources": {"requests": resources}}]},
        "status": {"phase": "Running"},
    }
    handler = feed._pods  # the watch events' entry point, without a watch
    handler.replace([pod, {**pod, "metadata": {"namespace": "ml", "name": "b"}}])
    handler.apply("MODIFIED", {**pod, "status": {"phase": "Succeeded"}})
    assert changes == [(("ml", "a"), "n1", False), (("ml", "b"), "n1", False), (("ml", "a"), None, True)]
    handler.replace([])  # both vanished while the watch was down
    assert sorted(changes[3:]) == [(("ml", "a"), None, True), (("ml", "b"), None, True)]
