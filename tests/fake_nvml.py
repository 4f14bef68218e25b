"""A faithful fake of the pynvml module for one described machine.

Same function names, parameter names and return shapes as pynvml 13 (``nvmlPciInfo_t`` whose
``busId`` reads back as ``str``, ``c_nvmlMemory_t``, ctypes ``c_ulonglong`` arrays for affinity
masks, ``[current, pending]`` for the MIG mode, caller-allocated fabric structs passed by
reference), and failures raised as pynvml's own error classes, built the way pynvml builds them
(``pynvml.NVMLError(code)``), so ``except pynvml.NVMLError_NotSupported`` behaves as on a real
host. Constants, structs and error classes are pynvml's own objects, copied onto the module.

What it models, per the NVML header: calls before ``nvmlInit`` raise Uninitialized; a GPU that
fell off the bus keeps its handle but every call on it raises GpuIsLost; a link number past the
GPU's links is InvalidArgument; a GPU without NVLink answers NotSupported for every link.
"""

from __future__ import annotations

import ctypes
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from tests.machines.gpu_hardware import GpuMachine, GpuSpec, NvLinkSpec

_COPIED_PREFIXES = ("NVML_", "NVMLError", "c_nvml", "nvmlPciInfo", "nvmlGpuFabricInfo_v", "nvmlMemory_v")

# The pynvml functions this fake provides; each has pynvml's exact signature.
FUNCTIONS = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetMemoryAffinity",
    "nvmlDeviceGetCpuAffinity",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceGetGpuFabricInfo",
    "nvmlDeviceGetGpuFabricInfoV",
    "nvmlDeviceGetTopologyCommonAncestor",
)


@dataclass(frozen=True)
class _Handle:
    """Stands for pynvml's opaque ``c_nvmlDevice_t``."""

    index: int


def _fail(code: int) -> Exception:
    error: Exception = pynvml.NVMLError(code)  # pynvml maps the code to its subclass, e.g. NVMLError_GpuIsLost
    return error


