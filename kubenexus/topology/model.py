"""The node topology model: frozen dataclasses, pure data, no I/O.

Every discovery source fills part of a ``NodeTopology``; the publisher and the
placement service read the same model back through the codecs in this package.
Ids are the kernel's own (NUMA ids may be sparse: 0, 1, 2, 33, ...). A value the
host did not reveal is ``None``, never a made-up default, and the reason goes into
``warnings``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

SCHEMA_VERSION = 1


class MemoryKind(enum.StrEnum):
    """What backs a NUMA cell's memory, when the host tells."""

    DRAM = "DRAM"
    HBM = "HBM"
    NVM = "NVM"
    GPU = "GPU"  # GPU memory exposed as a NUMA node (GH200/GB200, older coherent platforms)
    UNKNOWN = "unknown"


class PathKind(enum.StrEnum):
    """How two devices reach each other, in ``nvidia-smi topo -m`` vocabulary (best first)."""

    SELF = "X"
    NVLINK = "NV"  # printed as NV<count>
    PIX = "PIX"  # at most one PCIe bridge between them
    PXB = "PXB"  # several PCIe bridges, no host bridge
    PHB = "PHB"  # through one PCIe host bridge
    NODE = "NODE"  # different host bridges within one NUMA node
    SYS = "SYS"  # across NUMA nodes (SMP interconnect)


@dataclass(frozen=True)
class DiscoveryWarning:
    """Something discovery could not read or did not trust; the model says what it did instead."""

    source: str  # "cpu", "numa", "memory", "pci", "net", "nvml", ...
    message: str
    path: str | None = None  # the host path involved, as seen from the host root


@dataclass(frozen=True)
class Machine:
    cpu_model: str | None
    architecture: str | None
    sockets: int | None  # None where the source does not tell (an imported nvidia-smi matrix)
    cores: int | None  # physical cores among online CPUs
    threads: int  # online logical CPUs
    online_cpus: tuple[int, ...]
    offline_cpus: tuple[int, ...]


@dataclass(frozen=True)
class HugePages:
    size_kib: int
    total: int
    free: int | None = None


@dataclass(frozen=True)
class MemorySideCache:
    """A memory-side cache in front of a NUMA cell (``nodeN/memory_side_cache/indexK``)."""

    level: int
    size_bytes: int
    line_size: int | None
    indexing: int | None  # 0 direct-mapped, 1 complex, 2 unknown (kernel ABI)
    write_policy: int | None  # 0 write-back, 1 write-through, 2 unknown (kernel ABI)


@dataclass(frozen=True)
class NumaCell:
    id: int
    cpus: tuple[int, ...]  # as sysfs lists them; empty for memory-only cells
    memory_bytes: int | None  # MemTotal of the cell, hugepages included
    hugepages: tuple[HugePages, ...] = ()
    memory_kind: MemoryKind = MemoryKind.UNKNOWN
    memory_side_caches: tuple[MemorySideCache, ...] = ()


@dataclass(frozen=True)
class Distances:
    """The SLIT matrix; ``matrix[i][j]`` is the distance from ``ids[i]`` to ``ids[j]``."""

    ids: tuple[int, ...]
    matrix: tuple[tuple[int, ...], ...]

    def get(self, source: int, target: int) -> int | None:
        if source not in self.ids or target not in self.ids:
            return None
        return self.matrix[self.ids.index(source)][self.ids.index(target)]


@dataclass(frozen=True)
class MemoryAttribute:
    """HMAT performance from an initiator cell to a target cell (``nodeT/accessC/initiators``).

    Access class 0 counts every initiator (CPUs and generic initiators such as GPUs);
    access class 1 counts CPUs only. Bandwidth in MB/s, latency in ns.
    """

    target: int
    initiator: int
    access_class: int
    read_bandwidth_mbps: int | None = None
    write_bandwidth_mbps: int | None = None
    read_latency_ns: int | None = None
    write_latency_ns: int | None = None


@dataclass(frozen=True)
class PciDevice:
    bus_id: str  # sysfs form, "0000:18:00.0"
    class_code: int  # 24-bit class, e.g. 0x030200 for a 3D controller
    vendor_id: int
    device_id: int
    numa_node: int | None  # None where the kernel says -1 or does not say
    local_cpus: tuple[int, ...]
    bridge_path: tuple[str, ...]  # bus ids of the PCI bridges above it, host side first
    root: str | None  # the PCIe root complex, "pci0000:00"; None when sysfs did not show it

    @property
    def is_bridge(self) -> bool:
        return self.class_code >> 8 == 0x0604


