"""The cluster index's records: per-node and per-pod records, the views it answers with, and ``IndexState``:
the arrays and the slots every role shares.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from kubenexus.topology.nrt import GPU_RESOURCE
from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.constraint_types import Labels
from placement.core.dra.gpu_devices import NVIDIA_GPU_DRIVERS
from placement.core.gpu_sets import GpuLinkTable
from placement.core.pods import PodUsage
from placement.core.vocabulary import (
    CPU,
    GPU_MILLI,
    GPU_SHARE,
    MAX_NUMA,
    POLICY_CODES,
    BoolArray,
    FloatArray,
    IntArray,
    MemoryGroupArray,
    NodeArrays,
)
from placement.core.workload_policies import DEFAULT_POLICIES, WorkloadPolicies
from placement.state.dra_state import DraState
from placement.state.dra_verdicts import DeviceChoices
from placement.state.scheduling_facts import SchedulingFacts
from placement.state.workload import WorkloadModel
from placement.state.workload_scores import PolicyScores

_MILLI = 1000.0


_POLICY_NAMES = {int(code): name for name, code in POLICY_CODES.items()}


DEFAULT_GPU_COLUMNS = 8  # GPUs per node in ``gpu_left``; widened for a machine with more


_BASE_RESOURCES = (CPU, "memory", "hugepages-2Mi", "hugepages-1Gi", GPU_RESOURCE, GPU_SHARE)


@dataclass(frozen=True)
class GpuShape:
    """A node's GPUs as decisions need them; interned, so identical machines share one value."""

    table: GpuLinkTable
    numa_of: Mapping[int, int | None]  # GPU index -> host NUMA id
    healthy: frozenset[int]


@dataclass
class _PodEntry:
    usage: PodUsage
    bound: bool  # the pod watch shows it on this node; False for a reservation not yet bound
    accounted: bool = False  # a report's availability already includes it


@dataclass(frozen=True)
class _FreeState:
    """One node's free arrays as charging its pods leaves them (``ClusterIndex._free_state``)."""

    cell_free: FloatArray  # [R, K]
    node_free: FloatArray  # [R]
    claimed: BoolArray  # [K]
    isolated: BoolArray  # [K]
    memory_group: MemoryGroupArray  # [K]
    gpu_share_free: float
    gpu_left: list[float]  # thousandths left per healthy GPU, by index


@dataclass
class _Node:
    name: str
    slot: int
    fingerprint: str | None = None
    gpus: GpuShape | None = None
    pods: dict[tuple[str, str], _PodEntry] = field(default_factory=dict)
    note: str | None = None  # what the report could not tell (another writer's NRT): said with each placement


def _rows_of(arrays: NodeArrays, rows: IntArray) -> NodeArrays:
    """``arrays`` kept to ``rows`` (copies): row ``i`` of the answer is row ``rows[i]`` of ``arrays``."""
    share, left, model = arrays.gpu_share_free, arrays.gpu_left, arrays.gpu_model
    return replace(
        arrays,
        cell_total=arrays.cell_total[:, rows, :],
        cell_free=arrays.cell_free[:, rows, :],
        node_allocatable=arrays.node_allocatable[:, rows],
        node_free=arrays.node_free[:, rows],
        numa_count=arrays.numa_count[rows],
        policy=arrays.policy[rows],
        scope=arrays.scope[rows],
        cpu_static=arrays.cpu_static[rows],
        memory_static=arrays.memory_static[rows],
        cell_ids=arrays.cell_ids[rows],
        cell_claimed=arrays.cell_claimed[rows],
        cell_isolated=arrays.cell_isolated[rows],
        memory_group=arrays.memory_group[rows],
        unaligned_gpus=arrays.unaligned_gpus[rows],
        bandwidth=arrays.bandwidth[rows],
        spanning_bandwidth=arrays.spanning_bandwidth[rows],
        local_distance=arrays.local_distance[rows],
        spanning_distance=arrays.spanning_distance[rows],
        gpu_share_free=None if share is None else share[rows],
        gpu_left=None if left is None else left[rows],
        gpu_model=None if model is None else model[rows],
    )


