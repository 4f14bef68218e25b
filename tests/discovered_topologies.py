"""Every fixture machine as the agent's discovery builds it, for the label and NodeResourceTopology tests.

The fixtures are every real sysfs snapshot and every ``nvidia-smi topo -m`` capture in ../shared/data,
and every fake-NVML GPU machine of the catalogue; ``tests/conftest.py``'s ``built`` fixture hands them out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.discovery import discover
from agent.hostfs import HostFS
from agent.sources.nvml import discover_gpus
from agent.sources.pci import discover_pci
from kubenexus.topology.model import Distances, Machine, MemoryKind, NodeTopology, NumaCell
from kubenexus.topology.nvlink import nvlink_pair_counts
from kubenexus.topology.paths import build_device_links
from kubenexus.topology.topo_matrix import CPU_AFFINITY, parse_topo_matrix
from tests.conftest import GPU_DIR, SnapshotUnpacker, hwloc_snapshot_names, require_shared
from tests.fake_nvml import FakeNvml
from tests.gpu_sysfs import build_gpu_sysfs
from tests.machines.gpu_hardware import ALL_MACHINES, GpuMachine


def capture_names() -> list[str]:
    if not GPU_DIR.is_dir():
        return []
    return sorted(path.name for path in GPU_DIR.glob("*.txt") if CPU_AFFINITY in path.read_text())


# "<source>/<name>"; a missing shared-data folder leaves one id per source that skips with the reason.
FIXTURES = [
    *(f"hwloc/{name}" for name in hwloc_snapshot_names() or ["<no shared data>"]),
    *(f"nvidia-smi/{name}" for name in capture_names() or ["<no shared data>"]),
    *(f"nvml/{machine.name}" for machine in ALL_MACHINES),
]
_MACHINES = {machine.name: machine for machine in ALL_MACHINES}
_BUILT: dict[str, NodeTopology] = {}


def fixture_topology(
    fixture: str, unpack_snapshot: SnapshotUnpacker, tmp_path_factory: pytest.TempPathFactory
) -> NodeTopology:
    """The topology of one fixture machine, built once per session."""
    if fixture not in _BUILT:
        source, name = fixture.split("/", 1)
        if source == "hwloc":
            _BUILT[fixture] = discover(HostFS(str(unpack_snapshot(name))), nvml=None)
        elif source == "nvidia-smi":
            _BUILT[fixture] = parse_topo_matrix(require_shared(GPU_DIR / name).read_text())
        else:
            _BUILT[fixture] = nvml_machine_topology(_MACHINES[name], tmp_path_factory.mktemp(name))
    return _BUILT[fixture]


def nvml_machine_topology(machine: GpuMachine, root: Path) -> NodeTopology:
    """A fake-NVML machine as discovery would assemble it; NUMA cells from the GPUs' published CPU affinity."""
    fs = HostFS(str(build_gpu_sysfs(root, machine)))
    pci = discover_pci(fs)
    report = discover_gpus(fs, pci.devices, nvml=FakeNvml(machine).module, allow_fake_root=True)
    links = build_device_links(
        report.gpus,
        pci.nics,
        {device.bus_id: device for device in pci.devices},
        nvlink_pair_counts(report.gpus),
        report.nvml_paths,
    )
    host_cpus: dict[int, set[int]] = {}
    for spec in machine.gpus:
        host_cpus.setdefault(spec.numa_node, set()).update(spec.cpus)
    cells = [
        NumaCell(node, tuple(sorted(cpus)), None, memory_kind=MemoryKind.DRAM)
        for node, cpus in sorted(host_cpus.items())
    ]
    cells += [
        NumaCell(spec.gpu_numa_node, (), spec.memory_mib << 20, memory_kind=MemoryKind.GPU)
        for spec in machine.gpus
        if spec.gpu_numa_node is not None
    ]
    ids = tuple(cell.id for cell in cells)
    online = tuple(sorted(set().union(*host_cpus.values())))
    return NodeTopology(
        machine=Machine(None, None, None, None, len(online), online, ()),
        numa_cells=tuple(cells),
        distances=Distances(ids, tuple(tuple(10 if a == b else 20 for b in ids) for a in ids)),
        pci_devices=pci.devices,
        nics=pci.nics,
        gpus=report.gpus,
        links=links,
        gpu_source=report.source,
        warnings=pci.warnings + report.warnings,
    )
