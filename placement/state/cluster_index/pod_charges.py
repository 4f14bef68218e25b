"""Pods on nodes: bound pods the watch shows and reservations, charged until a report accounts for them (its pods
fingerprint names them).
"""

from __future__ import annotations

from kubenexus.topology.podfingerprint import pods_fingerprint
from placement.core.pods import PodUsage
from placement.core.vocabulary import IntArray
from placement.state.cluster_index.free_amounts import IndexFree
from placement.state.cluster_index.index_records import (
    _Node,
    _placed,
    _PodEntry,
)


class IndexPods(IndexFree):
    """The pods role: which pods are charged where."""

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
                self.workload.observe(usage.demand, usage.gpu_models)
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
