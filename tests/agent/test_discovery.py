"""Discovery of an authored host, and its robustness against damaged input."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery import UnusableHostRoot, discover
from agent.hostfs import HostFS
from kubenexus.topology.model import HugePages, MemoryKind, MemorySideCache
from tests.fake_sysfs import build_two_socket_host


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return build_two_socket_host(tmp_path / "host")


def test_authored_host_is_discovered_exactly(host: Path) -> None:
    topology = discover(HostFS(str(host)), nvml=None)
    machine = topology.machine
    assert (machine.sockets, machine.cores, machine.threads) == (2, 8, 16)
    assert machine.cpu_model == "Test Xeon 9999"
    assert machine.offline_cpus == ()  # 16-31 are possible, not present
    cell0, cell1 = topology.numa_cells
    assert cell0.cpus == (0, 1, 2, 3, 8, 9, 10, 11)
    assert cell1.memory_bytes == 16_384_000 * 1024
    assert cell0.hugepages == (HugePages(2048, 512, 500), HugePages(1048576, 0, 0))
    assert cell0.memory_kind is MemoryKind.DRAM
    assert cell1.memory_side_caches == (MemorySideCache(1, 64 << 30, 64, 0, 0),)
    assert topology.distances is not None
    assert topology.distances.get(0, 1) == 21
    assert topology.distances.get(0, 7) is None
    assert {(a.target, a.initiator, a.read_bandwidth_mbps, a.write_latency_ns) for a in topology.memory_attributes} == {
        (0, 0, 131072, 100),
        (1, 1, 131072, 100),
    }
    assert topology.warnings == ()


def test_host_without_numa_directory_is_one_cell(host: Path) -> None:
    shutil.rmtree(host / "sys/devices/system/node")
    topology = discover(HostFS(str(host)), nvml=None)
    (cell,) = topology.numa_cells
    assert cell.cpus == tuple(range(16))
    assert cell.memory_bytes == 32_384_000 * 1024
    assert any("one cell" in w.message for w in topology.warnings)


def test_unusable_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnusableHostRoot, match="neither"):
        discover(HostFS(str(tmp_path)), nvml=None)
    with pytest.raises(UnusableHostRoot, match="not a directory"):
        discover(HostFS(str(tmp_path / "absent")), nvml=None)


MUTATIONS = ("delete", "empty", "truncate", "garbage", "directory", "dangling", "nul")


def _damage(path: Path, mutation: str, seed: int) -> None:
    if mutation == "delete":
        path.unlink()
    elif mutation == "empty":
        path.write_bytes(b"")
    elif mutation == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: seed % max(1, len(data))])
    elif mutation == "garbage":
        path.write_bytes(bytes((seed * 7 + i * 13) % 256 for i in range(1 + seed % 40)))
    elif mutation == "directory":
        path.unlink()
        path.mkdir()
    elif mutation == "dangling":
        path.unlink()
        path.symlink_to("does-not-exist")
    elif mutation == "nul":
        path.write_bytes(b"\x00" + path.read_bytes())


_TEMPLATE = build_two_socket_host(Path(tempfile.mkdtemp(prefix="kubenexus-template-")) / "host")
_FILES = sorted(
    str(Path(dirpath, name).relative_to(_TEMPLATE))
    for dirpath, _, names in os.walk(_TEMPLATE)
    for name in names
    if not Path(dirpath, name).is_symlink()
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    damaged=st.lists(
        st.tuples(st.sampled_from(_FILES), st.sampled_from(MUTATIONS), st.integers(0, 1000)),
        min_size=1,
        max_size=4,
        unique_by=lambda item: item[0],
    )
)
def test_damaged_files_never_raise(damaged: list[tuple[str, str, int]], tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    shutil.copytree(_TEMPLATE, root / "host", symlinks=True)
    for relative, mutation, seed in damaged:
        _damage(root / "host" / relative, mutation, seed)
    topology = discover(HostFS(str(root / "host")), nvml=None)
    assert topology.numa_cells  # a model always comes back
    for cell in topology.numa_cells:
        assert set(cell.cpus) <= set(topology.machine.online_cpus) or not topology.machine.online_cpus


@pytest.mark.parametrize(
    ("relative", "text", "expected_warning"),
    [
        ("sys/devices/system/node/node0/distance", "10 x\n", "distance"),
        ("sys/devices/system/node/node1/distance", "21\n", "1 distances for 2 nodes"),
        ("sys/devices/system/node/node0/meminfo", "Node 0 MemFree: 1 kB\n", "no MemTotal"),
        ("sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "many\n", "expected an integer"),
        ("sys/devices/system/node/node0/access1/initiators/read_bandwidth", "fast\n", "HMAT value ignored"),
        ("sys/devices/system/cpu/online", "0-x\n", "garbled CPU list"),
    ],
)
def test_specific_damage_is_reported(host: Path, relative: str, text: str, expected_warning: str) -> None:
    (host / relative).write_text(text)
    topology = discover(HostFS(str(host)), nvml=None)
    assert any(expected_warning in w.message for w in topology.warnings), topology.warnings


def test_cpumap_replaces_a_missing_cpulist(host: Path) -> None:
    (host / "sys/devices/system/node/node1/cpulist").unlink()
    topology = discover(HostFS(str(host)), nvml=None)
    assert topology.numa_cells[1].cpus == (4, 5, 6, 7, 12, 13, 14, 15)
    assert topology.warnings == ()
