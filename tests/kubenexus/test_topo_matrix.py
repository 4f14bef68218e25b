"""``nvidia-smi topo -m`` both ways, against the real captures in ../shared/data/gpu.

Round trips are checked with a deliberately naive cell reader (whitespace split, the three
multi-word column names known), independent of the importer under test.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubenexus.topology.model import DeviceLink, Gpu, Machine, MemoryKind, Nic, NodeTopology, PathKind
from kubenexus.topology.topo_matrix import (
    CPU_AFFINITY,
    GPU_NUMA_ID,
    NUMA_AFFINITY,
    PLACEHOLDER_BUS_ID_PREFIX,
    TopoParseError,
    parse_topo_matrix,
    render_topo_matrix,
)
from tests import TESTS
from tests.conftest import GPU_DIR, require_shared

COLUMNS = (CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID)


def _capture_names() -> list[Any]:
    if not GPU_DIR.is_dir():
        return [pytest.param("absent", marks=pytest.mark.skip(reason=f"shared data not found at {GPU_DIR}"))]
    return sorted(path.name for path in GPU_DIR.glob("*.txt") if CPU_AFFINITY in path.read_text())


def _capture(prefix: str) -> str:
    (path,) = sorted(require_shared(GPU_DIR).glob(f"{prefix}*.txt"))
    return path.read_text()


@dataclass(frozen=True)
class Cells:
    devices: tuple[str, ...]  # GPU<k>, NIC<position> (an old driver's NIC name becomes NIC<position>)
    columns: tuple[str, ...]
    links: dict[tuple[str, str], str]
    values: dict[str, dict[str, str]]


def read_cells(text: str) -> Cells:
    lines = re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip())
    header = lines[start]
    for column in COLUMNS:
        header = header.replace(column, column.replace(" ", "~"))
    words = [word.replace("~", " ") for word in header.split()]
    printed = [word for word in words if word not in COLUMNS]
    columns = tuple(word for word in words if word in COLUMNS)
    nic_names = [name for name in printed if not name.startswith("GPU")]
    canonical = {name: name for name in printed} | {name: f"NIC{i}" for i, name in enumerate(nic_names)}
    links: dict[tuple[str, str], str] = {}
    values: dict[str, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("Legend"):
            break
        label, *rest = line.split()
        cells, trailing = rest[: len(printed)], rest[len(printed) :]
        for column, cell in zip(printed, cells, strict=True):
            links[canonical[label], canonical[column]] = cell
        if trailing:
            assert len(trailing) == len(columns), f"{label}: the naive reader needs every affinity cell filled"
            values[canonical[label]] = dict(zip(columns, trailing, strict=True))
    return Cells(tuple(canonical[name] for name in printed), columns, links, values)


def assert_same_cells(original: Cells, rendered: Cells) -> None:
    assert rendered.devices == original.devices
    assert rendered.columns == COLUMNS
    for pair, cell in original.links.items():
        # Drivers before ~384 printed SOC for what is now SYS; the renderer speaks the current vocabulary.
        assert rendered.links[pair] == ("SYS" if cell == "SOC" else cell), pair
    for device, values in original.values.items():
        for column, value in values.items():
            assert rendered.values[device][column] == value, (device, column)
        for column in set(COLUMNS) - set(values):
            assert rendered.values[device][column] == "N/A", (device, column)


@pytest.mark.parametrize("name", _capture_names())
def test_every_capture_imports_and_renders_back_cell_for_cell(name: str) -> None:
    text = (GPU_DIR / name).read_text()
    topology = parse_topo_matrix(text)
    original = read_cells(text)
    assert len(topology.gpus) == sum(device.startswith("GPU") for device in original.devices)
    assert len(topology.links) == len(original.devices) * (len(original.devices) - 1) // 2
    assert topology.gpu_source == "nvidia-smi"
    assert_same_cells(original, read_cells(render_topo_matrix(topology)))
    assert parse_topo_matrix(render_topo_matrix(topology)) == topology


def _labels(topology: NodeTopology) -> dict[tuple[str, str], str]:
    return {(link.a, link.b): link.label for link in topology.links}


@pytest.mark.parametrize(("prefix", "label"), [("aws_p4d.24xlarge", "NV12"), ("aws_p5.48xlarge", "NV18")])
def test_nvswitch_machines_link_every_gpu_pair(prefix: str, label: str) -> None:
    topology = parse_topo_matrix(_capture(prefix))
    pairs = list(itertools.combinations([f"GPU{i}" for i in range(8)], 2))
    assert _labels(topology) == dict.fromkeys(pairs, label)
    assert [gpu.numa_node for gpu in topology.gpus] == [0] * 4 + [1] * 4
    # x86: no GPU memory node, no GPU cell, no multi-node affinity.
    assert all(gpu.gpu_numa_node is None and gpu.numa_affinity == () for gpu in topology.gpus)
    assert [(cell.id, cell.memory_kind) for cell in topology.numa_cells] == [
        (0, MemoryKind.UNKNOWN),
        (1, MemoryKind.UNKNOWN),
    ]


def test_p4d_numa_cells_and_machine_come_from_the_affinity_columns() -> None:
    topology = parse_topo_matrix(_capture("aws_p4d.24xlarge"))
    assert [(cell.id, cell.cpus) for cell in topology.numa_cells] == [
        (0, (*range(24), *range(48, 72))),
        (1, (*range(24, 48), *range(72, 96))),
    ]
    assert all(cell.memory_bytes is None for cell in topology.numa_cells)
    assert topology.machine.online_cpus == tuple(range(96))
    assert topology.machine.threads == 96
    assert topology.gpus[4].cpu_affinity == (*range(24, 48), *range(72, 96))
    assert [gpu.pci_bus_id for gpu in topology.gpus[:2]] == ["nvidia-smi:GPU0", "nvidia-smi:GPU1"]
    assert "placeholder" in topology.warnings[0].message


def test_l40s_is_node_everywhere_without_nvlink() -> None:
    topology = parse_topo_matrix(_capture("aws_g6e.12xlarge"))
    assert {link.path for link in topology.links} == {PathKind.NODE}
    assert all(link.nvlinks == 0 for link in topology.links)
    assert len(topology.links) == 6
    assert not any(label.startswith("NV") for label in _labels(topology).values())


def test_bridge_pair_machine_has_nvlink_exactly_on_its_bridged_pairs() -> None:
    topology = parse_topo_matrix(_capture("pcie_8gpu_nvlink_bridge_pairs"))
    nvlinks = {pair: label for pair, label in _labels(topology).items() if label.startswith("NV")}
    assert nvlinks == {
        ("GPU0", "GPU2"): "NV12",
        ("GPU1", "GPU3"): "NV12",
        ("GPU4", "GPU5"): "NV12",
        ("GPU6", "GPU7"): "NV12",
    }
    assert {link.path for link in topology.links} - {PathKind.NVLINK} == {PathKind.SYS}
    assert [cell.id for cell in topology.numa_cells] == [0, 1]


def test_workstation_without_numa_has_no_cells_and_renders_na() -> None:
    topology = parse_topo_matrix(_capture("workstation_2x1080Ti"))
    assert topology.links == (DeviceLink("GPU0", "GPU1", PathKind.PHB),)
    assert [gpu.numa_node for gpu in topology.gpus] == [None, None]
    assert topology.numa_cells == ()
    assert topology.machine.online_cpus == tuple(range(12))


# A current-driver layout authored here: tabs, the ANSI-underlined header, NICs and their legend,
# a GPU whose CPU affinity is empty (as on GB200), a GPU NUMA id (as on GH200).
AUTHORED = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV4\tSYS\tPIX\tSYS\t0-3,8-11\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\tPXB\tSYS\t0-3,8-11\t0\t\t2\n"
    "GPU2\tSYS\tSYS\t X \tSYS\tPHB\t\t1\t\tN/A\n"
    "NIC0\tPIX\tPXB\tSYS\t X \tSYS\t\t\t\t\n"
    "NIC1\tSYS\tSYS\tPHB\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_bond_0\n"
    "\n"
)


def test_authored_capture_imports_every_field() -> None:
    topology = parse_topo_matrix(AUTHORED)
    assert [(gpu.index, gpu.cpu_affinity, gpu.numa_node, gpu.gpu_numa_node) for gpu in topology.gpus] == [
        (0, (0, 1, 2, 3, 8, 9, 10, 11), 0, None),
        (1, (0, 1, 2, 3, 8, 9, 10, 11), 0, 2),
        (2, (), 1, None),
    ]
    assert topology.nics == (
        Nic(name="mlx5_0", pci_bus_id=f"{PLACEHOLDER_BUS_ID_PREFIX}NIC0", rdma_devices=("mlx5_0",)),
        Nic(name="mlx5_bond_0", pci_bus_id=f"{PLACEHOLDER_BUS_ID_PREFIX}NIC1", rdma_devices=("mlx5_bond_0",)),
    )
    assert _labels(topology) == {
        ("GPU0", "GPU1"): "NV4",
        ("GPU0", "GPU2"): "SYS",
        ("GPU0", "NIC0"): "PIX",
        ("GPU0", "NIC1"): "SYS",
        ("GPU1", "GPU2"): "SYS",
        ("GPU1", "NIC0"): "PXB",
        ("GPU1", "NIC1"): "SYS",
        ("GPU2", "NIC0"): "SYS",
        ("GPU2", "NIC1"): "PHB",
        ("NIC0", "NIC1"): "SYS",
    }
    assert [(cell.id, cell.cpus, cell.memory_kind) for cell in topology.numa_cells] == [
        (0, (0, 1, 2, 3, 8, 9, 10, 11), MemoryKind.UNKNOWN),
        (1, (), MemoryKind.UNKNOWN),
        (2, (), MemoryKind.GPU),  # GPU1's own memory: a CPU-less cell, never one CPUs are pinned to
    ]


def test_authored_capture_renders_back_byte_for_byte_apart_from_escapes_and_legend() -> None:
    rendered = render_topo_matrix(parse_topo_matrix(AUTHORED))
    matrix = re.sub(r"\x1b\[[0-9;]*m", "", AUTHORED).split("\n\n")[0]
    assert rendered.split("\n\n")[0] == matrix
    assert rendered.endswith("NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_bond_0\n\n")
    assert "  PIX  = Connection traversing at most a single PCIe bridge\n" in rendered


def test_tabs_expanded_to_spaces_import_the_same_even_with_empty_cells() -> None:
    assert parse_topo_matrix(AUTHORED.expandtabs(8)) == parse_topo_matrix(AUTHORED)


AUTHORED_CAPTURES = TESTS / "machines" / "captures"


def _authored_capture(name: str) -> str:
    return (AUTHORED_CAPTURES / f"{name}_nvidia-smi_topo_m.txt").read_text()


def test_gh200_keeps_the_grace_node_for_alignment_and_the_gpu_memory_node_apart() -> None:
    topology = parse_topo_matrix(_authored_capture("gh200_1gpu"))
    (gpu,) = topology.gpus
    assert (gpu.numa_node, gpu.gpu_numa_node, gpu.numa_affinity) == (0, 1, ())
    assert gpu.cpu_affinity == tuple(range(72))
    assert [(cell.id, cell.cpus, cell.memory_kind) for cell in topology.numa_cells] == [
        (0, tuple(range(72)), MemoryKind.UNKNOWN),
        (1, (), MemoryKind.GPU),
    ]
    assert topology.machine.online_cpus == tuple(range(72))


def test_two_gh200_each_gpu_on_its_grace_with_its_own_memory_node() -> None:
    topology = parse_topo_matrix(_authored_capture("gh200_2gpu"))
    assert [(gpu.numa_node, gpu.gpu_numa_node) for gpu in topology.gpus] == [(0, 2), (1, 10)]
    assert [(cell.id, len(cell.cpus), cell.memory_kind) for cell in topology.numa_cells] == [
        (0, 72, MemoryKind.UNKNOWN),
        (1, 72, MemoryKind.UNKNOWN),
        (2, 0, MemoryKind.GPU),
        (10, 0, MemoryKind.GPU),
    ]
    assert _labels(topology)["GPU0", "GPU1"] == "NV18"


@pytest.mark.parametrize("name", ["gh200_1gpu", "gh200_2gpu"])
def test_grace_captures_render_back_cell_for_cell(name: str) -> None:
    text = _authored_capture(name)
    topology = parse_topo_matrix(text)
    rendered = render_topo_matrix(topology)
    assert_same_cells(read_cells(text), read_cells(rendered))
    assert rendered.split("\n\n")[0] == re.sub(r"\x1b\[[0-9;]*m", "", text).split("\n\n")[0]
    assert parse_topo_matrix(rendered) == topology


# Authored: NUMA Affinity naming several nodes, as a range, as a list, and including the GPU's own node.
MULTI_NODE = (
    "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tSYS\tSYS\t0-63\t0-1\t\tN/A\n"
    "GPU1\tSYS\t X \tSYS\t0-31,64-95\t0,2\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \t96-127\t3-4\t\t3\n"
)


def test_multi_node_numa_affinity_keeps_every_node_and_the_first_cpu_side_one() -> None:
    topology = parse_topo_matrix(MULTI_NODE)
    assert [(gpu.numa_node, gpu.numa_affinity, gpu.gpu_numa_node) for gpu in topology.gpus] == [
        (0, (0, 1), None),
        (0, (0, 2), None),
        (4, (3, 4), 3),  # node 3 is the GPU's own memory: alignment uses the CPU-side node 4
    ]
    # CPUs affine to several nodes cannot be split between them: the cells are known, their CPUs are not.
    assert [(cell.id, cell.cpus, cell.memory_kind) for cell in topology.numa_cells] == [
        (0, (), MemoryKind.UNKNOWN),
        (1, (), MemoryKind.UNKNOWN),
        (2, (), MemoryKind.UNKNOWN),
        (3, (), MemoryKind.GPU),
        (4, (), MemoryKind.UNKNOWN),
    ]
    messages = [warning.message for warning in topology.warnings]
    assert any("GPU0 has NUMA affinity 0-1; its NUMA node is taken as 0" in message for message in messages)
    assert any("GPU2 has NUMA affinity 3-4; its NUMA node is taken as 4" in message for message in messages)


def test_multi_node_numa_affinity_renders_back_as_printed() -> None:
    topology = parse_topo_matrix(MULTI_NODE)
    rendered = render_topo_matrix(topology)
    assert rendered.split("\n\n")[0] == MULTI_NODE.rstrip("\n")
    assert parse_topo_matrix(rendered) == topology
    assert parse_topo_matrix(MULTI_NODE.expandtabs(8)) == topology


# An old driver: SOC for SYS, the NIC named in the header, no NUMA columns, no NIC legend.
LEGACY = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tmlx4_0\tCPU Affinity
GPU0\t X \tPHB\tSOC\tSOC\tSOC\t0-5
GPU1\tPHB\t X \tSOC\tSOC\tSOC\t0-5
GPU2\tSOC\tSOC\t X \tPHB\tPHB\t6-11
GPU3\tSOC\tSOC\tPHB\t X \tPHB\t6-11
mlx4_0\tSOC\tSOC\tPHB\tPHB\t X

Legend:

  X   = Self
  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
"""


