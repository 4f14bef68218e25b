"""The kubelet's hint providers and their allocations, on per-NUMA counts.

Hints are exact ports (CPU manager ``generateCPUTopologyHints``, memory manager ``calculateHints``,
device manager ``generateDeviceTopologyHints``). Allocation only has to say *whether* the kubelet's
``Allocate`` succeeds and roughly *where* the resources go so that the next container of the same pod
sees the right free counts; which core or which device id is taken is not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from placement.core.topology_manager.admission_inputs import (
    Container,
    CpuManagerPolicy,
    DeviceGroup,
    MemoryManagerPolicy,
    NodeResources,
    Pod,
    QOSClass,
)
from placement.core.topology_manager.bitmask import NumaMask, iterate_masks
from placement.core.topology_manager.merge import ProviderHints, TopologyHint

MEMORY = "memory"


class AllocationError(Exception):
    """A resource manager's ``Allocate`` failed; the kubelet reports it as UnexpectedAdmissionError."""


def guaranteed_cpus(pod: Pod, container: Container) -> int:
    """``staticPolicy.guaranteedCPUs``: only Guaranteed pods with an integral CPU request get exclusive CPUs."""
    if pod.qos is not QOSClass.GUARANTEED or container.cpu_millis % 1000:
        return 0
    return container.cpu_millis // 1000


def pod_level_request(pod: Pod, per_container: Callable[[Container], int]) -> int:
    """``podGuaranteedCPUs`` (and the device/memory managers' pod-scope twins): the larger of the init
    containers' peak and the long-running total, sidecars counted as long-running from their start."""
    init_peak = 0
    sidecars = 0
    for container in pod.init_containers:
        request = per_container(container)
        if container.restartable:
            sidecars += request
        else:
            init_peak = max(init_peak, sidecars + request)
    long_running = sidecars + sum(per_container(c) for c in pod.containers)
    return max(init_peak, long_running)


def memory_requests(container: Container) -> dict[str, int]:
    """``getRequestedResources``: memory and hugepages only."""
    requests = {MEMORY: container.memory} if container.memory > 0 else {}
    requests.update((name, size) for name, size in container.hugepages if size > 0)
    return requests


