"""Grace platforms (GH200/GB200): the GPU's own memory is a CPU-less NUMA cell, kept apart from the Grace.

The host is authored from published GH200 facts (one 72-core Grace on node 0, the H100's HBM on node 1)
and discovered end to end: fake sysfs for CPUs, cells and PCI, the fake pynvml for the GPU.
"""

from __future__ import annotations

from pathlib import Path

from agent.discovery import discover
from agent.hostfs import HostFS
from agent.sources.numa import link_gpu_memory_cells
from kubenexus.topology.model import Gpu, MemoryKind, NumaCell
from kubenexus.topology.nrt import GPU_RESOURCE, cell_resources
from tests.fake_nvml import FakeNvml
from tests.fake_sysfs import write
from tests.gpu_sysfs import build_gpu_sysfs
from tests.machines.gpu_hardware import GH200, HGX_H100

GRACE_CPUS = 72
GRACE_MEMORY_KB = 480 * 1024 * 1024
GPU_MEMORY_KB = 96 * 1024 * 1024


def build_gh200_host(root: Path) -> Path:
    write(root, "/sys/devices/system/cpu/online", f"0-{GRACE_CPUS - 1}\n")
    write(root, "/sys/devices/system/cpu/present", f"0-{GRACE_CPUS - 1}\n")
    write(root, "/sys/devices/system/cpu/possible", f"0-{GRACE_CPUS - 1}\n")
    for cpu in range(GRACE_CPUS):
        topology = f"/sys/devices/system/cpu/cpu{cpu}/topology"
        write(root, f"{topology}/physical_package_id", "0\n")
        write(root, f"{topology}/core_id", f"{cpu}\n")
        write(root, f"{topology}/thread_siblings_list", f"{cpu}\n")
    # The kernel lists a memory-only node with an empty CPU list.
    for node, cpus, memory_kb, distances in (
        (0, f"0-{GRACE_CPUS - 1}", GRACE_MEMORY_KB, "10 80"),
        (1, "", GPU_MEMORY_KB, "80 10"),
    ):
        base = f"/sys/devices/system/node/node{node}"
        write(root, f"{base}/cpulist", f"{cpus}\n")
        write(root, f"{base}/meminfo", f"Node {node} MemTotal:       {memory_kb} kB\n")
        write(root, f"{base}/distance", f"{distances}\n")
    write(root, "/proc/meminfo", f"MemTotal:       {GRACE_MEMORY_KB + GPU_MEMORY_KB} kB\n")
    return build_gpu_sysfs(root, GH200)


def test_gh200_gpu_memory_cell_is_marked_gpu_and_the_gpu_aligns_to_the_grace(tmp_path: Path) -> None:
    # No /proc/driver/nvidia in this root: only NVML's node id tells node 1 is the GPU's memory.
    topology = discover(HostFS(str(build_gh200_host(tmp_path))), nvml=FakeNvml(GH200).module, nvml_with_host_root=True)
    grace, gpu_memory = topology.numa_cells
    assert (grace.id, len(grace.cpus), grace.memory_kind) == (0, GRACE_CPUS, MemoryKind.DRAM)
    assert (gpu_memory.id, gpu_memory.cpus, gpu_memory.memory_kind) == (1, (), MemoryKind.GPU)
    (gpu,) = topology.gpus
    assert (gpu.numa_node, gpu.gpu_numa_node) == (0, 1)
    gpus_per_cell = {
        cell.id: next(amount.capacity for amount in cell_resources(topology, cell) if amount.name == GPU_RESOURCE)
        for cell in topology.numa_cells
    }
    assert gpus_per_cell == {0: 1, 1: 0}  # the GPU is counted where its CPUs are, not in its own memory
    # Only the CPU model is missing (this root has no /proc/cpuinfo): no NUMA or NVML doubt.
    assert [warning.source for warning in topology.warnings] == ["cpu"]


def test_without_nvml_the_memory_only_cell_stays_cpu_less_but_unnamed(tmp_path: Path) -> None:
    topology = discover(HostFS(str(build_gh200_host(tmp_path))), nvml=None)
    cell = topology.cell(1)
    assert cell is not None
    assert (cell.cpus, cell.memory_kind) == ((), MemoryKind.DRAM)
    assert [gpu.gpu_numa_node for gpu in topology.gpus] == [None]


def test_x86_gpus_mark_no_cell(tmp_path: Path) -> None:
    cells = (
        NumaCell(0, (0, 1), 1 << 30, memory_kind=MemoryKind.DRAM),
        NumaCell(1, (), 1 << 30, memory_kind=MemoryKind.DRAM),
    )
    gpus = [Gpu(index=0, pci_bus_id="0000:18:00.0", numa_node=0)]
    assert link_gpu_memory_cells(cells, gpus) == (cells, ())
    assert HGX_H100.gpus[0].gpu_numa_node is None


def test_a_named_gpu_memory_node_with_cpus_stays_a_cpu_cell_with_a_warning() -> None:
    cells = (NumaCell(0, (0, 1), 1 << 30, memory_kind=MemoryKind.DRAM),)
    gpus = [Gpu(index=3, pci_bus_id="0000:18:00.0", numa_node=0, gpu_numa_node=0)]
    linked, warnings = link_gpu_memory_cells(cells, gpus)
    assert linked == cells
    (warning,) = warnings
    assert "NUMA node 0 as GPU 3's own memory, but the kernel lists CPUs in it" in warning.message