def test_old_driver_soc_becomes_sys_and_header_nic_names_are_kept() -> None:
    topology = parse_topo_matrix(LEGACY)
    assert topology.nics == (Nic(name="mlx4_0", pci_bus_id="nvidia-smi:NIC0", rdma_devices=("mlx4_0",)),)
    labels = _labels(topology)
    assert labels["GPU0", "GPU2"] == "SYS"
    assert labels["GPU0", "NIC0"] == "SYS"
    assert labels["GPU2", "NIC0"] == "PHB"
    assert all(gpu.numa_node is None and gpu.gpu_numa_node is None for gpu in topology.gpus)
    assert topology.numa_cells == ()
    rendered = render_topo_matrix(topology)
    assert "SOC" not in rendered
    assert "NIC Legend:\n\n  NIC0: mlx4_0\n" in rendered
    original, again = read_cells(LEGACY), read_cells(rendered)
    assert_same_cells(original, again)
    soc_pairs = [pair for pair, cell in original.links.items() if cell == "SOC"]
    assert len(soc_pairs) == 12
    assert all(again.links[pair] == "SYS" for pair in soc_pairs)


def test_space_aligned_text_with_unpadded_columns_imports() -> None:
    text = """\
        GPU0 GPU1 NIC0 CPU Affinity NUMA Affinity GPU NUMA ID
GPU0    X    NV4  NODE 0-31,64-95   0             N/A
GPU1    NV4  X    NODE 0-31,64-95   0             N/A
NIC0    NODE NODE X
"""
    topology = parse_topo_matrix(text)
    assert _labels(topology) == {("GPU0", "GPU1"): "NV4", ("GPU0", "NIC0"): "NODE", ("GPU1", "NIC0"): "NODE"}
    assert topology.nics == (Nic(name="NIC0", pci_bus_id="nvidia-smi:NIC0"),)  # no legend: no RDMA name
    assert topology.gpus[1].cpu_affinity == (*range(32), *range(64, 96))


