"""Kubelet fidelity (issue 14): what the index and the admission model make of a node, against the kubelet.

The kubelet here is the exact port (``placement.core.topology_manager``, checked against the upstream test
tables) holding its resource managers' state from one admitted pod to the next, as a node does; the
placement side sees only what the node publishes and the pods it knows, through ``ClusterIndex``.

The kubelet oracle (tests/upstream/test_oracle_kubelet.py, upstream v1.37.2's own managers) now covers this too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kubenexus.topology.model import (
    Gpu,
    KubeletSettings,
    Machine,
    NodeTopology,
    NumaCell,
    ResourceAmount,
    ZoneResources,
)
from kubenexus.topology.podfingerprint import pods_fingerprint
from placement.core.feasibility import filter_nodes, node_resources
from placement.core.gang_plan import empty_view
from placement.core.pods import PodUsage
from placement.core.topology_manager import (
    AdmissionResult,
    Container,
    CpuManagerPolicy,
    DeviceGroup,
    KubeletConfig,
    MemoryManagerPolicy,
    MemoryPool,
    NodeResources,
    NumaCellResources,
    Pod,
    QOSClass,
    TopologyPolicy,
    TopologyScope,
    admit,
)
from placement.core.topology_manager.providers import NodeState, guaranteed_cpus, memory_requests
from placement.core.vocabulary import CPU, GPU_RESOURCE, MEMORY, demand_of
from placement.state.cluster_index import ClusterIndex
from tests.machines.node_topologies import cpu_node, kubelet

GIB = 1024**3
NODE = "node"


def _machine(cpus: int) -> Machine:
    return Machine("Xeon", "x86_64", 1, cpus, cpus, tuple(range(cpus)), ())


def _numa_cells(cpus: list[int], memory: list[int]) -> tuple[NumaCell, ...]:
    starts = np.cumsum([0, *cpus])
    return tuple(
        NumaCell(id=i, cpus=tuple(range(int(starts[i]), int(starts[i + 1]))), memory_bytes=memory[i])
        for i in range(len(cpus))
    )


# --- the Static memory manager's groups -------------------------------------------------------------------


class Kubelet:
    """One node's kubelet: a static CPU manager and a Static memory manager, pod scope, no devices."""

    def __init__(self, cpus: list[int], memory: list[int], policy: TopologyPolicy) -> None:
        self.node = NodeResources(
            cells=tuple(
                NumaCellResources(i, n, n, (MemoryPool(MEMORY, m, m),))
                for i, (n, m) in enumerate(zip(cpus, memory, strict=True))
            ),
            kubelet=KubeletConfig(
                topology_policy=policy,
                scope=TopologyScope.POD,
                cpu_manager_policy=CpuManagerPolicy.STATIC,
                memory_manager_policy=MemoryManagerPolicy.STATIC,
            ),
        )

    def run(self, pod: Pod) -> tuple[int, ...] | None:
        """Admit a one-container pod and keep its allocation; the NUMA ids its memory went to (None: refused)."""
        result = admit(self.node, pod)
        if not result.admit:
            return None
        (container,) = pod.containers
        hint = result.affinities[0].hint
        state = NodeState(self.node)  # allocateAlignedResources with the merged hint, as admit did
        state.allocate_cpus(guaranteed_cpus(pod, container), hint.affinity, init_container=False)
        before = dict(state.memory_assignments)
        state.allocate_memory(pod, memory_requests(container), hint, init_container=False)
        self.node = replace(
            self.node,
            cells=tuple(
                replace(
                    cell,
                    free_cpus=state.free_cpus[cell.id],
                    memory=tuple(replace(p, free=state.free_memory[(cell.id, p.resource)]) for p in cell.memory),
                    memory_group=state.memory_group[cell.id],
                    memory_assignments=state.memory_assignments[cell.id],
                )
                for cell in self.node.cells
            ),
        )
        return tuple(i for i in state.cell_ids if state.memory_assignments[i] > before[i])

    def report(self, pods: list[PodUsage]) -> NodeTopology:
        """What the agent publishes: the kubelet's per-zone free amounts, accounting for ``pods``."""
        cells = self.node.cells
        memory = [c.memory[0].allocatable for c in cells]
        zones = tuple(
            ZoneResources(
                c.id,
                (
                    ResourceAmount(CPU, c.cpus, c.cpus, c.free_cpus),
                    ResourceAmount(MEMORY, c.memory[0].allocatable, c.memory[0].allocatable, c.memory[0].free),
                ),
            )
            for c in cells
        )
        policy = self.node.kubelet.topology_policy.value
        return NodeTopology(
            machine=_machine(sum(c.cpus for c in cells)),
            numa_cells=_numa_cells([c.cpus for c in cells], memory),
            kubelet=KubeletSettings(policy, "pod", "static", "Static"),
            zone_resources=zones,
            pods_fingerprint=pods_fingerprint(p.key for p in pods),
        )


