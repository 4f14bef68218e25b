"""The demo cluster's machine types, from a compact description to the project's own JSON.

``python -m tools.build_demo_machines`` (from the repository root) writes
``placement/demo/machines/<name>.json`` (the ``kubenexus.topology.json_codec`` form of a
``NodeTopology``, exactly what ``kubenexus-agent discover --format json`` prints); ``--check`` only
compares and exits 1 when a file differs. The files are committed and ship as package data, so the demo
needs neither this tool nor any captured data, and a test keeps them equal to what this tool builds.

Each machine is built the way the agent builds a real one: PCI functions with their bridge paths,
GPUs with their NVLinks, NICs; then ``kubenexus.topology.paths.build_device_links`` and
``kubenexus.topology.nvlink.nvlink_pair_counts`` derive the GPU/NIC matrix, so the links are the
agent's own answer for that PCIe tree, not typed in.

Published facts used (``../shared/data/gpu`` holds the captures named):

* ``hgx-h100``: 8x H100 80GB HBM3 on an HGX board, 4 NVSwitches with 5+4+4+5 NVLink 4 links per
  GPU (NV18 all pairs); GPU bus ids from the thamada/nvidia-smi capture; the CPU/NUMA layout of the
  p5.48xlarge capture (2x AMD EPYC 7R13 48-core with SMT, GPUs 0-3 on NUMA 0, 4-7 on NUMA 1,
  2 TiB); one ConnectX-7 per GPU on the other downstream port of the GPU's PCIe switch (PIX), as
  the HGX H100 reference design wires its compute NICs.
* ``dgx-a100``: 8x A100-SXM4-40GB, 6 NVSwitches, 12 NVLink 3 links per GPU (NV12); 2x AMD EPYC
  7742 in NPS4 (8 NUMA nodes of 16 cores), GPU NUMA affinity 3,3,1,1,7,7,5,5 and GPU bus ids as
  DGX A100's ``nvidia-smi topo -m`` prints them; 8 ConnectX-6 compute ports at the bus ids behind
  DGX OS's names ibp12s0 ... ibp204s0, two per GPU-pair switch tree (PXB to those GPUs); 1 TiB.
  (The p4d.24xlarge capture is a different A100 machine: 2 Intel NUMA nodes, affinity 0,0,0,0,1,1,1,1.)
* ``l40s-4x``: the g6e.12xlarge capture: 4x L40S, each on its own host bridge (NODE between all
  GPUs), one NUMA node, 48 CPUs (EPYC 7R13, 24 cores with SMT), 384 GiB.
* ``a100-pcie-nvbridge``: the k8s-device-plugin issue 546 capture: 8x A100 80GB PCIe, NVLink
  bridges (3 bridges of 4 links, NV12) on pairs 0-2, 1-3, 4-5, 6-7, GPUs 0-3 on NUMA 0 (CPUs 0-31)
  and 4-7 on NUMA 1 (CPUs 32-63). Its NVML answered SYS for GPU pairs on one NUMA node; the PCIe
  tree says NODE, so the agent publishes NODE with ``nvml_path`` SYS, as it would on that host.
* ``cpu-2s``: a plain 2-socket Xeon Gold 6338 (Ice Lake, 32 cores with SMT per socket), 512 GiB,
  64 x 1 GiB hugepages per NUMA node for HPC pods.

Illustrative, where no public source gives it (say so when quoting a figure): bus ids of NVSwitches,
bridges and the PCIe machines' GPUs; the PCIe-bridge machine's CPU model and memory; the hugepage
pools; the kubelet settings. HMAT bandwidth is the DRAM peak per NUMA node (channels x MT/s x 8
bytes), the figure firmware HMAT tables state; SLIT is what these platforms print (AMD 2-socket
10/32, NPS4 12 within a socket; Intel 2-socket 10/20).

Kubelet settings (topology manager policy, why):

* HGX H100: ``single-numa-node``, pod scope, static CPU and memory managers: a GPU's CPUs, memory
  and NIC must be on its NUMA node for GPUDirect RDMA, and one pod's containers share one cell.
* DGX A100: ``restricted``, pod scope, static CPU manager: 8 small NPS4 cells cannot hold a 4-GPU
  pod's CPUs in one cell, so single-numa-node would reject most training pods; restricted still
  refuses a non-preferred (wider than necessary) alignment.
* PCIe GPU nodes (L40S, A100 PCIe): ``best-effort``, container scope (the kubelet default): inference
  pods, alignment preferred, never a reason to fail admission.
* CPU nodes: ``none`` with the static CPU manager: exclusive cores without NUMA alignment, the
  common default; a pod that needs a whole NUMA cell asks with its own intent annotation.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kubenexus.topology import json_codec
from kubenexus.topology.cpulist import parse_cpulist
from kubenexus.topology.model import (
    Distances,
    Gpu,
    HugePages,
    KubeletSettings,
    Machine,
    MemoryAttribute,
    MemoryKind,
    Nic,
    NodeTopology,
    NumaCell,
    NvLink,
    NvLinkRemote,
    PathKind,
    ZoneResources,
)
from kubenexus.topology.nrt import MEMORY, METHOD_WITH_EXCLUSIVE_RESOURCES, cell_resources
from kubenexus.topology.nvlink import nvlink_pair_counts
from kubenexus.topology.paths import build_device_links
from kubenexus.topology.podfingerprint import pods_fingerprint
from tools.pcie_tree import (
    CLASS_3D_CONTROLLER,
    CLASS_BRIDGE_OTHER,
    CLASS_INFINIBAND,
    MELLANOX,
    NVIDIA,
    PcieSlot,
    cascade_slot,
    root_port_slot,
    switch_slot,
    with_switch_ports,
)

MACHINES_DIR = Path(__file__).resolve().parent.parent / "placement" / "demo" / "machines"

GIB = 1024**3
_MIB = 1024**2
_HUGEPAGE_1G_KIB = 1024 * 1024
_HUGEPAGE_2M_KIB = 2048


@dataclass(frozen=True)
class Host:
    """The CPU side of a machine: how Linux numbers its CPUs and what each NUMA node holds."""

    cpu_model: str
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    numa_per_socket: int  # NPS on AMD, sub-NUMA clusters on Intel
    memory_per_node: int  # bytes, MemTotal of the node (hugepage pools included)
    hugepages: tuple[HugePages, ...]  # per NUMA node
    distance_same_socket: int
    distance_remote: int
    bandwidth_mbps: int  # local read bandwidth per NUMA node (HMAT)
    kubelet: KubeletSettings
    reserved_memory: int  # the kubelet's --reserved-memory, all on NUMA node 0

    @property
    def numa_count(self) -> int:
        return self.sockets * self.numa_per_socket

    def node_cpus(self, node: int) -> tuple[int, ...]:
        """Linux's order: the first thread of every core, socket by socket, then the SMT siblings alike."""
        cores = self.sockets * self.cores_per_socket
        per_node = self.cores_per_socket // self.numa_per_socket
        first = range(node * per_node, (node + 1) * per_node)
        return tuple(core + thread * cores for thread in range(self.threads_per_core) for core in first)

    def socket_of(self, node: int) -> int:
        return node // self.numa_per_socket