@pytest.mark.parametrize("blank", ["", "   \n\t\n"])
def test_empty_text_is_refused(blank: str) -> None:
    with pytest.raises(TopoParseError, match="empty input") as error:
        parse_topo_matrix(blank)
    assert error.value.line is None


def _error(text: str) -> TopoParseError:
    with pytest.raises(TopoParseError) as error:
        parse_topo_matrix(text)
    assert isinstance(error.value, ValueError)
    return error.value


def test_a_matrix_without_its_header_is_refused_on_line_one() -> None:
    error = _error("\n".join(AUTHORED.splitlines()[1:4]))
    assert error.line == 1
    assert "header" in str(error)
    assert str(error).startswith("line 1: ")


def test_text_that_is_not_a_matrix_names_what_it_found() -> None:
    error = _error("==============NVSMI LOG==============\n\nDriver Version : 565.57.01\n")
    assert error.line == 1
    assert "expected the matrix header" in str(error)


def test_a_ragged_row_is_refused_with_its_line() -> None:
    ragged = AUTHORED.replace("GPU1\tNV4\t X \tSYS\tPXB\tSYS\t", "GPU1\tNV4\t X \tSYS\tPXB\t")
    error = _error(ragged)
    assert error.line == 3
    assert "row GPU1 has 4 link cells but the header names 5 devices (ragged row)" in str(error)