def _in_units(resource: str, amount: float) -> float:
    """Node arrays count millicores: CPUs for people."""
    return float(amount) / _MILLI if resource == CPU else float(amount)


def _gpu_cells(usage: PodUsage, node: _Node, ids: list[int]) -> list[int | None] | None:
    """The cell position of each GPU the pod holds, when known (``charging.charge_cells``)."""
    if not usage.gpus or node.gpus is None:
        return None
    numa_of = node.gpus.numa_of
    return [ids.index(numa) if (numa := numa_of.get(index)) in ids else None for index in usage.gpus]


def _placed(usage: PodUsage, held: PodUsage) -> PodUsage:
    """``usage`` as put over ``held``: the watch's copy of one of our pods may predate our annotations,
    so where it names no cells, what we reserved stays."""
    if held.cells and not usage.cells:
        return replace(usage, cells=held.cells, gpus=held.gpus, isolated=held.isolated)
    return usage


def _share_left(node: _Node, shared: Mapping[int, float], whole: set[int]) -> dict[int, float]:
    """Thousandths left per healthy GPU not held whole, given the thousandths ``shared`` out of each."""
    if node.gpus is None:
        return {}
    return {i: GPU_MILLI - shared.get(i, 0.0) for i in sorted(node.gpus.healthy - whole)}


def _share_of(usage: PodUsage) -> float:
    return dict(usage.demand.device_requests).get(GPU_SHARE, 0.0)


def _shares_gpu(usage: PodUsage) -> bool:
    return _share_of(usage) > 0


