"""Clusters, member pods and invariant checks shared by the gang tests and the gang benchmark.

The machines come from the catalogue, ``tests.machines``; a member may also ask for ``RDMA`` NICs
(``pcie_node`` offers them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from kubenexus.topology.labels import FABRIC_CLIQUE_KEY
from kubenexus.topology.model import NodeTopology
from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY, SPREAD_KEY
from placement.core.feasibility import node_resources
from placement.core.gang_plan import GangMember, GangPlan, GangUnplaceable, Locality, NodeGpus, plan_gang
from placement.core.podgroup import SpreadPolicy
from placement.core.pods import PendingPod, PodUsage
from placement.core.topology_manager import Container, Pod, QOSClass, admit
from placement.core.vocabulary import IntArray, demand_of
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import DEFAULT_RACK_KEY as RACK
from placement.state.gang_coordinator import DEFAULT_ZONE_KEY as ZONE
from placement.state.gang_coordinator import GangConfig, GangCoordinator
from placement.state.reservations import Reservations
from tests.machines.node_topologies import GIB, RDMA, nvswitch_node


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def pod(*, cpus: int = 8, memory_gib: int = 64, gpus: int = 0, rdma: int = 0) -> Pod:
    devices = tuple((name, count) for name, count in (("nvidia.com/gpu", gpus), (RDMA, rdma)) if count)
    container = Container("main", cpu_millis=cpus * 1000, memory=memory_gib * GIB, devices=devices)
    return Pod(containers=(container,), qos=QOSClass.GUARANTEED)


def member(
    name: str,
    group: str,
    min_available: int | str,
    *,
    spread: str | None = None,
    priority: int = 0,
    namespace: str = "ns",
    **shape: int,
) -> PendingPod:
    labels = {GROUP_NAME_KEY: group, MIN_AVAILABLE_KEY: str(min_available)}
    if spread is not None:
        labels[SPREAD_KEY] = spread
    return PendingPod(namespace, name, pod(**shape), labels=labels, priority=priority)


# A coordinator on a fake clock: no failed plan waits to be tried again, however long it took on a loaded machine
# (``GangConfig.slow_plan_s``): the clock is fake, the planning time real.
FAKE_CLOCK_CONFIG = GangConfig(slow_plan_s=math.inf)


@dataclass(frozen=True)
class GangEngine:
    """A placement engine whose gangs are the coordinator's, on a test clock: what the gRPC gang tests serve."""

    index: ClusterIndex
    reservations: Reservations
    gangs: CoordinatedGangs
    engine: PlacementEngine


def gang_engine(nodes: Sequence[str], clock: Clock) -> GangEngine:
    """The engine over ``nodes``, each an 8-GPU NVSwitch machine of two NUMA cells, its gangs coordinated on
    ``clock`` (``FAKE_CLOCK_CONFIG``)."""
    index = ClusterIndex()
    for name in nodes:
        index.upsert_topology(name, nvswitch_node(cells=2))
    reservations = Reservations(index, clock=clock)
    gangs = CoordinatedGangs(GangCoordinator(index, reservations, config=FAKE_CLOCK_CONFIG, clock=clock), clock=clock)
    return GangEngine(index, reservations, gangs,
                      PlacementEngine(index=index, reservations=reservations, gangs=gangs, clock=clock))  # fmt: skip


