"""The ``nvidia-smi topo -m`` text format, both ways: render a NodeTopology, import a capture.

The layout, as current drivers print it (tab-separated; the header underlined with ANSI escapes
on a terminal)::

    \\tGPU0\\tGPU1\\tNIC0\\tCPU Affinity\\tNUMA Affinity\\tGPU NUMA ID
    GPU0\\t X \\tNV12\\tPIX\\t0-23,48-71\\t0\\t\\tN/A
    GPU1\\tNV12\\t X \\tNODE\\t0-23,48-71\\t0\\t\\tN/A
    NIC0\\tPIX\\tNODE\\t X \\t\\t\\t\\t
    <blank line, Legend block, blank line, "NIC Legend:" block naming NIC0 -> mlx5_0>

The extra tab after the NUMA affinity only pads it under its long header. Older drivers print
fewer columns (no "GPU NUMA ID", no "NUMA Affinity"), ``SOC`` for SYS, and name NICs in the
header itself (``mlx5_0``) with no NIC legend. Captures pasted from a terminal have their tabs
expanded to 8-column stops, which is how the importer recovers empty cells in them.

On coherent CPU-GPU platforms (GH200, GB200) "GPU NUMA ID" names the node the GPU's own memory
is; it becomes ``Gpu.gpu_numa_node`` and a CPU-less cell of kind GPU, never a cell CPUs are pinned
to. "NUMA Affinity" may list several nodes (``0-1``, ``0,2``): the GPU keeps them all in
``Gpu.numa_affinity`` and, as ``numa_node``, the first that is not its own memory node.

``topo -m`` reveals no PCI bus ids, sockets or cores. The importer gives every GPU and NIC the
placeholder bus id ``nvidia-smi:<name>`` (``nvidia-smi:GPU0``, ``nvidia-smi:NIC1``: unique, and
never a valid bus id), leaves ``Machine.sockets`` and ``Machine.cores`` unknown (None), and says so in
``warnings``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kubenexus.topology.cpulist import format_cpulist, parse_cpulist
from kubenexus.topology.model import (
    DeviceLink,
    DiscoveryWarning,
    Gpu,
    Machine,
    MemoryKind,
    Nic,
    NodeTopology,
    NumaCell,
    PathKind,
)

PLACEHOLDER_BUS_ID_PREFIX = "nvidia-smi:"
CPU_AFFINITY = "CPU Affinity"
NUMA_AFFINITY = "NUMA Affinity"
GPU_NUMA_ID = "GPU NUMA ID"

LEGEND = (
    "  X    = Self",
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "  PIX  = Connection traversing at most a single PCIe bridge",
    "  NV#  = Connection traversing a bonded set of # NVLinks",
)

# Our own renderer writes N/A for a pair the model has no link for; nvidia-smi never does.
_UNKNOWN_CELL = "N/A"
_TAB = 8
_MAX_ID = 65535  # far above any kernel's NR_CPUS or node count; stops "0-4294967295" from eating memory
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_GPU_NAME = re.compile(r"GPU(\d+)")
_NIC_NAME = re.compile(r"NIC(\d+)")
_LEGACY_NIC_NAME = re.compile(r"[A-Za-z][\w.:-]*")
_NIC_LEGEND_ENTRY = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)\s*")
_NVLINK_CELL = re.compile(r"NV(\d+)")
_PCIE_CELLS = {
    "PIX": PathKind.PIX,
    "PXB": PathKind.PXB,
    "PHB": PathKind.PHB,
    "NODE": PathKind.NODE,
    "SYS": PathKind.SYS,
    "SOC": PathKind.SYS,  # older drivers' name for the SMP interconnect
}
_MULTI_WORD_COLUMNS = (CPU_AFFINITY.split(), NUMA_AFFINITY.split(), GPU_NUMA_ID.split())


class TopoParseError(ValueError):
    """The text is not ``nvidia-smi topo -m`` output; ``line`` is 1-based, None for the text as a whole."""

    def __init__(self, line: int | None, message: str) -> None:
        self.line = line
        super().__init__(message if line is None else f"line {line}: {message}")


def render_topo_matrix(topology: NodeTopology) -> str:
    """The matrix as current ``nvidia-smi topo -m`` prints it, tab-separated, without ANSI escapes.

    GPUs come in index order as ``GPU<index>``, NICs in model order as ``NIC<position>`` (the names
    ``DeviceLink`` uses). A pair with no link in ``topology.links`` shows ``N/A``.
    """
    gpus = sorted(topology.gpus, key=lambda gpu: gpu.index)
    names = [f"GPU{gpu.index}" for gpu in gpus] + [f"NIC{position}" for position in range(len(topology.nics))]
    labels = {frozenset((link.a, link.b)): link.label for link in topology.links if link.a != link.b}
    lines = ["\t" + "\t".join([*names, CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID])]
    for row, name in enumerate(names):
        cells = [" X " if other == name else labels.get(frozenset((name, other)), _UNKNOWN_CELL) for other in names]
        if row < len(gpus):
            gpu = gpus[row]
            numa = format_cpulist(gpu.numa_affinity) if gpu.numa_affinity else _id_text(gpu.numa_node)
            affinity = [format_cpulist(gpu.cpu_affinity), numa, "", _id_text(gpu.gpu_numa_node)]
        else:
            affinity = ["", "", "", ""]
        lines.append("\t".join([name, *cells, *affinity]))
    lines += ["", "Legend:", "", *LEGEND]
    if topology.nics:
        lines += ["", "NIC Legend:", ""]
        lines += [f"  NIC{position}: {nic.name}" for position, nic in enumerate(topology.nics)]
        lines.append("")
    return "\n".join(lines) + "\n"


def parse_topo_matrix(text: str) -> NodeTopology:
    """Import ``nvidia-smi topo -m`` output (any driver era, tabs or expanded tabs, ANSI or not).

    The first non-blank line must be the header; the matrix ends at the first blank line or
    ``Legend:``; after it only the ``NIC Legend:`` entries are read. Raise TopoParseError, with
    the line number, for anything else that does not fit.
    """
    lines = _ANSI_ESCAPE.sub("", text).splitlines()
    header_index = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_index is None:
        raise TopoParseError(None, "empty input: expected the output of `nvidia-smi topo -m`")
    header = _parse_header(lines[header_index], header_index + 1)
    rows: dict[str, _Row] = {}
    end = len(lines)
    for index in range(header_index + 1, len(lines)):
        line = lines[index]
        if not line.strip() or line.strip().startswith("Legend:"):
            end = index
            break
        row = _parse_row(line, index + 1, header)
        if row.label in rows:
            raise TopoParseError(
                row.line, f"a second row for {row.label} (the first is on line {rows[row.label].line})"
            )
        rows[row.label] = row
    missing = [name for name in header.devices if name not in rows]
    if missing:
        raise TopoParseError(
            header.line, f"the header names {', '.join(missing)} but the matrix has no row for it; is it truncated?"
        )
    legend = _parse_nic_legend(lines[end:], end + 1, header)
    return _build_topology(header, rows, legend)


@dataclass(frozen=True)
class _Header:
    line: int
    devices: tuple[str, ...]  # as printed: GPU<k>, NIC<k>, or an old driver's NIC name (mlx5_0)
    columns: tuple[str, ...]  # the columns after the matrix, CPU Affinity first


@dataclass(frozen=True)
class _Row:
    line: int
    label: str
    cells: tuple[str, ...]
    values: dict[str, str]  # column -> text after the matrix, "" where empty


def _parse_header(line: str, line_number: int) -> _Header:
    if "\t" in line:
        fields = [field.strip() for field in line.split("\t")]
        if fields and not fields[0]:
            fields = fields[1:]
        devices = _leading(fields, lambda field: bool(field) and not any(c.isspace() for c in field))
        columns = fields[len(devices) :]
        while columns and not columns[-1]:
            columns.pop()
    else:
        devices, columns = _split_spaced_header(line.split())
    if not devices:
        raise TopoParseError(line_number, f"expected the matrix header (GPU0 GPU1 ... CPU Affinity), found {line!r}")
    gpu_count = 0
    nic_count = 0
    for name in devices:
        if _is_cell(name):
            raise TopoParseError(
                line_number,
                f"{name!r} is a matrix cell, not a device name: the header row (GPU0 GPU1 ... CPU Affinity) is missing",
            )
        gpu = _GPU_NAME.fullmatch(name)
        if gpu is not None:
            if name != f"GPU{int(gpu.group(1))}":
                raise TopoParseError(line_number, f"{name} is not how nvidia-smi names GPU{int(gpu.group(1))}")
            gpu_count += 1
            continue
        nic = _NIC_NAME.fullmatch(name)
        if nic is not None and name != f"NIC{nic_count}":
            raise TopoParseError(line_number, f"{name} is the NIC at position {nic_count}; expected NIC{nic_count}")
        if nic is None and not _LEGACY_NIC_NAME.fullmatch(name):
            raise TopoParseError(
                line_number,
                f"expected the matrix header (GPU0 GPU1 ... CPU Affinity), found {line.strip()!r}: "
                f"{name!r} is not a device name (GPU<n>, NIC<n> or a NIC such as mlx5_0)",
            )
        nic_count += 1
    duplicates = sorted({name for name in devices if devices.count(name) > 1})
    if duplicates:
        raise TopoParseError(line_number, f"the header names {', '.join(duplicates)} more than once")
    if gpu_count == 0:
        raise TopoParseError(
            line_number,
            f"expected the matrix header (GPU0 GPU1 ... CPU Affinity), found {line.strip()!r}: no GPU in it",
        )
    return _Header(line_number, tuple(devices), tuple(columns))


def _split_spaced_header(words: list[str]) -> tuple[list[str], list[str]]:
    """Without tabs, multi-word column names are recognised by their words; devices are one word each."""
    devices: list[str] = []
    columns: list[str] = []
    unknown: list[str] = []
    index = 0
    while index < len(words):
        known = next((name for name in _MULTI_WORD_COLUMNS if words[index : index + len(name)] == name), None)
        if known is not None:
            if unknown:
                columns.append(" ".join(unknown))
                unknown = []
            columns.append(" ".join(known))
            index += len(known)
            continue
        if columns or unknown:
            unknown.append(words[index])  # a column a future driver adds after the known ones
        else:
            devices.append(words[index])
        index += 1
    if unknown:
        columns.append(" ".join(unknown))
    return devices, columns


def _parse_row(line: str, line_number: int, header: _Header) -> _Row:
    size = len(header.devices)
    if "\t" in line:
        fields = line.split("\t")
        label, rest = fields[0].strip(), [field.strip() for field in fields[1:]]
        cells, after = rest[:size], rest[size:]
    else:
        tokens = [(match.start(), match.group()) for match in re.finditer(r"\S+", line)]
        label = tokens[0][1]
        cells = [token for _, token in tokens[1 : 1 + size]]
        after = _spaced_values(tokens, size, len(header.columns))
    if label not in header.devices:
        raise TopoParseError(line_number, f"row {label!r} is not a device of the header ({' '.join(header.devices)})")
    cell_count = len(_leading(cells, _is_cell))
    if cell_count < size:
        found = cells[cell_count] if cell_count < len(cells) else None
        if found and _looks_like_cell(found):
            column = header.devices[cell_count]
            raise TopoParseError(
                line_number, f"{label}/{column}: {found!r} is not a link (X, NV#, PIX, PXB, PHB, NODE, SYS)"
            )
        raise TopoParseError(
            line_number, f"row {label} has {cell_count} link cells but the header names {size} devices (ragged row)"
        )
    if after and after[0] != _UNKNOWN_CELL and _is_cell(after[0]):
        raise TopoParseError(
            line_number, f"row {label} has more link cells than the {size} devices of the header (ragged row)"
        )
    values = _assign_values(after, header.columns, label, line_number)
    return _Row(line_number, label, tuple(cells), values)


def _spaced_values(tokens: list[tuple[int, str]], size: int, column_count: int) -> list[str]:
    """The cells after the matrix of a tab-expanded row; empty ones come back from the tab stops."""
    rest = tokens[1 + size :]
    if len(rest) >= column_count or not rest:
        return [token for _, token in rest]
    fields: list[str] = []
    end = tokens[size][0] + len(tokens[size][1])
    for start, token in rest:
        next_stop = (end // _TAB + 1) * _TAB
        field_start = start // _TAB * _TAB
        if field_start < next_stop and fields:
            fields[-1] += " " + token
        else:
            fields += [""] * max(0, (field_start - next_stop) // _TAB)
            fields.append(token)
        end = start + len(token)
    return fields


def _assign_values(after: list[str], columns: Sequence[str], label: str, line_number: int) -> dict[str, str]:
    fields = list(after)
    # nvidia-smi pads short values with a second tab so the next column lines up under its header:
    # such padding is an empty field right after a value. Failing that, empties at the end go.
    index = len(fields) - 1
    while len(fields) > len(columns) and index > 0:
        if not fields[index] and fields[index - 1]:
            del fields[index]
        index -= 1
    while len(fields) > len(columns) and not fields[-1]:
        fields.pop()
    if len(fields) > len(columns):
        raise TopoParseError(
            line_number,
            f"row {label} has {len(fields)} values after the matrix but the header has {len(columns)} columns "
            f"({', '.join(columns) or 'none'})",
        )
    fields += [""] * (len(columns) - len(fields))
    return dict(zip(columns, fields, strict=True))


def _parse_nic_legend(lines: list[str], first_line: int, header: _Header) -> dict[str, str]:
    names: dict[str, str] = {}
    in_legend = False
    for offset, line in enumerate(lines):
        stripped = line.strip()
        if stripped == "NIC Legend:":
            in_legend = True
            continue
        entry = _NIC_LEGEND_ENTRY.fullmatch(line) if in_legend else None
        if entry is None:
            # Blank lines sit inside the block; only another "Title:" line ends it.
            in_legend = in_legend and not stripped.endswith(":")
            continue
        if entry.group(1) not in header.devices:
            raise TopoParseError(first_line + offset, f"the NIC legend names {entry.group(1)}, which the matrix lacks")
        names[entry.group(1)] = entry.group(2)
    return names


def _build_topology(header: _Header, rows: dict[str, _Row], legend: dict[str, str]) -> NodeTopology:
    position = {name: i for i, name in enumerate(header.devices)}
    gpu_names = sorted((n for n in header.devices if _GPU_NAME.fullmatch(n)), key=lambda n: int(n[3:]))
    nic_names = [name for name in header.devices if not _GPU_NAME.fullmatch(name)]
    link_name = {name: name for name in gpu_names} | {name: f"NIC{i}" for i, name in enumerate(nic_names)}
    ordered = gpu_names + nic_names
    warnings = [
        DiscoveryWarning(
            "nvidia-smi",
            "`nvidia-smi topo -m` shows no PCI bus ids, sockets or cores: GPUs and NICs carry placeholder "
            f"bus ids '{PLACEHOLDER_BUS_ID_PREFIX}<name>', sockets and cores are unknown",
        )
    ]
    for name in ordered:
        row = rows[name]
        own = row.cells[position[name]]
        if own != "X":
            raise TopoParseError(row.line, f"{name}/{name} is {own!r}; a device's own cell is X")
    links: list[DeviceLink] = []
    for i, name_a in enumerate(ordered):
        for name_b in ordered[i + 1 :]:
            cell = rows[name_a].cells[position[name_b]]
            mirror = rows[name_b].cells[position[name_a]]
            link = _link_of(cell)
            if link != _link_of(mirror):
                later = max(rows[name_a], rows[name_b], key=lambda row: row.line)
                raise TopoParseError(
                    later.line,
                    f"{name_a}/{name_b} is {cell} but {name_b}/{name_a} is {mirror}; the matrix is symmetric",
                )
            if link is not None:
                path, count = link
                links.append(DeviceLink(link_name[name_a], link_name[name_b], path, count))
    gpus = tuple(_gpu(rows[name], warnings) for name in gpu_names)
    nics = tuple(_nic(name, i, legend) for i, name in enumerate(nic_names))
    return NodeTopology(
        machine=_machine(gpus),
        numa_cells=_numa_cells(gpus),
        nics=nics,
        gpus=gpus,
        links=tuple(links),
        gpu_source="nvidia-smi",
        warnings=tuple(warnings),
    )


def _gpu(row: _Row, warnings: list[DiscoveryWarning]) -> Gpu:
    cpus = _id_list(row, CPU_AFFINITY, "a CPU list")
    numa_nodes = _id_list(row, NUMA_AFFINITY, "a NUMA node list")
    own_text = row.values.get(GPU_NUMA_ID, "")
    if own_text in ("", "N/A"):
        gpu_numa_node = None
    elif own_text.isascii() and own_text.isdigit() and int(own_text) <= _MAX_ID:
        gpu_numa_node = int(own_text)
    else:
        raise TopoParseError(row.line, f"{row.label} GPU NUMA ID {own_text!r} is neither a node id nor N/A")
    numa_node = _cpu_side_node(numa_nodes, gpu_numa_node)
    if len(numa_nodes) > 1:
        warnings.append(
            DiscoveryWarning(
                "nvidia-smi",
                f"{row.label} has NUMA affinity {row.values[NUMA_AFFINITY]}; its NUMA node is taken as {numa_node}, "
                "the first that is not its own memory, and the CPU affinity is left out of the cells",
            )
        )
    index = int(row.label[3:])
    return Gpu(
        index=index,
        pci_bus_id=f"{PLACEHOLDER_BUS_ID_PREFIX}{row.label}",
        numa_node=numa_node,
        numa_affinity=numa_nodes if len(numa_nodes) > 1 else (),
        cpu_affinity=cpus,
        gpu_numa_node=gpu_numa_node,
    )


def _cpu_side_node(numa_nodes: tuple[int, ...], gpu_numa_node: int | None) -> int | None:
    """The node GPU<->CPU alignment uses: the one listed, or the first of several that is not the GPU's memory."""
    if len(numa_nodes) <= 1:
        return numa_nodes[0] if numa_nodes else None
    return next((node for node in numa_nodes if node != gpu_numa_node), numa_nodes[0])


