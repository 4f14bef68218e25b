"""What the vectorised constraint plugins read of the cluster: one row per index slot, as ``NodeArrays``.

``placement.state`` implements ``ClusterView`` over the live index (read it under the index lock); the tests
implement it over plain lists. Versions let a plugin memoise per distinct selector, term or toleration
set: a mask computed at one ``labels_version`` holds while it stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from placement.core.constraints.constraint_types import ClaimFacts, Labels, PlacedPod, Taint
from placement.core.vocabulary import BoolArray, IntArray


class ClusterView(Protocol):
    @property
    def capacity(self) -> int:
        """Slots, the length of every per-slot array (free slots included)."""
        ...

    def node_names(self) -> Sequence[str | None]:
        """Per slot; None for a free slot."""
        ...

    @property
    def labels_version(self) -> int:
        """Bumped whenever any node's labels, taints or unschedulable flag change."""
        ...

    def label_column(self, key: str) -> tuple[IntArray, tuple[str, ...]]:
        """Per slot, the code of the node's value for ``key`` (-1: the node lacks the key), and the values
        by code."""
        ...

    def taint_columns(self) -> tuple[tuple[Taint, ...], BoolArray]:
        """The distinct taints of the cluster's nodes, and which slot carries which ([slots, taints])."""
        ...

    @property
    def unschedulable(self) -> BoolArray:
        """Per slot: ``spec.unschedulable`` (cordoned)."""
        ...

    @property
    def pods_version(self) -> int:
        """Bumped whenever a placed pod is added, changed or removed."""
        ...

    def placed_pods(self) -> tuple[Sequence[PlacedPod], IntArray]:
        """Every pod bound to or reserved on a node the index holds, and each one's slot."""
        ...

    def namespace_labels(self, namespace: str) -> Labels | None:
        """The labels of a namespace; None when the namespace is not known."""
        ...

    def claim(self, namespace: str, name: str) -> ClaimFacts | None:
        """A PersistentVolumeClaim as far as it can be judged; None when it is not known."""
        ...
