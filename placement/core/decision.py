"""One placement decision, pure: rank the candidate nodes, then plan the pod on the best one that holds.

``rank`` filters and scores every candidate at once (``feasibility``, ``scoring``). ``plan_on_node`` then
checks the node it is given with the exact Topology Manager model, which also says which NUMA cells the
kubelet will pin the pod to, and predicts the GPUs the kubelet's device manager will hand a pod asking
``nvidia.com/gpu``, as NVIDIA's device plugin prefers them (``nvidia_device_plugin``): the kubelet, not
us, picks both, so the intent's cell rules are checked against THOSE choices. The caller
(``placement.state``) tries the ranked nodes in order and reserves the first plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from placement.core.device_manager import DeviceAllocationError
from placement.core.feasibility import FilterResult, filter_nodes, node_resources, pod_of
from placement.core.fragmentation import least_fragmenting_gpu
from placement.core.gpu_sets import GpuLinkTable
from placement.core.gpuallocator import SearchTooLarge
from placement.core.intent import NumaIntentPolicy, PodIntent
from placement.core.nvidia_device_plugin import kubelet_gpus
from placement.core.scoring import Scores, ScoringWeights, score_nodes
from placement.core.topology_manager import UNEXPECTED_ADMISSION_ERROR, admit
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
    # GPU indices: those the kubelet is predicted to hand out, or the GPU a share goes on; () when no GPU is
    # asked for, the node has no link table, or the device plugin's answer was not computed.
    gpus: tuple[int, ...]


class NodeJudge(Protocol):
    """What ranks nodes beside the resources: a pod's constraints (``PodInCluster``), and its DRA claims."""

    def filtered(self, resources: FilterResult) -> FilterResult: ...

    def scored(self, scores: Scores) -> Scores: ...


def rank(
    arrays: NodeArrays,
    rows: IntArray,
    demand: PodDemand,
    *,
    intent: PodIntent | None = None,
    weights: ScoringWeights | None = None,
    gang: FloatArray | None = None,
    constraints: NodeJudge | None = None,
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

    ``free_gpus``: the node's healthy GPUs no pod we know holds, for a pod asking ``GPU_RESOURCE``;
    ``gpu_share_left``: thousandths left per shareable GPU, for a pod asking ``GPU_SHARE``.
    """
    pod = pod_of(demand)
    result = admit(node_resources(arrays, row), pod)
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
    gpus: tuple[int, ...] = ()
    if dict(demand.device_requests).get(GPU_RESOURCE, 0) and gpu_table is not None:
        affinities = {a.container: a.hint.affinity for a in result.affinities}
        try:
            gpus = kubelet_gpus(gpu_table, free_gpus, pod, affinities)
        except DeviceAllocationError as error:
            message = f"kubelet {UNEXPECTED_ADMISSION_ERROR}: Allocate failed due to {error}, which is unexpected"
            return Rejected(message, RejectionKind.KUBELET_TOPOLOGY)
        except SearchTooLarge:
            pass  # the plugin's answer is not computed: the GPUs are charged on the pod's cells, by count
    # The cells the pod uses: its pinned (or predicted) cells and those of the GPUs the kubelet gives it,
    # which its hint does not always hold (too few aligned GPUs, no hint at all).
    numa_of = {} if gpu_table is None else dict(zip(gpu_table.gpus, gpu_table.numa_nodes, strict=True))
    used = sorted(set(cells) | {numa for g in gpus if (numa := numa_of.get(g)) is not None})
    rejected = _cells_refused(arrays, row, ids, used, intent)
    if rejected is not None:
        return rejected
    share = int(dict(demand.device_requests).get(GPU_SHARE, 0))
    if share and gpu_table is not None:
        left = dict(gpu_share_left or {})
        in_cells = {index for index in left if numa_of.get(index) in cells}
        cpu = arrays.column(CPU)
        cpu_left = (arrays.node_free[cpu, row] if cpu is not None else 0.0) - dict(demand.node_requests).get(CPU, 0.0)
        # The kubelet pins the share to ``cells`` (their summed thousandths fit): a GPU elsewhere would break
        # that alignment, and none inside holding it means the allocation fails here. Where it pins nothing,
        # ``cells`` is where the CPUs are predicted to land: a GPU there keeps the pod aligned all the same.
        shared = least_fragmenting_gpu(arrays.workload_of(row), cpu_left, left, in_cells, share)
        if shared is None and not pinned:
            shared = least_fragmenting_gpu(arrays.workload_of(row), cpu_left, left, left, share)
        if shared is None:
            where = f"in NUMA cells {list(cells)} " if pinned else ""
            return Rejected(f"no GPU {where}has {share} thousandths left", RejectionKind.INSUFFICIENT_RESOURCES)
        gpus = (shared,)
    return NodePlan(row=row, cells=cells, pinned=pinned, gpus=gpus)


def _cells_refused(
    arrays: NodeArrays, row: int, ids: list[int], used: list[int], intent: PodIntent | None
) -> Rejected | None:
    """Why the cells the pod would use are not its to use (isolated pods, its intent); None when they are."""
    isolated = {ids[k] for k in range(len(ids)) if arrays.cell_isolated[row, k]}
    if isolated & set(used):
        held = sorted(isolated & set(used))
        return Rejected(f"NUMA cells {held} are held by an isolated pod", RejectionKind.ISOLATION)
    if intent is None:
        return None
    allowed = intent.cells_allowed(ids)
    if not set(used) <= allowed:
        where = f"the kubelet would use NUMA cells {used}, outside the allowed {sorted(allowed)}"
        return Rejected(where, RejectionKind.INTENT)
    if intent.policy in (NumaIntentPolicy.SINGLE_NUMA, NumaIntentPolicy.ISOLATED) and len(used) != 1:
        return Rejected(f"intent {intent.policy}: the kubelet would use NUMA cells {used}", RejectionKind.INTENT)
    if intent.policy is NumaIntentPolicy.ISOLATED:
        claimed = {ids[k] for k in range(len(ids)) if arrays.cell_claimed[row, k]}
        if claimed & set(used):
            message = f"intent isolated: NUMA cell {used[0]} already holds pods placed by us"
            return Rejected(message, RejectionKind.INTENT)
    return None
