"""What kube-scheduler's constraint plugins read of the cluster besides resources, in step with the index's slots.

``SchedulingFacts`` is the ``ClusterView`` (``placement.core.constraints.view``) over the live index; the
``ClusterIndex`` keeps one (``index.facts``) and tells it when a slot is taken, freed or the slots grow.

* **Nodes.** ``NodeFacts`` (labels, taints, cordon: the Node watch) are kept by node name,
  whether or not the node has a slot: a Node object often arrives before its topology report, and a node
  without an agent never gets one. When the index gives the node a slot (``attach``), its facts are
  written into that slot's columns; when the index frees the slot (``detach``), they are cleared there and
  kept by name. A slot whose Node object has not been seen (or is gone) holds the model's defaults (no
  labels, no taints, schedulable): what every node was before the constraints existed.
* **Label columns** are made the first time a key is read (``label_column``) and then kept in step slot
  by slot: one column per key the plugins ask about, not per key the nodes carry (a key on one node
  would cost a column for every slot). A key no slot carries answers a shared read-only column of -1
  and allocates nothing. Codes stay stable while a column lives; a column whose dead values outnumber its
  live ones is dropped and made again on its next read.
* **Taints**: the distinct taints of the slotted nodes and a [slots, taints] presence matrix; a taint no
  slot carries any more gives its column to the last one, so the matrix stays dense.
* **Placed pods** (bound, or reserved by the binder) are kept by key, whatever their node. ``placed_pods``
  answers those on slotted nodes from a dense list and slot array kept incrementally, so a read copies
  nothing. A pod on a node without a slot counts once the node gets one: the service places nothing on
  such a node, and no plugin can read that node's labels to put it in a topology domain (upstream counts
  it: a known difference, see ``placed_pods``).
* **Namespaces** (labels), **PriorityClasses** (value, global default), **claims** (PersistentVolumeClaims
  with their PersistentVolumes and StorageClasses), **PodDisruptionBudgets** (what preemption may not
  break: ``placement.core.preemption_rules.DisruptionBudget``).

Memory: the nodes' label pairs and taints and the pods' label sets are pooled (one instance each, shared
by every node or pod that carries it; the pods of one template carry one set). Measured with 10,000 nodes
(10 labels, 3 taints each) and 100,000 placed pods (4 labels, 2,000 templates): about 10 MB for the nodes,
40 MB for the pods, 3 MB of arrays.

Versions: ``labels_version`` bumps when a slot's facts change (its node's labels, taints or cordon,
or the slot taken or freed); ``pods_version`` when the placed pods answered change (a pod
added, changed or removed, or brought in or out with its node's slot) and when a namespace's labels
change (pod affinity terms select namespaces by label). A write that changes nothing bumps nothing:
a Node status heartbeat costs one comparison.

Every method takes the index's lock (re-entrant). Arrays and sequences returned are the live ones: read
them under the lock, copy what you keep.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from placement.core.constraints.constraint_types import (
    ClaimFacts,
    Labels,
    NodeFacts,
    NodeSelectorTerm,
    Operator,
    PlacedPod,
    Requirement,
    Taint,
)
from placement.core.preemption_rules import DisruptionBudget
from placement.core.vocabulary import BoolArray, IntArray

ABSENT = -1  # a label column's code for a slot whose node lacks the key
_SPARE_VALUES = 64  # dead values a label column may hold beyond its live ones before it is made again
_MIN_TAINT_COLUMNS = 8
_MIN_PLACED = 64
_POOL_SPARE = 1024  # values a pool holds beyond twice those in use before it drops the unused
_Scalar = TypeVar("_Scalar", bound=np.generic)
_Value = TypeVar("_Value", bound=Hashable)
_UNKNOWN = NodeFacts("")  # a slot whose Node object has not been seen: the model's defaults
PodKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class ClaimSource:
    """What the feed reads of a PersistentVolumeClaim."""

    volume: str = ""  # spec.volumeName: "" while unbound
    storage_class: str = ""
    selected_node: str = ""  # volume.kubernetes.io/selected-node: provisioning started for that node


class _LabelColumn:
    """One label key's value codes per slot."""

    __slots__ = ("_values_tuple", "code_of", "codes", "values")

    def __init__(self, capacity: int) -> None:
        self.codes: IntArray = np.full(capacity, ABSENT, dtype=np.int64)
        self.values: list[str] = []
        self.code_of: dict[str, int] = {}
        self._values_tuple: tuple[str, ...] | None = ()

    def code(self, value: str) -> int:
        code = self.code_of.get(value)
        if code is None:
            code = self.code_of[value] = len(self.values)
            self.values.append(value)
            self._values_tuple = None
        return code

    def values_by_code(self) -> tuple[str, ...]:
        if self._values_tuple is None:
            self._values_tuple = tuple(self.values)
        return self._values_tuple

    def grow(self, capacity: int) -> None:
        grown = np.full(capacity, ABSENT, dtype=np.int64)
        grown[: len(self.codes)] = self.codes
        self.codes = grown


