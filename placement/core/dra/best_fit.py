"""The best of the device sets the stable allocator's rules allow, by GPU topology, not the first one.

Feasibility is exactly ``first_fit``'s (``search.Search``, the same checks in the same order, the same
``firstAvailable`` priority: only the first alternative that has any solution is scored). The search
runs in combination mode, so each set of devices is met once, in published order; infeasible partial
sets are never extended. Every complete solution is scored, up to ``max_candidates`` (default 5,000)
solutions per call (all the pod's claims and requests together). Beyond the cap the search stops and
the best of the solutions examined is returned with ``truncated`` set: those are the sets that come
first in published order, so the answer is never worse than first fit's, only possibly not the best.

The score of a solution, each part in [0, 1], weighed by the caller's ``FitWeights`` and summed:

* ``links``: how well the chosen GPUs are connected, from the agent's topology joined by
  ``join.join_topology`` (a MIG device counts as its parent GPU). Pair ranks are ``gpu_sets.link_rank``'s
  (NVLink/NVSwitch above every PCIe class); the part is the mean of the weakest pair's rank and the mean
  pair rank, each divided by the node's best pair rank. One GPU (or none) scores 1.
* ``numa``: the share of the chosen GPUs on ``preferred_numa`` (the cell the kubelet pins the pod's CPUs
  to); a GPU whose NUMA node is unknown is not on it. 0 for every solution when no cell is given.
* ``fragmentation``: the sum of pair ranks among the node's free GPUs left after the choice, divided by
  that sum before it: taking a bridged pair whole keeps the other bridges intact, so the well-connected
  free sets left are larger.

A device that no agent GPU joins (no topology, or a device the agent does not know) adds nothing to
``links`` and ``numa``; with no topology at all every solution ties and the first (first fit's set, in
combination order) wins. Ties keep the earliest solution: the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations

from kubenexus.topology.model import NodeTopology
from placement.core.dra.claims import DeviceClass, ResourceClaim
from placement.core.dra.first_fit import Allocation, Unallocatable, why_nothing_fits
from placement.core.dra.footprints import conflicts
from placement.core.dra.gpus import GpuKind, dra_gpus
from placement.core.dra.join import join_topology
from placement.core.dra.pools import DeviceRef
from placement.core.dra.search import AllocationError, ClaimSolution, Inventory, Search
from placement.core.gpu_sets import GpuLinkTable, build_gpu_link_table, score_gpu_set

MAX_CANDIDATES = 5000


@dataclass(frozen=True)
class FitWeights:
    links: Fraction = Fraction(1)
    numa: Fraction = Fraction(1)
    fragmentation: Fraction = Fraction(1, 2)


@dataclass(frozen=True)
class FitScore:
    links: Fraction
    numa: Fraction
    fragmentation: Fraction
    total: Fraction


@dataclass(frozen=True)
class BestFit:
    """The best solution found, its score, and how much was searched."""

    allocation: Allocation
    score: FitScore
    examined: int  # complete solutions scored
    truncated: bool  # the cap stopped the search: a better solution may exist beyond it


def best_fit(
    claims: Sequence[ResourceClaim],
    *,
    classes: Mapping[str, DeviceClass],
    inventory: Inventory,
    topology: NodeTopology | None = None,
    preferred_numa: int | None = None,
    weights: FitWeights = FitWeights(),
    max_candidates: int = MAX_CANDIDATES,
) -> BestFit | Unallocatable:
    """The highest-scoring feasible solution for ``claims`` on the inventory's node (module docstring)."""
    scorer = _Scorer(inventory, topology, preferred_numa, weights)
    best: tuple[FitScore, tuple[ClaimSolution, ...]] | None = None
    examined = 0
    truncated = False
    try:
        search = Search(claims, classes, inventory, combinations=True)
        for solution in search.solutions():
            if examined == max_candidates:  # a solution beyond the cap exists
                truncated = True
                break
            examined += 1
            score = scorer.score(solution)
            if best is None or score.total > best[0].total:
                best = (score, solution)
        if best is None:
            return Unallocatable(inventory.node_name, why_nothing_fits(search))
    except AllocationError as error:
        return Unallocatable(inventory.node_name, str(error), error=True)
    return BestFit(Allocation(inventory.node_name, best[1]), best[0], examined, truncated)


class _Scorer:
    def __init__(
        self, inventory: Inventory, topology: NodeTopology | None, preferred_numa: int | None, weights: FitWeights
    ) -> None:
        self.weights = weights
        self.preferred_numa = preferred_numa
        self.gpu_of: dict[DeviceRef, int] = {}
        self.table: GpuLinkTable | None = None
        self.numa_of: dict[int, int | None] = {}
        self.free: frozenset[int] = frozenset()
        self.top = 1
        self.free_sum = 0
        if topology is None or not topology.gpus:
            return
        gpus = dra_gpus(inventory.devices)
        join = join_topology(gpus, topology)
        self.gpu_of = {m.device.ref: m.gpu.index for m in join.matches}
        self.table = build_gpu_link_table(topology)
        self.numa_of = {g.index: g.numa_node for g in topology.gpus}
        self.top = max((max(row) for row in self.table.ranks), default=1) or 1
        whole = [g.ref for g in gpus if g.kind is GpuKind.GPU and g.ref in self.gpu_of]
        self.free = frozenset(
            self.gpu_of[ref]
            for ref in whole
            if ref not in inventory.taken
            and not any(conflicts(inventory.footprints[ref], other) for other in inventory.taken_footprints)
        )
        self.free_sum = self._rank_sum(self.free)

    def score(self, solution: tuple[ClaimSolution, ...]) -> FitScore:
        chosen = sorted({i for c in solution for d in c.devices if (i := self.gpu_of.get(d.device.ref)) is not None})
        links = self._links(chosen)
        numa = Fraction(0)
        if self.preferred_numa is not None and chosen:
            numa = Fraction(sum(1 for i in chosen if self.numa_of.get(i) == self.preferred_numa), len(chosen))
        fragmentation = Fraction(0)
        if self.table is not None:
            left = self._rank_sum(self.free - set(chosen))
            fragmentation = Fraction(left, self.free_sum) if self.free_sum else Fraction(1)
        w = self.weights
        total = w.links * links + w.numa * numa + w.fragmentation * fragmentation
        return FitScore(links, numa, fragmentation, total)

    def _links(self, chosen: list[int]) -> Fraction:
        if self.table is None:
            return Fraction(0)
        if len(chosen) < 2:
            return Fraction(1)
        score = score_gpu_set(self.table, chosen)
        pairs = len(chosen) * (len(chosen) - 1) // 2
        weakest = score.weakest_rank or 0
        return (Fraction(weakest, self.top) + Fraction(score.rank_sum, pairs * self.top)) / 2

    def _rank_sum(self, gpus: frozenset[int] | set[int]) -> int:
        if self.table is None or len(gpus) < 2:
            return 0
        place = {index: p for p, index in enumerate(self.table.gpus)}
        return sum(self.table.ranks[place[a]][place[b]] for a, b in combinations(sorted(gpus), 2))