def _id_list(row: _Row, column: str, what: str) -> tuple[int, ...]:
    text = row.values.get(column, "")
    if text in ("", "N/A"):
        return ()
    try:
        if any(int(number) > _MAX_ID for number in re.findall(r"\d+", text)):
            raise ValueError(text)
        return parse_cpulist(text)
    except ValueError:
        raise TopoParseError(row.line, f"{row.label} {column} {text!r} is not {what}") from None


def _nic(printed_name: str, position: int, legend: dict[str, str]) -> Nic:
    # Both the NIC legend and old drivers' headers name the NIC by its RDMA device.
    rdma_device = legend.get(printed_name) if _NIC_NAME.fullmatch(printed_name) else printed_name
    if rdma_device is None:
        return Nic(name=printed_name, pci_bus_id=f"{PLACEHOLDER_BUS_ID_PREFIX}NIC{position}")
    return Nic(name=rdma_device, pci_bus_id=f"{PLACEHOLDER_BUS_ID_PREFIX}NIC{position}", rdma_devices=(rdma_device,))


def _machine(gpus: Sequence[Gpu]) -> Machine:
    online = tuple(sorted({cpu for gpu in gpus for cpu in gpu.cpu_affinity}))
    return Machine(
        cpu_model=None,
        architecture=None,
        sockets=None,
        cores=None,
        threads=len(online),
        online_cpus=online,
        offline_cpus=(),
    )


