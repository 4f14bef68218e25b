"""Which physical hardware a DRA device occupies, so that an allocator never hands out the same silicon twice.

A driver may publish one GPU several ways at once: as a full GPU and as MIG partitions (dynamic MIG,
partitionable devices), or as a GPU and a VFIO passthrough device. Two such devices are different
names for overlapping hardware. A footprint records

* ``whole``: aliases of the physical GPU a full GPU (or VFIO) device takes entirely (UUID, PCI bus id,
  device name; any shared alias means the same GPU);
* ``part_of``: aliases of the parent GPU a MIG device is carved from;
* ``memory_slices``: the MIG memory slices it holds (old drivers publish ``memorySliceN`` capacities);
* ``counters``: what it draws from its pool's shared counter sets (KEP-4815 partitionable devices),
  with each counter's total.

Two MIG devices of one parent do not conflict by themselves (static MIG instances coexist); they
conflict when they share a memory slice or together overdraw a counter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from placement.core.dra.device_types import CounterSet
from placement.core.dra.gpu_devices import NVIDIA_GPU_DRIVERS, GpuKind, gpu_identity
from placement.core.dra.pools import DeviceRef, PoolDevice

_MEMORY_SLICE = re.compile(r"memorySlice([0-9]+)")


@dataclass(frozen=True, order=True)
class CounterKey:
    driver: str
    pool: str
    counter_set: str
    counter: str


@dataclass(frozen=True)
class Footprint:
    device: DeviceRef
    shareable: bool  # allowMultipleAllocations: several claims may hold the device itself
    whole: frozenset[str] = frozenset()
    part_of: frozenset[str] = frozenset()
    memory_slices: frozenset[tuple[str, int]] = frozenset()  # (parent alias, slice number)
    counters: tuple[tuple[CounterKey, int], ...] = ()  # amount drawn
    counter_totals: tuple[tuple[CounterKey, int], ...] = ()  # what the pool declares, for the counters drawn

    @property
    def physical_units(self) -> frozenset[str]:
        """Everything it occupies, as text: the GPU, the parent's memory slices, the counters drawn from."""
        return frozenset(
            {f"gpu:{a}" for a in self.whole}
            | {f"part-of-gpu:{a}" for a in self.part_of}
            | {f"gpu:{a}/memorySlice{n}" for a, n in self.memory_slices}
            | {f"counter:{k.driver}/{k.pool}/{k.counter_set}/{k.counter}" for k, _ in self.counters}
        )


def footprint(
    entry: PoolDevice, counter_sets: Mapping[str, CounterSet], *, gpu_drivers: Iterable[str] = NVIDIA_GPU_DRIVERS
) -> Footprint:
    """The footprint of one device; ``counter_sets`` are its pool's (``Pool.counter_sets``).

    Devices of ``gpu_drivers`` are recognised as GPUs or MIG devices; any device's counters count.
    """
    ref = entry.ref
    gpu = gpu_identity(entry, drivers=gpu_drivers)
    whole: frozenset[str] = frozenset()
    part_of: frozenset[str] = frozenset()
    if gpu is not None and gpu.kind is GpuKind.MIG:
        part_of = _aliases(ref, gpu.parent_uuid, gpu.pci_bus_id, gpu.parent_device)
    elif gpu is not None:
        whole = _aliases(ref, gpu.uuid, gpu.pci_bus_id, ref.device)
    slices = frozenset(
        (alias, int(m.group(1)))
        for name, amount in entry.device.capacity
        if name.domain == ref.driver and (m := _MEMORY_SLICE.fullmatch(name.id)) and amount.value > 0
        for alias in part_of
    )
    drawn = [
        (CounterKey(ref.driver, ref.pool, c.counter_set, name), amount.value)
        for c in entry.device.consumes_counters
        for name, amount in c.counters
    ]
    totals = {
        CounterKey(ref.driver, ref.pool, s.name, name): amount.value
        for s in counter_sets.values()
        for name, amount in s.counters
    }
    return Footprint(
        device=ref,
        shareable=entry.device.allow_multiple_allocations,
        whole=whole,
        part_of=part_of,
        memory_slices=slices,
        counters=tuple(sorted(drawn)),
        counter_totals=tuple(sorted((k, totals[k]) for k, _ in drawn if k in totals)),
    )


def conflicts(a: Footprint, b: Footprint) -> bool:
    """Whether ``a`` and ``b`` cannot both be allocated (to different claims)."""
    if a.device == b.device:  # a shareable device still cannot overdraw its counters
        return not (a.shareable and b.shareable) or bool(overdrawn_counters((a, b)))
    if a.whole & (b.whole | b.part_of) or b.whole & a.part_of:
        return True
    if a.memory_slices & b.memory_slices:
        return True
    return bool(overdrawn_counters((a, b)))


def overdrawn_counters(footprints: Iterable[Footprint]) -> tuple[CounterKey, ...]:
    """The shared counters that ``footprints`` together draw beyond their pool's total."""
    drawn: dict[CounterKey, int] = {}
    totals: dict[CounterKey, int] = {}
    for item in footprints:
        totals.update(item.counter_totals)
        for key, amount in item.counters:
            drawn[key] = drawn.get(key, 0) + amount
    return tuple(sorted(k for k, amount in drawn.items() if k in totals and amount > totals[k]))


def _aliases(ref: DeviceRef, uuid: str | None, pci_bus_id: str | None, device_name: str | None) -> frozenset[str]:
    """Names of one physical GPU: its UUID (unique everywhere), and its bus id and device name in the pool."""
    scope = f"{ref.driver}/{ref.pool}"
    return frozenset(
        alias
        for alias in (
            f"uuid:{uuid}" if uuid else None,
            f"pci:{scope}/{pci_bus_id}" if pci_bus_id else None,
            f"device:{scope}/{device_name}" if device_name else None,
        )
        if alias is not None
    )
