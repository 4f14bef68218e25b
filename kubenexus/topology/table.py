"""The human view of a NodeTopology, in the spirit of ``numactl -H`` and ``lstopo``."""

from __future__ import annotations

from kubenexus.topology.cpulist import format_cpulist
from kubenexus.topology.model import Gpu, MemoryAttribute, NodeTopology, NumaCell, PathKind, PciDevice
from kubenexus.topology.topo_matrix import render_topo_matrix

# Like lstopo, the table names storage, network, display and compute functions; the chipset's
# bridges, USB and system peripherals only count.
_SHOWN_BASE_CLASSES = {0x01, 0x02, 0x03, 0x0B, 0x12}
_CLASS_NAMES = {
    0x0100: "SCSI controller",
    0x0104: "RAID controller",
    0x0106: "SATA controller",
    0x0108: "NVMe controller",
    0x0200: "Ethernet controller",
    0x0207: "InfiniBand controller",
    0x0280: "Network controller",
    0x0300: "VGA controller",
    0x0302: "3D controller",
    0x0380: "Display controller",
    0x0B40: "Co-processor",
    0x1200: "Processing accelerator",
}


def render_table(topology: NodeTopology) -> str:
    lines = [*_machine_lines(topology), ""]
    for cell in topology.numa_cells:
        lines.extend(_cell_lines(topology, cell))
        lines.append("")
    orphans = [d for d in topology.pci_devices if d.numa_node is None]
    if orphans:
        lines.append("PCI devices with no NUMA node")
        lines.extend(_device_lines(topology, orphans))
        lines.append("")
    lines.extend(_gpu_lines(topology))
    lines.extend(_distance_lines(topology))
    lines.extend(_hmat_lines(topology.memory_attributes))
    if topology.warnings:
        lines.append("Warnings")
        lines.extend(f"  [{w.source}] {w.message}" + (f" ({w.path})" if w.path else "") for w in topology.warnings)
    return "\n".join(lines).rstrip() + "\n"


def render_table_with_links(topology: NodeTopology) -> str:
    """The table, then the GPU and NIC link matrix as ``nvidia-smi topo -m`` prints it, when there is one."""
    if not topology.gpus and not topology.nics:
        return render_table(topology)
    return render_table(topology) + "\nLinks\n" + render_topo_matrix(topology)


def format_bytes(value: int | None) -> str:
    if value is None:
        return "unknown"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _machine_lines(topology: NodeTopology) -> list[str]:
    m = topology.machine
    model = m.cpu_model or "unknown CPU"
    arch = f" ({m.architecture})" if m.architecture else ""
    offline = format_cpulist(m.offline_cpus) or "none"
    return [
        f"Machine: {model}{arch}",
        f"  sockets {_count(m.sockets)}, cores {_count(m.cores)}, threads {m.threads}; "
        f"online CPUs {format_cpulist(m.online_cpus) or 'none'}; offline CPUs {offline}",
        f"  {len(topology.numa_cells)} NUMA cells, {len([d for d in topology.pci_devices if not d.is_bridge])} "
        f"PCI functions, {len(topology.nics)} NICs, {len(topology.gpus)} GPUs",
    ]


def _cell_lines(topology: NodeTopology, cell: NumaCell) -> list[str]:
    cpus = format_cpulist(cell.cpus)
    lines = [
        f"NUMA cell {cell.id} ({cell.memory_kind.value})",
        f"  CPUs     {cpus} ({len(cell.cpus)})" if cpus else "  CPUs     none",
        f"  memory   {format_bytes(cell.memory_bytes)}",
    ]
    for pool in cell.hugepages:
        free = "" if pool.free is None else f", {pool.free} free"
        lines.append(f"  hugepages {_page_size(pool.size_kib)}: {pool.total}{free}")
    for cache in cell.memory_side_caches:
        line_size = f", line {cache.line_size} B" if cache.line_size else ""
        lines.append(f"  memory-side cache L{cache.level}: {format_bytes(cache.size_bytes)}{line_size}")
    lines.extend(_device_lines(topology, [d for d in topology.pci_devices if d.numa_node == cell.id]))
    for gpu in topology.gpus:
        if gpu.gpu_numa_node == cell.id:
            lines.append(f"  memory of GPU{gpu.index} ({gpu.pci_bus_id})")
    return lines


def _device_lines(topology: NodeTopology, devices: list[PciDevice]) -> list[str]:
    gpu_names = {gpu.pci_bus_id: f"GPU{gpu.index}" for gpu in topology.gpus}
    nic_names = {nic.pci_bus_id: nic.name for nic in topology.nics}
    lines = []
    shown = [d for d in devices if d.class_code >> 16 in _SHOWN_BASE_CLASSES]
    for device in shown:
        kind = _CLASS_NAMES.get(device.class_code >> 8, f"class {device.class_code:06x}")
        role = gpu_names.get(device.bus_id) or nic_names.get(device.bus_id)
        suffix = f" [{role}]" if role else ""
        lines.append(f"  PCI      {device.bus_id} {kind} {device.vendor_id:04x}:{device.device_id:04x}{suffix}")
    if len(devices) > len(shown):
        lines.append(f"  (+{len(devices) - len(shown)} bridges and chipset functions; --format json lists them)")
    return lines


