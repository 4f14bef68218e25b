"""A ``ClusterView`` over plain lists, for the constraint plugin tests.

``ListCluster`` holds nodes by slot (None: a free slot), placed pods, namespaces and claims, answers the
``ClusterView`` protocol the vectorised plugins read, and hands the same facts to the reference
implementation (``facts``). Versions come from one counter shared by every instance, so a memo bound to
one view never mistakes another view's versions for its own; ``touch_labels`` and ``touch_pods`` bump
them after a test changes what the view holds.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from placement.core.constraints.constraint_types import ClaimFacts, Labels, NodeFacts, PlacedPod, Taint
from placement.core.constraints.reference import ClusterFacts
from placement.core.vocabulary import BoolArray, IntArray

_VERSIONS = itertools.count(1)


@dataclass
class ListCluster:
    slots: list[NodeFacts | None]
    pods: list[PlacedPod] = field(default_factory=list)
    namespaces: dict[str, Labels] = field(default_factory=dict)
    claims: dict[tuple[str, str], ClaimFacts] = field(default_factory=dict)
    _labels_version: int = field(default_factory=lambda: next(_VERSIONS))
    _pods_version: int = field(default_factory=lambda: next(_VERSIONS))

    @classmethod
    def of(
        cls,
        nodes: Sequence[NodeFacts],
        pods: Sequence[PlacedPod] = (),
        namespaces: dict[str, Labels] | None = None,
        claims: dict[tuple[str, str], ClaimFacts] | None = None,
    ) -> ListCluster:
        return cls(list(nodes), list(pods), dict(namespaces or {}), dict(claims or {}))

    # --- ClusterView -----------------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return len(self.slots)

    def node_names(self) -> Sequence[str | None]:
        return [None if n is None else n.name for n in self.slots]

    @property
    def labels_version(self) -> int:
        return self._labels_version

    def label_column(self, key: str) -> tuple[IntArray, tuple[str, ...]]:
        values: dict[str, int] = {}
        codes = np.full(self.capacity, -1, dtype=np.int64)
        for slot, node in enumerate(self.slots):
            value = None if node is None else dict(node.labels).get(key)
            if value is not None:
                codes[slot] = values.setdefault(value, len(values))
        return codes, tuple(values)

    def taint_columns(self) -> tuple[tuple[Taint, ...], BoolArray]:
        taints = tuple(dict.fromkeys(t for n in self.slots if n is not None for t in n.taints))
        carried = np.zeros((self.capacity, len(taints)), dtype=np.bool_)
        for slot, node in enumerate(self.slots):
            for taint in () if node is None else node.taints:
                carried[slot, taints.index(taint)] = True
        return taints, carried

    @property
    def unschedulable(self) -> BoolArray:
        return np.array([n is not None and n.unschedulable for n in self.slots], dtype=np.bool_)

    @property
    def pods_version(self) -> int:
        return self._pods_version

    def placed_pods(self) -> tuple[Sequence[PlacedPod], IntArray]:
        slot_of = {n.name: s for s, n in enumerate(self.slots) if n is not None}
        placed = [p for p in self.pods if p.node in slot_of]
        return placed, np.array([slot_of[p.node] for p in placed], dtype=np.int64)

    def namespace_labels(self, namespace: str) -> Labels | None:
        return self.namespaces.get(namespace)

    def claim(self, namespace: str, name: str) -> ClaimFacts | None:
        return self.claims.get((namespace, name))

    # --- for the tests -----------------------------------------------------------------------------------------

    def facts(self) -> ClusterFacts:
        """The same cluster for the reference implementation (free slots left out)."""
        return ClusterFacts(
            nodes=tuple(n for n in self.slots if n is not None),
            pods=tuple(self.pods),
            namespaces=tuple(self.namespaces.items()),
            claims=tuple(self.claims.items()),
        )

    def rows(self, names: Sequence[str] | None = None) -> IntArray:
        """The slots of ``names`` (every node when None), in that order."""
        slot_of = {n.name: s for s, n in enumerate(self.slots) if n is not None}
        wanted = [n.name for n in self.slots if n is not None] if names is None else names
        return np.array([slot_of[name] for name in wanted], dtype=np.int64)

    def touch_labels(self) -> None:
        self._labels_version = next(_VERSIONS)

    def touch_pods(self) -> None:
        self._pods_version = next(_VERSIONS)