@dataclass(frozen=True)
class Function:
    """A PCI endpoint worth publishing: a GPU, an NVSwitch or a NIC."""

    bus_id: str
    class_code: int
    vendor_id: int
    device_id: int
    numa_node: int
    slot: PcieSlot
    rdma_device: str | None = None
    netdev: str | None = None


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_mib: int
    compute_capability: str
    device_id: int


H100_SXM = GpuModel("NVIDIA H100 80GB HBM3", 81559, "9.0", 0x2330)
A100_SXM = GpuModel("NVIDIA A100-SXM4-40GB", 40960, "8.0", 0x20B0)
L40S = GpuModel("NVIDIA L40S", 46068, "8.9", 0x26B9)
A100_PCIE = GpuModel("NVIDIA A100 80GB PCIe", 81920, "8.0", 0x20B5)


def _kubelet(policy: str, scope: str, reserved: str, *, memory_static: bool = False) -> KubeletSettings:
    return KubeletSettings(
        topology_manager_policy=policy,
        topology_manager_scope=scope,
        cpu_manager_policy="static",
        memory_manager_policy="Static" if memory_static else "None",
        reserved_cpus=parse_cpulist(reserved),
    )


# --- the CPU side of each machine ------------------------------------------------------------------

HGX_H100_HOST = Host(
    cpu_model="AMD EPYC 7R13 48-Core Processor",
    sockets=2,
    cores_per_socket=48,
    threads_per_core=2,
    numa_per_socket=1,
    memory_per_node=1024 * GIB,
    hugepages=(HugePages(_HUGEPAGE_2M_KIB, 8192, 8192),),
    distance_same_socket=10,
    distance_remote=32,
    bandwidth_mbps=8 * 3200 * 8,
    # Two whole cores (with their siblings) on NUMA 0 for the system; memory manager reserve beside them.
    kubelet=_kubelet("single-numa-node", "pod", "0-1,96-97", memory_static=True),
    reserved_memory=8 * GIB,
)
DGX_A100_HOST = Host(
    cpu_model="AMD EPYC 7742 64-Core Processor",
    sockets=2,
    cores_per_socket=64,
    threads_per_core=2,
    numa_per_socket=4,
    memory_per_node=128 * GIB,
    hugepages=(),
    distance_same_socket=12,
    distance_remote=32,
    bandwidth_mbps=2 * 3200 * 8,  # NPS4: two of the socket's eight DDR4-3200 channels per node
    kubelet=_kubelet("restricted", "pod", "0-1,128-129"),
    reserved_memory=4 * GIB,
)
L40S_HOST = Host(
    cpu_model="AMD EPYC 7R13 Processor",
    sockets=1,
    cores_per_socket=24,
    threads_per_core=2,
    numa_per_socket=1,
    memory_per_node=384 * GIB,
    hugepages=(),
    distance_same_socket=10,
    distance_remote=10,
    bandwidth_mbps=4 * 3200 * 8,  # a 24-core slice of the socket: half its channels
    kubelet=_kubelet("best-effort", "container", "0,24"),
    reserved_memory=2 * GIB,
)
PCIE_BRIDGE_HOST = Host(
    cpu_model="AMD EPYC 7543 32-Core Processor",  # illustrative: the capture shows only CPUs 0-31 / 32-63
    sockets=2,
    cores_per_socket=32,
    threads_per_core=1,
    numa_per_socket=1,
    memory_per_node=256 * GIB,
    hugepages=(),
    distance_same_socket=10,
    distance_remote=32,
    bandwidth_mbps=8 * 3200 * 8,
    kubelet=_kubelet("best-effort", "container", "0-1"),
    reserved_memory=2 * GIB,
)
CPU_2S_HOST = Host(
    cpu_model="Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
    sockets=2,
    cores_per_socket=32,
    threads_per_core=2,
    numa_per_socket=1,
    memory_per_node=256 * GIB,
    hugepages=(HugePages(_HUGEPAGE_1G_KIB, 64, 64),),
    distance_same_socket=10,
    distance_remote=20,
    bandwidth_mbps=8 * 3200 * 8,
    kubelet=_kubelet("none", "container", "0,64"),
    reserved_memory=2 * GIB,
)


