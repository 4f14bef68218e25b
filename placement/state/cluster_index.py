"""The cluster index: every node's NUMA resources as numpy arrays, fed incrementally by watches.

One slot per node; slots of removed nodes are reused. Per slot the index keeps what decisions read
(``NodeArrays``: [resources, nodes, cells] totals and free amounts, node-level allocatable and free,
kubelet policy codes, NUMA ids) plus what scoring reads (SLIT distances, HMAT bandwidth) and, outside
the arrays, a small Python record: the report's pods fingerprint, the pods we know on the node and a
shared reference to the node's GPU link table (interned: nodes of one machine type share one table).
No ``NodeTopology`` is kept per node. What kube-scheduler's constraint plugins read (labels, taints,
cordon, readiness, placed pods, claims) is in ``facts`` (``state.scheduling_facts``), which the index
tells when a slot is taken, freed or the slots grow.

How free capacity is derived, so that stale agent data never makes us over-commit:

* ``cell_free = reported available - charges of the pods the report does not account for``. A report
  accounts for the bound pods when its pods fingerprint equals the fingerprint of the bound pods we know
  (either fingerprint method); a pod stays accounted until it is removed. Pods reserved but not bound,
  and pods bound after the report, are charged on top of it.
* A charge lands on the pod's cells when we know them (our annotations or our reservation). A pod
  whose cells are unknown, or spread over several cells in amounts the kubelet chooses, is charged in
  full on every candidate cell: pessimistic, and only until a report accounts for it.
* ``node_free = allocatable - requests of every pod we know``: allocatable never accounts for pods.
* A pod bound to, or reserved on, a node without a slot (its report has not arrived yet: the pod list
  often lands before the node's after a restart; or its report was removed) is kept by node name and
  charged when a report gives the node a slot, as ``facts`` keeps its placed pods until ``attach``.
  Dropping it would leave the node looking emptier than it is, and the next decision double-booking it.
* ``memory_group``: on a Static memory manager node, the NUMA groups the kubelet's memory manager holds
  for the Guaranteed pods we know whose cells we know (``feasibility.memory_groups``), whether or not a
  report accounts for them: no report carries them. Pods placed by others cannot be modelled.

Every public method takes ``lock``; a caller that reads ``arrays()`` and decides on them (``decide``)
holds the lock for the whole decision, so no other decision or update interleaves.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from kubenexus.topology.labels import decode_node_metadata, local_read_bandwidth
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.nrt import GPU_RESOURCE, cell_resources, decode_nrt
from kubenexus.topology.podfingerprint import pods_fingerprint
from placement.core.charging import charge_cells, charge_node
from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.constraint_types import Labels
from placement.core.constraints.context import PodInCluster
from placement.core.dra.gpu_devices import NVIDIA_GPU_DRIVERS
from placement.core.feasibility import memory_groups
from placement.core.foreign_nrt import SOURCE as FOREIGN_NRT
from placement.core.gpu_sets import GpuLinkTable, build_gpu_link_table
from placement.core.pods import PendingPod, PodUsage
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
    PodDemand,
    PolicyCode,
    ScopeCode,
    is_memory_resource,
)
from placement.core.workload_policies import DEFAULT_POLICIES, WorkloadPolicies
from placement.state.dra_state import DraState
from placement.state.dra_verdicts import DeviceChoices, PodWithDevices
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


@dataclass(frozen=True)
class Amount:
    """One resource of a cell or node: cpu in CPUs, memory and hugepages in bytes, devices in counts."""

    name: str
    total: float
    free: float


@dataclass(frozen=True)
class CellState:
    """One NUMA cell as the index holds it (``ClusterIndex.cells``)."""

    id: int
    resources: tuple[Amount, ...]  # those the cell has
    local_read_bandwidth_mbps: float
    local_distance: float  # SLIT distance to itself; 0 where unknown
    claimed: bool  # a pod placed by us uses it
    isolated: bool  # an isolated pod placed by us holds it


@dataclass(frozen=True)
class KubeletPolicy:
    """The node's resource managers as it reported them."""

    topology_manager_policy: str
    topology_manager_scope: str
    cpu_manager_static: bool
    memory_manager_static: bool


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