@dataclass(frozen=True)
class Nic:
    """A network function, named by its RDMA device when it has one, else by its netdev."""

    name: str
    pci_bus_id: str
    netdevs: tuple[str, ...] = ()
    rdma_devices: tuple[str, ...] = ()


class NvLinkRemote(enum.StrEnum):
    GPU = "gpu"
    SWITCH = "switch"
    IBMNPU = "ibmnpu"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class NvLink:
    link: int
    active: bool
    version: int | None = None
    remote_type: NvLinkRemote = NvLinkRemote.UNKNOWN
    remote_bus_id: str | None = None


@dataclass(frozen=True)
class Gpu:
    index: int
    pci_bus_id: str  # sysfs form
    uuid: str | None = None
    name: str | None = None
    memory_bytes: int | None = None
    compute_capability: str | None = None  # "9.0"
    # The CPU-side NUMA node the GPU is attached to: what GPU<->CPU alignment uses.
    numa_node: int | None = None
    # Every node the source names as near when it names several (``nvidia-smi topo -m`` "0-1", "0,2"),
    # ascending; () when ``numa_node`` alone says it.
    numa_affinity: tuple[int, ...] = ()
    cpu_affinity: tuple[int, ...] = ()
    # The GPU's own memory as a NUMA node (GH200/GB200: a CPU-less cell, MemoryKind.GPU); None on x86.
    gpu_numa_node: int | None = None
    mig_enabled: bool | None = None
    healthy: bool = True
    health_reason: str | None = None
    nvlinks: tuple[NvLink, ...] = ()
    fabric_clique: str | None = None  # "<clusterUuid>.<cliqueId>" when fabric-attached


@dataclass(frozen=True)
class DeviceLink:
    """How two devices (``GPU0``, ``NIC1``) reach each other; one entry per unordered pair."""

    a: str
    b: str
    path: PathKind
    nvlinks: int = 0  # link count when path is NVLINK
    nvml_path: PathKind | None = None  # NVML's common-ancestor answer, kept only where it disagrees

    @property
    def label(self) -> str:
        return f"NV{self.nvlinks}" if self.path is PathKind.NVLINK else self.path.value


@dataclass(frozen=True)
class KubeletSettings:
    """The kubelet's resource-management settings; filled by the kubelet source."""

    topology_manager_policy: str = "none"
    topology_manager_scope: str = "container"
    cpu_manager_policy: str = "none"
    memory_manager_policy: str = "None"
    reserved_cpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class ResourceAmount:
    """One resource of one NUMA zone, in the kubelet's units.

    ``cpu`` counts whole CPUs; ``memory`` and ``hugepages-*`` count bytes; devices
    (``nvidia.com/gpu``, NIC resources) count devices.
    """

    name: str
    capacity: int
    allocatable: int
    available: int


@dataclass(frozen=True)
class ZoneResources:
    numa_id: int
    resources: tuple[ResourceAmount, ...]


@dataclass(frozen=True)
class NodeTopology:
    machine: Machine
    numa_cells: tuple[NumaCell, ...]
    distances: Distances | None = None
    memory_attributes: tuple[MemoryAttribute, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    nics: tuple[Nic, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    links: tuple[DeviceLink, ...] = ()
    gpu_source: str | None = None  # "nvml", "sysfs" (and why NVML was not used), "nvidia-smi"
    kubelet: KubeletSettings | None = None
    zone_resources: tuple[ZoneResources, ...] = ()  # per NUMA zone, from the kubelet's PodResources API
    pods_fingerprint: str | None = None  # of the pods the zone availability accounts for
    pods_fingerprint_method: str | None = None  # the podfingerprint method: "all", "with-exclusive-resources"
    warnings: tuple[DiscoveryWarning, ...] = field(default=())
    schema_version: int = SCHEMA_VERSION

    def cell(self, numa_id: int) -> NumaCell | None:
        return next((c for c in self.numa_cells if c.id == numa_id), None)

    def pci_device(self, bus_id: str) -> PciDevice | None:
        return next((d for d in self.pci_devices if d.bus_id == bus_id), None)