# --- PCI functions and NVLinks --------------------------------------------------------------------


def _gpu_function(bus: int, model: GpuModel, numa_node: int, slot: PcieSlot) -> Function:
    return Function(f"0000:{bus:02x}:00.0", CLASS_3D_CONTROLLER, NVIDIA, model.device_id, numa_node, slot)


def _nic_function(bus: int, device_id: int, numa_node: int, slot: PcieSlot, rdma_device: str) -> Function:
    return Function(
        f"0000:{bus:02x}:00.0",
        CLASS_INFINIBAND,
        MELLANOX,
        device_id,
        numa_node,
        slot,
        rdma_device=rdma_device,
        netdev=f"ibp{bus}s0",  # systemd's predictable name for bus <bus>, slot 0
    )


def _switch_links(switches: Sequence[Function], links_per_switch: Sequence[int], version: int) -> tuple[NvLink, ...]:
    numbered = [switch.bus_id for switch, count in zip(switches, links_per_switch, strict=True) for _ in range(count)]
    return tuple(NvLink(link, True, version, NvLinkRemote.SWITCH, bus_id) for link, bus_id in enumerate(numbered))


# --- assembling a NodeTopology the way the agent does -------------------------------------------------


@dataclass(frozen=True)
class GpuBoard:
    model: GpuModel
    functions: tuple[Function, ...]  # the GPUs, by index
    nvlinks: tuple[tuple[NvLink, ...], ...]  # per GPU index
    others: tuple[Function, ...] = ()  # NVSwitches and NICs
    nvml_paths: Mapping[tuple[int, int], PathKind] | None = None  # NVML's answer where it differs


