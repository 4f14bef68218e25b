"""Each node's Filter verdict and score components per pod shape, kept while the node stays unchanged.

A scheduler asks about the same pod shape over the same nodes again and again: every replica of a
Deployment, every member of a gang, every retry of a pending pod, and the Score call that follows each
Filter. Between two calls few nodes change: a bind changes one. The index stamps each slot with its
change counter when it writes the slot (``ClusterIndex.slot_changes``); a verdict judged at or after
that stamp still holds. So a call judges afresh only the slots changed since they were last judged, and
reads the rest from here.

What is kept is exactly what the core computes, node by node (``filter_nodes`` and
``scoring.node_components`` depend on the node's own row and the pod alone); what depends on the
candidates together (bandwidth relative to the best candidate, the order) is computed per call. Kept
answers are dropped when the arrays change shape (``ClusterIndex.layout``) and, for the fragmentation
component alone, when its target workload is rebuilt. Call under the index lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from placement.core.feasibility import FilterResult, filter_nodes
from placement.core.fragmentation import fragmentation_component
from placement.core.intent import PodIntent
from placement.core.scoring import NodeComponents, node_components
from placement.core.vocabulary import IntArray, PodDemand, RejectionKind, TargetWorkload
from placement.state.cluster_index import ClusterIndex

DEFAULT_SHAPES = 16  # pod shapes kept; 55 bytes of arrays per node each (0.55 MB at 10,000 nodes)
MAX_MESSAGES = 4096  # distinct rejection messages per shape before its verdicts start over
_NEVER = -1


class _Shape:
    """One pod shape's answers per slot; ``*_at`` is the index's change counter when judged."""

    def __init__(self, capacity: int, layout: int) -> None:
        self.layout = layout
        self.judged_at = np.full(capacity, _NEVER, dtype=np.int64)
        self.codes = np.zeros(capacity, dtype=np.int16)  # 0 feasible, else 1 + an index into messages
        self.exact = np.zeros(capacity, dtype=np.bool_)  # decided by the exact per-node model
        self.messages: list[str] = []
        self.kinds: list[RejectionKind] = []
        self._message_codes: dict[str, int] = {}
        self.scored_at = np.full(capacity, _NEVER, dtype=np.int64)
        # The fragmentation component also depends on the target workload: stamped apart, so that a rebuilt
        # workload costs a pass of that component alone, not of every component.
        self.fragmented_at = np.full(capacity, _NEVER, dtype=np.int64)
        self.workload: TargetWorkload | None = None
        self.labels_version = -1  # the nodes' labels the GPU models were read from, when the workload names some
        self.fit = np.zeros(capacity)
        self.raw_bandwidth = np.zeros(capacity, dtype=np.float32)
        self.distance = np.zeros(capacity)
        self.fragmentation = np.zeros(capacity)
        self.landing_cell = np.zeros(capacity, dtype=np.int64)

    def codes_of(self, fresh: FilterResult) -> npt.NDArray[np.int16]:
        """Maps a fresh result's codes (1 + index into its ``messages``) to this shape's codes."""
        table = [0]
        for message, kind in zip(fresh.messages, fresh.kinds, strict=True):
            code = self._message_codes.get(message)
            if code is None:
                self.messages.append(message)
                self.kinds.append(kind)
                code = self._message_codes[message] = len(self.messages)
            table.append(code)
        return np.array(table, dtype=np.int16)

    def forget_verdicts(self) -> None:
        self.judged_at[:] = _NEVER
        self.messages.clear()
        self.kinds.clear()
        self._message_codes.clear()


class DecisionCache:
    """Per pod shape (demand and intent), the verdicts and score components of the slots judged."""

    def __init__(self, index: ClusterIndex, *, shapes: int = DEFAULT_SHAPES) -> None:
        if shapes < 1:
            raise ValueError("the cache must keep at least one pod shape")
        self._index = index
        self._limit = shapes
        self._shapes: OrderedDict[Hashable, _Shape] = OrderedDict()
        # Over the cache's life (metrics, tests): verdicts read from here, slots judged afresh by ``filter``,
        # and slots whose score components ``components`` computed afresh.
        self.kept = 0
        self.judged = 0
        self.scored = 0
        self.refragmented = 0  # slots whose fragmentation component alone was computed again (a new workload)

    def filter(self, rows: IntArray, demand: PodDemand, intent: PodIntent | None) -> FilterResult:
        """``filter_nodes(index.arrays(), rows, demand, intent)``, judging afresh only changed slots."""
        index = self._index
        shape = self._shape(demand, intent)
        stale = rows[shape.judged_at[rows] < index.slot_changes[rows]]
        if len(stale):
            if len(shape.messages) > MAX_MESSAGES:
                shape.forget_verdicts()
                stale = rows
            fresh = filter_nodes(index.arrays(), stale, demand, intent)
            shape.codes[stale] = shape.codes_of(fresh)[fresh.reason_codes]
            shape.exact[stale] = False
            shape.exact[fresh.exact_rows] = True
            shape.judged_at[stale] = index.changes
            self.judged += len(stale)
        self.kept += len(rows) - len(stale)
        codes = shape.codes[rows]
        return FilterResult(
            rows=rows,
            feasible=codes == 0,
            reason_codes=codes,
            messages=tuple(shape.messages),
            kinds=tuple(shape.kinds),
            exact_rows=rows[shape.exact[rows]],
        )

    def components(self, rows: IntArray, demand: PodDemand, intent: PodIntent | None) -> NodeComponents:
        """``node_components`` of ``rows`` (nodes the pod fits), computing afresh only changed slots."""
        index = self._index
        shape = self._shape(demand, intent)
        workload = index.workload.target()
        if shape.workload is not workload:
            shape.fragmented_at[:] = _NEVER  # the fragmentation component measures against another workload
            shape.workload = workload
        if workload.constrained and shape.labels_version != index.facts.labels_version:
            shape.fragmented_at[:] = _NEVER  # a node's GPU model may have changed: its tables with it
            shape.labels_version = index.facts.labels_version
        changed = index.slot_changes[rows]
        stale = rows[shape.scored_at[rows] < changed]
        if len(stale):
            fresh = node_components(index.arrays(), stale, demand, intent=intent)
            shape.fit[stale] = fresh.fit
            shape.raw_bandwidth[stale] = fresh.raw_bandwidth
            shape.distance[stale] = fresh.distance
            shape.fragmentation[stale] = fresh.fragmentation
            shape.landing_cell[stale] = fresh.landing_cell
            shape.scored_at[stale] = shape.fragmented_at[stale] = index.changes
            self.scored += len(stale)
        unfragmented = rows[shape.fragmented_at[rows] < changed]  # only after the workload was rebuilt
        if len(unfragmented):
            shape.fragmentation[unfragmented] = fragmentation_component(index.arrays(), unfragmented, demand)
            shape.fragmented_at[unfragmented] = index.changes
            self.refragmented += len(unfragmented)
        return NodeComponents(
            fit=shape.fit[rows],
            raw_bandwidth=shape.raw_bandwidth[rows],
            distance=shape.distance[rows],
            fragmentation=shape.fragmentation[rows],
            landing_cell=shape.landing_cell[rows],
        )

    def _shape(self, demand: PodDemand, intent: PodIntent | None) -> _Shape:
        key = (demand, intent)
        index = self._index
        shape = self._shapes.get(key)
        if shape is None or shape.layout != index.layout:
            shape = self._shapes[key] = _Shape(index.capacity, index.layout)
            while len(self._shapes) > self._limit:
                self._shapes.popitem(last=False)
        self._shapes.move_to_end(key)
        return shape
