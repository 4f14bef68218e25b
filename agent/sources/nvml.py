"""GPUs through NVML, and through sysfs alone when NVML cannot be used.

NVML is a live-only probe: it describes the GPUs of the machine the agent runs on, so a fake
host root (a captured snapshot) gets the sysfs answer unless the caller says otherwise. The
pynvml module is passed in, never imported here at load time, so that a node without the
driver (or a test with a fake module) decides which NVML it gets.

Nothing here raises: a value NVML does not support is ``None``, a lost GPU is reported
unhealthy beside the healthy ones, and an NVML that will not start leaves the sysfs answer
with the reason in ``GpuReport.source``.
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from agent.hostfs import MAX_NUMA_NODES, HostFS
from kubenexus.topology.model import DiscoveryWarning, Gpu, NvLink, NvLinkRemote, PathKind, PciDevice

SOURCE = "nvml"
NVIDIA_VENDOR_ID = 0x10DE
_GPU_CLASSES = (0x0300, 0x0302)  # VGA-compatible controller, 3D controller (class >> 8)
_MASK_WORDS = 64  # 64-bit words per affinity mask: 4096 CPUs or NUMA nodes


@dataclass(frozen=True)
class GpuReport:
    gpus: tuple[Gpu, ...]
    source: str  # "nvml", or "sysfs: NVML unavailable (<reason>)"
    # NVML's PCIe common-ancestor class per GPU index pair (lower index first), to set beside sysfs.
    nvml_paths: Mapping[tuple[int, int], PathKind] = field(default_factory=dict)
    warnings: tuple[DiscoveryWarning, ...] = ()


def load_nvml() -> tuple[ModuleType | None, str | None]:
    """The pynvml module, or None and why not. Importing it does not load the driver library."""
    try:
        import pynvml  # noqa: PLC0415  (lazy: the agent runs without the package on CPU nodes)
    except ImportError as error:
        return None, f"pynvml is not installed ({error})"
    return pynvml, None


def discover_gpus(
    fs: HostFS,
    pci_devices: Sequence[PciDevice],
    *,
    nvml: ModuleType | None,
    allow_fake_root: bool = False,
    numa_nodes: Collection[int] | None = None,
) -> GpuReport:
    """The host's GPUs; ``allow_fake_root`` lets NVML describe a host whose /sys is read from another root
    (a DaemonSet that mounts the host's /sys at /host; tests with a fake NVML).

    A GPU's NUMA node and local CPUs come from its PCI function in ``pci_devices`` (read and checked
    there); a node NVML names instead must be one of ``numa_nodes`` (the host's cells; when not given,
    any id the kernel can have), else it is unknown, with a warning.
    """
    if nvml is None:
        return _from_sysfs(pci_devices, "NVML not used (disabled, or pynvml not installed)", failed=False)
    if not fs.is_live and not allow_fake_root:
        return _from_sysfs(pci_devices, f"host root {fs.root} is not the live host", failed=False)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        return _from_sysfs(pci_devices, f"nvmlInit failed: {error}", failed=True)
    try:
        known_nodes = range(MAX_NUMA_NODES) if numa_nodes is None else numa_nodes
        report = _from_nvml(pci_devices, nvml, known_nodes)
    except Exception as error:  # a driver or binding surprise must not take the agent's loop down
        report = _from_sysfs(pci_devices, f"NVML query failed: {type(error).__name__}: {error}", failed=True)
    try:
        nvml.nvmlShutdown()
    except nvml.NVMLError as error:
        report = replace(report, warnings=(*report.warnings, _warning(f"nvmlShutdown failed: {error}")))
    return report


def normalise_bus_id(nvml_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` as sysfs writes it, ``0000:18:00.0``. Raise ValueError when garbled."""
    domain, bus, slot = nvml_bus_id.strip().split(":")
    device, function = slot.split(".")
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16):x}"


def is_nvidia_gpu(device: PciDevice) -> bool:
    return device.vendor_id == NVIDIA_VENDOR_ID and device.class_code >> 8 in _GPU_CLASSES