class SchedulingFacts:
    """The ``ClusterView`` over the index's slots, plus what the service resolves requests with (priority
    classes); see the module docstring."""

    def __init__(self, lock: threading.RLock | None = None) -> None:
        self.lock = lock if lock is not None else threading.RLock()
        self._labels_version = 0
        self._pods_version = 0
        self._capacity = 0
        # Per slot.
        self._names: list[str | None] = []
        self._slot_facts: list[NodeFacts | None] = []
        self._unschedulable: BoolArray = np.zeros(0, dtype=np.bool_)
        self._absent: IntArray = _read_only(np.full(0, ABSENT, dtype=np.int64))
        self._key_slots: dict[str, int] = {}  # label key -> slots whose node carries it
        self._columns: dict[str, _LabelColumn] = {}
        self._taints: list[Taint] = []
        self._taint_column: dict[Taint, int] = {}
        self._taint_slots: list[int] = []  # per taint column: slots carrying it
        self._taint_matrix: BoolArray = np.zeros((0, _MIN_TAINT_COLUMNS), dtype=np.bool_)
        self._taints_tuple: tuple[Taint, ...] | None = ()
        # By name.
        self._nodes: dict[str, NodeFacts] = {}  # from Node objects
        self._slot_of: dict[str, int] = {}
        # Placed pods: those on slotted nodes in a dense list with their slots, the others by key and node.
        self._placed: list[PlacedPod] = []
        self._priorities: tuple[int, dict[tuple[str, str], int]] | None = None  # (pods version, priorities)
        self._placed_slots: IntArray = np.zeros(_MIN_PLACED, dtype=np.int64)
        self._position: dict[PodKey, int] = {}  # key -> index into ``_placed``
        self._unslotted: dict[PodKey, PlacedPod] = {}
        self._waiting: dict[str, set[PodKey]] = {}  # node without a slot -> its pods
        # One instance of each label pair and taint of the nodes, and of each label set of the pods (the
        # pods of one template carry the same): thousands of nodes and pods share a few.
        self._node_labels: _Pool[tuple[str, str]] = _Pool()
        self._node_taints: _Pool[Taint] = _Pool()
        self._pod_labels: _Pool[Labels] = _Pool()
        # The rest of the cluster.
        self._namespaces: dict[str, Labels] = {}
        self._priority_classes: dict[str, tuple[int, bool]] = {}  # name -> (value, globalDefault)
        self._default_priority = 0
        self._claims: dict[tuple[str, str], ClaimSource] = {}
        self._volumes: dict[str, tuple[NodeSelectorTerm, ...] | None] = {}  # PV -> its required node affinity
        self._waits_for_consumer: dict[str, bool] = {}  # StorageClass -> volumeBindingMode WaitForFirstConsumer
        self._budgets: dict[tuple[str, str], DisruptionBudget] = {}  # (namespace, name) -> PodDisruptionBudget

    # --- the ClusterView ---------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._capacity

    def node_names(self) -> Sequence[str | None]:
        return self._names

    @property
    def labels_version(self) -> int:
        return self._labels_version

    def label_column(self, key: str) -> tuple[IntArray, tuple[str, ...]]:
        with self.lock:
            column = self._columns.get(key)
            if column is None:
                if key not in self._key_slots:
                    return self._absent, ()
                column = self._columns[key] = self._made_column(key)
            return column.codes, column.values_by_code()

    def taint_columns(self) -> tuple[tuple[Taint, ...], BoolArray]:
        with self.lock:
            if self._taints_tuple is None:
                self._taints_tuple = tuple(self._taints)
            return self._taints_tuple, self._taint_matrix[:, : len(self._taints)]

    @property
    def unschedulable(self) -> BoolArray:
        return self._unschedulable

    @property
    def pods_version(self) -> int:
        return self._pods_version

    def placed_pods(self) -> tuple[Sequence[PlacedPod], IntArray]:
        """The pods on slotted nodes and their slots. Pods on nodes without a topology report (no slot) are
        left out until the node gets one: upstream counts them in topology domains, we cannot place them."""
        with self.lock:
            return self._placed, self._placed_slots[: len(self._placed)]

    def pod_priorities(self) -> Mapping[tuple[str, str], int]:
        """Every pod's priority by key (what preemption compares), kept until a pod changes."""
        with self.lock:
            if self._priorities is None or self._priorities[0] != self._pods_version:
                pods = itertools.chain(self._placed, self._unslotted.values())
                self._priorities = (self._pods_version, {(p.namespace, p.name): p.priority for p in pods})
            return self._priorities[1]

    def namespace_labels(self, namespace: str) -> Labels | None:
        with self.lock:
            return self._namespaces.get(namespace)

    def claim(self, namespace: str, name: str) -> ClaimFacts | None:
        """None also for a claim bound to a volume not seen (yet): it cannot be judged, as upstream cannot."""
        with self.lock:
            source = self._claims.get((namespace, name))
            if source is None:
                return None
            if source.volume:
                if source.volume not in self._volumes:
                    return None
                return ClaimFacts(bound=True, node_affinity=self._volumes[source.volume])
            waits = self._waits_for_consumer.get(source.storage_class, False)
            if not (waits and source.selected_node):
                return ClaimFacts(bound=False, wait_for_first_consumer=waits)
            # Provisioning started for one node: the claim fits only there (upstream's selected-node check).
            only_there = Requirement("metadata.name", Operator.IN, (source.selected_node,))
            return ClaimFacts(
                bound=False,
                node_affinity=(NodeSelectorTerm(match_fields=(only_there,)),),
                wait_for_first_consumer=True,
            )

    # --- priority classes (a request's priorityClassName) ------------------------------------------------

    def priority(self, class_name: str) -> int | None:
        """The priority a pod naming ``class_name`` gets at admission: "" the global default class's value
        (0 without one); None for a class that does not exist (admission refuses such a pod)."""
        with self.lock:
            if not class_name:
                return self._default_priority
            entry = self._priority_classes.get(class_name)
            return None if entry is None else entry[0]

    def set_priority_class(self, name: str, value: int, *, global_default: bool) -> None:
        with self.lock:
            self._priority_classes[name] = (value, global_default)
            self._default_priority = _default_priority(self._priority_classes)

    def remove_priority_class(self, name: str) -> None:
        with self.lock:
            if self._priority_classes.pop(name, None) is not None:
                self._default_priority = _default_priority(self._priority_classes)

    # --- disruption budgets (preemption) ------------------------------------------------------------------

    def disruption_budgets(self) -> tuple[DisruptionBudget, ...]:
        with self.lock:
            return tuple(self._budgets.values())

    def set_disruption_budget(self, budget: DisruptionBudget) -> None:
        with self.lock:
            self._budgets[(budget.namespace, budget.name)] = budget

    def remove_disruption_budget(self, namespace: str, name: str) -> None:
        with self.lock:
            self._budgets.pop((namespace, name), None)

    # --- writes from the feed ----------------------------------------------------------------------------

    def set_node(self, facts: NodeFacts) -> bool:
        """A Node object's facts; False (and nothing bumped) when they did not change (a status heartbeat)."""
        with self.lock:
            if self._nodes.get(facts.name) == facts:
                return False
            facts = replace(
                facts,
                labels=tuple(self._node_labels.shared(pair, self._node_pairs) for pair in facts.labels),
                taints=tuple(self._node_taints.shared(taint, self._node_taint_values) for taint in facts.taints),
            )
            self._nodes[facts.name] = facts
            slot = self._slot_of.get(facts.name)
            if slot is not None:
                self._write(slot, facts)
            return True

    def node(self, name: str) -> NodeFacts | None:
        """The facts of a Node object seen, slot or not."""
        with self.lock:
            return self._nodes.get(name)

    def remove_node(self, name: str) -> None:
        """The Node object is gone; a slot it still holds keeps the defaults until the index frees it."""
        with self.lock:
            if self._nodes.pop(name, None) is None:
                return
            slot = self._slot_of.get(name)
            if slot is not None:
                self._write(slot, _UNKNOWN)

    def put_pod(self, pod: PlacedPod) -> None:
        with self.lock:
            key = (pod.namespace, pod.name)
            held = self._held(key)
            if held == pod:
                return
            pod = self._shared(pod)
            key = (pod.namespace, pod.name)  # the shared namespace: the key holds no copy of its own
            if held is None or held.node != pod.node:
                if held is not None:
                    self._unplace(key, held)
                self._place(key, pod)
            elif (position := self._position.get(key)) is not None:
                self._placed[position] = pod
                self._pods_version += 1
            else:
                self._unslotted[key] = pod

    def remove_pod(self, namespace: str, name: str) -> None:
        with self.lock:
            key = (namespace, name)
            held = self._held(key)
            if held is not None:
                self._unplace(key, held)

    def pod(self, namespace: str, name: str) -> PlacedPod | None:
        with self.lock:
            return self._held((namespace, name))

    def set_namespace(self, name: str, labels: Labels) -> None:
        with self.lock:
            if self._namespaces.get(name) != labels:
                self._namespaces[name] = labels
                self._pods_version += 1

    def remove_namespace(self, name: str) -> None:
        with self.lock:
            if self._namespaces.pop(name, None) is not None:
                self._pods_version += 1

    def set_claim(self, namespace: str, name: str, source: ClaimSource) -> None:
        with self.lock:
            self._claims[(namespace, name)] = source

    def remove_claim(self, namespace: str, name: str) -> None:
        with self.lock:
            self._claims.pop((namespace, name), None)

    def set_volume(self, name: str, node_affinity: tuple[NodeSelectorTerm, ...] | None) -> None:
        with self.lock:
            self._volumes[name] = node_affinity

    def remove_volume(self, name: str) -> None:
        with self.lock:
            self._volumes.pop(name, None)

    def set_storage_class(self, name: str, *, wait_for_first_consumer: bool) -> None:
        with self.lock:
            self._waits_for_consumer[name] = wait_for_first_consumer

    def remove_storage_class(self, name: str) -> None:
        with self.lock:
            self._waits_for_consumer.pop(name, None)

    # --- slots, from the index ---------------------------------------------------------------------------

    def grow(self, capacity: int) -> None:
        """The index holds ``capacity`` slots now (it only grows)."""
        with self.lock:
            old = self._capacity
            if capacity <= old:
                return
            self._names.extend([None] * (capacity - old))
            self._slot_facts.extend([None] * (capacity - old))
            self._unschedulable = _grown(self._unschedulable, capacity, False)
            self._absent = _read_only(np.full(capacity, ABSENT, dtype=np.int64))
            for column in self._columns.values():
                column.grow(capacity)
            matrix = np.zeros((capacity, self._taint_matrix.shape[1]), dtype=np.bool_)
            matrix[:old] = self._taint_matrix
            self._taint_matrix = matrix
            self._capacity = capacity

    def attach(self, name: str, slot: int) -> None:
        """The index gave ``name`` the free ``slot``: its facts and its pods are read there from now on."""
        with self.lock:
            self._names[slot] = name
            self._slot_of[name] = slot
            self._write(slot, self._nodes.get(name, _UNKNOWN))
            waiting = self._waiting.pop(name, ())
            for key in waiting:
                self._append(key, self._unslotted.pop(key), slot)
            if waiting:
                self._pods_version += 1

    def detach(self, slot: int) -> None:
        """The index freed ``slot``: its node's facts and pods are kept by name, for when it returns."""
        with self.lock:
            name = self._names[slot]
            if name is None:
                return
            self._clear(slot)
            self._names[slot] = None
            del self._slot_of[name]
            positions = np.flatnonzero(self._placed_slots[: len(self._placed)] == slot)
            if positions.size:
                waiting = self._waiting.setdefault(name, set())
                for position in positions[::-1].tolist():  # highest first: what a swap moves is already kept
                    pod = self._placed[position]
                    key = (pod.namespace, pod.name)
                    self._remove_at(key, position)
                    self._unslotted[key] = pod
                    waiting.add(key)
                self._pods_version += 1
            self._labels_version += 1

    def nbytes(self) -> int:
        """Bytes held in the per-slot arrays (label columns, taint matrix, flags, placed pods' slots)."""
        arrays = (self._unschedulable, self._absent, self._taint_matrix, self._placed_slots)
        return sum(a.nbytes for a in arrays) + sum(c.codes.nbytes for c in self._columns.values())

    def _node_pairs(self) -> Iterator[tuple[str, str]]:
        return (pair for facts in self._nodes.values() for pair in facts.labels)

    def _node_taint_values(self) -> Iterator[Taint]:
        return (taint for facts in self._nodes.values() for taint in facts.taints)

    # --- per slot ----------------------------------------------------------------------------------------

    def _write(self, slot: int, facts: NodeFacts) -> None:
        held = self._slot_facts[slot]
        if held == facts:
            return
        self._slot_facts[slot] = facts
        before: Labels = () if held is None else held.labels
        if before != facts.labels:
            self._write_labels(slot, dict(before), dict(facts.labels))
        taints: tuple[Taint, ...] = () if held is None else held.taints
        if taints != facts.taints:
            self._write_taints(slot, set(taints), set(facts.taints))
        self._unschedulable[slot] = facts.unschedulable
        self._labels_version += 1

    def _clear(self, slot: int) -> None:
        held = self._slot_facts[slot]
        if held is None:
            return
        self._write_labels(slot, dict(held.labels), {})
        self._write_taints(slot, set(held.taints), set())
        self._slot_facts[slot] = None
        self._unschedulable[slot] = False

    def _write_labels(self, slot: int, before: dict[str, str], after: dict[str, str]) -> None:
        for key in before.keys() - after.keys():
            self._key_slots[key] -= 1
            if not self._key_slots[key]:
                del self._key_slots[key]
                self._columns.pop(key, None)
            elif (column := self._columns.get(key)) is not None:
                column.codes[slot] = ABSENT
        for key, value in after.items():
            if key not in before:
                self._key_slots[key] = self._key_slots.get(key, 0) + 1
            elif before[key] == value:
                continue
            column = self._columns.get(key)
            if column is None:
                continue
            column.codes[slot] = column.code(value)
            if len(column.values) > 2 * self._key_slots[key] + _SPARE_VALUES:
                del self._columns[key]  # mostly values no node carries now (renamed hosts): made again when read

    def _made_column(self, key: str) -> _LabelColumn:
        column = _LabelColumn(self._capacity)
        for slot, facts in enumerate(self._slot_facts):
            if facts is not None:
                for label, value in facts.labels:
                    if label == key:
                        column.codes[slot] = column.code(value)
                        break
        return column

    def _write_taints(self, slot: int, before: set[Taint], after: set[Taint]) -> None:
        for taint in before - after:
            column = self._taint_column[taint]
            self._taint_matrix[slot, column] = False
            self._taint_slots[column] -= 1
            if not self._taint_slots[column]:
                self._drop_taint(column)
        for taint in after - before:
            found = self._taint_column.get(taint)
            column = self._add_taint(taint) if found is None else found
            self._taint_matrix[slot, column] = True
            self._taint_slots[column] += 1

    def _add_taint(self, taint: Taint) -> int:
        column = len(self._taints)
        if column == self._taint_matrix.shape[1]:
            wider = np.zeros((self._capacity, 2 * column), dtype=np.bool_)
            wider[:, :column] = self._taint_matrix
            self._taint_matrix = wider
        self._taints.append(taint)
        self._taint_slots.append(0)
        self._taint_column[taint] = column
        self._taints_tuple = None
        return column

    def _drop_taint(self, column: int) -> None:
        """No slot carries the taint of ``column`` any more: the last column moves into its place."""
        last = len(self._taints) - 1
        del self._taint_column[self._taints[column]]
        if column != last:
            moved = self._taints[last]
            self._taints[column] = moved
            self._taint_slots[column] = self._taint_slots[last]
            self._taint_column[moved] = column
            self._taint_matrix[:, column] = self._taint_matrix[:, last]
            self._taint_matrix[:, last] = False
        self._taints.pop()
        self._taint_slots.pop()
        self._taints_tuple = None

    # --- placed pods -------------------------------------------------------------------------------------

    def _held(self, key: PodKey) -> PlacedPod | None:
        position = self._position.get(key)
        return self._unslotted.get(key) if position is None else self._placed[position]

    def _shared(self, pod: PlacedPod) -> PlacedPod:
        """``pod`` with its labels, namespace and node shared with the pods that carry the same."""
        labels = self._pod_labels.find(pod.labels)
        if labels is None:
            interned = tuple((sys.intern(key), sys.intern(value)) for key, value in pod.labels)
            labels = self._pod_labels.add(interned, lambda: (p.labels for p in self._every_pod()))
        return replace(pod, namespace=sys.intern(pod.namespace), node=sys.intern(pod.node), labels=labels)

    def _every_pod(self) -> Iterator[PlacedPod]:
        return itertools.chain(self._placed, self._unslotted.values())

    def _place(self, key: PodKey, pod: PlacedPod) -> None:
        slot = self._slot_of.get(pod.node)
        if slot is None:
            self._unslotted[key] = pod
            self._waiting.setdefault(pod.node, set()).add(key)
            return
        self._append(key, pod, slot)
        self._pods_version += 1

    def _unplace(self, key: PodKey, held: PlacedPod) -> None:
        position = self._position.get(key)
        if position is not None:
            self._remove_at(key, position)
            self._pods_version += 1
            return
        del self._unslotted[key]
        waiting = self._waiting[held.node]
        waiting.discard(key)
        if not waiting:
            del self._waiting[held.node]

    def _append(self, key: PodKey, pod: PlacedPod, slot: int) -> None:
        position = len(self._placed)
        if position == len(self._placed_slots):
            self._placed_slots = _grown(self._placed_slots, 2 * position, 0)
        self._placed.append(pod)
        self._placed_slots[position] = slot
        self._position[key] = position

    def _remove_at(self, key: PodKey, position: int) -> None:
        """Swap-remove: the last placed pod takes ``position``."""
        del self._position[key]
        last = len(self._placed) - 1
        if position != last:
            moved = self._placed[last]
            self._placed[position] = moved
            self._placed_slots[position] = self._placed_slots[last]
            self._position[(moved.namespace, moved.name)] = position
        self._placed.pop()