class IndexState:
    """The index's arrays and records, which every role shares (the roles are its bases:
    ``placement.state.cluster_index``), and looking nodes up by name and slot."""

    def __init__(
        self,
        *,
        initial_capacity: int = 64,
        workload: WorkloadModel | None = None,
        gpu_drivers: Sequence[str] = NVIDIA_GPU_DRIVERS,
        policies: WorkloadPolicies = DEFAULT_POLICIES,
    ) -> None:
        self.lock = threading.RLock()
        # Bumped by every change to nodes or pods: a verdict computed at one count holds while it stands.
        self.changes = 0
        # Bumped when the arrays change shape (more slots, a new resource column, more GPUs per node):
        # per-slot answers kept from before no longer line up.
        self.layout = 0
        # Bumped when a node gains or loses its slot: name -> slot lookups kept elsewhere hold while it stands.
        self.membership = 0
        # The workload the fragmentation score measures against: every pod counts once, when first seen.
        self.workload = workload if workload is not None else WorkloadModel()
        self._gpu_columns = DEFAULT_GPU_COLUMNS
        self._resources: list[str] = list(_BASE_RESOURCES)
        self._capacity = 0
        self._nodes: dict[str, _Node] = {}
        self._slot_by_name: dict[str, int] = {}  # name -> slot, for ``slots_of``'s one-call lookup
        self._slot_names: list[str | None] = []
        self._name_array: npt.NDArray[np.object_] = np.array([], dtype=object)  # the same, "" for a free slot
        self._free_slots: list[int] = []
        self._pod_nodes: dict[tuple[str, str], str] = {}  # every pod we hold -> its node, slotted or not
        # Pods on nodes without a slot (no report yet, or removed), by node name, until a report gives it one.
        self._waiting: dict[str, dict[tuple[str, str], _PodEntry]] = {}
        self._gpu_shapes: dict[object, GpuShape] = {}
        # What the constraint plugins read (labels, taints, placed pods, ...), in step with the slots.
        self.facts = SchedulingFacts(self.lock)
        self._constraint_cache = ConstraintCache()
        # The workload policies' score components (services spread, batch packed, tenants' pools).
        self.policy_scores = PolicyScores(policies, self.facts)
        # DRA: ResourceSlices, DeviceClasses, ResourceClaims and held devices, and the device choices kept.
        self.dra = DraState(self.lock, gpu_drivers=gpu_drivers)
        self.device_choices = DeviceChoices(
            self.dra, slots=self._slots_epoch, slot_of=self.slot_of, labels_version=self._labels_version
        )
        self._allocate(max(1, initial_capacity))

    def _allocate(self, capacity: int) -> None:
        resources, old = len(self._resources), self._capacity

        def grow(array: npt.NDArray[Any] | None, shape: tuple[int, ...], dtype: Any, fill: float = 0) -> Any:
            fresh = np.full(shape, fill, dtype=dtype)
            if array is not None and old:
                fresh[tuple(slice(0, n) for n in array.shape)] = array
            return fresh

        first = old == 0
        self.cell_total: FloatArray = grow(
            None if first else self.cell_total, (resources, capacity, MAX_NUMA), np.float64
        )
        self.reported_free: FloatArray = grow(
            None if first else self.reported_free, (resources, capacity, MAX_NUMA), np.float64
        )
        self.cell_free: FloatArray = grow(
            None if first else self.cell_free, (resources, capacity, MAX_NUMA), np.float64
        )
        self.node_allocatable: FloatArray = grow(
            None if first else self.node_allocatable, (resources, capacity), np.float64
        )
        self.node_free: FloatArray = grow(None if first else self.node_free, (resources, capacity), np.float64)
        self.numa_count: npt.NDArray[np.int8] = grow(None if first else self.numa_count, (capacity,), np.int8)
        self.policy: npt.NDArray[np.int8] = grow(None if first else self.policy, (capacity,), np.int8)
        self.scope: npt.NDArray[np.int8] = grow(None if first else self.scope, (capacity,), np.int8)
        self.cpu_static: BoolArray = grow(None if first else self.cpu_static, (capacity,), np.bool_)
        self.memory_static: BoolArray = grow(None if first else self.memory_static, (capacity,), np.bool_)
        self.generation: npt.NDArray[np.int64] = grow(None if first else self.generation, (capacity,), np.int64)
        # Per slot, ``changes`` when the slot's arrays were last written: what was judged since still holds.
        self.slot_changes: npt.NDArray[np.int64] = grow(None if first else self.slot_changes, (capacity,), np.int64)
        self.cell_ids: npt.NDArray[np.int16] = grow(
            None if first else self.cell_ids, (capacity, MAX_NUMA), np.int16, -1
        )
        self.cell_claimed: BoolArray = grow(None if first else self.cell_claimed, (capacity, MAX_NUMA), np.bool_)
        self.cell_isolated: BoolArray = grow(None if first else self.cell_isolated, (capacity, MAX_NUMA), np.bool_)
        self.memory_group: MemoryGroupArray = grow(None if first else self.memory_group, (capacity, MAX_NUMA), np.uint8)
        self.unaligned_gpus: npt.NDArray[np.int16] = grow(None if first else self.unaligned_gpus, (capacity,), np.int16)
        self.bandwidth: npt.NDArray[np.float32] = grow(
            None if first else self.bandwidth, (capacity, MAX_NUMA), np.float32
        )
        self.spanning_bandwidth: npt.NDArray[np.float32] = grow(
            None if first else self.spanning_bandwidth, (capacity,), np.float32
        )
        self.local_distance: npt.NDArray[np.float32] = grow(
            None if first else self.local_distance, (capacity, MAX_NUMA), np.float32
        )
        self.spanning_distance: npt.NDArray[np.float32] = grow(
            None if first else self.spanning_distance, (capacity,), np.float32
        )
        self.gpu_share_free: FloatArray = grow(None if first else self.gpu_share_free, (capacity,), np.float64)
        self.gpu_left: npt.NDArray[np.int16] = grow(
            None if first else self.gpu_left, (capacity, self._gpu_columns), np.int16
        )
        self._slot_names.extend([None] * (capacity - old))
        self._name_array = np.concatenate([self._name_array, np.full(capacity - old, "", dtype=object)])
        self._free_slots.extend(range(capacity - 1, old - 1, -1))
        self._capacity = capacity
        self.facts.grow(capacity)
        self.layout += 1

    def _column(self, name: str) -> int:
        """The resource axis position of ``name``, adding a column the first time a resource appears."""
        if name in self._resources:
            return self._resources.index(name)
        self._resources.append(name)
        extra_cells = np.zeros((1, self._capacity, MAX_NUMA))
        extra_nodes = np.zeros((1, self._capacity))
        self.cell_total = np.concatenate([self.cell_total, extra_cells])
        self.reported_free = np.concatenate([self.reported_free, extra_cells])
        self.cell_free = np.concatenate([self.cell_free, extra_cells])
        self.node_allocatable = np.concatenate([self.node_allocatable, extra_nodes])
        self.node_free = np.concatenate([self.node_free, extra_nodes])
        self.layout += 1
        return len(self._resources) - 1

    def _widen_gpus(self, gpus: int) -> None:
        """Room for ``gpus`` GPUs per node in ``gpu_left`` (a machine with more than any before)."""
        if gpus <= self._gpu_columns:
            return
        wider = np.zeros((self._capacity, gpus), dtype=np.int16)
        wider[:, : self._gpu_columns] = self.gpu_left
        self.gpu_left = wider
        self._gpu_columns = gpus
        self.layout += 1

    def nbytes(self) -> int:
        """Bytes held in the per-slot arrays."""
        arrays = (
            self.cell_total,
            self.reported_free,
            self.cell_free,
            self.node_allocatable,
            self.node_free,
            self.numa_count,
            self.policy,
            self.scope,
            self.cpu_static,
            self.memory_static,
            self.generation,
            self.slot_changes,
            self.cell_ids,
            self.cell_claimed,
            self.cell_isolated,
            self.memory_group,
            self.unaligned_gpus,
            self.bandwidth,
            self.spanning_bandwidth,
            self.local_distance,
            self.spanning_distance,
            self.gpu_share_free,
            self.gpu_left,
        )
        return sum(a.nbytes for a in arrays)

    def __len__(self) -> int:
        return len(self._nodes)

    def node_names(self) -> list[str]:
        with self.lock:
            return list(self._nodes)

    def slot_of(self, name: str) -> int | None:
        node = self._nodes.get(name)
        return None if node is None else node.slot

    def slots_of(self, names: Sequence[str]) -> IntArray:
        """The slot of each name, in order, -1 for a name the index does not hold (call under the lock).

        One C-level pass (``map`` over a dict's ``get``): a Filter over 1,000 names costs ~40 us, not ~600.
        """
        return np.fromiter(map(self._slot_by_name.get, names, repeat(-1)), dtype=np.int64, count=len(names))

    def names_of(self, slots: IntArray) -> list[str]:
        """The name of each slot, in order; "" for a free slot (call under the lock). One numpy gather: no
        Python work per name."""
        return list(self._name_array[slots].tolist())

    def name_array(self, slots: IntArray) -> npt.NDArray[np.object_]:
        """``names_of`` as a numpy array of ``str`` (call under the lock)."""
        names: npt.NDArray[np.object_] = self._name_array[slots]
        return names

    def name_of(self, slot: int) -> str | None:
        return self._slot_names[slot]

    @property
    def capacity(self) -> int:
        """Slots the arrays hold; it grows only with a node report, which also bumps ``changes``."""
        return self._capacity

    def slot_names(self) -> tuple[str | None, ...]:
        """The node name of every slot (None for a free slot), in slot order."""
        return tuple(self._slot_names)

    def slots(self, names: Iterable[str] | None = None) -> IntArray:
        """Slots of ``names`` (unknown names skipped), or of every node."""
        with self.lock:
            chosen = self._nodes.values() if names is None else (self._nodes[n] for n in names if n in self._nodes)
            return np.fromiter((node.slot for node in chosen), dtype=np.int64)

    def _slots_epoch(self) -> tuple[int, int]:
        """(layout, capacity): what per-slot arrays kept elsewhere must be rebuilt for. A slot that gets
        another node needs nothing here: attaching it changes the facts' ``labels_version``."""
        return (self.layout, self._capacity)

    def _labels_version(self) -> int:
        return self.facts.labels_version

    def _node_labels(self, name: str) -> Labels:
        facts = self.facts.node(name)
        return () if facts is None else facts.labels