def _from_sysfs(pci_devices: Sequence[PciDevice], reason: str, *, failed: bool) -> GpuReport:
    """The GPUs sysfs shows; ``failed`` (NVML broke, not merely skipped) warns where there are GPUs to miss."""
    # NVML numbers GPUs in PCI bus order, so sysfs order gives the same indices.
    found = sorted((d for d in pci_devices if is_nvidia_gpu(d)), key=lambda d: _bus_key(d.bus_id))
    gpus = tuple(
        Gpu(index=index, pci_bus_id=device.bus_id, numa_node=device.numa_node, cpu_affinity=device.local_cpus)
        for index, device in enumerate(found)
    )
    warnings = (_warning(f"GPUs from sysfs only: {reason}"),) if failed and gpus else ()
    return GpuReport(gpus=gpus, source=f"sysfs: NVML unavailable ({reason})", warnings=warnings)


class _Lost(Exception):
    """The GPU stopped answering (fallen off the bus, or waiting for a reset)."""


class _Device:
    """NVML calls for one GPU: 'not supported' becomes None, any other failure a warning and None.

    A lost GPU raises ``_Lost`` so that the caller stops asking it and reports it unhealthy.
    """

    def __init__(self, nvml: ModuleType, index: int, handle: Any, warnings: list[DiscoveryWarning]) -> None:
        self.nvml = nvml
        self.index = index
        self.handle = handle
        self._warnings = warnings
        self.lost_errors = _error_classes(nvml, "NVMLError_GpuIsLost", "NVMLError_ResetRequired")
        # FunctionNotFound: a driver older than the binding; same meaning as not supported.
        self._quiet_errors = _error_classes(nvml, "NVMLError_NotSupported", "NVMLError_FunctionNotFound")

    def query(self, name: str, *args: Any, quiet: tuple[type[BaseException], ...] = ()) -> Any:
        function = getattr(self.nvml, name, None)
        if function is None:  # a pynvml older than the call
            return None
        try:
            return function(self.handle, *args)
        except self.nvml.NVMLError as error:
            if isinstance(error, self.lost_errors):
                raise _Lost(str(error)) from None
            if not isinstance(error, self._quiet_errors + quiet):
                self.warn(f"{name} failed: {error}")
            return None

    def warn(self, message: str) -> None:
        self._warnings.append(_warning(f"GPU {self.index}: {message}"))


def _from_nvml(pci_devices: Sequence[PciDevice], nvml: ModuleType, numa_nodes: Collection[int]) -> GpuReport:
    warnings: list[DiscoveryWarning] = []
    placements = {device.bus_id: (device.numa_node, device.local_cpus) for device in pci_devices}
    devices: list[tuple[_Device, str | None, str | None]] = []  # device, bus id, why it is lost
    for index in range(int(nvml.nvmlDeviceGetCount())):
        device = _Device(nvml, index, None, warnings)
        try:
            device.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as error:
            if isinstance(error, device.lost_errors):
                devices.append((device, None, str(error)))
            else:
                device.warn(f"no handle ({error}); left out")
            continue
        try:
            devices.append((device, _bus_id(device), None))
        except _Lost as lost:
            devices.append((device, None, str(lost)))

    spare_bus_ids = _unclaimed_sysfs_gpus(pci_devices, {bus for _, bus, _ in devices if bus is not None})
    gpus: list[Gpu] = []
    alive: list[_Device] = []
    for device, known_bus_id, lost_reason in devices:
        bus_id, reason = known_bus_id, lost_reason
        if bus_id is None and reason is not None and spare_bus_ids:
            # A GPU that fell off the bus still has its slot in sysfs; NVML and sysfs share PCI order.
            bus_id = spare_bus_ids.pop(0)
            reason = f"{reason}; bus id {bus_id} inferred from sysfs"
        if bus_id is None:
            device.warn(f"PCI bus id unknown ({reason or 'NVML gave none'}); left out")
            continue
        if reason is None:
            try:
                gpus.append(_read_gpu(device, bus_id, placements.get(bus_id, (None, ())), numa_nodes))
                alive.append(device)
                continue
            except _Lost as lost:
                reason = str(lost)
        numa_node, cpus = placements.get(bus_id, (None, ()))
        gpus.append(
            Gpu(
                index=device.index,
                pci_bus_id=bus_id,
                numa_node=numa_node,
                cpu_affinity=cpus,
                healthy=False,
                health_reason=f"NVML: {reason}",
            )
        )
    for bus_id in spare_bus_ids:
        warnings.append(_warning(f"sysfs lists NVIDIA GPU {bus_id} that NVML does not report", _device_path(bus_id)))
    return GpuReport(gpus=tuple(gpus), source=SOURCE, nvml_paths=_common_ancestors(alive), warnings=tuple(warnings))


