"""Node scores for a pod, vectorised over the feasible nodes, each one explainable component by component.

Five components, each in [0, 1], weighted (``ScoringWeights``: fragmentation 0.95, the others the seed
design's 40/25/20/15 in the remaining 0.05) and scaled so that the total is in [0, 100]:

* fragmentation: how much the placement lowers the node's expected GPU fragmentation against the target
  workload (``fragmentation.fragmentation_component``, FGD's measure); 0.5 where it does not change it,
  which is everywhere on nodes without GPUs.
* fit: how well used the pod leaves the NUMA cell it lands in (``fit_curve``). The pod is predicted to
  land in the best allowed cell that holds all it asks for; when no single cell does, it spans the node
  and the node's utilisation after placement is scored instead. Utilisation is the mean, over the
  resources the pod asks for, of (used + request) / total. On a node with GPUs, neutral (0.5) for a pod
  asking for GPUs, whose packing there is the fragmentation component's measure, and the share of the
  node's GPUs taken already for a pod asking for none (``gpu_node_fit``); the landing cell is chosen the
  same way everywhere.
* bandwidth: the landing cell's HMAT local read bandwidth relative to the best cell among the candidates;
  the mean over the node's cells when the pod spans; 0.5 (neutral) when the host did not publish it.
* distance: 10 / the average SLIT distance over the cells the pod spans (every ordered pair, self
  included, as the kubelet averages): 1.0 within one cell, 10/21 ~ 0.48 across two sockets at 21;
  0.5 (neutral) for a spanning pod on a node without a SLIT table.
* gang: supplied by the caller per node (the gang planner's affinity), 0 for a pod outside a gang.

The intent's affinity lists act through ``allowed``: only allowed cells are candidates for landing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from placement.core import kernel
from placement.core.feasibility import allowed_cells, cell_requests
from placement.core.fragmentation import fragmentation_component
from placement.core.intent import PodIntent
from placement.core.vocabulary import GPU_MILLI, GPU_RESOURCE, FloatArray, IntArray, NodeArrays, PodDemand, shape_of

SWEET_SPOT = 0.85  # a cell left 85% used scores best: well packed, with headroom for what runs there
FULL_CELL_SCORE = 0.5  # a cell filled to the brim: packed, but no headroom left at all
NEUTRAL = 0.5
LOCAL_DISTANCE = 10.0  # the SLIT distance of a cell to itself
COMPONENTS = ("fit", "bandwidth", "distance", "gang", "fragmentation")


@dataclass(frozen=True)
class ScoringWeights:
    """Relative weights; the total score is normalised by their sum.

    Fragmentation dominates: a GPU pod goes where it breaks up the least of what the workload needs, and
    the other components (in the seed design's 40/25/20/15 proportions) order what it leaves equal, which
    is everything for a pod on nodes without GPUs.
    """

    fit: float = 0.02
    bandwidth: float = 0.0125
    distance: float = 0.01
    gang: float = 0.0075
    fragmentation: float = 0.95

    def __post_init__(self) -> None:
        values = self.as_dict()
        if any(not np.isfinite(v) or v < 0 for v in values.values()) or sum(values.values()) <= 0:
            raise ValueError(f"scoring weights must be finite, non-negative and not all zero: {values}")

    def as_dict(self) -> dict[str, float]:
        return {
            "fit": self.fit,
            "bandwidth": self.bandwidth,
            "distance": self.distance,
            "gang": self.gang,
            "fragmentation": self.fragmentation,
        }

    @cached_property
    def shares(self) -> dict[str, float]:
        """Each component's share of the 100 points (its weight over their sum); a component scoring 1
        earns its share. Computed once per weights."""
        relative = self.as_dict()
        scale = 100.0 / sum(relative.values())
        return {name: weight * scale for name, weight in relative.items()}


DEFAULT_WEIGHTS = ScoringWeights()  # built once: every Score call uses it


def fit_curve(utilisation: FloatArray) -> FloatArray:
    """Rises linearly to 1.0 at ``SWEET_SPOT``, then falls linearly to ``FULL_CELL_SCORE`` at 100% used.

    An empty cell scores 0 (placing there spreads work thin and breaks a cell big requests need); a cell
    past the sweet spot loses score because a full cell leaves its tenants no room.
    """
    u = np.clip(utilisation, 0.0, 1.0)
    rising = u / SWEET_SPOT
    falling = 1.0 - (1.0 - FULL_CELL_SCORE) * (u - SWEET_SPOT) / (1.0 - SWEET_SPOT)
    result: FloatArray = np.where(u <= SWEET_SPOT, rising, falling)
    return result


@dataclass(frozen=True)
class Scores:
    """Scores of ``rows``; ``components`` are raw values in [0, 1] before weighting, ``shares`` each
    component's share of the 100 points (a component scoring 1 earns its share)."""

    rows: IntArray
    total: FloatArray  # [N] in [0, 100]
    components: Mapping[str, FloatArray]
    shares: Mapping[str, float]
    landing_cell: IntArray  # [N] the cell slot the pod is predicted to land in; -1 when it spans the node

    def breakdown(self, position: int) -> dict[str, float]:
        """Points per component for one row; they add up to ``total[position]``."""
        return {name: float(share * self.components[name][position]) for name, share in self.shares.items()}


# What the topology score above weighs against kube-scheduler's scoring plugins, whose default weights are
# TaintToleration 3, NodeAffinity 2, PodTopologySpread 2 and InterPodAffinity 2 (default_plugins.go): the
# topology score counts for as much as NodeResourcesFit, BalancedAllocation and the four of them together,
# so a pod's preferences reorder nodes of like topology, and a node far better for the pod's GPUs and NUMA
# cells still wins over a slightly preferred one.
TOPOLOGY_WEIGHT = 12
CONSTRAINT_COMPONENTS = {
    "TaintToleration": "taint-toleration",
    "NodeAffinity": "node-affinity",
    "PodTopologySpread": "topology-spread",
    "InterPodAffinity": "inter-pod-affinity",
    "DynamicResources": "devices",  # ours: the DRA device choice's score (placement.state.dra_verdicts)
    # Ours: the workload policies (placement.core.workload_policies, placement.state.workload_scores).
    "WorkloadAware": "workload",
    "TenantHardware": "tenant",
}


def with_constraint_scores(
    scores: Scores, plugin_scores: Mapping[str, FloatArray], plugin_weights: Mapping[str, float]
) -> Scores:
    """``scores`` with kube-scheduler's constraint scores (0..100 per plugin, normalized over ``scores.rows``)
    added as components, at their weights against ``TOPOLOGY_WEIGHT``.

    A plugin that scores every row alike is left out: it cannot change the order, and leaving it out keeps
    the points of a pod that states no preference (on nodes without PreferNoSchedule taints) as they were.
    """
    active = {name: score for name, score in plugin_scores.items() if len(score) and np.ptp(score) > 0}
    if not active:
        return scores
    total_weight = TOPOLOGY_WEIGHT + sum(plugin_weights[name] for name in active)
    scale = TOPOLOGY_WEIGHT / total_weight
    components = dict(scores.components)
    shares = {name: share * scale for name, share in scores.shares.items()}
    total = scores.total * scale
    for plugin, score in active.items():
        name = CONSTRAINT_COMPONENTS[plugin]
        components[name] = np.asarray(score, dtype=np.float64) / 100.0
        shares[name] = 100.0 * plugin_weights[plugin] / total_weight
        total = total + shares[name] * components[name]
    return Scores(rows=scores.rows, total=total, components=components, shares=shares, landing_cell=scores.landing_cell)


@dataclass(frozen=True)
class NodeComponents:
    """What each node's score is made of, before the weights: every field depends on the node alone (and
    the pod), so a caller may keep them per node while the node is unchanged (``state.decision_cache``)."""

    fit: FloatArray  # [N] in [0, 1]
    raw_bandwidth: npt.NDArray[np.float32]  # [N] MB/s of the landing cell, the node's mean if it spans; 0 unknown
    distance: FloatArray  # [N] in [0, 1]
    fragmentation: FloatArray  # [N] in [0, 1]
    landing_cell: IntArray  # [N] the cell slot the pod is predicted to land in; -1 when it spans the node


def score_nodes(
    arrays: NodeArrays,
    rows: IntArray,
    demand: PodDemand,
    *,
    intent: PodIntent | None = None,
    weights: ScoringWeights | None = None,
    gang: FloatArray | None = None,
) -> Scores:
    return combine(arrays, rows, node_components(arrays, rows, demand, intent=intent), weights=weights, gang=gang)


def node_components(
    arrays: NodeArrays, rows: IntArray, demand: PodDemand, *, intent: PodIntent | None
) -> NodeComponents:
    """The per-node parts of the score of ``rows``."""
    compiled = _compiled_components(arrays, rows, demand, intent=intent)
    if compiled is not None:
        return compiled
    count = len(rows)
    allowed = allowed_cells(arrays, rows, intent)
    used = np.zeros((count, arrays.cell_total.shape[2]))
    node_used = np.zeros(count)
    resources = 0
    fits = allowed
    for name, request in cell_requests(arrays, demand, set()):
        column = arrays.column(name)
        if column is None:
            continue
        total, free = arrays.cell_total[column][rows], arrays.cell_free[column][rows]
        fits = fits & (free >= request)
        # A resource the cell lacks counts as full there: the pod cannot land on it anyway.
        taken = total - free + request
        used += np.divide(taken, total, out=np.ones_like(taken), where=total > 0)
        node_total = total.sum(axis=1)
        node_taken = node_total - free.sum(axis=1) + request
        node_used += np.divide(node_taken, node_total, out=np.ones_like(node_taken), where=node_total > 0)
        resources += 1
    divisor = max(resources, 1)
    cell_fit = np.where(fits, fit_curve(used / divisor), -1.0)
    landing = cell_fit.argmax(axis=1)
    everywhere = np.arange(count)
    single = fits[everywhere, landing]
    fit = gpu_node_fit(
        arrays, rows, demand, np.where(single, cell_fit[everywhere, landing], fit_curve(node_used / divisor))
    )

    raw_bandwidth = np.where(single, arrays.bandwidth[rows][everywhere, landing], arrays.spanning_bandwidth[rows])
    local = arrays.local_distance[rows][everywhere, landing]
    spanning = arrays.spanning_distance[rows]
    distance = np.where(
        single,
        np.where(local > 0, LOCAL_DISTANCE / np.maximum(local, 1.0), 1.0),
        np.where(spanning > 0, LOCAL_DISTANCE / np.maximum(spanning, 1.0), NEUTRAL),
    )
    return NodeComponents(
        fit=fit,
        raw_bandwidth=raw_bandwidth,
        # fit_curve stays in [0, 1] by construction; a SLIT table may be malformed.
        distance=np.clip(distance, 0.0, 1.0),
        fragmentation=fragmentation_component(arrays, rows, demand),
        landing_cell=np.where(single, landing, -1).astype(np.int64),
    )


def gpu_node_fit(arrays: NodeArrays, rows: IntArray, demand: PodDemand, fit: FloatArray) -> FloatArray:
    """``fit`` on the nodes with GPUs: for a pod asking for GPUs, neutral; for a pod asking for none, the
    share of the node's GPU thousandths taken already.

    A GPU pod's packing there is the fragmentation component's measure, which weighs the CPUs and GPUs a
    placement takes against what the workload's pods need. Ordering its ties by cell utilisation (which
    wants headroom left) or by the GPUs taken stranded more GPUs in the trace replay than the lower slot
    does. A CPU-only pod changes that measure only where it takes CPUs the workload's shapes need. Among
    the nodes where it does not, it goes where the GPUs are in use already, and leaves the CPUs of idle
    GPUs to GPU pods (docs/placement.md).
    """
    gpus = arrays.column(GPU_RESOURCE)
    if gpus is None:
        return fit
    total = arrays.node_allocatable[gpus][rows]
    shape = shape_of(demand)
    if shape.gpus or shape.gpu_milli or arrays.gpu_left is None:
        return np.where(total > 0, NEUTRAL, fit)
    left = np.clip(arrays.gpu_left[rows], 0, GPU_MILLI).sum(axis=1) / GPU_MILLI
    taken = np.divide(total - left, total, out=np.zeros_like(total), where=total > 0)
    result: FloatArray = np.where(total > 0, np.clip(taken, 0.0, 1.0), fit)
    return result


def _compiled_components(
    arrays: NodeArrays, rows: IntArray, demand: PodDemand, *, intent: PodIntent | None
) -> NodeComponents | None:
    """The compiled kernel's components for a call of few rows whose intent names no cells
    (``placement.core.kernel``); None where the kernel is off or the intent limits the cells."""
    compiled = kernel.for_rows(len(rows))
    if compiled is None or (intent is not None and (intent.affinity_node_ids or intent.anti_affinity_node_ids)):
        return None
    wanted = [(arrays.column(name), request) for name, request in cell_requests(arrays, demand, set())]
    known = [(column, request) for column, request in wanted if column is not None]
    gpus = arrays.column(GPU_RESOURCE)
    parts = compiled.node_parts(
        rows,
        (
            arrays.cell_ids,
            arrays.cell_total,
            arrays.cell_free,
            arrays.node_allocatable,
            arrays.bandwidth,
            arrays.spanning_bandwidth,
            arrays.local_distance,
            arrays.spanning_distance,
        ),
        np.array([column for column, _ in known], dtype=np.int64),
        np.array([request for _, request in known], dtype=np.float64),
        -1 if gpus is None else gpus,
    )
    return NodeComponents(
        fit=gpu_node_fit(arrays, rows, demand, parts.fit),
        raw_bandwidth=parts.raw_bandwidth,
        distance=parts.distance,
        fragmentation=fragmentation_component(arrays, rows, demand),
        landing_cell=parts.landing_cell,
    )


def combine(
    arrays: NodeArrays,
    rows: IntArray,
    parts: NodeComponents,
    *,
    weights: ScoringWeights | None = None,
    gang: FloatArray | None = None,
) -> Scores:
    """The scores of ``rows`` from their components: bandwidth is relative to the best cell among ``rows``."""
    weights = weights or DEFAULT_WEIGHTS
    count = len(rows)
    best = float(arrays.bandwidth[rows].max()) if count else 0.0
    bandwidth_score = np.where(parts.raw_bandwidth > 0, parts.raw_bandwidth / max(best, 1.0), NEUTRAL)
    gang_score = np.zeros(count) if gang is None else np.clip(np.asarray(gang, dtype=np.float64), 0.0, 1.0)
    components = {
        "fit": parts.fit,
        "bandwidth": bandwidth_score,
        "distance": parts.distance,
        "gang": gang_score,
        "fragmentation": parts.fragmentation,
    }
    shares = weights.shares
    total_score = sum((shares[name] * components[name] for name in COMPONENTS), np.zeros(count))
    return Scores(
        rows=rows,
        total=total_score,
        components=components,
        shares=shares,
        landing_cell=parts.landing_cell,
    )