def _guaranteed(cpus: int, memory_gib: int) -> Pod:
    return Pod((Container("c", cpu_millis=cpus * 1000, memory=memory_gib * GIB),), qos=QOSClass.GUARANTEED)


guaranteed_pods = st.builds(_guaranteed, st.integers(1, 4), st.integers(1, 8))


@dataclass(frozen=True)
class Verdicts:
    kubelet: AdmissionResult
    filtered: bool  # the vectorised filter (Filter, Score, Reserve's ranking)
    exact: AdmissionResult  # the exact model on the index's row (Reserve, Explain, the filter's fallback)


def _verdicts(index: ClusterIndex, kubelet: NodeResources, pod: Pod) -> Verdicts:
    slot = index.slot_of(NODE)
    assert slot is not None
    arrays = index.arrays()
    filtered = filter_nodes(arrays, np.array([slot], dtype=np.int64), demand_of(pod))
    return Verdicts(admit(kubelet, pod), bool(filtered.feasible[0]), admit(node_resources(arrays, slot), pod))


@settings(max_examples=300)
@given(
    cells=st.lists(st.tuples(st.integers(2, 8), st.integers(2, 8)), min_size=2, max_size=4),
    policy=st.sampled_from(list(TopologyPolicy)),
    placed=st.lists(guaranteed_pods, min_size=1, max_size=5),
    pod=guaranteed_pods,
)
def test_memory_groups_of_known_pods_are_the_kubelets(
    cells: list[tuple[int, int]], policy: TopologyPolicy, placed: list[Pod], pod: Pod
) -> None:
    """Pods we placed run on a Static memory manager node, and the node's report accounts for them; a new
    pod is admitted by the index's model exactly when the kubelet, holding their memory, admits it."""
    kubelet = Kubelet([n for n, _ in cells], [m * GIB for _, m in cells], policy)
    known: list[PodUsage] = []
    for n, placed_pod in enumerate(placed):
        memory_cells = kubelet.run(placed_pod)
        if memory_cells is not None:
            known.append(PodUsage("ns", f"p{n}", NODE, demand_of(placed_pod), cells=memory_cells))
    index = ClusterIndex()
    index.upsert_topology(NODE, kubelet.report(known))
    for usage in known:
        index.upsert_pod(usage)
    verdicts = _verdicts(index, kubelet.node, pod)
    assert verdicts.filtered == verdicts.kubelet.admit, verdicts
    assert verdicts.exact.admit == verdicts.kubelet.admit, verdicts


# --- GPUs without a NUMA node -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSpec:
    numa: int | None  # a cell position, or None: the GPU reports no NUMA node
    healthy: bool


def _gpu_topology(cpus: list[int], gpus: list[GpuSpec], policy: str, scope: str) -> NodeTopology:
    memory = [64 * GIB] * len(cpus)
    return NodeTopology(
        machine=_machine(sum(cpus)),
        numa_cells=_numa_cells(cpus, memory),
        gpus=tuple(
            Gpu(index=i, pci_bus_id=f"0000:{i + 16:02x}:00.0", numa_node=g.numa, healthy=g.healthy)
            for i, g in enumerate(gpus)
        ),
        kubelet=KubeletSettings(policy, scope, "static", "None"),
    )