class _Pool(Generic[_Value]):
    """One instance of each distinct value; values nothing holds any more are dropped each time the pool
    doubles (``held`` names the values still in use)."""

    def __init__(self) -> None:
        self._values: dict[_Value, _Value] = {}
        self._limit = _POOL_SPARE

    def find(self, value: _Value) -> _Value | None:
        return self._values.get(value)

    def add(self, value: _Value, held: Callable[[], Iterable[_Value]]) -> _Value:
        if len(self._values) >= self._limit:
            self._values = {kept: kept for kept in held()}
            self._limit = 2 * len(self._values) + _POOL_SPARE
        self._values[value] = value
        return value

    def shared(self, value: _Value, held: Callable[[], Iterable[_Value]]) -> _Value:
        found = self._values.get(value)
        return self.add(value, held) if found is None else found


def _default_priority(classes: dict[str, tuple[int, bool]]) -> int:
    """Admission's default: the global default class's value (the lowest, should several claim it), else 0."""
    return min((value for value, default in classes.values() if default), default=0)


def _grown(array: npt.NDArray[_Scalar], length: int, fill: object) -> npt.NDArray[_Scalar]:
    grown = np.full(length, fill, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def _read_only(array: IntArray) -> IntArray:
    array.flags.writeable = False
    return array