def test_a_row_with_an_extra_cell_is_refused() -> None:
    error = _error(AUTHORED.replace("NIC1\tSYS\tSYS\tPHB\tSYS\t X \t", "NIC1\tSYS\tSYS\tPHB\tSYS\t X \tSYS\t"))
    assert error.line == 6
    assert "more link cells" in str(error)


def test_an_unknown_cell_is_named_with_its_column() -> None:
    error = _error(AUTHORED.replace("GPU2\tSYS\tSYS\t X \tSYS\tPHB", "GPU2\tSYS\tSYS\t X \tSYS\tFOO"))
    assert error.line == 4
    assert "GPU2/NIC1: 'FOO' is not a link" in str(error)


def test_an_asymmetric_matrix_is_refused() -> None:
    error = _error(AUTHORED.replace("GPU2\tSYS\tSYS\t X \tSYS\tPHB", "GPU2\tSYS\tSYS\t X \tSYS\tSYS"))
    assert error.line == 6
    assert "symmetric" in str(error)


def test_a_missing_row_or_a_stray_row_is_refused() -> None:
    truncated = _error(AUTHORED.replace("NIC1\tSYS\tSYS\tPHB\tSYS\t X \t\t\t\t\n", ""))
    assert truncated.line == 1
    assert "the header names NIC1 but the matrix has no row for it" in str(truncated)
    stray = _error(AUTHORED.replace("NIC1\tSYS\tSYS\tPHB", "NIC7\tSYS\tSYS\tPHB"))
    assert stray.line == 6
    assert "'NIC7' is not a device of the header" in str(stray)


