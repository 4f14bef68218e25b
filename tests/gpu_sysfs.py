"""A fake sysfs PCI tree for a described GPU machine, laid out as the kernel lays it out.

Functions live under ``/sys/devices/pci<domain>:<bus>/<bridge>/.../<function>``, and
``/sys/bus/pci/devices/<bus id>`` is a relative link into that tree
(``../../../devices/pci0000:15/0000:15:01.1/.../0000:18:00.0``), as are the ``/sys/class/net``
and ``/sys/class/infiniband`` entries of the NICs. Value formats follow the kernel's ABI:
hex ids with ``0x``, ``numa_node`` -1 when unknown, ``local_cpus`` a mask of 32-bit words.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubenexus.topology.cpulist import format_cpulist
from tests.machines.gpu_hardware import GpuMachine, pci_devices


def build_gpu_sysfs(root: Path, machine: GpuMachine) -> Path:
    """Write the machine's PCI functions (bridges, GPUs, NVSwitches, NICs) under ``root``; return ``root``."""
    links = root / "sys/bus/pci/devices"
    links.mkdir(parents=True, exist_ok=True)
    directories: dict[str, Path] = {}
    for device in pci_devices(machine):
        assert device.root is not None
        directory = root / "sys/devices" / device.root
        for bridge in device.bridge_path:
            directory /= bridge
        directory /= device.bus_id
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "vendor").write_text(f"0x{device.vendor_id:04x}\n")
        (directory / "device").write_text(f"0x{device.device_id:04x}\n")
        (directory / "class").write_text(f"0x{device.class_code:06x}\n")
        (directory / "numa_node").write_text(f"{-1 if device.numa_node is None else device.numa_node}\n")
        (directory / "local_cpulist").write_text(f"{format_cpulist(device.local_cpus)}\n")
        (directory / "local_cpus").write_text(f"{cpumask(device.local_cpus)}\n")
        (links / device.bus_id).symlink_to(os.path.relpath(directory, links))
        directories[device.bus_id] = directory
    for other in machine.others:
        for kind, name in (("net", other.netdev), ("infiniband", other.rdma_device)):
            if name is None:
                continue
            entry = directories[other.bus_id] / kind / name
            entry.mkdir(parents=True)
            (entry / "device").symlink_to(os.path.relpath(directories[other.bus_id], entry))
            class_dir = root / "sys/class" / kind
            class_dir.mkdir(parents=True, exist_ok=True)
            (class_dir / name).symlink_to(os.path.relpath(entry, class_dir))
    return root


def cpumask(cpus: tuple[int, ...]) -> str:
    """The kernel's cpumask text: comma-separated 32-bit hex words, most significant first."""
    value = sum(1 << cpu for cpu in set(cpus))
    words = max(1, (max(cpus, default=0) + 32) // 32)
    return ",".join(f"{value >> (32 * word) & 0xFFFFFFFF:08x}" for word in reversed(range(words)))
