"""Inputs of the admission model: what a node's kubelet knows, and what a pod asks for.

Plain frozen dataclasses, independent of protobuf and Kubernetes objects. Quantities are the kubelet's
own units: CPUs as counts (a pod's request in millicores), memory and hugepages in bytes, devices as counts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from placement.core.topology_manager.merge import PolicyOptions, TopologyPolicy


class TopologyScope(enum.StrEnum):
    CONTAINER = "container"
    POD = "pod"


class CpuManagerPolicy(enum.StrEnum):
    NONE = "none"
    STATIC = "static"


class MemoryManagerPolicy(enum.StrEnum):
    NONE = "None"
    STATIC = "Static"


class QOSClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@dataclass(frozen=True)
class MemoryPool:
    """One memory type of a NUMA cell as the memory manager's machine state holds it."""

    resource: str  # "memory" or "hugepages-<size>", e.g. "hugepages-1Gi"
    allocatable: int  # bytes; what "preferred" is judged on
    free: int  # bytes not yet assigned to Guaranteed containers


@dataclass(frozen=True)
class NumaCellResources:
    """One NUMA cell: TOTAL capacity (for "preferred") and FREE capacity (for "possible")."""

    id: int
    cpus: int  # every online CPU of the cell, kubelet-reserved ones included (CPUDetails.CPUsInNUMANodes)
    free_cpus: int  # exclusively allocatable now: the shared pool minus reserved CPUs (GetAvailableCPUs)
    memory: tuple[MemoryPool, ...] = ()
    # The memory manager's ``Cells``: the cells this one's memory is already spread across together with
    # it by an earlier multi-NUMA allocation; () means only itself.
    memory_group: tuple[int, ...] = ()
    memory_assignments: int = 0  # NumberOfAssignments in the memory manager state


@dataclass(frozen=True)
class DeviceGroup:
    """Identical devices of one resource with the same NUMA affinity, as the device plugin reports it."""

    resource: str  # e.g. "nvidia.com/gpu"
    numa_ids: tuple[int, ...]  # () when the plugin reports no topology
    total: int
    free: int
    healthy: int | None = None  # healthy devices, in use or not; None where the node does not tell


@dataclass(frozen=True)
class KubeletConfig:
    topology_policy: TopologyPolicy = TopologyPolicy.NONE
    scope: TopologyScope = TopologyScope.CONTAINER
    options: PolicyOptions = field(default_factory=PolicyOptions)
    cpu_manager_policy: CpuManagerPolicy = CpuManagerPolicy.NONE
    memory_manager_policy: MemoryManagerPolicy = MemoryManagerPolicy.NONE


@dataclass(frozen=True)
class NodeResources:
    """A node as its kubelet's resource managers see it."""

    cells: tuple[NumaCellResources, ...]
    distances: tuple[tuple[int, ...], ...] = ()  # SLIT row per cell, in ``cells`` order
    devices: tuple[DeviceGroup, ...] = ()
    kubelet: KubeletConfig = field(default_factory=KubeletConfig)


@dataclass(frozen=True)
class Container:
    name: str
    cpu_millis: int = 0  # the CPU request
    memory: int = 0  # bytes
    hugepages: tuple[tuple[str, int], ...] = ()  # ("hugepages-1Gi", bytes)
    devices: tuple[tuple[str, int], ...] = ()  # ("nvidia.com/gpu", count), device-plugin resources only
    restartable: bool = False  # an init container with restartPolicy: Always (a sidecar)


@dataclass(frozen=True)
class Pod:
    containers: tuple[Container, ...]
    init_containers: tuple[Container, ...] = ()
    qos: QOSClass = QOSClass.BEST_EFFORT
    # spec.overhead in the containers' units (cpu in millicores): the pod sandbox's own use. The node-level fit
    # counts it (kube-scheduler's and the kubelet's ``PodRequests``); the resource managers, which work on
    # containers, never see it.
    overhead: tuple[tuple[str, int], ...] = ()

    def all_containers(self) -> tuple[Container, ...]:
        """Admission order: ``append(pod.Spec.InitContainers, pod.Spec.Containers...)``."""
        return self.init_containers + self.containers