def test_a_bad_affinity_is_refused_with_its_line() -> None:
    error = _error(AUTHORED.replace("0-3,8-11\t0\t\t2", "0-x\t0\t\t2"))
    assert error.line == 3
    assert "CPU list" in str(error)
    error = _error(AUTHORED.replace("0-3,8-11\t0\t\t2", "0-3\t0\t\tmany"))
    assert "GPU NUMA ID" in str(error)


def test_a_diagonal_that_is_not_x_is_refused() -> None:
    error = _error(AUTHORED.replace("GPU0\t X \tNV4", "GPU0\tSYS\tNV4"))
    assert error.line == 2
    assert "own cell" in str(error)


CELL_LABELS = ["PIX", "PXB", "PHB", "NODE", "SYS", "NV1", "NV2", "NV12", "NV18", None]


def _numa_fields(draw: st.DrawFn) -> dict[str, Any]:
    """A GPU's node fields as an importer fills them: one node, or several with the first CPU-side one chosen."""
    node_ids = st.none() | st.integers(0, 7)
    gpu_numa_node = draw(node_ids)
    affinity = tuple(sorted(draw(st.frozensets(st.integers(0, 7), min_size=2, max_size=3) | st.just(frozenset()))))
    if not affinity:
        return {"numa_node": draw(node_ids), "gpu_numa_node": gpu_numa_node}
    numa_node = next((node for node in affinity if node != gpu_numa_node), affinity[0])
    return {"numa_node": numa_node, "numa_affinity": affinity, "gpu_numa_node": gpu_numa_node}


