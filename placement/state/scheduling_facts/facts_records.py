"""The scheduling facts' records: label columns, shared pod pools, and ``FactsState``: the columns and records
every role shares.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from placement.core.constraints.constraint_types import (
    Labels,
    NodeFacts,
    NodeSelectorTerm,
    PlacedPod,
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


class FactsState:
    """The facts' columns and records, which every role shares (the roles are its bases:
    ``placement.state.scheduling_facts``), and what the constraint plugins read of them."""

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
        # (pods version, every pod's priority, the pods Kueue admitted): what preemption reads of all pods.
        self._preemption_cache: tuple[int, dict[PodKey, int], frozenset[PodKey]] | None = None
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

    @property
    def capacity(self) -> int:
        return self._capacity

    def node_names(self) -> Sequence[str | None]:
        return self._names

    @property
    def labels_version(self) -> int:
        return self._labels_version

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

    def pod_priorities(self) -> Mapping[PodKey, int]:
        """Every pod's priority by key (what preemption compares), kept until a pod changes."""
        return self._preemption_reads()[1]

    def kueue_admitted_pods(self) -> frozenset[PodKey]:
        """The pods Kueue admitted (``PlacedPod.kueue_admitted``: only Kueue evicts them), kept likewise."""
        return self._preemption_reads()[2]

    def _preemption_reads(self) -> tuple[int, dict[PodKey, int], frozenset[PodKey]]:
        with self.lock:
            if self._preemption_cache is None or self._preemption_cache[0] != self._pods_version:
                pods = list(itertools.chain(self._placed, self._unslotted.values()))
                priorities = {(p.namespace, p.name): p.priority for p in pods}
                kueue = frozenset((p.namespace, p.name) for p in pods if p.kueue_admitted)
                self._preemption_cache = (self._pods_version, priorities, kueue)
            return self._preemption_cache

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

    def nbytes(self) -> int:
        """Bytes held in the per-slot arrays (label columns, taint matrix, flags, placed pods' slots)."""
        arrays = (self._unschedulable, self._absent, self._taint_matrix, self._placed_slots)
        return sum(a.nbytes for a in arrays) + sum(c.codes.nbytes for c in self._columns.values())