def build_topology(name: str, host: Host, board: GpuBoard | None) -> NodeTopology:
    """The NodeTopology the agent would publish for ``host`` with ``board``, before any pod runs."""
    ids = tuple(range(host.numa_count))
    cells = tuple(
        NumaCell(
            id=node,
            cpus=host.node_cpus(node),
            memory_bytes=host.memory_per_node,
            hugepages=host.hugepages,
            memory_kind=MemoryKind.DRAM,
        )
        for node in ids
    )
    online = tuple(sorted(cpu for cell in cells for cpu in cell.cpus))
    distances = Distances(
        ids=ids,
        matrix=tuple(
            tuple(
                10
                if a == b
                else host.distance_same_socket
                if host.socket_of(a) == host.socket_of(b)
                else host.distance_remote
                for b in ids
            )
            for a in ids
        ),
    )
    bandwidth = tuple(
        MemoryAttribute(target=node, initiator=node, access_class=1, read_bandwidth_mbps=host.bandwidth_mbps)
        for node in ids
    )
    topology = NodeTopology(
        machine=Machine(
            cpu_model=host.cpu_model,
            architecture="x86_64",
            sockets=host.sockets,
            cores=host.sockets * host.cores_per_socket,
            threads=len(online),
            online_cpus=online,
            offline_cpus=(),
        ),
        numa_cells=cells,
        distances=distances,
        memory_attributes=bandwidth,
        kubelet=host.kubelet,
    )
    if board is not None:
        topology = _with_board(name, topology, board)
    return _with_kubelet_view(topology, host)


def _with_board(name: str, topology: NodeTopology, board: GpuBoard) -> NodeTopology:
    functions = (*board.functions, *board.others)
    cpus_of = {cell.id: cell.cpus for cell in topology.numa_cells}
    endpoints = (
        function.slot.device(
            function.bus_id,
            class_code=function.class_code,
            vendor_id=function.vendor_id,
            device_id=function.device_id,
            numa_node=function.numa_node,
            local_cpus=cpus_of[function.numa_node],
        )
        for function in functions
    )
    devices = {device.bus_id: device for device in with_switch_ports(endpoints)}
    gpus = tuple(
        Gpu(
            index=index,
            pci_bus_id=function.bus_id,
            # Stable per machine type and index: the demo's output does not change between runs.
            uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'kubenexus-demo/{name}/{index}')}",
            name=board.model.name,
            memory_bytes=board.model.memory_mib * _MIB,
            compute_capability=board.model.compute_capability,
            numa_node=function.numa_node,
            cpu_affinity=cpus_of[function.numa_node],
            mig_enabled=False,
            nvlinks=board.nvlinks[index],
        )
        for index, function in enumerate(board.functions)
    )
    nics = tuple(
        Nic(name=nic.rdma_device, pci_bus_id=nic.bus_id, netdevs=(nic.netdev,), rdma_devices=(nic.rdma_device,))
        for nic in sorted(board.others, key=lambda f: f.bus_id)
        if nic.rdma_device is not None and nic.netdev is not None
    )
    links = build_device_links(gpus, nics, devices, nvlink_pair_counts(gpus), board.nvml_paths)
    return replace(
        topology,
        pci_devices=tuple(sorted(devices.values(), key=lambda d: d.bus_id)),
        nics=nics,
        gpus=gpus,
        links=links,
        gpu_source="nvml",
    )