class ClusterIndex:
    """Per-node NUMA arrays for vectorised filtering and scoring; see the module docstring."""

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

    # --- storage ---------------------------------------------------------------------------------------

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

    # --- nodes -----------------------------------------------------------------------------------------

    def upsert_node(self, name: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
        """A Node's labels and annotations (labels mode); raises ``TopologyDecodeError`` on a bad model."""
        self.upsert_topology(name, decode_node_metadata(labels, annotations))

    def upsert_nrt(self, obj: Mapping[str, Any]) -> None:
        """A NodeResourceTopology object (NRT mode); the object name is the node name."""
        topology = decode_nrt(obj)
        self.upsert_topology(str(obj["metadata"]["name"]), topology)

    def upsert_topology(self, name: str, topology: NodeTopology) -> None:
        """The latest report for ``name``, from either mode: replaces the node's totals and availability."""
        with self.lock:
            self.changes += 1
            node = self._nodes.get(name)
            if node is None:
                if not self._free_slots:
                    self._allocate(self._capacity * 2)
                node = _Node(name=name, slot=self._free_slots.pop())
                self._nodes[name] = node
                self._slot_by_name[name] = node.slot
                self._slot_names[node.slot] = self._name_array[node.slot] = name
                self.membership += 1
                self.facts.attach(name, node.slot)
                # Pods listed before the node's report: charged from now on (``_reconcile`` below decides
                # whether this report already accounts for them).
                node.pods.update(self._waiting.pop(name, {}))
            self._write_report(node, topology)
            self._reconcile(node)
            self._rebuild(node)
            self.dra.set_topology(name, topology)

    def remove_node(self, name: str) -> None:
        with self.lock:
            self.changes += 1
            node = self._nodes.pop(name, None)
            if node is None:
                return
            del self._slot_by_name[name]
            if node.pods:
                # Its pods are kept by name, charged again if a report brings the node back; a fresh
                # report must account for them anew.
                for entry in node.pods.values():
                    entry.accounted = False
                self._waiting[name] = node.pods
            self._clear_slot(node.slot)
            self._slot_names[node.slot] = None
            self._name_array[node.slot] = ""
            self.membership += 1
            self.facts.detach(node.slot)
            self.dra.set_topology(name, None)
            self._free_slots.append(node.slot)

    def _clear_slot(self, slot: int) -> None:
        for array in (self.cell_total, self.reported_free, self.cell_free):
            array[:, slot, :] = 0
        self.node_allocatable[:, slot] = 0
        self.node_free[:, slot] = 0
        for scalar in (self.numa_count, self.policy, self.scope, self.cpu_static, self.memory_static):
            scalar[slot] = 0
        self.cell_ids[slot] = -1
        self.cell_claimed[slot] = False
        self.cell_isolated[slot] = False
        self.memory_group[slot] = 0
        self.unaligned_gpus[slot] = 0
        self.bandwidth[slot] = 0
        self.spanning_bandwidth[slot] = 0
        self.local_distance[slot] = 0
        self.spanning_distance[slot] = 0
        self.gpu_share_free[slot] = 0
        self.gpu_left[slot] = 0
        self.slot_changes[slot] = self.changes

    def _write_report(self, node: _Node, topology: NodeTopology) -> None:
        slot = node.slot
        self._clear_slot(slot)
        cells = sorted(topology.numa_cells, key=lambda c: c.id)
        self.numa_count[slot] = min(len(cells), np.iinfo(np.int8).max)
        kubelet = topology.kubelet
        if kubelet is not None:
            self.policy[slot] = POLICY_CODES.get(kubelet.topology_manager_policy, PolicyCode.NONE)
            self.scope[slot] = ScopeCode.POD if kubelet.topology_manager_scope == "pod" else ScopeCode.CONTAINER
            self.cpu_static[slot] = kubelet.cpu_manager_policy == "static"
            self.memory_static[slot] = kubelet.memory_manager_policy == "Static"
        in_arrays = len(cells) <= MAX_NUMA  # a wider machine is decided on node-level amounts only
        for position, cell in enumerate(cells):
            for amount in cell_resources(topology, cell):
                column = self._column(amount.name)
                scale = _MILLI if amount.name == CPU else 1.0
                self.node_allocatable[column, slot] += amount.allocatable * scale
                if not in_arrays:
                    continue
                # "Preferred" is judged on every CPU and every device, but on allocatable memory.
                total = amount.allocatable if is_memory_resource(amount.name) else amount.capacity
                self.cell_total[column, slot, position] = total
                self.reported_free[column, slot, position] = min(amount.available, total)
            if in_arrays:
                self.cell_ids[slot, position] = cell.id
                self.bandwidth[slot, position] = local_read_bandwidth(topology, cell.id) or 0
        if in_arrays:
            known = self.bandwidth[slot][self.bandwidth[slot] > 0]
            self.spanning_bandwidth[slot] = known.mean() if known.size else 0
        if topology.distances is not None and in_arrays:
            pairs = [[topology.distances.get(a.id, b.id) or 0 for b in cells] for a in cells]
            for position in range(len(cells)):
                self.local_distance[slot, position] = pairs[position][position]
            flat = [d for row in pairs for d in row]
            # The kubelet's CalculateAverageFor: every ordered pair, self-distances included.
            self.spanning_distance[slot] = sum(flat) / len(flat) if flat and all(flat) else 0
        unaligned = sum(1 for gpu in topology.gpus if gpu.numa_node is None and gpu.healthy)
        gpu = self._column(GPU_RESOURCE)
        if unaligned:
            self.node_allocatable[gpu, slot] += unaligned
            self.unaligned_gpus[slot] = unaligned
        # Every GPU also offers GPU_MILLI thousandths to pods that share one, in the same cells.
        share = self._column(GPU_SHARE)
        self.node_allocatable[share, slot] = GPU_MILLI * self.node_allocatable[gpu, slot]
        self.cell_total[share, slot] = GPU_MILLI * self.cell_total[gpu, slot]
        self.reported_free[share, slot] = GPU_MILLI * self.reported_free[gpu, slot]
        node.fingerprint = topology.pods_fingerprint
        node.note = next((w.message for w in topology.warnings if w.source == FOREIGN_NRT), None)
        node.gpus = self._gpu_shape(topology)
        self._widen_gpus(len(node.gpus.healthy) if node.gpus is not None else 0)
        self.generation[slot] += 1

    def _gpu_shape(self, topology: NodeTopology) -> GpuShape | None:
        if not topology.gpus:
            return None
        names = {f"GPU{gpu.index}" for gpu in topology.gpus}
        key = (
            tuple((g.index, g.numa_node, g.healthy) for g in topology.gpus),
            tuple(link for link in topology.links if link.a in names and link.b in names),
        )
        shape = self._gpu_shapes.get(key)
        if shape is None:
            shape = GpuShape(
                table=build_gpu_link_table(topology),
                numa_of={g.index: g.numa_node for g in topology.gpus},
                healthy=frozenset(g.index for g in topology.gpus if g.healthy),
            )
            self._gpu_shapes[key] = shape
        return shape

    # --- pods ------------------------------------------------------------------------------------------

    def upsert_pod(self, usage: PodUsage) -> None:
        """A pod the watch shows bound to ``usage.node`` (confirms a reservation of the same pod)."""
        self._put_pod(usage, bound=True)

    def assume_pod(self, usage: PodUsage) -> None:
        """A reservation: charged at once, as if bound, until bound and accounted or released."""
        self._put_pod(usage, bound=False)

    def _put_pod(self, usage: PodUsage, *, bound: bool) -> None:
        with self.lock:
            previous = self._pod_nodes.get(usage.key)
            if previous == usage.node and self._unchanged(usage, bound=bound):
                return  # a status update of a pod already counted: nothing to judge again
            self.changes += 1
            if previous is None:
                self.workload.observe(usage.demand)
            entry: _PodEntry | None = None
            if previous is not None:
                entry = self._take(usage.key, previous, settle=previous != usage.node)
                if previous != usage.node:
                    entry = None
            held = _PodEntry(
                usage=usage if entry is None else _placed(usage, entry.usage),
                bound=bound or (entry is not None and entry.bound),
                accounted=entry.accounted if entry is not None else False,
            )
            self._pod_nodes[usage.key] = usage.node
            node = self._nodes.get(usage.node)
            if node is None:
                # A node without a report yet: kept by name, charged when the report gives it a slot.
                self._waiting.setdefault(usage.node, {})[usage.key] = held
                return
            node.pods[usage.key] = held
            self._reconcile(node)
            self._rebuild(node)

    def _entry(self, key: tuple[str, str], node_name: str) -> _PodEntry | None:
        """The pod ``key`` as held on ``node_name``, slotted or waiting for its report."""
        node = self._nodes.get(node_name)
        pods = node.pods if node is not None else self._waiting.get(node_name, {})
        return pods.get(key)

    def _take(self, key: tuple[str, str], node_name: str, *, settle: bool) -> _PodEntry | None:
        """Remove the pod ``key`` from ``node_name``; ``settle``: recompute that node's arrays at once."""
        node = self._nodes.get(node_name)
        if node is not None:
            entry = node.pods.pop(key, None)
            if settle:
                self._reconcile(node)
                self._rebuild(node)
            return entry
        waiting = self._waiting.get(node_name)
        if waiting is None:
            return None
        entry = waiting.pop(key, None)
        if not waiting:
            del self._waiting[node_name]
        return entry

    def _unchanged(self, usage: PodUsage, *, bound: bool) -> bool:
        """Putting the pod again would change nothing: held on its node as placed, at least as bound."""
        entry = self._entry(usage.key, usage.node)
        if entry is None or (bound and not entry.bound):
            return False
        return _placed(usage, entry.usage) == entry.usage

    def remove_pod(self, namespace: str, name: str) -> PodUsage | None:
        """Pod deleted, finished, or reservation released; returns what it held."""
        with self.lock:
            self.changes += 1
            node_name = self._pod_nodes.pop((namespace, name), None)
            if node_name is None:
                return None
            entry = self._take((namespace, name), node_name, settle=True)
            return entry.usage if entry is not None else None

    def pod(self, namespace: str, name: str) -> tuple[PodUsage, bool, bool] | None:
        """(usage, bound, accounted) of a pod the index holds, on a slotted node or waiting for its report."""
        with self.lock:
            node_name = self._pod_nodes.get((namespace, name))
            entry = self._entry((namespace, name), node_name) if node_name is not None else None
            return None if entry is None else (entry.usage, entry.bound, entry.accounted)

    def _reconcile(self, node: _Node) -> None:
        """Mark the bound pods accounted when the report's fingerprint names exactly them."""
        if node.fingerprint is None:
            return
        bound = [entry for entry in node.pods.values() if entry.bound]
        if not bound or all(entry.accounted for entry in bound):
            return
        slot = node.slot
        every = pods_fingerprint(e.usage.key for e in bound)
        exclusive = pods_fingerprint(e.usage.key for e in bound if self._has_exclusive(e.usage, slot))
        if node.fingerprint in (every, exclusive):
            for entry in bound:
                entry.accounted = True

    def _has_exclusive(self, usage: PodUsage, slot: int) -> bool:
        demand = usage.demand
        return bool(
            (demand.exclusive_cpus and self.cpu_static[slot])
            or demand.device_requests
            or (demand.guaranteed and demand.memory_requests and self.memory_static[slot])
        )

    def _rebuild(self, node: _Node) -> None:
        """Recompute the node's free arrays from its report and its pods (a few pods: a Python loop)."""
        self._write_free(node.slot, self._free_state(node, node.pods.values()))
        self.slot_changes[node.slot] = self.changes

    def _free_state(self, node: _Node, entries: Iterable[_PodEntry]) -> _FreeState:
        """The node's free amounts from its report with ``entries`` (its pods, or some of them) charged."""
        slot = node.slot
        count = min(int(self.numa_count[slot]), MAX_NUMA)
        free = self.reported_free[:, slot, :].copy()
        node_free = self.node_allocatable[:, slot].copy()
        claimed = np.zeros(MAX_NUMA, dtype=np.bool_)
        isolated = np.zeros(MAX_NUMA, dtype=np.bool_)
        pinned_memory: list[tuple[PodDemand, list[int]]] = []  # pods whose cells we know, for memory groups
        ids = [int(i) for i in self.cell_ids[slot, :count]]
        gpu = self._resources.index(GPU_RESOURCE)
        shared_by_all: dict[int, float] = {}  # thousandths shared out of each GPU, by every pod we know
        shared_unaccounted: set[int] = set()
        whole: set[int] = set()  # GPUs held whole by the pods charged
        for entry in entries:
            usage = entry.usage
            # A shared GPU is gone for whole-GPU requests too (below).
            charge_node(node_free, self._resources, usage.demand)
            if _shares_gpu(usage):
                for index in usage.gpus:
                    shared_by_all[index] = shared_by_all.get(index, 0.0) + _share_of(usage)
                    if not entry.accounted:
                        shared_unaccounted.add(index)
            else:
                whole.update(usage.gpus)
            known = [ids.index(c) for c in usage.cells if c in ids]
            if known:
                claimed[known] = True
                if usage.isolated:
                    isolated[known] = True
                pinned_memory.append((usage.demand, known))
            if not entry.accounted:
                cells = known or list(range(count))
                charge_cells(free, self._resources, usage.demand, cells, _gpu_cells(usage, node, ids))
        node_free[gpu] -= len(shared_by_all)
        for index in shared_unaccounted:
            numa = node.gpus.numa_of.get(index) if node.gpus is not None else None
            if numa in ids:
                free[gpu, ids.index(numa)] -= 1
        left = _share_left(node, shared_by_all, whole)
        return _FreeState(
            cell_free=np.clip(free, 0, self.cell_total[:, slot, :]),
            node_free=node_free,
            claimed=claimed,
            isolated=isolated,
            memory_group=memory_groups(pinned_memory) if self.memory_static[slot] else np.zeros(MAX_NUMA, np.uint8),
            gpu_share_free=max(left.values(), default=0),
            gpu_left=self._whole_gpus_as_reported(node, left, free[gpu], ids),
        )

    def _write_free(self, slot: int, state: _FreeState, arrays: NodeArrays | None = None) -> None:
        """Write ``state`` into the live arrays, or into ``arrays`` (a copy whose row ``slot`` it is)."""
        target = arrays if arrays is not None else self.arrays()
        target.cell_free[:, slot, :] = state.cell_free
        target.node_free[:, slot] = state.node_free
        if target.gpu_share_free is not None:
            target.gpu_share_free[slot] = state.gpu_share_free
        if target.gpu_left is not None:
            target.gpu_left[slot] = 0
            target.gpu_left[slot, : len(state.gpu_left)] = state.gpu_left
        target.cell_claimed[slot] = state.claimed
        target.cell_isolated[slot] = state.isolated
        target.memory_group[slot] = state.memory_group

    def _whole_gpus_as_reported(
        self, node: _Node, left: Mapping[int, float], cell_gpus_free: FloatArray, ids: list[int]
    ) -> list[float]:
        """Thousandths left on each healthy GPU, by index (0 for one held whole). A cell has no more free
        whole GPUs than its free count says: the device plugin gave some to pods whose GPUs we do not
        know, so the highest free indices there count as taken."""
        if node.gpus is None:
            return []
        amounts = {index: left.get(index, 0.0) for index in sorted(node.gpus.healthy)}
        for position, numa in enumerate(ids):
            whole = [i for i, amount in amounts.items() if amount >= GPU_MILLI and node.gpus.numa_of.get(i) == numa]
            for index in whole[max(int(cell_gpus_free[position]), 0) :]:
                amounts[index] = 0.0
        return list(amounts.values())

    # --- reading ---------------------------------------------------------------------------------------

    def arrays(self) -> NodeArrays:
        """A view of the live arrays (not a copy): read it under ``lock``."""
        return NodeArrays(
            resources=tuple(self._resources),
            cell_total=self.cell_total,
            cell_free=self.cell_free,
            node_allocatable=self.node_allocatable,
            node_free=self.node_free,
            numa_count=self.numa_count,
            policy=self.policy,
            scope=self.scope,
            cpu_static=self.cpu_static,
            memory_static=self.memory_static,
            cell_ids=self.cell_ids,
            cell_claimed=self.cell_claimed,
            cell_isolated=self.cell_isolated,
            memory_group=self.memory_group,
            unaligned_gpus=self.unaligned_gpus,
            bandwidth=self.bandwidth,
            spanning_bandwidth=self.spanning_bandwidth,
            local_distance=self.local_distance,
            spanning_distance=self.spanning_distance,
            gpu_share_free=self.gpu_share_free,
            gpu_left=self.gpu_left,
            workload=self.workload.target(),
        )

    def arrays_without(self, keys: Collection[tuple[str, str]], *, slots: Sequence[int] | None = None) -> NodeArrays:
        """The arrays as if the pods ``keys`` were gone (evicted): a copy, the live arrays untouched, in which
        only the slots those pods are on are charged again (``_free_state``, the one charging code).

        ``slots``: only these rows, in this order (row ``i`` of the answer is slot ``slots[i]``): one node's
        row to check a plan on costs a few small copies, not the whole cluster's. Call under ``lock``.
        """
        live = self.arrays()
        if slots is None:
            picked = replace(
                live,
                cell_free=live.cell_free.copy(),
                node_free=live.node_free.copy(),
                cell_claimed=live.cell_claimed.copy(),
                cell_isolated=live.cell_isolated.copy(),
                memory_group=live.memory_group.copy(),
                gpu_share_free=self.gpu_share_free.copy(),
                gpu_left=self.gpu_left.copy(),
            )
            position: Mapping[int, int] | None = None
        else:
            chosen = np.asarray(slots, dtype=np.int64)
            picked = _rows_of(live, chosen)
            position = {slot: row for row, slot in enumerate(chosen.tolist())}
        gone_by_node: dict[str, set[tuple[str, str]]] = {}
        for key in keys:
            node_name = self._pod_nodes.get(key)
            if node_name is not None:
                gone_by_node.setdefault(node_name, set()).add(key)
        for node_name, gone in gone_by_node.items():
            node = self._nodes.get(node_name)
            if node is None:
                continue
            row = node.slot if position is None else position.get(node.slot)
            if row is None:
                continue
            staying = [entry for key, entry in node.pods.items() if key not in gone]
            self._write_free(row, self._free_state(node, staying), picked)
        return picked

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

    def gpu_shape(self, slot: int) -> GpuShape | None:
        name = self._slot_names[slot]
        return None if name is None else self._nodes[name].gpus

    def busy_gpus(self, slot: int, *, without: Collection[tuple[str, str]] = ()) -> frozenset[int]:
        """GPUs that pods we know on the node hold by index (ours; the device plugin picks the rest);
        ``without``: as if those pods were gone."""
        name = self._slot_names[slot]
        if name is None:
            return frozenset()
        pods = self._nodes[name].pods
        return frozenset(i for key, entry in pods.items() if key not in without for i in entry.usage.gpus)

    def gpu_share_left(self, slot: int, *, without: Collection[tuple[str, str]] = ()) -> dict[int, int]:
        """Thousandths left per GPU that a pod may share: healthy, not held whole by a pod we know;
        ``without``: as if those pods were gone."""
        name = self._slot_names[slot]
        if name is None:
            return {}
        node = self._nodes[name]
        shared: dict[int, float] = {}
        whole: set[int] = set()
        for key, entry in node.pods.items():
            if key in without:
                continue
            if not _shares_gpu(entry.usage):
                whole.update(entry.usage.gpus)
                continue
            for index in entry.usage.gpus:
                shared[index] = shared.get(index, 0.0) + _share_of(entry.usage)
        return {index: int(amount) for index, amount in _share_left(node, shared, whole).items()}

    # --- views for people (GetNodeTopology, ListNodes): read under ``lock`` --------------------------------

    def kubelet_policy(self, slot: int) -> KubeletPolicy:
        return KubeletPolicy(
            topology_manager_policy=_POLICY_NAMES.get(int(self.policy[slot]), "none"),
            topology_manager_scope="pod" if self.scope[slot] == ScopeCode.POD else "container",
            cpu_manager_static=bool(self.cpu_static[slot]),
            memory_manager_static=bool(self.memory_static[slot]),
        )

    def numa_cells(self, slot: int) -> int:
        return int(self.numa_count[slot])

    def node_notes(self, name: str) -> tuple[str, ...]:
        """What the node's report could not tell, in a sentence (``placement.core.foreign_nrt``); () for a node
        the agent reports."""
        with self.lock:
            node = self._nodes.get(name)
            return () if node is None or node.note is None else (node.note,)

    def cells(self, slot: int) -> tuple[CellState, ...]:
        count = min(int(self.numa_count[slot]), MAX_NUMA)
        return tuple(
            CellState(
                id=int(self.cell_ids[slot, k]),
                resources=tuple(
                    Amount(name, float(self.cell_total[c, slot, k]), float(self.cell_free[c, slot, k]))
                    for c, name in enumerate(self._resources)
                    if self.cell_total[c, slot, k] > 0
                ),
                local_read_bandwidth_mbps=float(self.bandwidth[slot, k]),
                local_distance=float(self.local_distance[slot, k]),
                claimed=bool(self.cell_claimed[slot, k]),
                isolated=bool(self.cell_isolated[slot, k]),
            )
            for k in range(count)
        )

    def node_amounts(self, slot: int) -> dict[str, Amount]:
        """Allocatable and free per resource the node offers (free: less every pod we know there)."""
        allocatable, free = self.node_allocatable[:, slot], self.node_free[:, slot]
        return {
            name: Amount(name, _in_units(name, allocatable[c]), _in_units(name, free[c]))
            for c, name in enumerate(self._resources)
            if allocatable[c] > 0
        }

    def judge(self, pod: PendingPod) -> PodInCluster | PodWithDevices:
        """``pod``'s kube-scheduler constraints against the node facts and placed pods here (under ``lock``),
        and its DRA claims when it has some."""
        constraints = PodInCluster(
            self.facts,
            self._constraint_cache,
            pod.namespace,
            pod.sorted_labels(),
            pod.constraints,
            self.policy_scores.scorer(pod, self.arrays),
        )
        if not pod.resource_claims:
            return constraints
        return PodWithDevices(
            constraints, pod, self.device_choices, self.name_of, self._node_labels, self._landing_cells
        )

    def _slots_epoch(self) -> tuple[int, int]:
        """(layout, capacity): what per-slot arrays kept elsewhere must be rebuilt for. A slot that gets
        another node needs nothing here: attaching it changes the facts' ``labels_version``."""
        return (self.layout, self._capacity)

    def _labels_version(self) -> int:
        return self.facts.labels_version

    def _node_labels(self, name: str) -> Labels:
        facts = self.facts.node(name)
        return () if facts is None else facts.labels

    def _landing_cells(self, slots: IntArray, positions: IntArray) -> IntArray:
        """The NUMA cell id at each slot's cell position; -1 where the position is -1 (the pod spans the node)."""
        ids = self.cell_ids[slots, np.maximum(positions, 0)].astype(np.int64)
        cells: IntArray = np.where(positions >= 0, ids, -1)
        return cells

    def bound_pods(self, slots: IntArray) -> list[tuple[int, PodUsage]]:
        """(position in ``slots``, usage) of every pod the watch shows bound on those slots: one pass under
        one lock, for a decision that reads every node's pods (preemption's bounds)."""
        with self.lock:
            names = self._slot_names
            return [
                (position, entry.usage)
                for position, slot in enumerate(slots.tolist())
                if (name := names[slot]) is not None
                for entry in self._nodes[name].pods.values()
                if entry.bound
            ]

    def pods_on(self, name: str) -> list[tuple[PodUsage, bool, bool]]:
        with self.lock:
            node = self._nodes.get(name)
            return [] if node is None else [(e.usage, e.bound, e.accounted) for e in node.pods.values()]


def _rows_of(arrays: NodeArrays, rows: IntArray) -> NodeArrays:
    """``arrays`` kept to ``rows`` (copies): row ``i`` of the answer is row ``rows[i]`` of ``arrays``."""
    share, left = arrays.gpu_share_free, arrays.gpu_left
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
