"""How two devices reach each other, in ``nvidia-smi topo -m`` / NVML vocabulary, from the PCI tree.

NVML's ``nvmlDeviceGetTopologyCommonAncestor`` levels and the classes here, in terms of
``PciDevice.bridge_path`` (bridges above the device, host side first) and ``PciDevice.root``:

- ``X`` (same device): the same bus id.
- ``PIX`` (NVML_TOPOLOGY_SINGLE): they share a bridge, and each sits at most one bridge below the
  deepest shared one: the two sides of one PCIe switch (upstream port shared, one downstream port
  each), or one root or switch port (functions of one card).
- ``PXB`` (NVML_TOPOLOGY_MULTIPLE): they share a bridge, but one of them sits two or more bridges
  below it (cascaded switches); the host bridge is not crossed.
- ``PHB`` (NVML_TOPOLOGY_HOSTBRIDGE): the same root complex, no shared bridge; the path turns
  around in the host bridge (different root ports, or devices on the root bus itself).
- ``NODE`` (NVML_TOPOLOGY_NODE): different root complexes on the same NUMA node.
- ``SYS`` (NVML_TOPOLOGY_SYSTEM): different root complexes on different NUMA nodes, or where the
  NUMA node of either side is unknown.

A PCIe switch shows in sysfs as an upstream-port bridge with one downstream-port bridge per
slot, so two GPUs behind one switch share the upstream port and differ in the downstream port:
that is the "single bridge" NVML means (the switch), hence PIX rather than a count of 3 bridges.

Unknown NUMA is SYS, not NODE: a placement decision must never be promised locality the host
did not show; where every device's NUMA is unknown every cross-root pair is SYS alike, so the
ranking among pairs is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from kubenexus.topology.model import DeviceLink, Gpu, Nic, PathKind, PciDevice

_Value = TypeVar("_Value")


def classify_pci_path(a: PciDevice, b: PciDevice, devices_by_bus_id: Mapping[str, PciDevice] | None = None) -> PathKind:
    """The PCIe class of the path from ``a`` to ``b`` (never NVLINK; see the module docstring).

    ``devices_by_bus_id`` (the host's PCI devices) lends a device without a NUMA node the node of
    its nearest bridge that has one, for the NODE/SYS decision across root complexes.
    """
    if a.bus_id == b.bus_id:
        return PathKind.SELF
    if a.root is None or b.root is None or a.root != b.root:  # an unknown root promises no shared one
        node_a = _numa_node(a, devices_by_bus_id)
        node_b = _numa_node(b, devices_by_bus_id)
        if node_a is not None and node_a == node_b:
            return PathKind.NODE
        return PathKind.SYS
    shared = _shared_prefix_length(a.bridge_path, b.bridge_path)
    if shared == 0:
        return PathKind.PHB
    below = max(len(a.bridge_path), len(b.bridge_path)) - shared
    return PathKind.PIX if below <= 1 else PathKind.PXB


def build_device_links(
    gpus: Sequence[Gpu],
    nics: Sequence[Nic],
    pci_devices: Mapping[str, PciDevice],
    nvlink_counts: Mapping[tuple[int, int], int],
    nvml_paths: Mapping[tuple[int, int], PathKind] | None = None,
) -> tuple[DeviceLink, ...]:
    """One link per unordered pair of ``GPU<index>`` and ``NIC<position>``, GPUs first, in input order.

    A GPU pair with a positive count in ``nvlink_counts`` (keyed by GPU index, either order) is
    NVLINK; every other pair gets its PCIe class from sysfs. ``nvml_paths`` (NVML's common-ancestor
    answer per GPU index pair, either order) is kept as ``nvml_path`` only where it differs from the
    sysfs PCIe class, NVLink pairs included, since that PCIe answer still decides peer-to-peer
    fallbacks.

    A device whose bus id is missing from ``pci_devices`` has no sysfs answer: its GPU pairs take
    NVML's answer when there is one, every other pair is SYS (the worst class, so nothing is
    over-promised). This function cannot warn; the caller, which knows why the device is missing,
    records the DiscoveryWarning.
    """
    nvml = nvml_paths or {}
    devices: list[tuple[str, str, int | None]] = [(f"GPU{gpu.index}", gpu.pci_bus_id, gpu.index) for gpu in gpus]
    devices += [(f"NIC{position}", nic.pci_bus_id, None) for position, nic in enumerate(nics)]
    links: list[DeviceLink] = []
    for i, (name_a, bus_a, gpu_a) in enumerate(devices):
        for name_b, bus_b, gpu_b in devices[i + 1 :]:
            nvml_answer = None
            nvlinks = 0
            if gpu_a is not None and gpu_b is not None:
                nvml_answer = _either_order(nvml, gpu_a, gpu_b)
                nvlinks = _either_order(nvlink_counts, gpu_a, gpu_b) or 0
            device_a, device_b = pci_devices.get(bus_a), pci_devices.get(bus_b)
            if device_a is not None and device_b is not None:
                pcie = classify_pci_path(device_a, device_b, pci_devices)
                disagreement = nvml_answer if nvml_answer is not None and nvml_answer != pcie else None
            else:
                pcie = nvml_answer if nvml_answer is not None else PathKind.SYS
                disagreement = None
            if nvlinks > 0:
                links.append(DeviceLink(name_a, name_b, PathKind.NVLINK, nvlinks, disagreement))
            else:
                links.append(DeviceLink(name_a, name_b, pcie, 0, disagreement))
    return tuple(links)


def _either_order(table: Mapping[tuple[int, int], _Value], first: int, second: int) -> _Value | None:
    value = table.get((first, second))
    return value if value is not None else table.get((second, first))


def _shared_prefix_length(left: tuple[str, ...], right: tuple[str, ...]) -> int:
    length = 0
    for bridge_left, bridge_right in zip(left, right, strict=False):
        if bridge_left != bridge_right:
            break
        length += 1
    return length


def _numa_node(device: PciDevice, devices_by_bus_id: Mapping[str, PciDevice] | None) -> int | None:
    if device.numa_node is not None or devices_by_bus_id is None:
        return device.numa_node
    # A device that reads NUMA -1 still sits where its bridges sit: the nearest one that knows speaks for it.
    for bus_id in reversed(device.bridge_path):
        bridge = devices_by_bus_id.get(bus_id)
        if bridge is not None and bridge.numa_node is not None:
            return bridge.numa_node
    return None
