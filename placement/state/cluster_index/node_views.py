"""What the index tells about one node: its GPUs, kubelet policy, cells and amounts (GetNodeTopology, ListNodes),
and a pod judged against the cluster (``judge``).
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from placement.core.constraints.context import PodInCluster
from placement.core.node_amounts import Amount, CellState, KubeletPolicy
from placement.core.pods import PendingPod
from placement.core.vocabulary import (
    MAX_NUMA,
    IntArray,
    ScopeCode,
)
from placement.state.cluster_index.free_amounts import IndexFree
from placement.state.cluster_index.index_records import (
    _POLICY_NAMES,
    GpuShape,
    _in_units,
    _share_left,
    _share_of,
    _shares_gpu,
)
from placement.state.dra_verdicts import PodWithDevices


class IndexViews(IndexFree):
    """The views role: reads a slot, changes nothing."""

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

    def _landing_cells(self, slots: IntArray, positions: IntArray) -> IntArray:
        """The NUMA cell id at each slot's cell position; -1 where the position is -1 (the pod spans the node)."""
        ids = self.cell_ids[slots, np.maximum(positions, 0)].astype(np.int64)
        cells: IntArray = np.where(positions >= 0, ids, -1)
        return cells
