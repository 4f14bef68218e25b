"""What is free on a node: the report's availability less the pods it does not account for, and the arrays a
decision reads (``arrays``; ``arrays_without`` some pods, for preemption).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from kubenexus.topology.nrt import GPU_RESOURCE
from placement.core.charging import charge_cells, charge_node
from placement.core.constraints.gpu_labels import GPU_PRODUCT_LABEL
from placement.core.feasibility import memory_groups
from placement.core.vocabulary import (
    GPU_MILLI,
    MAX_NUMA,
    FloatArray,
    NodeArrays,
    PodDemand,
)
from placement.state.cluster_index.index_records import (
    IndexState,
    _FreeState,
    _gpu_cells,
    _Node,
    _PodEntry,
    _rows_of,
    _share_left,
    _share_of,
    _shares_gpu,
)


class IndexFree(IndexState):
    """The free-amounts role: a slot's free arrays rebuilt from its report and its pods."""

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

    def arrays(self) -> NodeArrays:
        """A view of the live arrays (not a copy): read it under ``lock``.

        Each node's GPU model (its ``nvidia.com/gpu.product`` label) comes with them only where the target
        workload names GPU models: the fragmentation measure then reads the node model's tables.
        """
        workload = self.workload.target()
        models, model_names = self.facts.label_column(GPU_PRODUCT_LABEL) if workload.constrained else (None, ())
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
            workload=workload,
            gpu_model=models,
            gpu_model_names=model_names,
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