@st.composite
def topologies(draw: st.DrawFn) -> NodeTopology:
    gpu_count = draw(st.integers(1, 6))
    nic_count = draw(st.integers(0, 3))
    cpu_sets = st.frozensets(st.integers(0, 255), max_size=40)
    gpus = tuple(
        Gpu(
            index=index,
            pci_bus_id=f"{PLACEHOLDER_BUS_ID_PREFIX}GPU{index}",
            cpu_affinity=tuple(sorted(draw(cpu_sets))),
            **_numa_fields(draw),
        )
        for index in range(gpu_count)
    )
    nic_names = draw(
        st.lists(st.from_regex(r"mlx5_(bond_)?[0-9]{1,2}", fullmatch=True), min_size=nic_count, max_size=nic_count)
    )
    nics = tuple(
        Nic(name=name, pci_bus_id=f"{PLACEHOLDER_BUS_ID_PREFIX}NIC{i}", rdma_devices=(name,))
        for i, name in enumerate(nic_names)
    )
    names = [f"GPU{i}" for i in range(gpu_count)] + [f"NIC{i}" for i in range(nic_count)]
    links = []
    for a, b in itertools.combinations(names, 2):
        label = draw(st.sampled_from(CELL_LABELS))
        if label is not None:
            count = int(label[2:]) if label.startswith("NV") else 0
            links.append(DeviceLink(a, b, PathKind.NVLINK if count else PathKind(label), count))
    machine = Machine(None, None, 0, 0, 0, (), ())
    return NodeTopology(machine=machine, numa_cells=(), gpus=gpus, nics=nics, links=tuple(links))


@given(topologies())
def test_render_then_parse_keeps_links_gpus_and_nics(topology: NodeTopology) -> None:
    rendered = render_topo_matrix(topology)
    for text in (rendered, rendered.expandtabs(8)):
        parsed = parse_topo_matrix(text)
        assert parsed.links == topology.links
        assert parsed.gpus == topology.gpus
        assert parsed.nics == topology.nics
        assert render_topo_matrix(parsed) == rendered


FUZZ_PIECES = [
    *("GPU0", "GPU1", "NIC0", "NIC1", "mlx5_0", "X", " X ", "NV12", "SYS", "SOC", "PIX", "N/A", "FOO"),
    *("CPU Affinity", "NUMA Affinity", "GPU NUMA ID", "0-3,8", "1", "0-4294967295", "Legend:", "NIC Legend:"),
    *("  NIC0: mlx5_0", "  NIC3: x", "\x1b[4m", "\x1b[0m", "\t", "\t\t", " ", "    ", "\n", "\n\n", ":", ","),
]


@given(st.lists(st.sampled_from(FUZZ_PIECES), max_size=60).map("".join) | st.text(max_size=200))
def test_any_text_imports_or_raises_topo_parse_error(text: str) -> None:
    try:
        topology = parse_topo_matrix(text)
    except TopoParseError:
        return
    assert parse_topo_matrix(render_topo_matrix(topology)).links == topology.links


def test_an_absurd_cpu_number_is_refused_not_expanded() -> None:
    error = _error(AUTHORED.replace("0-3,8-11\t0\t\t2", "0-4294967295\t0\t\t2"))
    assert "CPU Affinity '0-4294967295' is not a CPU list" in str(error)
