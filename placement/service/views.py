"""Nodes as people inspect them (GetNodeTopology, ListNodes): read through the cluster index's accessors."""

from __future__ import annotations

from dataclasses import dataclass

from placement.core.gpu_sets import rank_label
from placement.core.node_amounts import Amount, CellState, KubeletPolicy
from placement.core.vocabulary import CPU, GPU_RESOURCE, MEMORY
from placement.service.errors import NodeNotFound
from placement.state.cluster_index import ClusterIndex


@dataclass(frozen=True)
class GpuView:
    index: int
    numa_cell: int | None
    healthy: bool
    busy: bool


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    cells: tuple[int, ...]
    gpus: tuple[int, ...]
    bound: bool
    accounted: bool


@dataclass(frozen=True)
class NodeView:
    name: str
    kubelet: KubeletPolicy
    cells: tuple[CellState, ...]
    node_resources: tuple[Amount, ...]
    gpus: tuple[GpuView, ...]
    gpu_links: tuple[tuple[int, int, str], ...]  # (a, b, nvidia-smi class such as NV18 or SYS)
    pods: tuple[PodView, ...]
    notes: tuple[str, ...] = ()  # what the report could not tell (``ClusterIndex.node_notes``)


@dataclass(frozen=True)
class NodeSummary:
    name: str
    numa_cells: int
    topology_manager_policy: str
    gpus: int
    free_gpus: int
    allocatable_cpus: float
    free_cpus: float
    allocatable_memory: float
    free_memory: float
    pods: int


def node_view(index: ClusterIndex, name: str) -> NodeView:
    with index.lock:
        slot = index.slot_of(name)
        if slot is None:
            raise NodeNotFound(name)
        shape = index.gpu_shape(slot)
        busy = index.busy_gpus(slot)
        gpus: tuple[GpuView, ...] = ()
        links: tuple[tuple[int, int, str], ...] = ()
        if shape is not None:
            table = shape.table
            gpus = tuple(GpuView(i, shape.numa_of.get(i), i in shape.healthy, i in busy) for i in sorted(shape.numa_of))
            links = tuple(
                (table.gpus[a], table.gpus[b], rank_label(table.ranks[a][b]))
                for a in range(len(table.gpus))
                for b in range(a + 1, len(table.gpus))
            )
        return NodeView(
            name=name,
            kubelet=index.kubelet_policy(slot),
            cells=index.cells(slot),
            node_resources=tuple(index.node_amounts(slot).values()),
            gpus=gpus,
            gpu_links=links,
            pods=tuple(
                PodView(u.namespace, u.name, u.cells, u.gpus, bound, accounted)
                for u, bound, accounted in index.pods_on(name)
            ),
            notes=index.node_notes(name),
        )


def node_summaries(index: ClusterIndex) -> list[NodeSummary]:
    with index.lock:
        summaries = []
        for name in sorted(index.node_names()):
            slot = index.slot_of(name)
            assert slot is not None  # names come from the index under its lock
            amounts = index.node_amounts(slot)
            none = Amount("", 0.0, 0.0)
            cpu, memory, gpu = (amounts.get(r, none) for r in (CPU, MEMORY, GPU_RESOURCE))
            summaries.append(
                NodeSummary(
                    name=name,
                    numa_cells=index.numa_cells(slot),
                    topology_manager_policy=index.kubelet_policy(slot).topology_manager_policy,
                    gpus=int(gpu.total),
                    free_gpus=int(gpu.free),
                    allocatable_cpus=cpu.total,
                    free_cpus=cpu.free,
                    allocatable_memory=memory.total,
                    free_memory=memory.free,
                    pods=len(index.pods_on(name)),
                )
            )
        return summaries
