"""PCI functions and network functions, read from sysfs.

``discover_pci`` reads ``/sys/bus/pci/devices/*`` for the devices and ``/sys/class/net/*`` plus
``/sys/class/infiniband/*`` for the network functions on them. A damaged or missing file costs
one ``DiscoveryWarning`` and a best-effort value, never an exception.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

from agent.hostfs import MAX_NUMA_NODES, HostFS, HostFSError
from kubenexus.topology.cpulist import MAX_CPUS
from kubenexus.topology.model import DiscoveryWarning, Nic, PciDevice

PCI_BUS = "/sys/bus/pci"
PCI_DEVICES = "/sys/bus/pci/devices"
NET_CLASS = "/sys/class/net"
RDMA_CLASS = "/sys/class/infiniband"
VIRTUAL_DEVICES = "/sys/devices/virtual/"

# Domains may have 5 hex digits (Intel VMD, Hyper-V), so {4,}; the kernel writes lowercase.
_BUS_ID = re.compile(r"([0-9a-f]{4,}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])")
_ROOT = re.compile(r"pci[0-9a-f]{4,}:[0-9a-f]{2}")
# The kernel prints these as "0x%06x" and "0x%04x": a fixed width also catches truncation.
_CLASS = re.compile(r"0x[0-9a-f]{6}")
_ID = re.compile(r"0x[0-9a-f]{4}")

_T = TypeVar("_T")


@dataclass(frozen=True)
class PciReport:
    devices: tuple[PciDevice, ...] = ()  # sorted by bus id (numerically: domain, bus, device, function)
    nics: tuple[Nic, ...] = ()  # sorted by PCI bus id
    warnings: tuple[DiscoveryWarning, ...] = ()


def discover_pci(fs: HostFS, *, cpu_id_limit: int = MAX_CPUS, numa_nodes: Collection[int] | None = None) -> PciReport:
    """Every PCI function and every network function on one, as the host's sysfs shows them.

    A host without ``/sys/bus/pci`` (a kernel built without PCI, some VMs and containers) has no PCI
    devices: that is a fact, not a failure, so it yields an empty device list and no warning. A present
    ``/sys/bus/pci`` whose ``devices`` directory is unreadable is a failure and yields one warning.
    Absent ``/sys/class/net`` or ``/sys/class/infiniband`` likewise just mean no such devices.
    Values that cannot be read fall back to: 0 for class/vendor/device, None for the NUMA node,
    () for local CPUs, () and None for bridge path and root; each fallback comes with a warning.
    A NUMA node that is not one of ``numa_nodes`` (the host's cells; when not given, any id the kernel
    can have) and a local CPU list past ``cpu_id_limit`` are impossible, so they fall back too.
    """
    warnings: list[DiscoveryWarning] = []
    known_nodes = range(MAX_NUMA_NODES) if numa_nodes is None else numa_nodes
    devices = _read_devices(fs, cpu_id_limit, known_nodes, warnings) if fs.exists(PCI_BUS) else ()
    nics = _read_nics(fs, warnings)
    return PciReport(devices=devices, nics=nics, warnings=tuple(warnings))


def bus_id_key(bus_id: str) -> tuple[int, ...]:
    """Numeric sort key of a sysfs bus id ("10000:00:04.0" sorts after "ffff:00:00.0")."""
    match = _BUS_ID.fullmatch(bus_id)
    if match is None:
        raise ValueError(f"not a PCI bus id: {bus_id!r}")
    return tuple(int(group, 16) for group in match.groups())


def _read_devices(
    fs: HostFS, cpu_id_limit: int, numa_nodes: Collection[int], warnings: list[DiscoveryWarning]
) -> tuple[PciDevice, ...]:
    try:
        names = fs.listdir(PCI_DEVICES)
    except HostFSError as error:
        warnings.append(DiscoveryWarning("pci", f"cannot list PCI devices: {error.problem}", PCI_DEVICES))
        return ()
    bus_ids = []
    for name in names:
        if _BUS_ID.fullmatch(name):
            bus_ids.append(name)
        else:
            path = f"{PCI_DEVICES}/{name}"
            warnings.append(DiscoveryWarning("pci", f"skipped {name!r}: not a PCI bus id", path))
    return tuple(
        _read_device(fs, bus_id, cpu_id_limit, numa_nodes, warnings) for bus_id in sorted(bus_ids, key=bus_id_key)
    )


def _read_device(
    fs: HostFS, bus_id: str, cpu_id_limit: int, numa_nodes: Collection[int], warnings: list[DiscoveryWarning]
) -> PciDevice:
    def parse_numa_node(text: str) -> int | None:
        node = _parse_numa_node(text)
        if node is not None and node not in numa_nodes:
            raise ValueError(f"is {node}, not a NUMA node of this host")
        return node

    def read(attribute: str, parse: Callable[[str], _T], fallback: _T) -> _T:
        path = f"{PCI_DEVICES}/{bus_id}/{attribute}"
        try:
            return parse(fs.read_str(path))
        except HostFSError as error:
            problem = error.problem
        except ValueError as error:
            problem = str(error)
        warnings.append(DiscoveryWarning("pci", f"{bus_id}: {attribute} {problem}; using {fallback}", path))
        return fallback

    bridge_path, root = _placement(fs, bus_id, warnings)
    return PciDevice(
        bus_id=bus_id,
        class_code=read("class", _parse_class, 0),
        vendor_id=read("vendor", _parse_id, 0),
        device_id=read("device", _parse_id, 0),
        numa_node=read("numa_node", parse_numa_node, None),
        local_cpus=_local_cpus(fs, bus_id, cpu_id_limit, warnings),
        bridge_path=bridge_path,
        root=root,
    )


def _parse_class(text: str) -> int:
    return _parse_hex(_CLASS, text)


def _parse_id(text: str) -> int:
    return _parse_hex(_ID, text)


def _parse_hex(pattern: re.Pattern[str], text: str) -> int:
    if not pattern.fullmatch(text):
        raise ValueError(f"is {text[:40]!r}, expected the kernel's {pattern.pattern!r}")
    return int(text, 16)


def _parse_numa_node(text: str) -> int | None:
    try:
        node = int(text)  # the kernel writes -1 for "no affinity"
    except ValueError:
        raise ValueError(f"is {text[:40]!r}, expected a NUMA node id or -1") from None
    if node < -1:
        raise ValueError(f"is {node}, expected a NUMA node id or -1")
    return None if node == -1 else node


def _local_cpus(fs: HostFS, bus_id: str, cpu_id_limit: int, warnings: list[DiscoveryWarning]) -> tuple[int, ...]:
    """``local_cpulist``, else the ``local_cpus`` mask (the only one kernels before 2.6.26 have)."""
    problems: list[tuple[str, str]] = []
    cpus: tuple[int, ...] = ()
    for attribute, reader in (("local_cpulist", fs.read_cpulist), ("local_cpus", fs.read_cpumask)):
        path = f"{PCI_DEVICES}/{bus_id}/{attribute}"
        try:
            cpus = reader(path, limit=cpu_id_limit)
        except HostFSError as error:
            problems.append((path, f"{attribute} {error.problem}"))
            continue
        if cpus:
            break
        problems.append((path, f"{attribute} lists no CPUs"))
    fallback = "using local_cpus" if cpus else "locality unknown"
    warnings.extend(DiscoveryWarning("pci", f"{bus_id}: {problem}; {fallback}", path) for path, problem in problems)
    return cpus


def _placement(fs: HostFS, bus_id: str, warnings: list[DiscoveryWarning]) -> tuple[tuple[str, ...], str | None]:
    """The bridge path and root complex, from where the device link points into /sys/devices.

    Behind a VMD controller the path crosses two roots (``pci0000:00/0000:00:0e.0/pci10000:e0/...``);
    the host-side one is the root complex, and the VMD function is part of the bridge path.
    """
    link = f"{PCI_DEVICES}/{bus_id}"
    try:
        real = fs.realpath(link)
    except HostFSError as error:  # a link loop
        warnings.append(DiscoveryWarning("pci", f"{bus_id}: {error.problem}; bridge path unknown", link))
        return (), None
    parts = real.split("/")
    roots = [part for part in parts if _ROOT.fullmatch(part)]
    if roots and parts[-1] == bus_id:
        return tuple(part for part in parts[:-1] if _BUS_ID.fullmatch(part)), roots[0]
    problem = f"resolves to {real}, not to a device under a PCI root"
    warnings.append(DiscoveryWarning("pci", f"{bus_id}: {problem}; bridge path unknown", link))
    return (), None


def _read_nics(fs: HostFS, warnings: list[DiscoveryWarning]) -> tuple[Nic, ...]:
    netdevs: dict[str, list[str]] = {}
    rdma_devices: dict[str, list[str]] = {}
    for class_dir, found in ((NET_CLASS, netdevs), (RDMA_CLASS, rdma_devices)):
        for name in _list_class(fs, class_dir, warnings):
            bus_id = _function_of(fs, f"{class_dir}/{name}", warnings)
            if bus_id is not None:
                found.setdefault(bus_id, []).append(name)
    nics = []
    for bus_id in sorted(netdevs.keys() | rdma_devices.keys(), key=bus_id_key):
        on_netdevs, on_rdma = tuple(netdevs.get(bus_id, ())), tuple(rdma_devices.get(bus_id, ()))
        name = (on_rdma or on_netdevs)[0]
        nics.append(Nic(name=name, pci_bus_id=bus_id, netdevs=on_netdevs, rdma_devices=on_rdma))
    return tuple(nics)


def _list_class(fs: HostFS, class_dir: str, warnings: list[DiscoveryWarning]) -> list[str]:
    if not fs.exists(class_dir):
        return []
    try:
        return fs.listdir(class_dir)
    except HostFSError as error:
        warnings.append(DiscoveryWarning("net", f"cannot list {class_dir}: {error.problem}", class_dir))
        return []


def _function_of(fs: HostFS, entry: str, warnings: list[DiscoveryWarning]) -> str | None:
    """The PCI function a netdev or RDMA device sits on; None for virtual and non-PCI devices.

    The ``device`` link names the parent device, which may be a child of the PCI function (virtio:
    ``0000:00:03.0/virtio0``), so the nearest PCI function on its resolved path counts, as in hwloc.
    The kernel puts the class device itself at ``<parent>/<class>/<name>``; a ``device`` link that
    disagrees is reported (on pre-2.6.26 layouts the class entry is a directory and cannot disagree).
    """
    link = f"{entry}/device"
    try:
        real = fs.realpath(entry)
        if real.startswith(VIRTUAL_DEVICES):
            return None
        device = fs.realpath(link)
    except HostFSError as error:
        warnings.append(DiscoveryWarning("net", f"cannot resolve {entry}: {error.problem}", entry))
        return None
    if not fs.is_dir(device):
        warnings.append(DiscoveryWarning("net", f"{link} is missing or dangling; skipped {entry}", link))
        return None
    if real != entry and posixpath.dirname(posixpath.dirname(real)) != device:
        problem = f"{link} resolves to {device}, but {entry} sits at {real}"
        warnings.append(DiscoveryWarning("net", f"{problem}; trusting the device link", link))
    functions = [part for part in device.split("/") if _BUS_ID.fullmatch(part)]
    return functions[-1] if functions else None
