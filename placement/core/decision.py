"""One placement decision, pure: rank the candidate nodes, then plan the pod on the best one that holds.

``rank`` filters and scores every candidate at once (``feasibility``, ``scoring``). ``plan_on_node`` then
checks the node it is given with the exact Topology Manager model, which also says which NUMA cells the
kubelet will pin the pod to; the intent's cell rules are checked against THAT choice (the kubelet, not
us, picks the cells), and the GPU set is chosen within those cells. The caller (``placement.state``)
tries the ranked nodes in order and reserves the first plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from placement.core.constraints.context import PodInCluster
from placement.core.feasibility import FilterResult, filter_nodes, node_resources, pod_of
from placement.core.fragmentation import least_fragmenting_gpu
from placement.core.gpu_sets import GpuLinkTable, choose_gpu_set
from placement.core.intent import NumaIntentPolicy, PodIntent
from placement.core.scoring import Scores, ScoringWeights, score_nodes
from placement.core.topology_manager import admit
from placement.core.vocabulary import (
    CPU,
    GPU_RESOURCE,
    GPU_SHARE,
    FloatArray,
    IntArray,
    NodeArrays,
    PodDemand,
    Rejected,
    RejectionKind,
)


@dataclass(frozen=True)
class Ranking:
    filtered: FilterResult
    scores: Scores  # of the feasible rows, in ``filtered`` order
    order: IntArray  # positions into ``scores.rows``, best first (ties: lower slot first)

    def ranked_rows(self) -> IntArray:
        ranked: IntArray = self.scores.rows[self.order]
        return ranked


@dataclass(frozen=True)
class NodePlan:
    row: int
    cells: tuple[int, ...]  # NUMA ids the pod is predicted to use
    pinned: bool  # the kubelet pins the pod to ``cells`` (an aligned merged hint); else our prediction
    gpus: tuple[int, ...]  # GPU indices chosen; () when no GPU is asked for or the node has no link table


def rank(
    arrays: NodeArrays,
    rows: IntArray,
    demand: PodDemand,
    *,
    intent: PodIntent | None = None,
    weights: ScoringWeights | None = None,
    gang: FloatArray | None = None,
    constraints: PodInCluster | None = None,
) -> Ranking:
    """Filter ``rows`` and score the feasible ones; ``gang`` is aligned with ``rows``. ``constraints``: the
    pod's kube-scheduler constraints, filtered and scored with the resources (None: not judged)."""
    filtered = filter_nodes(arrays, rows, demand, intent)
    if constraints is not None:
        filtered = constraints.filtered(filtered)
    feasible = filtered.rows[filtered.feasible]
    scores = score_nodes(
        arrays,
        feasible,
        demand,
        intent=intent,
        weights=weights,
        gang=None if gang is None else gang[filtered.feasible],
    )
    if constraints is not None:
        scores = constraints.scored(scores)
    return Ranking(filtered=filtered, scores=scores, order=order_of(scores))


def order_of(scores: Scores) -> IntArray:
    """Positions into ``scores.rows``, best first; ties go to the lower slot."""
    order: IntArray = np.lexsort((scores.rows, -scores.total)).astype(np.int64)
    return order


def plan_on_node(
    arrays: NodeArrays,
    row: int,
    demand: PodDemand,
    *,
    intent: PodIntent | None,
    landing_cell: int,
    gpu_table: GpuLinkTable | None,
    free_gpus: frozenset[int],
    gpu_share_left: Mapping[int, int] | None = None,
) -> NodePlan | Rejected:
    """The plan for ``row``, or why the node does not hold after all.

    ``gpu_share_left``: thousandths left per shareable GPU, for a pod asking ``GPU_SHARE``.
    """
    result = admit(node_resources(arrays, row), pod_of(demand))
    if not result.admit:
        return Rejected(f"kubelet {result.reason}: {result.message}", RejectionKind.KUBELET_TOPOLOGY)
    count = int(arrays.numa_count[row])
    ids = [int(i) for i in arrays.cell_ids[row, :count]]
    pinned_ids = sorted({i for a in result.affinities if a.hint.affinity is not None for i in a.hint.affinity.ids})
    pinned = bool(pinned_ids)
    if pinned:
        cells = tuple(pinned_ids)
    elif landing_cell >= 0:
        cells = (ids[landing_cell],)
    else:
        cells = tuple(ids)
    isolated = {ids[k] for k in range(len(ids)) if arrays.cell_isolated[row, k]}
    if isolated & set(cells):
        held = sorted(isolated & set(cells))
        return Rejected(f"NUMA cells {held} are held by an isolated pod", RejectionKind.ISOLATION)
    if intent is not None:
        allowed = intent.cells_allowed(ids)
        if not set(cells) <= allowed:
            where = f"the kubelet would use NUMA cells {list(cells)}, outside the allowed {sorted(allowed)}"
            return Rejected(where, RejectionKind.INTENT)
        if intent.policy in (NumaIntentPolicy.SINGLE_NUMA, NumaIntentPolicy.ISOLATED) and len(cells) != 1:
            message = f"intent {intent.policy}: the kubelet would use NUMA cells {list(cells)}"
            return Rejected(message, RejectionKind.INTENT)
        if intent.policy is NumaIntentPolicy.ISOLATED:
            claimed = {ids[k] for k in range(len(ids)) if arrays.cell_claimed[row, k]}
            if claimed & set(cells):
                message = f"intent isolated: NUMA cell {cells[0]} already holds pods placed by us"
                return Rejected(message, RejectionKind.INTENT)
    wanted = int(dict(demand.device_requests).get(GPU_RESOURCE, 0))
    gpus: tuple[int, ...] = ()
    if wanted and gpu_table is not None:
        # Where the kubelet pins nothing, ``cells`` is where the CPUs are predicted to land: GPUs there keep
        # the pod aligned all the same (choose_gpu_set ranks sets by it before link quality).
        choice = choose_gpu_set(gpu_table, free_gpus, wanted, numa_preference=frozenset(cells))
        if choice is not None:
            gpus = choice.gpus
    share = int(dict(demand.device_requests).get(GPU_SHARE, 0))
    if share and gpu_table is not None:
        left = dict(gpu_share_left or {})
        numa = dict(zip(gpu_table.gpus, gpu_table.numa_nodes, strict=True))
        in_cells = {index for index in left if numa.get(index) in cells}
        cpu = arrays.column(CPU)
        cpu_left = (arrays.node_free[cpu, row] if cpu is not None else 0.0) - dict(demand.node_requests).get(CPU, 0.0)
        # The kubelet pins the share to ``cells`` (their summed thousandths fit): a GPU elsewhere would break
        # that alignment, and none inside holding it means the allocation fails here. Where it pins nothing,
        # ``cells`` is where the CPUs are predicted to land: a GPU there keeps the pod aligned all the same.
        shared = least_fragmenting_gpu(arrays.workload, cpu_left, left, in_cells, share)
        if shared is None and not pinned:
            shared = least_fragmenting_gpu(arrays.workload, cpu_left, left, left, share)
        if shared is None:
            where = f"in NUMA cells {list(cells)} " if pinned else ""
            return Rejected(f"no GPU {where}has {share} thousandths left", RejectionKind.INSUFFICIENT_RESOURCES)
        gpus = (shared,)
    return NodePlan(row=row, cells=cells, pinned=pinned, gpus=gpus)
