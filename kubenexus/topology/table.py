"""The human view of a NodeTopology, in the spirit of ``numactl -H`` and ``lstopo``."""

from __future__ import annotations

from kubenexus.topology.cpulist import format_cpulist
from kubenexus.topology.model import MemoryAttribute, NodeTopology, NumaCell, PciDevice

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
    lines.extend(_distance_lines(topology))
    lines.extend(_hmat_lines(topology.memory_attributes))
    if topology.warnings:
        lines.append("Warnings")
        lines.extend(f"  [{w.source}] {w.message}" + (f" ({w.path})" if w.path else "") for w in topology.warnings)
    return "\n".join(lines).rstrip() + "\n"


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