class Cluster:
    """An index, its reservations and a gang coordinator on a fake clock."""

    def __init__(
        self,
        nodes: Mapping[str, NodeTopology],
        labels: Mapping[str, Mapping[str, str]] | None = None,
        *,
        config: GangConfig | None = None,
        slow_plan_s: float = math.inf,
    ) -> None:
        """``slow_plan_s``: the coordinator's (``GangConfig.slow_plan_s``); by default no failed plan waits to be
        tried again, however long it took on a loaded machine: the clock here is fake, the planning time real."""
        config = replace(config or GangConfig(), slow_plan_s=slow_plan_s)
        self.clock = Clock()
        self.topologies = dict(nodes)
        self.index = ClusterIndex()
        for name, topology in nodes.items():
            self.index.upsert_topology(name, topology)
        self.reservations = Reservations(self.index, clock=self.clock)
        self.gangs = GangCoordinator(self.index, self.reservations, config=config, clock=self.clock)
        for name, topology in nodes.items():
            self.gangs.observe_node(name, (labels or {}).get(name, {}), topology)

    def plan(
        self,
        members: list[PendingPod],
        policy: SpreadPolicy = SpreadPolicy.PACKED,
        labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> GangPlan | GangUnplaceable:
        """``plan_gang`` over every node, nothing reserved; locality codes from ``labels``."""
        index = self.index
        names = index.slot_names()
        codes: dict[str, int] = {}

        def level(key: str) -> IntArray:
            values = [(labels or {}).get(name or "", {}).get(key) for name in names]
            return np.array([-1 if v is None else codes.setdefault(key + v, len(codes)) for v in values], np.int64)

        locality = Locality(zone=level(ZONE), rack=level(RACK), clique=level(FABRIC_CLIQUE_KEY))

        def gpus(row: int) -> NodeGpus | None:
            shape = index.gpu_shape(row)
            return None if shape is None else NodeGpus(shape.table, shape.healthy)

        planned = [GangMember(m.key, demand_of(m.pod)) for m in members]
        return plan_gang(index.arrays(), index.slots(), planned, gpus=gpus, policy=policy, locality=locality)

    def pods(self) -> list[tuple[PodUsage, bool]]:
        return [(usage, bound) for node in self.index.node_names() for usage, bound, _ in self.index.pods_on(node)]

    def bind_all(self, group_keys: list[tuple[str, str]]) -> None:
        for key in group_keys:
            entry = self.index.pod(*key)
            assert entry is not None
            self.gangs.observe_bound(entry[0])


def assert_no_overcommit(cluster: Cluster) -> None:
    """Every cell's and node's charges stay within its capacity; no GPU is handed out twice."""
    index = cluster.index
    arrays = index.arrays()
    for node in index.node_names():
        slot = index.slot_of(node)
        assert slot is not None
        ids = [int(i) for i in arrays.cell_ids[slot]]
        shape = index.gpu_shape(slot)
        cell_used: dict[tuple[str, int], float] = defaultdict(float)
        node_used: dict[str, float] = defaultdict(float)
        gpus: list[int] = []
        for usage, _, _ in index.pods_on(node):
            demand = usage.demand
            assert len(usage.cells) >= 1, usage
            for name, amount in demand.node_requests:
                node_used[name] += amount
            cell = ids.index(usage.cells[0])
            # Cells bind CPUs and memory only where the kubelet's managers pin them.
            if len(usage.cells) == 1 and arrays.cpu_static[slot]:
                cell_used[("cpu", cell)] += demand.exclusive_cpus
            if len(usage.cells) == 1 and arrays.memory_static[slot] and demand.guaranteed:
                for name, amount in demand.memory_requests:
                    cell_used[(name, cell)] += amount
            for index_ in usage.gpus:
                assert shape is not None
                numa = shape.numa_of[index_]
                cell_used[("nvidia.com/gpu", ids.index(numa) if numa in ids else -1)] += 1
            gpus.extend(usage.gpus)
        for (name, cell), amount in cell_used.items():
            column = arrays.column(name)
            assert column is not None
            assert amount <= arrays.cell_total[column, slot, cell], (node, name, cell)
        for name, amount in node_used.items():
            column = arrays.column(name)
            assert column is not None
            assert amount <= arrays.node_allocatable[column, slot], (node, name)
        assert len(gpus) == len(set(gpus)), (node, gpus)


def assert_admitted_in_order(
    cluster: Cluster, placed: list[tuple[str, str]], pods: Mapping[tuple[str, str], Pod]
) -> None:
    """Replay: with every other pod charged, each of ``placed`` in turn is admitted by the exact kubelet
    model on its node, pinned to the cells planned for it where the kubelet pins."""
    scratch = ClusterIndex()
    for name, topology in cluster.topologies.items():
        scratch.upsert_topology(name, topology)
    new = set(placed)
    for usage, _ in cluster.pods():
        if usage.key not in new:
            scratch.assume_pod(usage)
    for key in placed:
        entry = cluster.index.pod(*key)
        assert entry is not None, key
        usage = entry[0]
        slot = scratch.slot_of(usage.node)
        assert slot is not None
        result = admit(node_resources(scratch.arrays(), slot), pods[key])
        assert result.admit, (key, usage.node, result.reason, result.message)
        pinned = sorted({i for a in result.affinities if a.hint.affinity is not None for i in a.hint.affinity.ids})
        if pinned:
            assert tuple(pinned) == usage.cells, (key, pinned, usage.cells)
        scratch.assume_pod(usage)