def _kubelet_view(cpus: list[int], gpus: list[GpuSpec], policy: str, scope: str) -> NodeResources:
    """The node as its kubelet sees it: the device manager's allDevices per NUMA node for "preferred",
    the healthy ones for allocation; a device without topology in no NUMA node's count."""
    devices = []
    for numa in [*range(len(cpus)), None]:
        here = [g for g in gpus if g.numa == numa]
        if here:
            ids = () if numa is None else (numa,)
            devices.append(DeviceGroup(GPU_RESOURCE, ids, len(here), sum(g.healthy for g in here)))
    return NodeResources(
        cells=tuple(NumaCellResources(i, n, n, (MemoryPool(MEMORY, 64 * GIB, 64 * GIB),)) for i, n in enumerate(cpus)),
        devices=tuple(devices),
        kubelet=KubeletConfig(
            topology_policy=TopologyPolicy(policy),
            scope=TopologyScope(scope),
            cpu_manager_policy=CpuManagerPolicy.STATIC,
        ),
    )


@st.composite
def gpu_nodes(draw: st.DrawFn) -> tuple[list[int], list[GpuSpec]]:
    cpus = draw(st.lists(st.integers(2, 8), min_size=1, max_size=4))
    where = st.one_of(st.none(), st.integers(0, len(cpus) - 1))
    gpus = draw(st.lists(st.builds(GpuSpec, where, st.booleans()), min_size=1, max_size=8))
    return cpus, gpus


@st.composite
def gpu_pods(draw: st.DrawFn) -> Pod:
    def container(name: str) -> Container:
        # At most 2 CPUs for two containers: the node-level CPU fit, which the kubelet model leaves to the
        # kubelet's resource-fit admission, never binds here.
        return Container(
            name,
            cpu_millis=draw(st.sampled_from([500, 1000])),
            memory=GIB,
            devices=((GPU_RESOURCE, draw(st.integers(1, 6))),),
        )

    count = draw(st.integers(1, 2))
    return Pod(tuple(container(f"c{i}") for i in range(count)), qos=QOSClass.GUARANTEED)


@settings(max_examples=300)
@given(
    node=gpu_nodes(),
    policy=st.sampled_from([p.value for p in TopologyPolicy]),
    scope=st.sampled_from(["pod", "container"]),
    pod=gpu_pods(),
)
def test_gpus_without_numa_count_as_the_kubelet_counts_them(
    node: tuple[list[int], list[GpuSpec]], policy: str, scope: str, pod: Pod
) -> None:
    """Healthy and unhealthy GPUs, some without a NUMA node: the index's row admits a pod exactly when the
    kubelet does, in the vectorised filter and in the exact model (Reserve, Explain, the fallback)."""
    cpus, gpus = node
    index = ClusterIndex()
    index.upsert_topology(NODE, _gpu_topology(cpus, gpus, policy, scope))
    verdicts = _verdicts(index, _kubelet_view(cpus, gpus, policy, scope), pod)
    assert verdicts.filtered == verdicts.kubelet.admit, verdicts
    if verdicts.filtered or any(g.healthy for g in gpus):
        # Only unhealthy GPUs without a NUMA node: the report has none, so the index's row registers no GPU
        # plugin and the exact model, like the kubelet's device manager for an unregistered resource, leaves
        # the GPUs to the node-level fit, which the filter applies (the exact model is not asked then).
        assert verdicts.exact.admit == verdicts.kubelet.admit, verdicts


def test_the_empty_cluster_a_gang_is_judged_against_holds_no_memory_groups() -> None:
    """``gang.empty_view`` is every node with nothing running: no pod's memory group either."""
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node(settings=kubelet(memory=True)))
    pod = Pod((Container("main", cpu_millis=4000, memory=8 * 1024**3),), qos=QOSClass.GUARANTEED)
    index.upsert_pod(PodUsage("ns", "p", "n", demand_of(pod), cells=(0,)))
    arrays = index.arrays()
    assert arrays.memory_group.any()
    assert not empty_view(arrays).memory_group.any()