def _gpu_lines(topology: NodeTopology) -> list[str]:
    """One line per GPU: model and memory, NUMA placement, NVLink peers and the nearest NICs.

    An imported ``nvidia-smi topo -m`` knows no model or memory; the line says "unknown" rather than
    leaving the GPU out, so a table of an import still shows every GPU and where it sits."""
    if not topology.gpus:
        return []
    source = f" (from {topology.gpu_source})" if topology.gpu_source else ""
    lines = [f"GPUs{source}"]
    for gpu in sorted(topology.gpus, key=lambda gpu: gpu.index):
        memory = "memory unknown" if gpu.memory_bytes is None else format_bytes(gpu.memory_bytes)
        parts = [f"{gpu.name or 'model unknown'}, {memory}", _gpu_numa(gpu)]
        parts.extend(_gpu_links(topology, gpu))
        lines.append(f"  GPU{gpu.index}  " + "; ".join(parts))
    lines.append("")
    return lines


def _gpu_numa(gpu: Gpu) -> str:
    if len(gpu.numa_affinity) > 1:
        numa = f"NUMA {format_cpulist(gpu.numa_affinity)}"
    else:
        numa = f"NUMA {_count(gpu.numa_node)}"
    if gpu.cpu_affinity:
        numa += f", CPUs {format_cpulist(gpu.cpu_affinity)}"
    if gpu.gpu_numa_node is not None:
        numa += f", GPU memory is NUMA {gpu.gpu_numa_node}"
    return numa


def _gpu_links(topology: NodeTopology, gpu: Gpu) -> list[str]:
    """The GPU's NVLink peers ("NVLink NV12 to GPUs 1-7") and nearest NICs, from the links the matrix shows."""
    name = f"GPU{gpu.index}"
    nvlink_peers: dict[str, list[int]] = {}
    nic_paths: dict[int, PathKind] = {}
    for link in topology.links:
        if name not in (link.a, link.b) or link.a == link.b:
            continue
        other = link.b if link.a == name else link.a
        if other.startswith("GPU") and link.path is PathKind.NVLINK:
            nvlink_peers.setdefault(link.label, []).append(int(other.removeprefix("GPU")))
        elif other.startswith("NIC"):
            nic_paths[int(other.removeprefix("NIC"))] = link.path
    parts = [
        f"NVLink {label} to GPU{'s' if len(peers) > 1 else ''} {format_cpulist(peers)}"
        for label, peers in sorted(nvlink_peers.items())
    ]
    active = sum(1 for nvlink in gpu.nvlinks if nvlink.active)
    if not nvlink_peers and active:
        parts.append(f"{active} active NVLinks")
    if nic_paths:
        order = list(PathKind)
        best = min(nic_paths.values(), key=order.index)
        nearest = [
            topology.nics[position].name
            for position, path in sorted(nic_paths.items())
            if path is best and position < len(topology.nics)
        ]
        parts.append(f"nearest NIC {', '.join(nearest)} ({best.value})")
    return parts


def _distance_lines(topology: NodeTopology) -> list[str]:
    distances = topology.distances
    if distances is None:
        return ["Distances: unknown", ""]
    width = max(4, *(len(str(i)) + 1 for i in distances.ids))
    header = "node".rjust(width) + "".join(str(i).rjust(width) for i in distances.ids)
    rows = [
        f"{str(source) + ':':>{width}}" + "".join(str(value).rjust(width) for value in row)
        for source, row in zip(distances.ids, distances.matrix, strict=True)
    ]
    return ["Distances (SLIT)", header, *rows, ""]


def _hmat_lines(attributes: tuple[MemoryAttribute, ...]) -> list[str]:
    if not attributes:
        return []
    lines = ["Memory performance (HMAT; class 0: all initiators, class 1: CPUs)"]
    for a in attributes:
        bandwidth = f"read {_value(a.read_bandwidth_mbps, 'MB/s')}, write {_value(a.write_bandwidth_mbps, 'MB/s')}"
        latency = f"read {_value(a.read_latency_ns, 'ns')}, write {_value(a.write_latency_ns, 'ns')}"
        lines.append(f"  cell {a.target} from cell {a.initiator} (class {a.access_class}): {bandwidth}; {latency}")
    lines.append("")
    return lines


def _count(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def _value(value: int | None, unit: str) -> str:
    return "unknown" if value is None else f"{value} {unit}"


def _page_size(size_kib: int) -> str:
    if size_kib % (1024 * 1024) == 0:
        return f"{size_kib // (1024 * 1024)} GiB"
    if size_kib % 1024 == 0:
        return f"{size_kib // 1024} MiB"
    return f"{size_kib} KiB"