def _numa_cells(gpus: Sequence[Gpu]) -> tuple[NumaCell, ...]:
    """CPU-side cells with the CPUs of their single-node GPUs, and each GPU's memory node as a CPU-less GPU cell.

    The CPUs of a GPU affine to several nodes cannot be split between them, so such a GPU only makes
    its nodes known. A GPU memory node is never given CPUs: the kubelet pins no CPU there.
    """
    cpus_by_node: dict[int, set[int]] = {}
    for gpu in gpus:
        if gpu.numa_node is not None:
            cpus = cpus_by_node.setdefault(gpu.numa_node, set())
            if not gpu.numa_affinity:
                cpus.update(gpu.cpu_affinity)
        for node in gpu.numa_affinity:
            if node != gpu.gpu_numa_node:
                cpus_by_node.setdefault(node, set())
    cells = {
        node: NumaCell(id=node, cpus=tuple(sorted(cpus)), memory_bytes=None) for node, cpus in cpus_by_node.items()
    }
    for gpu in gpus:
        if gpu.gpu_numa_node is not None and gpu.gpu_numa_node not in cells:
            cells[gpu.gpu_numa_node] = NumaCell(
                id=gpu.gpu_numa_node, cpus=(), memory_bytes=None, memory_kind=MemoryKind.GPU
            )
    return tuple(cells[node] for node in sorted(cells))


def _is_cell(text: str) -> bool:
    return text in ("X", _UNKNOWN_CELL) or text in _PCIE_CELLS or _NVLINK_CELL.fullmatch(text) is not None


def _link_of(cell: str) -> tuple[PathKind, int] | None:
    """(path, NVLink count) of a valid cell; None for N/A, a pair the text gives no link for."""
    if cell == _UNKNOWN_CELL:
        return None
    if cell == "X":
        return (PathKind.SELF, 0)
    nvlink = _NVLINK_CELL.fullmatch(cell)
    if nvlink is not None:
        return (PathKind.NVLINK, int(nvlink.group(1)))
    return (_PCIE_CELLS[cell], 0)


def _looks_like_cell(text: str) -> bool:
    """Whether a word where a link cell belongs is a misspelt cell, not the CPU list of a short row."""
    return bool(text) and re.fullmatch(r"[\d,\-]+", text) is None


def _leading(items: Sequence[str], accept: Callable[[str], bool]) -> list[str]:
    """The items before the first one ``accept`` refuses."""
    taken: list[str] = []
    for item in items:
        if not accept(item):
            break
        taken.append(item)
    return taken


def _id_text(value: int | None) -> str:
    return "N/A" if value is None else str(value)
