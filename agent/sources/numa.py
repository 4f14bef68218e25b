"""NUMA cells, distances and memory performance: /sys/devices/system/node (+ DAX, NVIDIA GPU memory).

The kernel's view is reported as it is: a CPU-less cell keeps an empty CPU list, a cell
that firmware duplicated stays (with a warning), ids stay sparse. A host without
``/sys/devices/system/node`` (a non-NUMA kernel) is one cell holding every online CPU and
``/proc/meminfo``'s memory.

Memory kind, when the host tells: a DAX device under an NVDIMM bus (``ndbus``) makes its
cell NVM; a specific-purpose memory DAX device (``hmem``) whose bandwidth beats every other
cell's is HBM; ``/proc/driver/nvidia/gpus/*/numa_status`` marks GPU memory; any other cell
with memory is DRAM.

Values no kernel can produce are not published as facts: a node id at or past MAX_NUMNODES
(1024) drops that node, a SLIT distance outside 1-255 drops the matrix, an HMAT initiator that
is no cell drops that entry, a negative or impossible size (past 2^50 bytes, a pebibyte, in one
cell) makes the memory size unknown or leaves out the hugepage pool or cache it describes; each
with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from agent.hostfs import MAX_NUMA_NODES, HostFS, HostFSError
from kubenexus.topology.cpulist import MAX_CPUS
from kubenexus.topology.model import (
    DiscoveryWarning,
    Distances,
    Gpu,
    HugePages,
    MemoryAttribute,
    MemoryKind,
    MemorySideCache,
    NumaCell,
)

NODE_DIR = "/sys/devices/system/node"
# Far more than one cell holds (the largest machines have tens of TiB in all): beyond it a size is garbage.
MAX_CELL_BYTES = 1 << 50
# ACPI SLIT entries are one byte; the kernel writes 10 for local, 255 for unreachable, and never 0.
_DISTANCES = range(1, 256)
_NODE_NAME = re.compile(r"node(\d+)")
_HUGEPAGES_NAME = re.compile(r"hugepages-(\d+)kB")
_CACHE_NAME = re.compile(r"index(\d+)")
_MEMTOTAL = re.compile(r"MemTotal:\s*(-?\d+)\s*kB")
_HMAT_FILES = ("read_bandwidth", "write_bandwidth", "read_latency", "write_latency")

Warn = Callable[[str, str], None]


@dataclass(frozen=True)
class NumaReport:
    cells: tuple[NumaCell, ...]
    distances: Distances | None
    memory_attributes: tuple[MemoryAttribute, ...]
    warnings: tuple[DiscoveryWarning, ...]


def discover_numa(fs: HostFS, *, online_cpus: tuple[int, ...], cpu_id_limit: int = MAX_CPUS) -> NumaReport:
    """A cell's CPUs are its online CPUs: the kernel's node list also keeps offline and absent ones.

    ``cpu_id_limit`` bounds the CPU ids a node's list may hold (``CpuReport.cpu_id_limit``).
    """
    warnings: list[DiscoveryWarning] = []

    def warn(message: str, path: str) -> None:
        warnings.append(DiscoveryWarning("numa", message, path))

    ids = _node_ids(fs, warn)
    if not ids:
        cell = NumaCell(
            id=0,
            cpus=online_cpus,
            memory_bytes=_machine_memory(fs, warn),
            hugepages=_hugepages(fs, "/sys/kernel/mm/hugepages", warn),
            memory_kind=MemoryKind.DRAM,
        )
        return NumaReport((cell,), None, (), tuple(warnings))

    cells = [_cell(fs, node_id, frozenset(online_cpus), cpu_id_limit, warn) for node_id in ids]
    attributes = tuple(a for node_id in ids for a in _memory_attributes(fs, node_id, frozenset(ids), warn))
    cells = _with_memory_kinds(fs, cells, attributes, warn)
    _warn_on_duplicate_cells(cells, warn)
    distances = _distances(fs, ids, warn)
    return NumaReport(tuple(cells), distances, attributes, tuple(warnings))


def link_gpu_memory_cells(
    cells: tuple[NumaCell, ...], gpus: Iterable[Gpu]
) -> tuple[tuple[NumaCell, ...], tuple[DiscoveryWarning, ...]]:
    """Mark each GPU's own memory node (``Gpu.gpu_numa_node``, from NVML) as a cell of kind GPU.

    On GH200/GB200 the GPU's HBM is a CPU-less NUMA cell; without ``/proc/driver/nvidia`` in the
    host root it would read as plain DRAM, a cell a pod's memory could be aligned to. A cell NVML
    names that holds CPUs is kept as the kernel lists it, with a warning: the kubelet pins CPUs there.
    """
    owners = {gpu.gpu_numa_node: gpu.index for gpu in gpus if gpu.gpu_numa_node is not None}
    warnings = []
    linked = []
    for cell in cells:
        if cell.id not in owners:
            linked.append(cell)
        elif not cell.cpus:
            linked.append(replace(cell, memory_kind=MemoryKind.GPU))
        else:
            linked.append(cell)
            warnings.append(
                DiscoveryWarning(
                    "numa",
                    f"NVML names NUMA node {cell.id} as GPU {owners[cell.id]}'s own memory, but the kernel lists "
                    "CPUs in it; kept as a CPU cell",
                    f"{NODE_DIR}/node{cell.id}/cpulist",
                )
            )
    return tuple(linked), tuple(warnings)


def _node_ids(fs: HostFS, warn: Warn) -> tuple[int, ...]:
    if not fs.exists(NODE_DIR):
        warn("no NUMA information (non-NUMA kernel?): one cell holds every CPU", NODE_DIR)
        return ()
    try:
        names = fs.listdir(NODE_DIR)
    except HostFSError as error:
        warn(f"cannot list NUMA nodes: {error.problem}; one cell assumed", NODE_DIR)
        return ()
    found = sorted(int(m.group(1)) for name in names if (m := _NODE_NAME.fullmatch(name)))
    impossible = [node_id for node_id in found if node_id >= MAX_NUMA_NODES]
    if impossible:
        warn(
            f"node ids {', '.join(map(str, impossible[:5]))} are past the kernel's limit of {MAX_NUMA_NODES} nodes; "
            "those nodes are left out",
            f"{NODE_DIR}/node{impossible[0]}",
        )
    ids = tuple(node_id for node_id in found if node_id < MAX_NUMA_NODES)
    if not ids:
        warn("no NUMA node directories: one cell holds every CPU", NODE_DIR)
    return ids


def _cell(fs: HostFS, node_id: int, online_cpus: frozenset[int], cpu_id_limit: int, warn: Warn) -> NumaCell:
    node = f"{NODE_DIR}/node{node_id}"
    cpus = _node_cpus(fs, node, cpu_id_limit, warn)
    if online_cpus and not online_cpus.issuperset(cpus):
        cpus = tuple(cpu for cpu in cpus if cpu in online_cpus)
    return NumaCell(
        id=node_id,
        cpus=cpus,
        memory_bytes=_node_memory(fs, node, warn),
        hugepages=_hugepages(fs, f"{node}/hugepages", warn),
        memory_side_caches=_side_caches(fs, node, warn),
    )


def _node_cpus(fs: HostFS, node: str, cpu_id_limit: int, warn: Warn) -> tuple[int, ...]:
    problems = []
    damaged: str | None = None  # a missing cpulist is an old kernel; any other failure is worth a warning
    for name, reader in (("cpulist", fs.read_cpulist), ("cpumap", fs.read_cpumask)):
        try:
            cpus = reader(f"{node}/{name}", limit=cpu_id_limit)
        except HostFSError as error:
            problems.append(f"{name} {error.problem}")
            damaged = damaged or (error.path if error.problem != "missing" else None)
            continue
        if damaged:
            warn(f"{'; '.join(problems)}; CPUs read from {name}", damaged)
        return cpus
    warn(f"no CPU list ({'; '.join(problems)}); the cell is reported without CPUs", node)
    return ()


def _node_memory(fs: HostFS, node: str, warn: Warn) -> int | None:
    path = f"{node}/meminfo"
    try:
        text = fs.read_text(path)
    except HostFSError as error:
        warn(f"memory size unknown: {error.problem}", path)
        return None
    match = _MEMTOTAL.search(text)
    if match is None:
        warn("memory size unknown: no MemTotal line", path)
        return None
    size = int(match.group(1)) * 1024
    if not _possible_size(size):
        warn(f"memory size unknown: MemTotal of {size} bytes is impossible", path)
        return None
    return size


def _machine_memory(fs: HostFS, warn: Warn) -> int | None:
    return _node_memory(fs, "/proc", warn)


def _hugepages(fs: HostFS, directory: str, warn: Warn) -> tuple[HugePages, ...]:
    if not fs.exists(directory):
        return ()
    try:
        names = fs.listdir(directory)
    except HostFSError as error:
        warn(f"hugepages unknown: {error.problem}", directory)
        return ()
    pools = []
    for name in names:
        match = _HUGEPAGES_NAME.fullmatch(name)
        if match is None:
            continue
        size_kib = int(match.group(1))
        path = f"{directory}/{name}/nr_hugepages"
        try:
            total = fs.read_int(path)
        except HostFSError as error:
            warn(f"hugepage pool skipped: {error.problem}", path)
            continue
        if total < 0 or not _possible_size(total * size_kib * 1024) or not _possible_size(size_kib * 1024):
            warn(f"hugepage pool skipped: {total} pages of {size_kib} KiB is impossible", path)
            continue
        free_path = f"{directory}/{name}/free_hugepages"
        try:
            free: int | None = fs.read_int(free_path)
        except HostFSError:
            free = None
        if free is not None and not 0 <= free <= total:
            warn(f"free hugepages unknown: {free} free of {total} is impossible", free_path)
            free = None
        pools.append(HugePages(size_kib=size_kib, total=total, free=free))
    return tuple(sorted(pools, key=lambda pool: pool.size_kib))


def _side_caches(fs: HostFS, node: str, warn: Warn) -> tuple[MemorySideCache, ...]:
    directory = f"{node}/memory_side_cache"
    if not fs.exists(directory):
        return ()
    caches = []
    for name, level in _numbered(fs, directory, _CACHE_NAME, warn):
        path = f"{directory}/{name}/size"
        try:
            size = fs.read_int(path)
        except HostFSError as error:
            warn(f"memory-side cache skipped: {error.problem}", path)
            continue
        if not _possible_size(size):
            warn(f"memory-side cache skipped: a size of {size} bytes is impossible", path)
            continue
        caches.append(
            MemorySideCache(
                level=level,
                size_bytes=size,
                line_size=_optional_int(fs, f"{directory}/{name}/line_size"),
                indexing=_optional_int(fs, f"{directory}/{name}/indexing"),
                write_policy=_optional_int(fs, f"{directory}/{name}/write_policy"),
            )
        )
    return tuple(caches)


def _memory_attributes(fs: HostFS, target: int, cells: frozenset[int], warn: Warn) -> Iterator[MemoryAttribute]:
    """HMAT values of one target cell; the kernel gives one value set per access class for all its initiators.

    An initiator that is not one of ``cells`` is left out: it would be a fact about a node the host does not have.
    """
    for access_class in (0, 1):
        directory = f"{NODE_DIR}/node{target}/access{access_class}/initiators"
        if not fs.exists(directory):
            continue
        values: dict[str, int | None] = {}
        for name in _HMAT_FILES:
            path = f"{directory}/{name}"
            value = None
            try:
                value = fs.read_int(path) or None  # the kernel writes 0 for "not provided"
            except HostFSError as error:
                if error.problem != "missing":
                    warn(f"HMAT value ignored: {error.problem}", path)
            if value is not None and value < 0:
                warn(f"HMAT value ignored: {value} is negative", path)
                value = None
            values[name] = value
        if not any(values.values()):
            continue
        for name, initiator in _numbered(fs, directory, _NODE_NAME, warn):
            if initiator not in cells:
                warn(f"HMAT initiator node{initiator} is not a NUMA node of this host; left out", f"{directory}/{name}")
                continue
            yield MemoryAttribute(
                target=target,
                initiator=initiator,
                access_class=access_class,
                read_bandwidth_mbps=values["read_bandwidth"],
                write_bandwidth_mbps=values["write_bandwidth"],
                read_latency_ns=values["read_latency"],
                write_latency_ns=values["write_latency"],
            )


def _with_memory_kinds(
    fs: HostFS, cells: list[NumaCell], attributes: tuple[MemoryAttribute, ...], warn: Warn
) -> list[NumaCell]:
    dax = _dax_kinds(fs, warn)
    gpu_nodes = _nvidia_gpu_memory_nodes(fs, warn)
    bandwidth: dict[int, int] = {}
    for attribute in attributes:
        if attribute.access_class == 1 and attribute.read_bandwidth_mbps:
            bandwidth[attribute.target] = max(bandwidth.get(attribute.target, 0), attribute.read_bandwidth_mbps)
    plain_bandwidth = max(
        (bw for node, bw in bandwidth.items() if node not in dax and node not in gpu_nodes), default=0
    )

    def kind(cell: NumaCell) -> MemoryKind:
        if cell.id in gpu_nodes:
            return MemoryKind.GPU
        if dax.get(cell.id) == "nvdimm":
            return MemoryKind.NVM
        if dax.get(cell.id) == "hmem" and bandwidth.get(cell.id, 0) > plain_bandwidth:
            return MemoryKind.HBM
        return MemoryKind.DRAM if cell.memory_bytes else MemoryKind.UNKNOWN

    return [replace(cell, memory_kind=kind(cell)) for cell in cells]


def _dax_kinds(fs: HostFS, warn: Warn) -> dict[int, str]:
    """Target NUMA node -> "nvdimm" or "hmem", from the DAX devices the kernel onlined as memory."""
    directory = "/sys/bus/dax/devices"
    if not fs.exists(directory):
        return {}
    kinds: dict[int, str] = {}
    try:
        names = fs.listdir(directory)
    except HostFSError as error:
        warn(f"DAX devices unknown: {error.problem}", directory)
        return {}
    for name in names:
        try:
            target = fs.read_int(f"{directory}/{name}/target_node")
            location = fs.realpath(f"{directory}/{name}")
        except HostFSError as error:
            warn(f"DAX device skipped: {error.problem}", f"{directory}/{name}")
            continue
        if "/ndbus" in location:
            kinds[target] = "nvdimm"
        elif "/hmem." in location:
            kinds.setdefault(target, "hmem")
    return kinds


def _nvidia_gpu_memory_nodes(fs: HostFS, warn: Warn) -> set[int]:
    directory = "/proc/driver/nvidia/gpus"
    if not fs.exists(directory):
        return set()
    nodes = set()
    try:
        gpus = fs.listdir(directory)
    except HostFSError as error:
        warn(f"NVIDIA GPU memory nodes unknown: {error.problem}", directory)
        return set()
    for gpu in gpus:
        path = f"{directory}/{gpu}/numa_status"
        try:
            text = fs.read_text(path)
        except HostFSError:
            continue  # only coherent platforms have it
        match = re.search(r"^Node:\s*(-?\d+)", text, re.MULTILINE)
        if match and int(match.group(1)) >= 0:
            nodes.add(int(match.group(1)))
    return nodes


def _warn_on_duplicate_cells(cells: list[NumaCell], warn: Warn) -> None:
    owners: dict[int, int] = {}
    for cell in cells:
        for cpu in cell.cpus:
            if cpu in owners:
                warn(
                    f"CPU {cpu} is listed by NUMA cells {owners[cpu]} and {cell.id} (buggy firmware?); "
                    "reported as the kernel lists it",
                    f"{NODE_DIR}/node{cell.id}/cpulist",
                )
                return
            owners[cpu] = cell.id


def _distances(fs: HostFS, ids: tuple[int, ...], warn: Warn) -> Distances | None:
    rows = []
    for node_id in ids:
        path = f"{NODE_DIR}/node{node_id}/distance"
        try:
            text = fs.read_str(path)
            row = tuple(int(value) for value in text.split())
        except HostFSError as error:
            warn(f"no distance matrix: {error.problem}", path)
            return None
        except ValueError:
            warn("no distance matrix: the row is not a list of integers", path)
            return None
        if len(row) != len(ids):
            warn(f"no distance matrix: {len(row)} distances for {len(ids)} nodes", path)
            return None
        impossible = next((value for value in row if value not in _DISTANCES), None)
        if impossible is not None:
            warn(f"no distance matrix: distance {impossible} is outside the kernel's 1-255", path)
            return None
        rows.append(row)
    return Distances(ids=ids, matrix=tuple(rows))


def _numbered(fs: HostFS, directory: str, pattern: re.Pattern[str], warn: Warn) -> list[tuple[str, int]]:
    try:
        names = fs.listdir(directory)
    except HostFSError as error:
        warn(f"cannot list: {error.problem}", directory)
        return []
    found = [(name, int(m.group(1))) for name in names if (m := pattern.fullmatch(name))]
    return sorted(found, key=lambda item: item[1])


def _optional_int(fs: HostFS, path: str) -> int | None:
    try:
        return fs.read_int(path)
    except HostFSError:
        return None


def _possible_size(size: int) -> bool:
    return 0 <= size <= MAX_CELL_BYTES
