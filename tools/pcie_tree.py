"""PCIe trees of authored machines, laid out as sysfs shows them: slots behind switches and root ports.

Shared by the demo machine builder (``tools/build_demo_machines.py``) and the tests' GPU machines
(``tests/machines/gpu_hardware.py``), so both describe a slot, and the switch ports above it, alike.
Bus numbers below a host bridge follow the usual enumeration: the root port on the host bridge's bus,
the switch's upstream port one bus below, its downstream ports one further.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubenexus.topology.model import PciDevice

NVIDIA = 0x10DE
MELLANOX = 0x15B3
VIRTIO = 0x1AF4
CLASS_3D_CONTROLLER = 0x030200
CLASS_BRIDGE_OTHER = 0x068000  # how NVSwitches enumerate
CLASS_INFINIBAND = 0x020700
CLASS_ETHERNET = 0x020000
CLASS_PCI_BRIDGE = 0x060400
SWITCH_PORT = (0x1000, 0xC030)  # Broadcom PEX89000 switch port: vendor, device


@dataclass(frozen=True)
class PcieSlot:
    """Where a function hangs in the PCIe tree, in sysfs terms."""

    root: str  # the host bridge directory, "pci0000:15"
    bridges: tuple[str, ...]  # bus ids of the bridges above the function, host side first

    def device(
        self,
        bus_id: str,
        *,
        class_code: int,
        vendor_id: int,
        device_id: int,
        numa_node: int | None,
        local_cpus: tuple[int, ...],
    ) -> PciDevice:
        """The function ``bus_id`` (sysfs form) in this slot."""
        return PciDevice(
            bus_id=bus_id,
            class_code=class_code,
            vendor_id=vendor_id,
            device_id=device_id,
            numa_node=numa_node,
            local_cpus=local_cpus,
            bridge_path=self.bridges,
            root=self.root,
        )


def switch_slot(root_bus: int, port: int) -> PcieSlot:
    """Behind downstream port ``port`` of a PCIe switch on a root port of host bridge ``root_bus``."""
    return PcieSlot(
        root=f"pci0000:{root_bus:02x}",
        bridges=(
            f"0000:{root_bus:02x}:01.1",
            f"0000:{root_bus + 1:02x}:00.0",
            f"0000:{root_bus + 2:02x}:{port:02x}.0",
        ),
    )


def cascade_slot(root_bus: int, branch: int, port: int) -> PcieSlot:
    """Behind port ``port`` of a second-level switch on downstream port ``branch`` of a first-level one."""
    first = switch_slot(root_bus, branch)
    return PcieSlot(
        root=first.root,
        bridges=(
            *first.bridges,
            f"0000:{root_bus + 3 + 2 * branch:02x}:00.0",
            f"0000:{root_bus + 4 + 2 * branch:02x}:{port:02x}.0",
        ),
    )


def root_port_slot(bus: int) -> PcieSlot:
    """Alone on a root port of its own host bridge, one bus below it."""
    return PcieSlot(root=f"pci0000:{bus - 1:02x}", bridges=(f"0000:{bus - 1:02x}:01.0",))


def with_switch_ports(functions: Iterable[PciDevice]) -> tuple[PciDevice, ...]:
    """``functions`` and every bridge above them, each bridge before the first function below it.

    The bridges are switch ports; each takes the NUMA node and CPUs of that first function.
    """
    devices: dict[str, PciDevice] = {}
    for function in functions:
        for depth, bridge in enumerate(function.bridge_path):
            devices.setdefault(
                bridge,
                PciDevice(
                    bus_id=bridge,
                    class_code=CLASS_PCI_BRIDGE,
                    vendor_id=SWITCH_PORT[0],
                    device_id=SWITCH_PORT[1],
                    numa_node=function.numa_node,
                    local_cpus=function.local_cpus,
                    bridge_path=function.bridge_path[:depth],
                    root=function.root,
                ),
            )
        devices[function.bus_id] = function
    return tuple(devices.values())