class NodeState:
    """Free and reusable counts while one pod is admitted container by container."""

    def __init__(self, node: NodeResources) -> None:
        self.node = node
        self.cell_ids = tuple(sorted(c.id for c in node.cells))
        cells = {c.id: c for c in node.cells}
        self.total_cpus = {i: cells[i].cpus for i in self.cell_ids}
        self.free_cpus = {i: cells[i].free_cpus for i in self.cell_ids}
        self.reusable_cpus = dict.fromkeys(self.cell_ids, 0)  # cpusToReuse: CPUs of finished init containers
        self.allocatable_memory = {(i, p.resource): p.allocatable for i in self.cell_ids for p in cells[i].memory}
        self.free_memory = {(i, p.resource): p.free for i in self.cell_ids for p in cells[i].memory}
        self.memory_group = {i: cells[i].memory_group or (i,) for i in self.cell_ids}
        self.memory_assignments = {i: cells[i].memory_assignments for i in self.cell_ids}
        # initContainersReusableMemory of the pod being admitted: (mask ids, resource) -> bytes.
        self.reusable_memory: dict[tuple[tuple[int, ...], str], int] = {}
        self.free_devices = [g.free for g in node.devices]
        self.reusable_devices = [0 for _ in node.devices]  # devicesToReuse

    # --- CPU manager, static policy -------------------------------------------------------------------

    def cpu_hints(self, request: int) -> list[TopologyHint]:
        """``generateCPUTopologyHints``: possible on FREE (+reusable) CPUs, preferred on TOTAL CPUs; the masks
        span the NUMA nodes that have CPUs (``CPUDetails.NUMANodes()``), and so does ``minAffinitySize``."""
        nodes = [i for i in self.cell_ids if self.total_cpus[i] > 0]
        min_affinity_size = len(nodes)
        possible: list[NumaMask] = []
        for mask in iterate_masks(nodes):
            if sum(self.total_cpus[i] for i in mask.ids) >= request and mask.count() < min_affinity_size:
                min_affinity_size = mask.count()
            if any(n and not mask.is_set(i) for i, n in self.reusable_cpus.items()):
                continue  # every reusable CPU's node must be in the mask
            matching = sum(self.reusable_cpus.values()) + sum(self.free_cpus[i] for i in mask.ids)
            if matching >= request:
                possible.append(mask)
        return [TopologyHint(m, m.count() == min_affinity_size) for m in possible]

    def cpu_provider(self, request: int) -> ProviderHints:
        """``staticPolicy.GetTopologyHints``; ``None`` (no preference) when no exclusive CPUs are asked for."""
        if self.node.kubelet.cpu_manager_policy is not CpuManagerPolicy.STATIC or request == 0:
            return None
        return {"cpu": self.cpu_hints(request)}

    def allocate_cpus(self, request: int, affinity: NumaMask | None, *, init_container: bool) -> None:
        """``staticPolicy.allocateCPUs``: aligned CPUs first, the rest from anywhere.

        Within a set of cells the CPUs are taken the way ``takeByTopologyNUMAPacked`` packs them: whole
        free cells first, then the fullest cell; reusable CPUs are used before free ones.
        """
        if self.node.kubelet.cpu_manager_policy is not CpuManagerPolicy.STATIC or request == 0:
            return
        available = {i: self.free_cpus[i] + self.reusable_cpus[i] for i in self.cell_ids}
        total_available = sum(available.values())
        aligned = [i for i in self.cell_ids if affinity is None or affinity.is_set(i)]
        # The aligned CPUs are taken first, as many as there are; only the second takeByTopology, for the
        # rest out of what is left, can fail, and its message counts that rest (allocateCPUs).
        first = 0 if affinity is None else min(request, sum(available[i] for i in aligned))
        if total_available - first < request - first:
            raise AllocationError(
                "not enough cpus available to satisfy request: "
                f"requested={request - first}, available={total_available - first}"
            )
        taken = self._pack(available, aligned, request)
        rest = request - sum(taken.values())
        if rest:
            others = [i for i in self.cell_ids if i not in aligned]
            for i, n in self._pack(available, others, rest).items():
                taken[i] = taken.get(i, 0) + n
        for i, n in taken.items():
            from_reuse = min(n, self.reusable_cpus[i])
            self.reusable_cpus[i] -= from_reuse
            self.free_cpus[i] -= n - from_reuse
            if init_container:
                # updateCPUsToReuse: an init container's CPUs are handed on to the containers after it.
                self.reusable_cpus[i] += n

    def _pack(self, available: dict[int, int], cells: list[int], request: int) -> dict[int, int]:
        taken: dict[int, int] = {}
        remaining = request
        for i in cells:  # whole, completely free cells first
            if 0 < self.total_cpus[i] == available[i] <= remaining:
                taken[i] = available[i]
                remaining -= available[i]
        for i in sorted(cells, key=lambda c: (available[c] - taken.get(c, 0), c)):  # then the fullest cell
            if remaining == 0:
                break
            n = min(available[i] - taken.get(i, 0), remaining)
            if n > 0:
                taken[i] = taken.get(i, 0) + n
                remaining -= n
        return taken

    # --- memory manager, static policy ----------------------------------------------------------------

    def memory_hints(self, requests: dict[str, int]) -> dict[str, list[TopologyHint]]:
        """``staticPolicy.calculateHints``: single NUMA or an existing group; preferred on allocatable."""
        min_affinity_size = len(self.cell_ids)
        possible: list[NumaMask] = []
        for mask in iterate_masks(self.cell_ids):
            bits = mask.ids
            single = len(bits) == 1
            if any(self._memory_sum(self.allocatable_memory, bits, r) < size for r, size in requests.items()):
                continue
            min_affinity_size = min(min_affinity_size, mask.count())
            if single and len(self.memory_group[bits[0]]) > 1:
                continue  # this cell's memory is already part of a multi-NUMA group
            if not single and self._violates_memory_groups(bits):
                continue
            # The free check counts what this pod's init containers left on exactly this mask
            # (getPodReusableMemory).
            if any(
                self._memory_sum(self.free_memory, bits, r) + self.reusable_memory.get((bits, r), 0) < size
                for r, size in requests.items()
            ):
                continue
            possible.append(mask)
        return {r: [TopologyHint(m, m.count() == min_affinity_size) for m in possible] for r in requests if possible}

    def _violates_memory_groups(self, bits: tuple[int, ...]) -> bool:
        """``isAffinityViolatingNUMAAllocations`` (and the same test inside ``calculateHints``): a cell
        already used alone, or by another group, cannot join a multi-NUMA allocation (``areGroupsEqual``)."""
        if len(bits) == 1:
            return False
        return any(
            self.memory_assignments[i] > 0
            and (len(self.memory_group[i]) == 1 or tuple(sorted(self.memory_group[i])) != bits)
            for i in bits
        )

    def memory_provider(self, pod: Pod, requests: dict[str, int]) -> ProviderHints:
        if self.node.kubelet.memory_manager_policy is not MemoryManagerPolicy.STATIC:
            return None
        if pod.qos is not QOSClass.GUARANTEED:
            return None
        # An empty map (nothing fits) reads as "no preference" to the merge, exactly as upstream;
        # allocate_memory then rejects the pod.
        return self.memory_hints(requests)

    def allocate_memory(self, pod: Pod, requests: dict[str, int], hint: TopologyHint, *, init_container: bool) -> None:
        """``staticPolicy.Allocate``: default hint for a nil affinity, extend a too-small one, check the
        single/cross-NUMA rule, then take the memory (``updateMachineState``) less what this pod's init
        containers left on the same mask, and record what an init container leaves behind
        (``updatePodReusableMemory``). ``init_container`` is ``isRegularInitContainer``."""
        if self.node.kubelet.memory_manager_policy is not MemoryManagerPolicy.STATIC:
            return
        if pod.qos is not QOSClass.GUARANTEED or not requests:
            return
        # getDefaultHint and extendTopologyManagerHint look at the regular memory hints only; a Guaranteed
        # container always requests memory.
        candidates = self.memory_hints(requests).get(MEMORY, [])
        best = hint
        if best.affinity is None:
            if not candidates:
                raise AllocationError(
                    "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is "
                    "available"
                )
            default = _find_best_hint(candidates)
            if not default.preferred and best.preferred:
                raise AllocationError("[memorymanager] failed to find the default preferred hint")
            best = default
        assert best.affinity is not None
        # isAffinitySatisfyRequest: free memory only, reusable memory not counted.
        if not all(self._memory_sum(self.free_memory, best.affinity.ids, r) >= s for r, s in requests.items()):
            wanted = set(best.affinity.ids)
            extended = [h for h in candidates if h.affinity is not None and wanted <= set(h.affinity.ids)]
            if not extended:
                raise AllocationError("[memorymanager] failed to find NUMA nodes to extend the current topology hint")
            extension = _find_best_hint(extended)
            if not extension.preferred and best.preferred:
                raise AllocationError("[memorymanager] failed to find the extended preferred hint")
            best = extension
        assert best.affinity is not None
        bits = best.affinity.ids
        if self._violates_memory_groups(bits):
            raise AllocationError("[memorymanager] preferred hint violates NUMA node allocation")
        for resource, size in requests.items():
            reusable = self.reusable_memory.get((bits, resource), 0)
            remaining = max(size - reusable, 0)
            for i in bits:  # updateMachineState: every cell of the mask, once per memory type
                self.memory_assignments[i] += 1
                self.memory_group[i] = bits
                take = min(self.free_memory.get((i, resource), 0), remaining)
                if take > 0:
                    self.free_memory[(i, resource)] -= take
                    remaining -= take
            if init_container:
                self.reusable_memory[(bits, resource)] = max(reusable, size)
            elif reusable:
                self.reusable_memory[(bits, resource)] = max(reusable - size, 0)

    @staticmethod
    def _memory_sum(pools: dict[tuple[int, str], int], cells: Iterable[int], resource: str) -> int:
        return sum(pools.get((i, resource), 0) for i in cells)

    # --- device manager ------------------------------------------------------------------------------

    def _groups(self, resource: str) -> list[tuple[int, DeviceGroup]]:
        return [(k, g) for k, g in enumerate(self.node.devices) if g.resource == resource]

    def device_hints(self, resource: str, request: int) -> list[TopologyHint] | None:
        """``GetTopologyHints`` for one resource, ``generateDeviceTopologyHints`` for the masks."""
        groups = self._groups(resource)
        if not any(g.numa_ids for _, g in groups):
            return None  # deviceHasTopologyAlignment is false: no preference
        available = sum(self.free_devices[k] for k, _ in groups)
        reusable = sum(self.reusable_devices[k] for k, _ in groups)
        if available + reusable < request:
            return []
        # Since 1.36 the masks span only the NUMA nodes that host a device of the resource (deviceNUMANodes),
        # all of them where none is known to the machine; so does minAffinitySize.
        nodes = sorted({i for _, g in groups for i in g.numa_ids} & set(self.cell_ids)) or self.cell_ids
        min_affinity_size = len(nodes)
        possible: list[NumaMask] = []
        for mask in iterate_masks(nodes):
            in_mask = sum(g.total for _, g in groups if mask.any_set(g.numa_ids))
            if in_mask >= request and mask.count() < min_affinity_size:
                min_affinity_size = mask.count()
            matching = 0
            misplaced = False
            for k, g in groups:
                if self.reusable_devices[k] and g.numa_ids:
                    if not mask.any_set(g.numa_ids):
                        misplaced = True
                    matching += self.reusable_devices[k]
            if misplaced:
                continue
            matching += sum(self.free_devices[k] for k, g in groups if mask.any_set(g.numa_ids))
            if matching >= request:
                possible.append(mask)
        return [TopologyHint(m, m.count() == min_affinity_size) for m in possible]

    def device_provider(self, requests: dict[str, int]) -> ProviderHints:
        return {r: self.device_hints(r, n) for r, n in requests.items() if self._groups(r)}

    def allocate_devices(self, requests: dict[str, int], affinity: NumaMask | None, *, init_container: bool) -> None:
        """``devicesToAllocate``: reusable devices first, then devices on the affinity's cells, then any.

        A resource no device plugin registered is not the device manager's (``isDevicePluginResource``):
        ``allocateContainerResources`` skips it, whatever the count (the node-level fit judges it).
        """
        for resource, request in requests.items():
            groups = self._groups(resource)
            if not groups:
                continue
            if all(g.healthy == 0 for _, g in groups):
                # devicesToAllocate checks the plugin's health before the count.
                raise AllocationError(f"no healthy devices present; cannot allocate unhealthy devices {resource}")
            remaining = request
            taken: dict[int, int] = {}
            for k, _ in groups:
                n = min(self.reusable_devices[k], remaining)
                self.reusable_devices[k] -= n
                taken[k] = n
                remaining -= n
            # Counted after the reusable devices are taken: the message names what is still needed.
            available = sum(self.free_devices[k] for k, _ in groups)
            if remaining > 0 and available < remaining:
                raise AllocationError(
                    f"requested number of devices unavailable for {resource}. "
                    f"Requested: {remaining}, Available: {available}"
                )

            def aligned_first(item: tuple[int, DeviceGroup]) -> tuple[bool, bool, tuple[int, ...]]:
                _, group = item
                is_aligned = affinity is not None and affinity.any_set(group.numa_ids)
                return (not is_aligned, not group.numa_ids, group.numa_ids)

            for k, _ in sorted(groups, key=aligned_first):
                n = min(self.free_devices[k], remaining)
                self.free_devices[k] -= n
                taken[k] = taken.get(k, 0) + n
                remaining -= n
            if init_container:
                for k, n in taken.items():
                    self.reusable_devices[k] += n


def _find_best_hint(hints: list[TopologyHint]) -> TopologyHint:
    """memory manager ``findBestHint``: preferred first, then the narrowest."""
    best = hints[0]
    for hint in hints[1:]:
        assert hint.affinity is not None
        assert best.affinity is not None
        more_preferred = hint.preferred and not best.preferred
        if more_preferred or (hint.preferred == best.preferred and hint.affinity.is_narrower_than(best.affinity)):
            best = hint
    return best


def device_requests(container: Container) -> dict[str, int]:
    return {name: n for name, n in container.devices if n > 0}
