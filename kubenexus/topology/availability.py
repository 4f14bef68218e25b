"""Per-NUMA-zone capacity, allocatable and available, counted the way the kubelet hands resources out.

The inputs are the kubelet PodResources API's answers (``GetAllocatableResources`` and ``List``) as
plain values; ``agent.sources.kubelet`` converts the protobuf. The counting reproduces the upstream
resource-topology-exporter (``pkg/resourcemonitor``), because the scheduler-plugins
NodeResourceTopologyMatch plugin was built against that exporter's numbers:

- a zone reports the resources the kubelet says are allocatable on that NUMA node: exclusive CPUs
  (allocatable CPU ids mapped to their cell), NUMA-pinned memory and hugepages (memory-manager
  blocks) and devices whose device plugin reported a NUMA affinity. Without a static CPU or memory
  manager the kubelet pins nothing, so nothing of that kind is reported;
- a NUMA node with nothing allocatable reports ``cpu`` 0, so that the zone is there (reserved);
- available = allocatable - what the containers in ``List`` hold on that node, never below 0;
- capacity comes from the topology (online CPUs of the cell, its MemTotal, its hugepage pools); where
  the topology has none, or less than allocatable, capacity is allocatable (devices always are);
- a device or memory block spanning several NUMA nodes counts in full on each of them, and one with
  no NUMA affinity counts on none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubenexus.topology.model import DiscoveryWarning, NodeTopology, ResourceAmount, ZoneResources
from kubenexus.topology.podfingerprint import METHOD_ALL, METHOD_WITH_EXCLUSIVE_RESOURCES, pods_fingerprint

SOURCE = "kubelet"
CPU = "cpu"
MEMORY = "memory"
HUGEPAGES_PREFIX = "hugepages-"
FINGERPRINT_METHODS = (METHOD_ALL, METHOD_WITH_EXCLUSIVE_RESOURCES)

_BINARY_SUFFIXES = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


@dataclass(frozen=True)
class DeviceSet:
    """Devices of one resource with one NUMA affinity (``ContainerDevices``)."""

    resource_name: str  # "nvidia.com/gpu"
    device_ids: tuple[str, ...]
    numa_nodes: tuple[int, ...] = ()  # empty when the device plugin reported no topology


@dataclass(frozen=True)
class MemoryBlock:
    """Memory or hugepages pinned to NUMA nodes by the memory manager (``ContainerMemory``)."""

    memory_type: str  # "memory", "hugepages-2Mi"
    size_bytes: int
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class AllocatableResources:
    """What the kubelet may hand out exclusively (``GetAllocatableResources``)."""

    devices: tuple[DeviceSet, ...] = ()
    cpu_ids: tuple[int, ...] = ()  # empty unless the CPU manager policy is static
    memory: tuple[MemoryBlock, ...] = ()  # empty unless the memory manager policy is Static


@dataclass(frozen=True)
class ContainerResources:
    name: str
    devices: tuple[DeviceSet, ...] = ()
    cpu_ids: tuple[int, ...] = ()  # exclusive CPUs only
    memory: tuple[MemoryBlock, ...] = ()


@dataclass(frozen=True)
class PodResources:
    """One pod as ``List`` reports it: every pod the kubelet runs, with or without exclusive resources."""

    namespace: str
    name: str
    containers: tuple[ContainerResources, ...] = ()


@dataclass(frozen=True)
class ZoneAvailability:
    zones: tuple[ZoneResources, ...]
    warnings: tuple[DiscoveryWarning, ...] = ()


def zone_resources(
    topology: NodeTopology, allocatable: AllocatableResources, pods: Sequence[PodResources]
) -> ZoneAvailability:
    """The resources of every NUMA cell of ``topology`` (by id), each resource sorted by name."""
    warnings: list[DiscoveryWarning] = []
    cell_ids = sorted({cell.id for cell in topology.numa_cells})
    cell_of_cpu = {cpu: cell.id for cell in topology.numa_cells for cpu in cell.cpus}
    counter = _Counter(cell_of_cpu, frozenset(cell_ids), warnings)

    allocatable_counts = counter.count(allocatable.devices, allocatable.cpu_ids, allocatable.memory, "allocatable")
    used: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in pods:
        for container in pod.containers:
            owner = f"container {pod.namespace}/{pod.name}/{container.name}"
            held = counter.count(container.devices, container.cpu_ids, container.memory, owner)
            for numa_id, counts in held.items():
                for name, amount in counts.items():
                    used[numa_id][name] += amount
    _warn_devices_without_topology(allocatable.devices, warnings)

    capacities = _capacities(topology)
    zones = []
    for numa_id in cell_ids:
        # A cell the kubelet can give nothing from still has to appear, with all its CPUs reserved.
        counts = allocatable_counts.get(numa_id) or {CPU: 0}
        resources = []
        for name in sorted(counts):
            allocatable_amount = counts[name]
            capacity = capacities.get(numa_id, {}).get(name, 0) or allocatable_amount
            if allocatable_amount > capacity:
                warnings.append(
                    _warning(
                        f"NUMA node {numa_id}: the kubelet reports {allocatable_amount} {name} allocatable, more than "
                        f"the {capacity} discovered; capacity follows the kubelet"
                    )
                )
                capacity = allocatable_amount
            available = allocatable_amount - used[numa_id][name]
            if available < 0:
                warnings.append(
                    _warning(
                        f"NUMA node {numa_id}: containers hold {used[numa_id][name]} {name}, more than the "
                        f"{allocatable_amount} allocatable; available is reported as 0"
                    )
                )
                available = 0
            resources.append(ResourceAmount(name, capacity, allocatable_amount, available))
        zones.append(ZoneResources(numa_id, tuple(resources)))
    return ZoneAvailability(tuple(zones), tuple(warnings))


def pod_set_fingerprint(pods: Iterable[PodResources], *, method: str = METHOD_ALL) -> str:
    """The podfingerprint of the pods ``method`` selects; the NRT also publishes ``method``.

    ``with-exclusive-resources`` keeps the pods with at least one container holding exclusive CPUs,
    NUMA-pinned memory or NUMA-affine devices (the exporter's ``numalocality`` filter). The
    ``exclude-terminal`` method needs pod phases, which the PodResources API does not give.
    """
    if method not in FINGERPRINT_METHODS:
        raise ValueError(f"unsupported pods fingerprint method {method!r}; supported: {', '.join(FINGERPRINT_METHODS)}")
    selected = pods if method == METHOD_ALL else (pod for pod in pods if has_exclusive_resources(pod))
    return pods_fingerprint((pod.namespace, pod.name) for pod in selected)


def has_exclusive_resources(pod: PodResources) -> bool:
    return any(
        container.cpu_ids
        or any(_has_numa_affinity(block.numa_nodes) for block in container.memory)
        or any(devices.device_ids and _has_numa_affinity(devices.numa_nodes) for devices in container.devices)
        for container in pod.containers
    )


def hugepages_resource_name(size_kib: int) -> str:
    """``hugepages-2Mi`` for 2048 KiB pages: the kubelet's name, the page size as a binary quantity."""
    size = size_kib * 1024
    for suffix, shift in _BINARY_SUFFIXES:
        if size % (1 << shift) == 0:
            return f"{HUGEPAGES_PREFIX}{size >> shift}{suffix}"
    return f"{HUGEPAGES_PREFIX}{size}"


class _Counter:
    """Counts resources per NUMA node in the kubelet's units, collecting what it had to skip."""

    def __init__(self, cell_of_cpu: dict[int, int], cell_ids: frozenset[int], warnings: list[DiscoveryWarning]) -> None:
        self._cell_of_cpu = cell_of_cpu
        self._cell_ids = cell_ids
        self._warnings = warnings

    def count(
        self,
        devices: Sequence[DeviceSet],
        cpu_ids: Sequence[int],
        memory: Sequence[MemoryBlock],
        owner: str,
    ) -> dict[int, dict[str, int]]:
        counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        unplaced = sorted(cpu for cpu in cpu_ids if cpu not in self._cell_of_cpu)
        if unplaced:
            self._warnings.append(
                _warning(f"{owner}: CPUs {unplaced} are in no NUMA cell of the topology; they are not counted")
            )
        for cpu in cpu_ids:
            if cpu in self._cell_of_cpu:
                counts[self._cell_of_cpu[cpu]][CPU] += 1
        for block in memory:
            for numa_id in self._known(block.numa_nodes, owner, block.memory_type):
                counts[numa_id][block.memory_type] += block.size_bytes
        for device_set in devices:
            for numa_id in self._known(device_set.numa_nodes, owner, device_set.resource_name):
                counts[numa_id][device_set.resource_name] += len(device_set.device_ids)
        return counts

    def _known(self, numa_nodes: Sequence[int], owner: str, resource: str) -> list[int]:
        # A negative id is the API's "no affinity"; an unknown one means kubelet and topology disagree.
        unknown = [numa_id for numa_id in numa_nodes if numa_id >= 0 and numa_id not in self._cell_ids]
        if unknown:
            self._warnings.append(
                _warning(f"{owner}: {resource} on NUMA nodes {unknown}, which the topology does not have; not counted")
            )
        return [numa_id for numa_id in numa_nodes if numa_id in self._cell_ids]


def _capacities(topology: NodeTopology) -> dict[int, dict[str, int]]:
    capacities: dict[int, dict[str, int]] = {}
    for cell in topology.numa_cells:
        if cell.id in capacities:  # a duplicated cell (buggy firmware) is flagged by discovery; first wins
            continue
        capacity = {CPU: len(cell.cpus), MEMORY: cell.memory_bytes or 0}
        for pool in cell.hugepages:
            capacity[hugepages_resource_name(pool.size_kib)] = pool.total * pool.size_kib * 1024
        capacities[cell.id] = capacity
    return capacities


def _warn_devices_without_topology(devices: Sequence[DeviceSet], warnings: list[DiscoveryWarning]) -> None:
    counts: dict[str, int] = defaultdict(int)
    for device_set in devices:
        if not _has_numa_affinity(device_set.numa_nodes):
            counts[device_set.resource_name] += len(device_set.device_ids)
    for name in sorted(counts):
        warnings.append(
            _warning(
                f"{counts[name]} allocatable {name} devices have no NUMA affinity (their device plugin reports no "
                "topology); they are in no zone"
            )
        )


def _has_numa_affinity(numa_nodes: Sequence[int]) -> bool:
    return any(numa_id >= 0 for numa_id in numa_nodes)


def _warning(message: str) -> DiscoveryWarning:
    return DiscoveryWarning(SOURCE, message)