def _with_kubelet_view(topology: NodeTopology, host: Host) -> NodeTopology:
    """The kubelet's per-NUMA view of an idle node, as the agent reads it from PodResources.

    It differs from the hardware in one place: the kubelet's ``--reserved-memory`` (on NUMA 0) is not
    allocatable. The fingerprint is of no pods with exclusive resources (the daemonsets have none).
    """
    zones = []
    for cell in topology.numa_cells:
        reserved = host.reserved_memory if cell.id == 0 else 0
        amounts = tuple(
            replace(amount, allocatable=amount.allocatable - reserved, available=amount.available - reserved)
            if amount.name == MEMORY
            else amount
            for amount in cell_resources(topology, cell)
        )
        zones.append(ZoneResources(numa_id=cell.id, resources=amounts))
    return replace(
        topology,
        zone_resources=tuple(zones),
        pods_fingerprint=pods_fingerprint(()),
        pods_fingerprint_method=METHOD_WITH_EXCLUSIVE_RESOURCES,
    )


# --- the machines ----------------------------------------------------------------------------------

HGX_H100_GPU_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # thamada/nvidia-smi capture


def hgx_h100() -> NodeTopology:
    switches = tuple(
        Function(f"0000:{0x05 + k:02x}:00.0", CLASS_BRIDGE_OTHER, NVIDIA, 0x22A3, 0, switch_slot(0x00, k))
        for k in range(4)
    )
    links = _switch_links(switches, (5, 4, 4, 5), version=4)
    gpus: list[Function] = []
    nics: list[Function] = []
    for index, bus in enumerate(HGX_H100_GPU_BUSES):
        node = 0 if index < 4 else 1
        gpus.append(_gpu_function(bus, H100_SXM, node, switch_slot(bus - 3, 0)))
        # The GPU's ConnectX-7 (15b3:1021) on the other downstream port of the same switch: PIX.
        nics.append(_nic_function(bus + 1, 0x1021, node, switch_slot(bus - 3, 1), f"mlx5_{index}"))
    board = GpuBoard(H100_SXM, tuple(gpus), (links,) * 8, others=(*switches, *nics))
    return build_topology("hgx-h100", HGX_H100_HOST, board)


# (GPU bus, host bridge bus, NUMA node) as DGX A100's topo -m shows them; compute NICs by host bridge.
_DGX_A100_GPUS = (
    (0x07, 0x00, 3),
    (0x0F, 0x00, 3),
    (0x47, 0x40, 1),
    (0x4E, 0x40, 1),
    (0x87, 0x80, 7),
    (0x90, 0x80, 7),
    (0xB7, 0xB0, 5),
    (0xBD, 0xB0, 5),
)
_DGX_A100_NICS = ((0x0C, 0x12), (0x4B, 0x54), (0x8D, 0x94), (0xBA, 0xCC))  # ibp12s0, ibp18s0, ...