class FakeNvml:
    """The fake library's state; ``module`` is what the code under test receives as pynvml."""

    def __init__(
        self,
        machine: GpuMachine,
        *,
        init_error: int | None = None,
        errors: Mapping[str, int] | None = None,
    ) -> None:
        self.machine = machine
        self.init_error = init_error  # e.g. NVML_ERROR_LIBRARY_NOT_FOUND: nvmlInit raises it
        self.errors = dict(errors or {})  # function name -> NVML error code, raised for every GPU
        self.init_calls = 0
        self.shutdown_calls = 0
        self.initialised = 0  # NVML counts nested nvmlInit calls
        self.module = types.ModuleType("pynvml", f"fake pynvml for {machine.name}")
        for name, value in vars(pynvml).items():
            if name.startswith(_COPIED_PREFIXES):
                setattr(self.module, name, value)
        for name in FUNCTIONS:
            setattr(self.module, name, getattr(self, name))

    # -- library --

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise _fail(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        if not self.initialised:
            raise _fail(pynvml.NVML_ERROR_UNINITIALIZED)
        self.shutdown_calls += 1
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return len(self.machine.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._require_init()
        if not 0 <= index < len(self.machine.gpus):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if "nvmlDeviceGetHandleByIndex" in self.errors:
            raise _fail(self.errors["nvmlDeviceGetHandleByIndex"])
        return _Handle(index)

    # -- identity and memory --

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        total = gpu.memory_mib << 20
        memory = pynvml.c_nvmlMemory_v2_t() if version else pynvml.c_nvmlMemory_t()
        if version:
            memory.version = version
        memory.total, memory.free, memory.used = total, total, 0
        return memory

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        return self._gpu("nvmlDeviceGetCudaComputeCapability", handle).compute_capability

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        return _pci_info(gpu.bus_id, gpu.device_id << 16 | 0x10DE)

    def nvmlDeviceGetPciInfo_v3(self, handle: _Handle) -> Any:
        return self.nvmlDeviceGetPciInfo(handle)

    # -- placement --

    def nvmlDeviceGetMemoryAffinity(self, handle: _Handle, nodeSetSize: int, scope: int) -> Any:
        gpu = self._gpu("nvmlDeviceGetMemoryAffinity", handle)
        if scope != pynvml.NVML_AFFINITY_SCOPE_NODE:
            raise NotImplementedError("the fake knows NUMA nodes, not sockets")
        return _mask((gpu.numa_node,), nodeSetSize)

    def nvmlDeviceGetCpuAffinity(self, handle: _Handle, cpuSetSize: int) -> Any:
        return _mask(self._gpu("nvmlDeviceGetCpuAffinity", handle).cpus, cpuSetSize)

    def nvmlDeviceGetNumaNodeId(self, handle: _Handle) -> int:
        gpu = self._gpu("nvmlDeviceGetNumaNodeId", handle)
        if gpu.gpu_numa_node is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.gpu_numa_node

    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", device)
        if gpu.mig_mode is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_mode, gpu.mig_mode]

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: _Handle, device2: _Handle) -> int:
        first = self._gpu("nvmlDeviceGetTopologyCommonAncestor", device1)
        second = self._gpu("nvmlDeviceGetTopologyCommonAncestor", device2)
        pair = (min(device1.index, device2.index), max(device1.index, device2.index))
        if pair in self.machine.nvml_level_overrides:
            return self.machine.nvml_level_overrides[pair]
        return _common_ancestor_level(first, second)

    # -- NVLink --

    def nvmlDeviceGetNvLinkState(self, device: _Handle, link: int) -> int:
        spec = self._link("nvmlDeviceGetNvLinkState", device, link)
        return int(pynvml.NVML_FEATURE_ENABLED if spec.active else pynvml.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetNvLinkVersion(self, device: _Handle, link: int) -> int:
        self._link("nvmlDeviceGetNvLinkVersion", device, link)
        return self.machine.gpus[device.index].nvlink_version

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: _Handle, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link).remote_type

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: _Handle, link: int) -> Any:
        spec = self._link("nvmlDeviceGetNvLinkRemotePciInfo", device, link)
        if spec.remote_bus_id is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        remote = self.machine.gpu_by_bus_id(spec.remote_bus_id)
        sysfs_id = spec.remote_bus_id[4:].lower()
        other = next((o for o in self.machine.others if o.bus_id == sysfs_id), None)
        device_id = remote.device_id if remote else other.device_id if other else 0
        vendor = 0x10DE if remote else other.vendor_id if other else 0
        return _pci_info(spec.remote_bus_id, device_id << 16 | vendor)

    # -- fabric --

    def nvmlDeviceGetGpuFabricInfoV(self, device: _Handle, gpuFabricInfo: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetGpuFabricInfoV", device)
        info = _by_reference(gpuFabricInfo)
        versions = {pynvml.nvmlGpuFabricInfo_v2: pynvml.c_nvmlGpuFabricInfo_v2_t}
        versions[pynvml.nvmlGpuFabricInfo_v3] = pynvml.c_nvmlGpuFabricInfo_v3_t
        if type(info) is not versions.get(info.version):
            raise _fail(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return self._fill_fabric(gpu, info)

    def nvmlDeviceGetGpuFabricInfo(self, device: _Handle, gpuFabricInfo: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetGpuFabricInfo", device)
        info = _by_reference(gpuFabricInfo)
        if not isinstance(info, pynvml.c_nvmlGpuFabricInfo_t):
            raise TypeError(f"nvmlDeviceGetGpuFabricInfo fills a c_nvmlGpuFabricInfo_t, not {type(info).__name__}")
        return self._fill_fabric(gpu, info)

    # -- helpers --

    def _fill_fabric(self, gpu: GpuSpec, info: Any) -> int:
        if gpu.fabric is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        ctypes.memmove(info.clusterUuid, gpu.fabric.cluster_uuid.bytes, pynvml.NVML_GPU_FABRIC_UUID_LEN)
        info.status = gpu.fabric.status
        info.cliqueId = gpu.fabric.clique_id
        info.state = gpu.fabric.state
        return int(pynvml.NVML_SUCCESS)

    def _require_init(self) -> None:
        if not self.initialised:
            raise _fail(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, function: str, handle: object) -> GpuSpec:
        self._require_init()
        if not isinstance(handle, _Handle):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.machine.gpus[handle.index]
        if gpu.lost:
            raise _fail(pynvml.NVML_ERROR_GPU_IS_LOST)
        if function in self.errors:
            raise _fail(self.errors[function])
        return gpu

    def _link(self, function: str, handle: _Handle, link: int) -> NvLinkSpec:
        gpu = self._gpu(function, handle)
        if gpu.nvlinks is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.nvlinks):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlinks[link]


def _pci_info(nvml_bus_id: str, pci_device_id: int) -> Any:
    domain, bus, slot = nvml_bus_id.split(":")
    info = pynvml.nvmlPciInfo_t()
    info.busId = nvml_bus_id.encode()
    info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{slot}".encode()
    info.domain = int(domain, 16)
    info.bus = int(bus, 16)
    info.device = int(slot.split(".")[0], 16)
    info.pciDeviceId = pci_device_id
    return info


def _mask(bits: tuple[int, ...], words: int) -> Any:
    """NVML's affinity mask: ``words`` unsigned longs, word 0 holding bits 0-63; bits past the end are cut."""
    mask = (ctypes.c_ulonglong * words)()
    for bit in bits:
        if bit // 64 < words:
            mask[bit // 64] |= 1 << (bit % 64)
    return mask


def _by_reference(argument: Any) -> Any:
    """The struct behind ``ctypes.byref(struct)`` or ``ctypes.pointer(struct)``, as the C call sees it."""
    if isinstance(argument, ctypes._Pointer):
        return argument.contents
    target = getattr(argument, "_obj", None)
    if target is None:
        raise TypeError("NVML fills a struct the caller owns: pass ctypes.byref(struct), not the struct itself")
    return target


def _common_ancestor_level(first: GpuSpec, second: GpuSpec) -> int:
    """What NVML derives from the PCIe tree: the same rules ``nvidia-smi topo -m`` prints."""
    if first.slot.root != second.slot.root:
        same_node = first.numa_node == second.numa_node
        return int(pynvml.NVML_TOPOLOGY_NODE if same_node else pynvml.NVML_TOPOLOGY_SYSTEM)
    shared = 0
    for mine, theirs in zip(first.slot.bridges, second.slot.bridges, strict=False):
        if mine != theirs:
            break
        shared += 1
    if shared == 0:
        return int(pynvml.NVML_TOPOLOGY_HOSTBRIDGE)
    below = max(len(first.slot.bridges), len(second.slot.bridges)) - shared
    return int(pynvml.NVML_TOPOLOGY_SINGLE if below <= 1 else pynvml.NVML_TOPOLOGY_MULTIPLE)
