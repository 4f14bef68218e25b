"""NUMA discovery against hwloc's ground truth on 20 real sysfs snapshots.

The oracle (``NAME.oracle-disallowed.json``) is hwloc 2.9's view of the same tree. Where
the kernel's raw view and hwloc's legitimately differ, the difference is named per
snapshot in ``HWLOC_DIFFERS`` and asserted, never skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.hostfs import HostFS
from agent.sources.cpu import discover_machine
from agent.sources.numa import NumaReport, discover_numa
from kubenexus.topology.model import MemoryKind
from tests.conftest import HWLOC_DIR, hwloc_snapshot_names

Unpack = Callable[[str], Path]

# hwloc merges cells that firmware duplicated (every cell claims CPUs 0-7): one cell is left.
DUPLICATED_BY_FIRMWARE = {"8em64t-2s2ca2c-buggynuma"}


def _oracle(name: str) -> dict[str, Any]:
    with open(HWLOC_DIR / f"{name}.oracle-disallowed.json") as handle:
        result: dict[str, Any] = json.load(handle)
        return result


def _discover(root: Path) -> NumaReport:
    fs = HostFS(str(root))
    machine = discover_machine(fs).machine
    return discover_numa(fs, online_cpus=machine.online_cpus)


@pytest.fixture(params=hwloc_snapshot_names() or ["<no shared data>"])
def snapshot(request: pytest.FixtureRequest, unpack_snapshot: Unpack) -> tuple[str, NumaReport, dict[str, Any]]:
    name: str = request.param
    root = unpack_snapshot(name)
    return name, _discover(root), _oracle(name)


def test_numa_ids_match_hwloc(snapshot: tuple[str, NumaReport, dict[str, Any]]) -> None:
    name, report, oracle = snapshot
    ours = [cell.id for cell in report.cells]
    theirs = [node["os_index"] for node in oracle["numa_nodes"]]
    if name in DUPLICATED_BY_FIRMWARE:
        assert theirs == [0]
        assert ours == list(range(8))
        assert any("buggy firmware" in w.message for w in report.warnings)
    else:
        assert ours == theirs


def test_cpus_of_cells_with_cpus_match_hwloc(snapshot: tuple[str, NumaReport, dict[str, Any]]) -> None:
    name, report, oracle = snapshot
    theirs = {node["os_index"]: node["cpus"] for node in oracle["numa_nodes"]}
    compared = 0
    for cell in report.cells:
        if not cell.cpus:
            # hwloc gives a CPU-less cell the CPUs of its locality; the kernel lists none.
            continue
        if name in DUPLICATED_BY_FIRMWARE and cell.id != 0:
            continue
        assert list(cell.cpus) == theirs[cell.id], f"cell {cell.id}"
        compared += 1
    assert compared > 0


def test_memory_and_hugepages_match_hwloc(snapshot: tuple[str, NumaReport, dict[str, Any]]) -> None:
    _name, report, oracle = snapshot
    theirs = {node["os_index"]: node for node in oracle["numa_nodes"]}
    for cell in report.cells:
        if cell.id not in theirs:
            continue
        node = theirs[cell.id]
        assert cell.memory_bytes is not None
        assert cell.memory_bytes == node["local_memory_bytes"], f"cell {cell.id}"
        pages = {int(size): count for size, count in node["pages"].items()}
        normal_page = min(pages)
        huge = {pool.size_kib * 1024: pool.total for pool in cell.hugepages}
        assert {size: count for size, count in pages.items() if size != normal_page} == huge
        # hwloc counts as normal pages what the hugepage pools leave of the cell's memory.
        left = cell.memory_bytes - sum(size * count for size, count in huge.items())
        assert pages[normal_page] == left // normal_page


def test_distances_match_hwloc(snapshot: tuple[str, NumaReport, dict[str, Any]]) -> None:
    name, report, oracle = snapshot
    theirs = oracle["distances"]
    if name in DUPLICATED_BY_FIRMWARE:
        assert theirs is None  # hwloc drops the matrix with the duplicate cells
        assert report.distances is not None
        assert len(report.distances.ids) == 8
        return
    if theirs is None:
        # hwloc drops a matrix that does not fit the node directories; we warn and do the same.
        assert report.distances is None or len(report.distances.ids) == 1
        if report.distances is None:
            assert any("distance" in w.message for w in report.warnings)
        return
    assert report.distances is not None
    assert list(report.distances.ids) == theirs["os_indexes"]
    assert [list(row) for row in report.distances.matrix] == theirs["matrix"]


def test_hmat_matches_hwloc(snapshot: tuple[str, NumaReport, dict[str, Any]]) -> None:
    _name, report, oracle = snapshot
    cpus_of = {cell.id: set(cell.cpus) for cell in report.cells}
    for oracle_name, field in (
        ("ReadBandwidth", "read_bandwidth_mbps"),
        ("WriteBandwidth", "write_bandwidth_mbps"),
        ("ReadLatency", "read_latency_ns"),
        ("WriteLatency", "write_latency_ns"),
    ):
        ours: dict[tuple[int, tuple[int, ...]], int] = {}
        for target in {a.target for a in report.memory_attributes if a.access_class == 1}:
            attributes = [a for a in report.memory_attributes if a.access_class == 1 and a.target == target]
            values = {getattr(a, field) for a in attributes}
            assert len(values) == 1  # one value per class for all initiators, as the kernel gives it
            value = values.pop()
            if value is not None:
                initiator_cpus = sorted(set().union(*(cpus_of[a.initiator] for a in attributes)))
                ours[(target, tuple(initiator_cpus))] = value
        theirs = {
            (entry["target_os_index"], tuple(entry["initiator_cpus"])): entry["value"]
            for entry in oracle["memattrs"].get(oracle_name, [])
        }
        assert ours == theirs, oracle_name


def test_memory_kinds_agree_with_hwloc_subtypes(snapshot: tuple[str, NumaReport, dict[str, Any]]) -> None:
    _name, report, oracle = snapshot
    expected = {"DRAM": MemoryKind.DRAM, "HBM": MemoryKind.HBM, "NVM": MemoryKind.NVM, "GPUMemory": MemoryKind.GPU}
    kinds = {cell.id: cell.memory_kind for cell in report.cells}
    for node in oracle["numa_nodes"]:
        if node["subtype"] is not None:
            assert kinds[node["os_index"]] is expected[node["subtype"]], f"cell {node['os_index']}"


def test_memory_side_cache_matches_hwloc_console(unpack_snapshot: Unpack) -> None:
    report = _discover(unpack_snapshot("memorysidecaches"))
    console = (HWLOC_DIR / "memorysidecaches.console").read_text()
    sizes = {int(size) for size in re.findall(r"MemCache L#\d+ \(total=\S+ size=(\d+)GiB", console)}
    assert sizes == {96}
    for cell in report.cells:
        (cache,) = cell.memory_side_caches
        assert cache.size_bytes == 96 << 30
        assert cache.line_size == 64
        assert cache.level == 1