def _read_gpu(
    device: _Device, bus_id: str, sysfs_placement: tuple[int | None, tuple[int, ...]], numa_nodes: Collection[int]
) -> Gpu:
    nvml = device.nvml
    memory = device.query("nvmlDeviceGetMemoryInfo")
    capability = device.query("nvmlDeviceGetCudaComputeCapability")
    mig = device.query("nvmlDeviceGetMigMode")
    gpu_numa = device.query("nvmlDeviceGetNumaNodeId")
    numa_node, sysfs_cpus = sysfs_placement
    if numa_node is None:
        affinity = device.query(
            "nvmlDeviceGetMemoryAffinity", _MASK_WORDS, _constant(nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
        )
        nodes = _mask_bits(affinity) if affinity is not None else ()
        numa_node = nodes[0] if len(nodes) == 1 else None
        if numa_node is not None and numa_node not in numa_nodes:
            device.warn(f"NVML's memory affinity names NUMA node {numa_node}, not a node of this host; node unknown")
            numa_node = None
    cpu_mask = device.query("nvmlDeviceGetCpuAffinity", _MASK_WORDS)
    cpus = _mask_bits(cpu_mask) if cpu_mask is not None else ()
    return Gpu(
        index=device.index,
        pci_bus_id=bus_id,
        uuid=_text_or_none(device.query("nvmlDeviceGetUUID")),
        name=_text_or_none(device.query("nvmlDeviceGetName")),
        memory_bytes=int(memory.total) if memory is not None else None,
        compute_capability=f"{capability[0]}.{capability[1]}" if capability is not None else None,
        numa_node=numa_node,
        cpu_affinity=cpus or sysfs_cpus,
        # NVML answers -1 on platforms where GPU memory is not a NUMA node of its own.
        gpu_numa_node=int(gpu_numa) if gpu_numa is not None and int(gpu_numa) >= 0 else None,
        mig_enabled=int(mig[0]) == _constant(nvml, "NVML_DEVICE_MIG_ENABLE", 1) if mig is not None else None,
        nvlinks=_nvlinks(device),
        fabric_clique=_fabric_clique(device),
    )


def _bus_id(device: _Device) -> str | None:
    info = device.query("nvmlDeviceGetPciInfo")
    if info is None:
        return None
    text = _text(info.busId)
    try:
        return normalise_bus_id(text)
    except ValueError:
        device.warn(f"garbled PCI bus id {text!r}")
        return None


def _nvlinks(device: _Device) -> tuple[NvLink, ...]:
    nvml = device.nvml
    # A link number past this GPU's links is InvalidArgument; a GPU without NVLink says NotSupported.
    no_such_link = _error_classes(nvml, "NVMLError_InvalidArgument")
    remote_types = {
        _constant(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0): NvLinkRemote.GPU,
        _constant(nvml, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1): NvLinkRemote.IBMNPU,
        _constant(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2): NvLinkRemote.SWITCH,
    }
    links: list[NvLink] = []
    for link in range(_constant(nvml, "NVML_NVLINK_MAX_LINKS", 36)):
        state = device.query("nvmlDeviceGetNvLinkState", link, quiet=no_such_link)
        if state is None:
            continue
        if int(state) != _constant(nvml, "NVML_FEATURE_ENABLED", 1):
            links.append(NvLink(link=link, active=False))
            continue
        version = device.query("nvmlDeviceGetNvLinkVersion", link, quiet=no_such_link)
        remote_type = device.query("nvmlDeviceGetNvLinkRemoteDeviceType", link, quiet=no_such_link)
        remote_pci = device.query("nvmlDeviceGetNvLinkRemotePciInfo", link, quiet=no_such_link)
        links.append(
            NvLink(
                link=link,
                active=True,
                version=int(version) if version is not None else None,
                remote_type=remote_types.get(int(remote_type), NvLinkRemote.UNKNOWN)
                if remote_type is not None
                else NvLinkRemote.UNKNOWN,
                remote_bus_id=_remote_bus_id(remote_pci),
            )
        )
    return tuple(links)


def _remote_bus_id(remote_pci: Any) -> str | None:
    if remote_pci is None:
        return None
    try:
        return normalise_bus_id(_text(remote_pci.busId))
    except ValueError:
        return None


def _fabric_clique(device: _Device) -> str | None:
    """``<clusterUuid>.<cliqueId>`` as GPU feature discovery labels it, or None when not fabric-attached."""
    nvml = device.nvml
    info = None
    # The versioned call is the current one; the legacy call serves drivers that predate it.
    for function, struct in (
        ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
        ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
    ):
        struct_type = getattr(nvml, struct, None)
        if struct_type is None:
            continue
        candidate = struct_type()
        if device.query(function, ctypes.byref(candidate)) is not None:
            info = candidate
            break
    if info is None:
        return None
    if int(info.state) != _constant(nvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3):
        return None
    if int(info.status) != _constant(nvml, "NVML_SUCCESS", 0):
        device.warn(f"fabric registration completed with status {int(info.status)}")
        return None
    cluster = bytes(info.clusterUuid)
    if not any(cluster):  # NVSwitch systems without multi-node NVLink report a zero cluster
        return None
    return f"{uuid.UUID(bytes=cluster)}.{int(info.cliqueId)}"


def _common_ancestors(devices: Sequence[_Device]) -> dict[tuple[int, int], PathKind]:
    if not devices:
        return {}
    nvml = devices[0].nvml
    levels = {
        _constant(nvml, "NVML_TOPOLOGY_INTERNAL", 0): PathKind.PIX,  # two GPUs on one board, behind its switch
        _constant(nvml, "NVML_TOPOLOGY_SINGLE", 10): PathKind.PIX,
        _constant(nvml, "NVML_TOPOLOGY_MULTIPLE", 20): PathKind.PXB,
        _constant(nvml, "NVML_TOPOLOGY_HOSTBRIDGE", 30): PathKind.PHB,
        _constant(nvml, "NVML_TOPOLOGY_NODE", 40): PathKind.NODE,
        _constant(nvml, "NVML_TOPOLOGY_SYSTEM", 50): PathKind.SYS,
    }
    paths: dict[tuple[int, int], PathKind] = {}
    for position, first in enumerate(devices):
        for second in devices[position + 1 :]:
            try:
                level = first.query("nvmlDeviceGetTopologyCommonAncestor", second.handle)
            except _Lost:
                continue  # the GPU was read healthy a moment ago; its next discovery marks it
            if level is not None and int(level) in levels:
                paths[(first.index, second.index)] = levels[int(level)]
    return paths


def _unclaimed_sysfs_gpus(pci_devices: Sequence[PciDevice], claimed: set[str]) -> list[str]:
    return sorted(
        (d.bus_id for d in pci_devices if is_nvidia_gpu(d) and d.bus_id not in claimed),
        key=_bus_key,
    )


def _device_path(bus_id: str) -> str:
    return f"/sys/bus/pci/devices/{bus_id}"


def _bus_key(bus_id: str) -> tuple[int, ...]:
    try:
        domain, bus, slot = bus_id.split(":")
        device, function = slot.split(".")
        return (int(domain, 16), int(bus, 16), int(device, 16), int(function, 16))
    except ValueError:
        return (1 << 32,)  # garbled ids sort last rather than stop discovery


def _mask_bits(words: Iterable[int]) -> tuple[int, ...]:
    """Bits set in NVML's mask of 64-bit words, word 0 holding bits 0-63."""
    return tuple(
        position * 64 + bit for position, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1
    )


def _error_classes(nvml: ModuleType, *names: str) -> tuple[type[BaseException], ...]:
    return tuple(getattr(nvml, name) for name in names if hasattr(nvml, name))


def _constant(nvml: ModuleType, name: str, default: int) -> int:
    return int(getattr(nvml, name, default))


def _text(value: Any) -> str:
    # pynvml decodes C strings since 11.x; older bindings hand back bytes.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def _text_or_none(value: Any) -> str | None:
    return _text(value) if value is not None else None


def _warning(message: str, path: str | None = None) -> DiscoveryWarning:
    return DiscoveryWarning(source=SOURCE, message=message, path=path)
