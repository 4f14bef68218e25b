"""Runs every discovery source against one host and assembles the NodeTopology."""

from __future__ import annotations

from types import ModuleType

from agent.hostfs import HostFS
from agent.sources.cpu import discover_machine
from agent.sources.numa import discover_numa, link_gpu_memory_cells
from agent.sources.nvml import discover_gpus
from agent.sources.pci import discover_pci
from kubenexus.topology.model import DiscoveryWarning, NodeTopology
from kubenexus.topology.nvlink import nvlink_pair_counts
from kubenexus.topology.paths import build_device_links

# The link matrix has one entry per pair of GPUs and NICs: quadratic in their count. The largest real boards
# carry 16 GPUs and a few dozen network functions; a host listing thousands is broken or hostile, and its model
# would not fit a node annotation either. The first of each (in the sources' order: GPU index, bus id) are
# modelled, with a warning; discovery stays linear in the functions listed.
MAX_MODELLED_DEVICES = 128


class UnusableHostRoot(Exception):
    """The host root holds neither /sys nor /proc: nothing can be discovered there."""


def check_host_root(fs: HostFS) -> None:
    if not fs.is_dir("/"):
        raise UnusableHostRoot(f"host root {fs.root} is not a directory")
    if not fs.is_dir("/sys/devices/system/cpu") and not fs.is_dir("/proc"):
        raise UnusableHostRoot(
            f"host root {fs.root} has neither /sys/devices/system/cpu nor /proc; "
            "point --host-root at a directory that holds the host's sys/ and proc/"
        )


def discover(fs: HostFS, *, nvml: ModuleType | None, nvml_with_host_root: bool = False) -> NodeTopology:
    """The whole topology of the host under ``fs``; ``nvml`` is the pynvml module, or None to skip NVML.

    NVML always describes the machine this process runs on, so with a host root other than ``/`` it
    is used only when ``nvml_with_host_root`` says that root is this machine's (a DaemonSet mounting
    the host's /sys at /host), never for a snapshot of another machine.
    """
    fs.forget_links()
    check_host_root(fs)
    cpu = discover_machine(fs)
    numa = discover_numa(fs, online_cpus=cpu.machine.online_cpus, cpu_id_limit=cpu.cpu_id_limit)
    cells = frozenset(cell.id for cell in numa.cells)
    pci = discover_pci(fs, cpu_id_limit=cpu.cpu_id_limit, numa_nodes=cells)
    gpus = discover_gpus(fs, pci.devices, nvml=nvml, allow_fake_root=nvml_with_host_root, numa_nodes=cells)
    modelled_gpus, modelled_nics = gpus.gpus[:MAX_MODELLED_DEVICES], pci.nics[:MAX_MODELLED_DEVICES]
    numa_cells, gpu_memory_warnings = link_gpu_memory_cells(numa.cells, modelled_gpus)
    links = build_device_links(
        modelled_gpus,
        modelled_nics,
        {device.bus_id: device for device in pci.devices},
        nvlink_pair_counts(gpus.gpus),
        gpus.nvml_paths,
    )
    return NodeTopology(
        machine=cpu.machine,
        numa_cells=numa_cells,
        distances=numa.distances,
        memory_attributes=numa.memory_attributes,
        pci_devices=pci.devices,
        nics=modelled_nics,
        gpus=modelled_gpus,
        links=links,
        gpu_source=gpus.source,
        warnings=(
            cpu.warnings
            + numa.warnings
            + pci.warnings
            + gpus.warnings
            + gpu_memory_warnings
            + _beyond_the_model("gpu", "GPU", len(gpus.gpus))
            + _beyond_the_model("net", "network", len(pci.nics))
        ),
    )


def _beyond_the_model(source: str, kind: str, found: int) -> tuple[DiscoveryWarning, ...]:
    if found <= MAX_MODELLED_DEVICES:
        return ()
    message = (
        f"{found} {kind} functions: only the first {MAX_MODELLED_DEVICES} are modelled (no real node has that many; "
        "the link matrix grows with the square of the count)"
    )
    return (DiscoveryWarning(source, message),)
