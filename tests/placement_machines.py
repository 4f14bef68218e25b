"""Node topologies for placement tests and benchmarks: real GPU captures plus published CPU layouts.

GPU nodes come from the ``nvidia-smi topo -m`` captures in ../shared/data/gpu (parsed with the agent's
own importer); a capture says nothing of memory or the kubelet, so those are added here: memory per cell
as the instance types publish it (p5.48xlarge 2 TiB, p4d.24xlarge 1152 GiB, g6e.12xlarge 384 GiB), HMAT
bandwidth and SLIT distances as typical 2-socket servers report them (10 local, 21 remote). CPU-only nodes
are a plain 2-socket layout. When the captures are absent an equivalent NVSwitch node is built inline.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kubenexus.topology.model import (
    DeviceLink,
    Distances,
    Gpu,
    KubeletSettings,
    Machine,
    MemoryAttribute,
    NodeTopology,
    NumaCell,
    PathKind,
    ResourceAmount,
    ZoneResources,
)
from kubenexus.topology.nrt import cell_resources
from kubenexus.topology.topo_matrix import parse_topo_matrix
from tests.conftest import GPU_DIR

GIB = 1024**3
P5_CAPTURE = GPU_DIR / "aws_p5.48xlarge_8xH100__gnosia93-training-on-eks.txt"
L40S_CAPTURE = GPU_DIR / "aws_g6e.12xlarge_4xL40S__gnosia93-training-on-eks.txt"


def kubelet(policy: str = "single-numa-node", scope: str = "pod", *, memory: bool = False) -> KubeletSettings:
    return KubeletSettings(
        topology_manager_policy=policy,
        topology_manager_scope=scope,
        cpu_manager_policy="static",
        memory_manager_policy="Static" if memory else "None",
    )


def _socket_tables(count: int, bandwidth_mbps: int) -> tuple[Distances, tuple[MemoryAttribute, ...]]:
    ids = tuple(range(count))
    matrix = tuple(tuple(10 if a == b else 21 for b in ids) for a in ids)
    attributes = tuple(
        MemoryAttribute(target=i, initiator=i, access_class=1, read_bandwidth_mbps=bandwidth_mbps) for i in ids
    )
    return Distances(ids=ids, matrix=matrix), attributes


def cpu_node(
    *,
    cells: int = 2,
    cpus_per_cell: int = 32,
    memory_per_cell: int = 256 * GIB,
    settings: KubeletSettings | None = None,
) -> NodeTopology:
    """A plain multi-socket CPU node, one NUMA cell per socket."""
    numa = tuple(
        NumaCell(id=i, cpus=tuple(range(i * cpus_per_cell, (i + 1) * cpus_per_cell)), memory_bytes=memory_per_cell)
        for i in range(cells)
    )
    online = tuple(c for cell in numa for c in cell.cpus)
    distances, attributes = _socket_tables(cells, 120_000)
    return NodeTopology(
        machine=Machine("Xeon", "x86_64", cells, len(online), len(online), online, ()),
        numa_cells=numa,
        distances=distances,
        memory_attributes=attributes,
        kubelet=settings or kubelet(),
    )


def inline_nvswitch() -> NodeTopology:
    """The p5.48xlarge capture's facts: 192 CPUs on 2 sockets (hyperthreads 96 apart), GPUs 0-3 on socket 0."""
    affinity = (
        (*range(0, 48), *range(96, 144)),
        (*range(48, 96), *range(144, 192)),
    )
    gpus = tuple(
        Gpu(index=i, pci_bus_id=f"nvidia-smi:GPU{i}", numa_node=i // 4, cpu_affinity=affinity[i // 4]) for i in range(8)
    )
    links = tuple(DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.NVLINK, 18) for a in range(8) for b in range(a + 1, 8))
    cells = tuple(NumaCell(id=i, cpus=affinity[i], memory_bytes=None) for i in range(2))
    online = tuple(range(192))
    return NodeTopology(
        machine=Machine(None, None, None, None, 192, online, ()), numa_cells=cells, gpus=gpus, links=links
    )


def _capture(path: Path) -> NodeTopology | None:
    return parse_topo_matrix(path.read_text()) if path.exists() else None


def _with_host(topology: NodeTopology, memory: int, settings: KubeletSettings, bandwidth_mbps: int) -> NodeTopology:
    cells = tuple(replace(cell, memory_bytes=memory // len(topology.numa_cells)) for cell in topology.numa_cells)
    distances, attributes = _socket_tables(len(cells), bandwidth_mbps)
    ids = tuple(c.id for c in cells)
    distances = Distances(ids=ids, matrix=distances.matrix)
    attributes = tuple(replace(a, target=ids[a.target], initiator=ids[a.initiator]) for a in attributes)
    return replace(topology, numa_cells=cells, distances=distances, memory_attributes=attributes, kubelet=settings)


def nvswitch_node(*, cells: int = 2, settings: KubeletSettings | None = None) -> NodeTopology:
    """8x H100 behind NVSwitches (p5.48xlarge capture), with its 2 NUMA cells split into ``cells``."""
    base = _capture(P5_CAPTURE) or inline_nvswitch()
    if cells != len(base.numa_cells):
        per_gpu = 8 // cells
        online = sorted(base.machine.online_cpus)
        chunk = len(online) // cells
        split = tuple(
            NumaCell(id=i, cpus=tuple(online[i * chunk : (i + 1) * chunk]), memory_bytes=None) for i in range(cells)
        )
        gpus = tuple(
            replace(g, numa_node=g.index // per_gpu, cpu_affinity=split[g.index // per_gpu].cpus) for g in base.gpus
        )
        base = replace(base, numa_cells=split, gpus=gpus)
    return _with_host(base, 2048 * GIB, settings or kubelet(), 300_000)


def l40s_node(*, settings: KubeletSettings | None = None) -> NodeTopology:
    """4x L40S on one NUMA cell, PCIe only (g6e.12xlarge capture)."""
    base = _capture(L40S_CAPTURE)
    if base is None:
        gpus = tuple(
            Gpu(index=i, pci_bus_id=f"nvidia-smi:GPU{i}", numa_node=0, cpu_affinity=tuple(range(48))) for i in range(4)
        )
        links = tuple(DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.NODE) for a in range(4) for b in range(a + 1, 4))
        base = NodeTopology(
            machine=Machine(None, None, None, None, 48, tuple(range(48)), ()),
            numa_cells=(NumaCell(id=0, cpus=tuple(range(48)), memory_bytes=None),),
            gpus=gpus,
            links=links,
        )
    return _with_host(base, 384 * GIB, settings or kubelet(), 200_000)


def with_usage(topology: NodeTopology, used: dict[int, dict[str, int]], fingerprint: str | None) -> NodeTopology:
    """The kubelet's view of ``topology`` with ``used[cell][resource]`` allocated, and a pods fingerprint."""
    zones = []
    for cell in topology.numa_cells:
        base = cell_resources(replace(topology, zone_resources=()), cell)
        taken = used.get(cell.id, {})
        zones.append(
            ZoneResources(
                numa_id=cell.id,
                resources=tuple(replace(r, available=r.available - taken.get(r.name, 0)) for r in base),
            )
        )
    return replace(topology, zone_resources=tuple(zones), pods_fingerprint=fingerprint)


def amounts(topology: NodeTopology, cell: int) -> dict[str, ResourceAmount]:
    return {r.name: r for r in cell_resources(topology, topology.numa_cells[cell])}
