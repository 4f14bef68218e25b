"""NVIDIA GPUs among DRA devices: full GPUs, MIG devices and VFIO passthrough GPUs, with their identity.

The attributes come from the NVIDIA DRA driver (``kubernetes-sigs/dra-driver-nvidia-gpu``,
``cmd/gpu-kubelet-plugin/deviceinfo.go``) as its releases published them: ``type`` (gpu, mig, vfio),
``uuid``, ``productName``, ``parentUUID`` and ``profile`` on MIG devices, the standard
``resource.kubernetes.io/pciBusID`` (the driver-local ``pcieBusID`` before v25.12), ``pcieRoot`` (v25.3
on), ``numaNode`` (scalar or list, the physical node first; VFIO's older ``numa``), and ``index``/``minor``
before v25.8. A missing attribute is ``None``, never a guess.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass

from placement.core.dra.device_types import STANDARD_DOMAIN, Attribute, AttributeKind, Device
from placement.core.dra.pools import DeviceRef, PoolDevice

NVIDIA_GPU_DRIVERS = ("gpu.nvidia.com",)
_PCI_BUS_ID = re.compile(r"(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])")
# Device names at driver HEAD (gpu-<parentMinor>-mig-...) and in older drivers (gpu-0-mig-19-6-1).
_MIG_PARENT_NAME = re.compile(r"(gpu-[0-9]+)-mig-.+")


class GpuKind(enum.StrEnum):
    GPU = "gpu"
    MIG = "mig"
    VFIO = "vfio"


@dataclass(frozen=True)
class DraGpu:
    """One GPU-like DRA device; ``ref`` is how an allocation names it."""

    ref: DeviceRef
    kind: GpuKind
    uuid: str | None = None
    product_name: str | None = None
    pci_bus_id: str | None = None  # normalised: lower case, 4-digit domain; a MIG device's is its parent's
    pcie_root: str | None = None
    numa_nodes: tuple[int, ...] = ()  # the physical node first, then same-socket nodes (KEP-6072 list form)
    memory_bytes: int | None = None
    parent_uuid: str | None = None  # MIG only
    parent_device: str | None = None  # MIG only: the parent's device name when the name follows the convention
    profile: str | None = None  # MIG only, e.g. "1g.10gb"
    index: int | None = None  # drivers before v25.8
    minor: int | None = None  # drivers before v25.8

    @property
    def numa_node(self) -> int | None:
        """The NUMA node the device is attached to (the first element of the list form)."""
        return self.numa_nodes[0] if self.numa_nodes else None


def normalize_pci_bus_id(text: str) -> str | None:
    """``dddd:bb:dd.f`` in lower case from sysfs, NVML (8-digit domain) or domain-less forms; else None."""
    match = _PCI_BUS_ID.fullmatch(text.strip())
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    domain_number = int(domain or "0", 16)
    if domain_number > 0xFFFF:
        return None
    return f"{domain_number:04x}:{bus.lower()}:{device.lower()}.{function}"


def gpu_identity(entry: PoolDevice, *, drivers: Iterable[str] = NVIDIA_GPU_DRIVERS) -> DraGpu | None:
    """The GPU a device of one of ``drivers`` stands for; None for other drivers' devices and other types."""
    driver = entry.slice.driver
    if driver not in tuple(drivers):
        return None
    device = entry.device
    kind = _kind(device, driver)
    if kind is None:
        return None
    memory = device.capacity_of(driver, "addressableMemory" if kind is GpuKind.VFIO else "memory")
    parent_name = _MIG_PARENT_NAME.fullmatch(device.name) if kind is GpuKind.MIG else None
    bus_id = _string(device, STANDARD_DOMAIN, "pciBusID") or _string(device, driver, "pcieBusID")
    return DraGpu(
        ref=entry.ref,
        kind=kind,
        uuid=_string(device, driver, "uuid"),
        product_name=_string(device, driver, "productName"),
        pci_bus_id=normalize_pci_bus_id(bus_id) if bus_id else None,
        pcie_root=_string(device, STANDARD_DOMAIN, "pcieRoot"),
        numa_nodes=_ints(device.attribute(STANDARD_DOMAIN, "numaNode") or device.attribute(driver, "numa")),
        memory_bytes=memory.value if memory else None,
        parent_uuid=_string(device, driver, "parentUUID"),
        parent_device=parent_name.group(1) if parent_name else None,
        profile=_string(device, driver, "profile"),
        index=_int(device, driver, "index"),
        minor=_int(device, driver, "minor"),
    )


def dra_gpus(entries: Iterable[PoolDevice], *, drivers: Iterable[str] = NVIDIA_GPU_DRIVERS) -> tuple[DraGpu, ...]:
    """The GPUs among ``entries``, in their order."""
    wanted = tuple(drivers)
    found = (gpu_identity(e, drivers=wanted) for e in entries)
    return tuple(g for g in found if g is not None)


def _kind(device: Device, driver: str) -> GpuKind | None:
    """The ``type`` attribute; without one (early drivers), a parent UUID or a MIG- UUID means MIG."""
    published = _string(device, driver, "type")
    if published is not None:
        return GpuKind(published) if published in GpuKind.__members__.values() else None
    uuid = _string(device, driver, "uuid") or ""
    is_mig = device.attribute(driver, "parentUUID") is not None or uuid.startswith("MIG-")
    return GpuKind.MIG if is_mig else GpuKind.GPU


def _string(device: Device, domain: str, id: str) -> str | None:
    attribute = device.attribute(domain, id)
    return attribute.value if attribute and isinstance(attribute.value, str) else None


def _int(device: Device, domain: str, id: str) -> int | None:
    attribute = device.attribute(domain, id)
    if attribute is None or attribute.kind is not AttributeKind.INT or isinstance(attribute.value, bool):
        return None
    return attribute.value if isinstance(attribute.value, int) else None


def _ints(attribute: Attribute | None) -> tuple[int, ...]:
    if attribute is None or attribute.kind not in (AttributeKind.INT, AttributeKind.INTS):
        return ()
    return tuple(v for v in attribute.elements if isinstance(v, int) and not isinstance(v, bool))