def dgx_a100() -> NodeTopology:
    switches = tuple(
        Function(f"0000:{0xC4 + k:02x}:00.0", CLASS_BRIDGE_OTHER, NVIDIA, 0x1AF1, 5, switch_slot(0xC0, k))
        for k in range(6)
    )
    links = _switch_links(switches, (2,) * 6, version=3)
    # Each host bridge carries a two-level switch tree: the GPU pair below one branch, the pair's two
    # ConnectX-6 (15b3:101b) below the other, hence PXB between a GPU and its NICs.
    gpus = tuple(
        _gpu_function(bus, A100_SXM, node, cascade_slot(root, 0, index % 2))
        for index, (bus, root, node) in enumerate(_DGX_A100_GPUS)
    )
    nics = tuple(
        _nic_function(bus, 0x101B, _DGX_A100_GPUS[2 * pair][2], cascade_slot(root, 1, port), f"mlx5_{2 * pair + port}")
        for pair, (root, buses) in enumerate(zip((0x00, 0x40, 0x80, 0xB0), _DGX_A100_NICS, strict=True))
        for port, bus in enumerate(buses)
    )
    board = GpuBoard(A100_SXM, gpus, (links,) * 8, others=(*switches, *nics))
    return build_topology("dgx-a100", DGX_A100_HOST, board)


def l40s_4x() -> NodeTopology:
    gpus = tuple(_gpu_function(bus, L40S, 0, root_port_slot(bus)) for bus in (0x38, 0x3A, 0x3C, 0x3E))
    board = GpuBoard(L40S, gpus, ((),) * 4)
    return build_topology("l40s-4x", L40S_HOST, board)


_BRIDGE_PARTNERS = {0: 2, 2: 0, 1: 3, 3: 1, 4: 5, 5: 4, 6: 7, 7: 6}
_BRIDGE_GPU_BUSES = (0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1)


def a100_pcie_nvbridge() -> NodeTopology:
    gpus = tuple(
        _gpu_function(bus, A100_PCIE, 0 if index < 4 else 1, root_port_slot(bus))
        for index, bus in enumerate(_BRIDGE_GPU_BUSES)
    )
    nvlinks = tuple(
        tuple(
            NvLink(link, True, 3, NvLinkRemote.GPU, gpus[_BRIDGE_PARTNERS[index]].bus_id)
            for link in range(12)  # three bridges of four links
        )
        for index in range(8)
    )
    same_node_without_bridge = ((0, 1), (0, 3), (1, 2), (2, 3), (4, 6), (4, 7), (5, 6), (5, 7))
    board = GpuBoard(A100_PCIE, gpus, nvlinks, nvml_paths=dict.fromkeys(same_node_without_bridge, PathKind.SYS))
    return build_topology("a100-pcie-nvbridge", PCIE_BRIDGE_HOST, board)


def cpu_2s() -> NodeTopology:
    return build_topology("cpu-2s", CPU_2S_HOST, None)


def machine_topologies() -> dict[str, NodeTopology]:
    """Every demo machine type by file stem."""
    return {
        "hgx-h100": hgx_h100(),
        "dgx-a100": dgx_a100(),
        "l40s-4x": l40s_4x(),
        "a100-pcie-nvbridge": a100_pcie_nvbridge(),
        "cpu-2s": cpu_2s(),
    }


def machine_documents() -> dict[str, str]:
    """File name -> the exact text committed under ``machines/``."""
    topologies = machine_topologies()
    return {f"{stem}.json": json_codec.dumps(topology, indent=2) + "\n" for stem, topology in topologies.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.build_demo_machines", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 when a file differs")
    parser.add_argument("--output", type=Path, default=MACHINES_DIR, help=f"directory (default {MACHINES_DIR})")
    arguments = parser.parse_args(argv)
    documents = machine_documents()
    stale: list[str] = []
    for extra in sorted(arguments.output.glob("*.json")):
        if extra.name not in documents:  # a machine type no longer described
            stale.append(extra.name)
            if not arguments.check:
                extra.unlink()
    for file_name, text in documents.items():
        path = arguments.output / file_name
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(file_name)
        if not arguments.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    verb = "differ" if arguments.check else "written"
    print(f"{len(stale)} machine file(s) {verb}: {', '.join(stale) or 'none'}")
    return 1 if arguments.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
