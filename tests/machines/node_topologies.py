"""Node topologies for placement tests and benchmarks: real GPU captures plus published CPU layouts.

GPU nodes come from the ``nvidia-smi topo -m`` captures in ../shared/data/gpu (parsed with the agent's
own importer); a capture says nothing of memory or the kubelet, so those are added here: memory per cell
as the instance types publish it (p5.48xlarge 2 TiB, p4d.24xlarge 1152 GiB, g6e.12xlarge 384 GiB), HMAT
bandwidth and SLIT distances as typical 2-socket servers report them (10 local, 21 remote). CPU-only nodes
are a plain 2-socket layout. When a capture is absent an equivalent node is built inline.

The 2-socket PCIe node (NVLink-bridged GPU pairs) is the k8s-device-plugin issue 546 capture, with an
RDMA NIC behind the PCIe switch of GPU1 (socket 0) and of GPU5 (socket 1). ``two_socket`` is an authored
Intel-style node with hugepages and HMAT entries, for the label and NodeResourceTopology encodings.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from kubenexus.topology.model import (
    DeviceLink,
    Distances,
    Gpu,
    HugePages,
    KubeletSettings,
    Machine,
    MemoryAttribute,
    Nic,
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
PCIE_CAPTURE = GPU_DIR / "pcie_8gpu_nvlink_bridge_pairs_NV12__k8s-device-plugin-issue546.txt"
RDMA = "rdma/hca_shared_devices_a"


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


def pcie_node(*, policy: str = "single-numa-node") -> NodeTopology:
    """8 GPUs over 2 sockets, bridged pairs (0-2, 1-3, 4-5, 6-7), SYS otherwise; RDMA NICs near GPU1 and GPU5."""
    if PCIE_CAPTURE.exists():
        base = parse_topo_matrix(PCIE_CAPTURE.read_text())
    else:
        pairs = {(0, 2), (1, 3), (4, 5), (6, 7)}
        gpus = tuple(
            Gpu(
                index=i,
                pci_bus_id=f"nvidia-smi:GPU{i}",
                numa_node=i // 4,
                cpu_affinity=tuple(range(i // 4 * 32, (i // 4 + 1) * 32)),
            )
            for i in range(8)
        )
        links = tuple(
            DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.NVLINK, 12)
            if (a, b) in pairs
            else DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.SYS)
            for a in range(8)
            for b in range(a + 1, 8)
        )
        base = NodeTopology(
            machine=Machine(None, None, None, None, 64, tuple(range(64)), ()),
            numa_cells=tuple(
                NumaCell(id=i, cpus=tuple(range(i * 32, (i + 1) * 32)), memory_bytes=None) for i in (0, 1)
            ),
            gpus=gpus,
            links=links,
        )
    cells = tuple(replace(cell, memory_bytes=256 * GIB) for cell in base.numa_cells)
    nics = (
        Nic("mlx5_0", "nvidia-smi:NIC0", rdma_devices=("mlx5_0",)),
        Nic("mlx5_1", "nvidia-smi:NIC1", rdma_devices=("mlx5_1",)),
    )
    nic_links = tuple(
        DeviceLink(f"GPU{g}", f"NIC{n}", PathKind.PIX if g == near else PathKind.SYS)
        for n, near in enumerate((1, 5))
        for g in range(8)
    )
    node = replace(
        base,
        numa_cells=cells,
        nics=nics,
        links=base.links + nic_links,
        distances=Distances(ids=(0, 1), matrix=((10, 21), (21, 10))),
        kubelet=kubelet(policy, "pod"),
    )
    # The RDMA shared-device plugin offers the NICs as a countable resource on each socket.
    zones = tuple(
        ZoneResources(cell.id, (*cell_resources(node, cell), ResourceAmount(RDMA, 16, 16, 16))) for cell in cells
    )
    return replace(node, zone_resources=zones)


def two_socket(**changes: Any) -> NodeTopology:
    """Two sockets with hyperthreads numbered the Intel way: cell 0 has CPUs 0-15 and 32-47."""
    cells = (
        NumaCell(0, (*range(16), *range(32, 48)), 64 * GIB, (HugePages(2048, 512, 500), HugePages(1048576, 4, 4))),
        NumaCell(1, (*range(16, 32), *range(48, 64)), 64 * GIB),
    )
    topology = NodeTopology(
        machine=Machine("Test Xeon", "x86_64", 2, 32, 64, tuple(range(64)), ()),
        numa_cells=cells,
        distances=Distances((0, 1), ((10, 21), (21, 10))),
        memory_attributes=(
            MemoryAttribute(0, 0, 0, read_bandwidth_mbps=99999),  # any initiator: not the CPUs' figure
            MemoryAttribute(0, 0, 1, read_bandwidth_mbps=131072, read_latency_ns=90),
            MemoryAttribute(1, 1, 1, read_latency_ns=95),  # latency only: no bandwidth label
        ),
    )
    return replace(topology, **changes)


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
