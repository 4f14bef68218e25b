"""Pools of ResourceSlices, and which of their devices a node may use, as the scheduler's allocator sees them.

From DRA-lib ``structured/pools_*.go: GatherPools``: slices are grouped by (driver, pool name); only the
highest ``pool.generation`` counts (older slices are leftovers of a driver's update in flight); a pool is
complete only when the slices seen number ``resourceSliceCount``. Incomplete pools contribute no devices
(the driver is still publishing), and invalid pools (a device name twice, a counter set nobody declares)
contribute none either (a counter set name declared twice counts as invalid, not as one merged
set: ``getAndValidateCounterSets``); both are reported so that an operator sees why devices are missing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from placement.core.constraints.selectors import terms_match
from placement.core.dra.device_types import CounterSet, Device, NodeSelection, ResourceSlice


class PoolStatus(enum.StrEnum):
    COMPLETE = "complete"
    INCOMPLETE = "incomplete"  # fewer (or more) slices than resourceSliceCount: the driver is mid-update
    INVALID = "invalid"


@dataclass(frozen=True)
class DeviceRef:
    """A device's identity in the cluster, as ``AllocationResult`` names it."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class PoolDevice:
    """A device with the slice that published it (the slice says where it may be used)."""

    slice: ResourceSlice
    device: Device

    @property
    def ref(self) -> DeviceRef:
        return DeviceRef(self.slice.driver, self.slice.pool.name, self.device.name)


@dataclass(frozen=True)
class Pool:
    driver: str
    name: str
    generation: int
    slices: tuple[ResourceSlice, ...]  # of the highest generation, by name
    status: PoolStatus
    problem: str | None = None  # why the pool is incomplete or invalid

    @property
    def devices(self) -> tuple[PoolDevice, ...]:
        """Every device in slice order, then spec order; none unless the pool is complete."""
        if self.status is not PoolStatus.COMPLETE:
            return ()
        return tuple(PoolDevice(s, d) for s in self.slices for d in s.devices)

    @property
    def counter_sets(self) -> Mapping[str, CounterSet]:
        return {c.name: c for s in self.slices for c in s.shared_counters}


@dataclass(frozen=True)
class NodeDevices:
    """What one node may use: devices of complete pools, and the pools that would have applied but cannot."""

    node_name: str
    devices: tuple[PoolDevice, ...]
    unusable_pools: tuple[Pool, ...]


def gather_pools(slices: Iterable[ResourceSlice]) -> tuple[Pool, ...]:
    """Group ``slices`` into pools, sorted by (driver, pool name); each pool judged complete or not."""
    grouped: dict[tuple[str, str], list[ResourceSlice]] = {}
    for item in slices:
        grouped.setdefault((item.driver, item.pool.name), []).append(item)
    return tuple(_pool(driver, name, members) for (driver, name), members in sorted(grouped.items()))


def _pool(driver: str, name: str, members: list[ResourceSlice]) -> Pool:
    generation = max(s.pool.generation for s in members)
    # Slices by name, as DRA-lib's incubating buildPool sorts them: first fit walks them in that order.
    current = tuple(sorted((s for s in members if s.pool.generation == generation), key=lambda s: s.name))
    expected = current[0].pool.resource_slice_count
    if len(current) != expected:
        problem = f"{len(current)} of {expected} slices of generation {generation} seen"
        return Pool(driver, name, generation, current, PoolStatus.INCOMPLETE, problem)
    invalidity = _invalidity(current)
    status = PoolStatus.INVALID if invalidity else PoolStatus.COMPLETE
    return Pool(driver, name, generation, current, status, invalidity)


def _invalidity(slices: tuple[ResourceSlice, ...]) -> str | None:
    """Why the scheduler would skip this complete pool: a device name twice, a counter set declared twice, or
    unknown counters (DRA-lib ``pools_incubating.go: buildPool``)."""
    seen: set[str] = set()
    for item in slices:
        for device in item.devices:
            if device.name in seen:
                return f"device {device.name!r} is published twice"
            seen.add(device.name)
    counter_sets: dict[str, set[str]] = {}
    for item in slices:
        for counter_set in item.shared_counters:
            # DRA-lib structured/internal/incubating/pools_incubating.go: getAndValidateCounterSets (line 346):
            # a name declared twice in a pool's slices makes the pool invalid; the sets are not merged.
            if counter_set.name in counter_sets:
                return f"counter set {counter_set.name!r} is declared twice"
            counter_sets[counter_set.name] = {name for name, _ in counter_set.counters}
    for item in slices:
        for device in item.devices:
            for consumption in device.consumes_counters:
                declared = counter_sets.get(consumption.counter_set)
                if declared is None:
                    return f"device {device.name!r} consumes from unknown counter set {consumption.counter_set!r}"
                missing = sorted({name for name, _ in consumption.counters} - declared)
                if missing:
                    return f"device {device.name!r} consumes {', '.join(missing)}, not in {consumption.counter_set!r}"
    return None


def selects_node(selection: NodeSelection, node_name: str, node_labels: Mapping[str, str]) -> bool:
    """``nodeName`` equal, ``allNodes``, or a ``nodeSelector`` term matching the node's labels and name."""
    if selection.node_name is not None:
        return selection.node_name == node_name
    if selection.all_nodes:
        return True
    if selection.node_selector is not None:
        return terms_match(selection.node_selector, node_labels, node_name)
    return False


def applies_to_node(entry: PoolDevice, node_name: str, node_labels: Mapping[str, str]) -> bool:
    """Whether the device may be used on the node: the slice's node selection, or the device's own."""
    selection = entry.device.node_selection if entry.slice.per_device_node_selection else entry.slice.node_selection
    return selects_node(selection, node_name, node_labels)


def node_devices(pools: Iterable[Pool], node_name: str, node_labels: Mapping[str, str]) -> NodeDevices:
    """The devices ``node_name`` may use, pool by pool; pools that apply but are unusable are listed."""
    usable: list[PoolDevice] = []
    unusable: list[Pool] = []
    for pool in pools:
        candidates = [PoolDevice(s, d) for s in pool.slices for d in s.devices]
        applying = [c for c in candidates if applies_to_node(c, node_name, node_labels)]
        # A counter slice that selects the node brings its pool in too (DRA-lib pools_incubating.go:
        # GatherPools takes every slice whose node selection matches): an incomplete or invalid pool is
        # then unusable here (an ``All`` request fails on it) even when none of its devices is.
        counting = any(
            s.shared_counters and selects_node(s.node_selection, node_name, node_labels) for s in pool.slices
        )
        if not applying and not counting:
            continue
        if pool.status is PoolStatus.COMPLETE:
            usable.extend(applying)
        else:
            unusable.append(pool)
    return NodeDevices(node_name=node_name, devices=tuple(usable), unusable_pools=tuple(unusable))
