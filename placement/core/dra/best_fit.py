"""The best of the device sets the allocator's rules allow, by GPU topology, not the first one.

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
* ``numa``: 1 when every chosen GPU is on ``preferred_numa`` (the cell the kubelet pins the pod's CPUs
  to), else 0: aligned or not, as the Topology Manager judges alignment. A set that must span cells
  anyway (the cell has too few free GPUs) is not partly aligned: links and fragmentation decide among
  such sets, rather than one more GPU on the cell winning over a better-connected set. A GPU whose NUMA
  node is unknown is not on the cell. 0 for every solution when no cell is given.
* ``fragmentation``: the sum of pair ranks among the node's free GPUs left after the choice, divided by
  that sum before it: taking a bridged pair whole keeps the other bridges intact, so the well-connected
  free sets left are larger.

A device that no agent GPU joins (no topology, or a device the agent does not know) adds nothing to
``links`` and ``numa``; with no topology at all every solution ties and the first (first fit's set, in
combination order) wins. Ties keep the earliest solution: the result is deterministic.

What depends only on the node (its candidate devices as published and the agent's topology: the join,
the pair ranks, each device's GPU and NUMA cell, which devices share hardware) is a ``PreparedNode``,
built by ``prepare_node`` once and passed to every ``best_fit`` on the node until its slices or its
topology change; a call then pays only for what is taken and for the claim. Solutions are compared by
an integer, the total times a positive constant of the call, so the order and the ties are exactly
those of the ``Fraction`` totals; ``FitScore`` is computed in ``Fraction``s for the chosen one only.

When the pod has one claim with one request for a count of devices, no constraint, and the devices
the request keeps neither share hardware nor draw shared counters, every set of ``count`` of them is
a solution and the search would meet them as ``itertools.combinations`` lists them: best fit then
enumerates those directly instead of running the search (where the search could not stop early on its
device-try limit or a selector error; otherwise it runs the search). The result is the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import reduce
from itertools import combinations, islice
from math import comb, lcm
from operator import or_
from typing import TypeVar

from kubenexus.topology.model import NodeTopology
from placement.core.dra.claims import AllocationMode, DeviceClass, ResourceClaim, taint_tolerated
from placement.core.dra.first_fit import Allocation, Unallocatable, nothing_fits
from placement.core.dra.footprints import Footprint, conflicts
from placement.core.dra.gpu_devices import NVIDIA_GPU_DRIVERS, GpuKind, dra_gpus
from placement.core.dra.join import join_topology
from placement.core.dra.pools import DeviceRef, PoolDevice
from placement.core.dra.search import (
    MAX_RESULTS_PER_CLAIM,
    AllocationError,
    ChosenDevice,
    ClaimSolution,
    Inventory,
    Option,
    Search,
)
from placement.core.gpu_sets import build_gpu_link_table

MAX_CANDIDATES = 5000
_T = TypeVar("_T")
# Memos a PreparedNode keeps, each emptied when full so that a long-lived node stays small: selector answers
# per distinct set of selectors (a cluster's classes times the selectors its requests add), and pair-rank
# figures per set of GPUs (2^8 sets on an 8-GPU node, so they are never emptied there).
_KEPT_SELECTOR_SETS = 64
_KEPT_GPU_SETS = 4096


@dataclass(frozen=True)
class FitWeights:
    """What each part of the score weighs. The defaults order sets by NUMA alignment, then by links, then by
    fragmentation: alignment (0 or 1) outweighs any difference of links (at most 1); fragmentation (at most
    1) weighs less than the smallest difference of links on a node of up to 16 GPUs (one rank step in a mean
    over 120 pairs of a best rank below 64, 1/15,360), so it only breaks ties between equally connected
    sets (it keeps bridges whole where the links allow either)."""

    links: Fraction = Fraction(1)
    numa: Fraction = Fraction(2)
    fragmentation: Fraction = Fraction(1, 20_000)


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


@dataclass(frozen=True, eq=False)
class PreparedNode:
    """What best fit needs of one node that does not change while only which devices are taken changes.

    Devices are addressed by position in ``devices`` (the inventory's search order), GPUs by bit: bit g
    is the g-th GPU of the agent's topology by ascending index. Build it with ``prepare_node``. It keeps
    memos of what calls computed from it (selector answers, pair ranks of GPU sets), so it compares by
    identity.
    """

    devices: tuple[PoolDevice, ...]
    refs: tuple[DeviceRef, ...]
    position: Mapping[DeviceRef, int]
    footprints: tuple[Footprint, ...]
    sharing: tuple[int, ...]  # per device: the positions of the others it cannot be allocated with
    draws_counters: int  # positions of the devices that draw from a shared counter
    tainted: int  # positions of the devices with taints
    scored: bool  # the agent reported GPUs: the parts are computed (else every solution scores 0)
    gpu_bit: tuple[int, ...]  # per device: the bit of the agent's GPU it joins (a MIG device: its parent), or 0
    whole_gpu_bit: tuple[int, ...]  # per device: its GPU bit when it is a whole GPU (one that can be free), else 0
    ranks: tuple[tuple[int, ...], ...]  # pair rank by GPU bit number
    cells: Mapping[int, int]  # NUMA cell -> its GPUs' bits
    top: int  # the best pair rank on the node; 1 when there is none
    # Common multiples of every GPU count 1..n and of every pair count of 2..n GPUs: with them a call
    # scales every solution's total to an integer.
    pairs_multiple: int
    # Memos of pure functions of the fields above (see _KEPT_SELECTOR_SETS, _KEPT_GPU_SETS).
    _selections: dict[tuple[str, ...], tuple[int, int]] = field(default_factory=dict, init=False, repr=False)
    _gpu_sets: dict[int, tuple[int, int]] = field(default_factory=dict, init=False, repr=False)

    def pair_ranks(self, gpus: int) -> tuple[int, int]:
        """(the sum of pair ranks, the weakest pair rank) among the GPUs with these bits; (0, 0) under two."""
        known = self._gpu_sets.get(gpus)
        if known is None:
            members = [g for g in range(len(self.ranks)) if gpus >> g & 1]
            pairs = [self.ranks[a][b] for a, b in combinations(members, 2)]
            known = (sum(pairs), min(pairs)) if pairs else (0, 0)
            if len(self._gpu_sets) >= _KEPT_GPU_SETS:
                self._gpu_sets.clear()
            self._gpu_sets[gpus] = known
        return known

    def selected(self, search: Search, key: tuple[int, int, int], option: Option) -> tuple[int, int]:
        """(positions the option's selectors keep, positions where they fail with an error), for every device.

        The answer depends only on the selectors and the devices, so it is kept per set of selectors; the
        search's own check (and its cache of CEL answers) computes it the first time.
        """
        selectors = (*option.device_class.selectors, *option.spec.selectors)
        known = self._selections.get(selectors)
        if known is None:
            kept = failed = 0
            for position, entry in enumerate(self.devices):
                try:
                    if search.selectable(key, entry):
                        kept |= 1 << position
                except AllocationError:
                    failed |= 1 << position
            known = (kept, failed)
            if len(self._selections) >= _KEPT_SELECTOR_SETS:
                self._selections.clear()
            self._selections[selectors] = known
        return known


def prepare_node(
    devices: Sequence[PoolDevice],
    footprints: Mapping[DeviceRef, Footprint],
    topology: NodeTopology | None,
    *,
    drivers: Iterable[str] = NVIDIA_GPU_DRIVERS,
) -> PreparedNode:
    """Best fit's view of one node: its candidate devices and their footprints (``Inventory.devices`` and
    ``Inventory.footprints``), joined to the agent's ``topology``; GPUs are the devices of ``drivers``.

    It holds for every inventory of the same devices, whatever is taken; rebuild it when the node's
    slices or its topology change.
    """
    devices = tuple(devices)
    refs = tuple(e.ref for e in devices)
    position = {ref: p for p, ref in enumerate(refs)}
    prints = tuple(footprints[ref] for ref in refs)
    sharing = tuple(
        sum(1 << q for q, theirs in enumerate(prints) if q != p and conflicts(theirs, mine))
        for p, mine in enumerate(prints)
    )
    gpu_bit = [0] * len(devices)
    whole_gpu_bit = [0] * len(devices)
    ranks: tuple[tuple[int, ...], ...] = ()
    cells: dict[int, int] = {}
    if topology is not None and topology.gpus:
        table = build_gpu_link_table(topology)
        bit_of = {index: 1 << place for place, index in enumerate(table.gpus)}
        for match in join_topology(dra_gpus(devices, drivers=drivers), topology).matches:
            p = position[match.device.ref]
            gpu_bit[p] = bit_of[match.gpu.index]
            if match.device.kind is GpuKind.GPU:
                whole_gpu_bit[p] = gpu_bit[p]
        ranks = table.ranks
        for gpu in topology.gpus:
            if gpu.numa_node is not None:
                cells[gpu.numa_node] = cells.get(gpu.numa_node, 0) | bit_of[gpu.index]
    gpus = len(ranks)
    return PreparedNode(
        devices=devices,
        refs=refs,
        position=position,
        footprints=prints,
        sharing=sharing,
        draws_counters=sum(1 << p for p, f in enumerate(prints) if f.counters),
        tainted=sum(1 << p for p, e in enumerate(devices) if e.device.taints),
        scored=bool(ranks),
        gpu_bit=tuple(gpu_bit),
        whole_gpu_bit=tuple(whole_gpu_bit),
        ranks=ranks,
        cells=cells,
        top=max((max(row) for row in ranks), default=1) or 1,
        pairs_multiple=lcm(*(c * (c - 1) // 2 for c in range(2, gpus + 1))),
    )


def best_fit(
    claims: Sequence[ResourceClaim],
    *,
    classes: Mapping[str, DeviceClass],
    inventory: Inventory,
    topology: NodeTopology | None = None,
    prepared: PreparedNode | None = None,
    preferred_numa: int | None = None,
    weights: FitWeights = FitWeights(),
    max_candidates: int = MAX_CANDIDATES,
) -> BestFit | Unallocatable:
    """The highest-scoring feasible solution for ``claims`` on the inventory's node (module docstring).

    Pass the node's ``prepared`` view (``prepare_node`` of this inventory's devices) or its ``topology``,
    not both; with neither every solution ties. ``max_candidates`` is at least 1.
    """
    if max_candidates < 1:
        raise ValueError(f"max_candidates must be at least 1, not {max_candidates}")
    if prepared is None:
        prepared = prepare_node(inventory.devices, inventory.footprints, topology)
    elif topology is not None:
        raise ValueError("pass the node's topology or its prepared view, not both")
    elif inventory.devices is not prepared.devices and tuple(e.ref for e in inventory.devices) != prepared.refs:
        raise ValueError(f"node {inventory.node_name}: the prepared view is of other devices than the inventory's")
    taken, blocked = _held(prepared, inventory)
    free = 0
    for p in _positions(~(taken | blocked) & ((1 << len(prepared.devices)) - 1)):
        free |= prepared.whole_gpu_bit[p]
    scorer = _Scorer(prepared, free, preferred_numa, weights)
    try:
        search = Search(claims, classes, inventory, combinations=True)
        found = _enumerated(
            search, prepared, taken=taken, blocked=blocked, scorer=scorer, max_candidates=max_candidates
        )
        if found is None:
            found = _searched(search, prepared, scorer, max_candidates)
        if found.solution is None:
            return nothing_fits(search)
    except AllocationError as error:
        return Unallocatable(inventory.node_name, str(error), error=True)
    allocation = Allocation(inventory.node_name, found.solution)
    return BestFit(allocation, scorer.fit_score(found.gpus, found.key), found.examined, found.truncated)


def _held(node: PreparedNode, inventory: Inventory) -> tuple[int, int]:
    """(positions taken, positions sharing hardware with a taken device): the search refuses both."""
    taken = 0
    for ref in inventory.taken:
        p = node.position.get(ref)
        if p is not None:
            taken |= 1 << p
    blocked = 0
    for other in inventory.taken_footprints:
        p = node.position.get(other.device)
        if p is not None:
            blocked |= node.sharing[p]
        else:  # held through a device that is not a candidate here: compare with each candidate
            blocked |= sum(1 << q for q, mine in enumerate(node.footprints) if conflicts(mine, other))
    return taken, blocked


@dataclass(frozen=True)
class _Found:
    solution: tuple[ClaimSolution, ...] | None  # None: no solution
    gpus: int  # the solution's GPU bits
    key: int  # its scaled total
    examined: int
    truncated: bool


class _Scorer:
    """A solution's total as an integer: the ``Fraction`` total times ``scale``, a positive whole number of
    this call, so comparing integers orders and ties solutions exactly as comparing the totals does.

    ``scale`` is a multiple of every part's denominator (``2 * pairs * top`` for links, for each count of
    chosen GPUs; 1 for NUMA; the free rank sum for fragmentation; each times its weight's denominator), so
    for a count of chosen GPUs each part is a whole factor times the weakest rank, the rank sum, whether
    the set is all on the preferred cell, or the rank sum left free.
    """

    def __init__(self, node: PreparedNode, free: int, preferred_numa: int | None, weights: FitWeights) -> None:
        self.node = node
        self.free = free
        self.free_sum = node.pair_ranks(free)[0]
        self.preferred_numa = preferred_numa
        self.cell = node.cells.get(preferred_numa, 0) if preferred_numa is not None else 0
        self.weights = weights
        self.scale = lcm(
            weights.links.denominator * 2 * node.top * node.pairs_multiple,
            weights.numa.denominator,
            weights.fragmentation.denominator * (self.free_sum or 1),
        )
        self.by_left = self._scaled(weights.fragmentation, self.free_sum) if node.scored and self.free_sum else 0
        self._factors: dict[int, tuple[int, int, int, int]] = {}
        self._known_ranks = node._gpu_sets.get

    def _scaled(self, weight: Fraction, denominator: int) -> int:
        """``scale * weight / denominator``, a whole number for every denominator of a part."""
        return self.scale * weight.numerator // (weight.denominator * denominator)

    def factors(self, count: int) -> tuple[int, int, int, int]:
        """For ``count`` chosen GPUs: (the constant, the factor of the weakest rank, of the rank sum, of a
        set all on the preferred cell)."""
        known = self._factors.get(count)
        if known is None:
            known = (0, 0, 0, 0)
            if self.node.scored:
                w, pairs, top = self.weights, count * (count - 1) // 2, self.node.top
                nothing_free = 0 if self.free_sum else self._scaled(w.fragmentation, 1)  # fragmentation scores 1
                known = (
                    nothing_free + (self._scaled(w.links, 1) if count < 2 else 0),  # links scores 1
                    self._scaled(w.links, 2 * top) if count >= 2 else 0,
                    self._scaled(w.links, 2 * pairs * top) if count >= 2 else 0,
                    # Without a preferred cell no set is on it, whatever the factor.
                    self._scaled(w.numa, 1) if count else 0,
                )
            self._factors[count] = known
        return known

    def first_best(self, candidates: Iterable[tuple[int, _T]]) -> tuple[tuple[int, int, _T] | None, int]:
        """The first best of ``candidates`` (a solution's GPU bits, and the solution) as (scaled total, GPU
        bits, solution), None when there is none; and how many were scored."""
        # This runs once per solution: the memos' lookups are inline and the fields local.
        known_ranks, ranks_of = self.node._gpu_sets.get, self.node.pair_ranks
        known_factors, factors_of = self._factors.get, self.factors
        free, cell, by_left = self.free, self.cell, self.by_left
        best: tuple[int, int, _T] | None = None
        scored = 0
        for gpus, solution in candidates:
            scored += 1
            count = gpus.bit_count()
            constant, by_weakest, by_rank_sum, by_on_cell = known_factors(count) or factors_of(count)
            rank_sum, weakest = known_ranks(gpus) or ranks_of(gpus)
            key = constant + by_weakest * weakest + by_rank_sum * rank_sum + (by_on_cell if gpus & ~cell == 0 else 0)
            if by_left:
                rest = free & ~gpus
                key += by_left * (known_ranks(rest) or ranks_of(rest))[0]
            if best is None or key > best[0]:
                best = (key, gpus, solution)
        return best, scored

    def fit_score(self, gpus: int, key: int) -> FitScore:
        """The parts, in ``Fraction``s, of the solution with these GPU bits and scaled total."""
        count = gpus.bit_count()
        links = numa = fragmentation = Fraction(0)
        if self.node.scored:
            rank_sum, weakest = self.node.pair_ranks(gpus)
            pairs = count * (count - 1) // 2
            links = Fraction(weakest * pairs + rank_sum, 2 * pairs * self.node.top) if count >= 2 else Fraction(1)
            left = self.node.pair_ranks(self.free & ~gpus)[0]
            fragmentation = Fraction(left, self.free_sum) if self.free_sum else Fraction(1)
        if self.preferred_numa is not None and count and gpus & ~self.cell == 0:
            numa = Fraction(1)
        return FitScore(links, numa, fragmentation, Fraction(key, self.scale))


def _searched(search: Search, node: PreparedNode, scorer: _Scorer, max_candidates: int) -> _Found:
    """Every solution the search meets, up to the cap, scored; the first of the best.

    An error the search meets after its first solution ends it there, as the cap does: a selector failing
    on a device first fit never tries, an "All" alternative whose devices break a constraint on a path
    first fit never takes, the limit of device tries. Upstream's allocator stops at that first solution
    and never meets the error, so the pod is not refused for it (found by tests/upstream/test_oracle_dra.py). An
    error before the first solution is upstream's too, and is raised."""
    solutions = search.solutions()
    stopped = False

    def with_gpus() -> Iterator[tuple[int, tuple[ClaimSolution, ...]]]:
        nonlocal stopped
        met = False
        try:
            for solution in solutions:
                gpus = 0
                for claim in solution:
                    for chosen in claim.devices:
                        gpus |= node.gpu_bit[node.position[chosen.device.ref]]
                met = True
                yield gpus, solution
        except AllocationError:
            if not met:
                raise
            stopped = True

    best, examined = scorer.first_best(islice(with_gpus(), max_candidates))
    # Whether a solution beyond the cap exists: the search looks for one more (and may fail doing so).
    if examined == max_candidates and not stopped:
        try:
            stopped = next(solutions, None) is not None
        except AllocationError:
            stopped = True
    truncated = stopped
    if best is None:
        return _Found(None, 0, 0, examined, truncated)
    key, gpus, solution = best
    return _Found(solution, gpus, key, examined, truncated)


def _enumerated(
    search: Search, node: PreparedNode, *, taken: int, blocked: int, scorer: _Scorer, max_candidates: int
) -> _Found | None:
    """The search's answer without running it, where its solutions are the combinations of the devices a
    request keeps (module docstring); None where that does not hold or would not end the same way.

    ``taken``: positions held or in flight; ``blocked``: positions sharing hardware with a taken device.
    """
    if len(search.claims) != 1 or search.claims[0].spec.constraints:
        return None
    requests = search.request_options(0)
    if len(requests) != 1:
        return None
    devices = search.inventory.devices
    tries = 0
    for sub_index, option in enumerate(requests[0]):
        if option.spec.allocation_mode is not AllocationMode.EXACT_COUNT:
            return None
        if option.count > MAX_RESULTS_PER_CLAIM:
            continue  # the search gives this alternative up before trying a device
        selected, failed = node.selected(search, (0, 0, sub_index), option)
        if failed & ~taken:
            return None  # the search stops on that error unless the cap stops it first: let it tell
        usable = selected & ~taken & ~blocked
        for p in _positions(usable & node.tainted):
            if not all(taint_tolerated(t, option.spec.tolerations) for t in devices[p].device.taints):
                usable &= ~(1 << p)
        kept = _positions(usable)
        if usable & node.draws_counters or any(node.sharing[p] & usable for p in kept):
            return None  # a choice changes what else fits: only the search knows
        # Every partial set of fewer than count kept devices tries at most every device: with no more tries
        # than the search allows, it would not have stopped on its limit.
        tries += len(devices) * sum(comb(len(kept), size) for size in range(option.count))
        if tries > search.max_tries:
            return None
        if len(kept) >= option.count:  # the first alternative with a solution is the one used
            return _best_combination(search, node, option, kept, scorer=scorer, max_candidates=max_candidates)
    return _Found(None, 0, 0, 0, False)


def _best_combination(
    search: Search, node: PreparedNode, option: Option, kept: Sequence[int], *, scorer: _Scorer, max_candidates: int
) -> _Found:
    """The first best of the first ``max_candidates`` combinations of ``count`` kept devices, in the order the
    search meets them (``itertools.combinations`` of ascending positions is that order)."""
    bits = [node.gpu_bit[p] for p in kept]
    chosen = combinations(bits, option.count)
    # Devices on distinct GPUs or on none (whole GPUs, the common case): a set's GPU bits are their sum,
    # which map computes in C.
    gpu_sets = map(sum, chosen) if len(set(bits)) == len(bits) else (reduce(or_, c, 0) for c in chosen)
    candidates = zip(gpu_sets, combinations(kept, option.count), strict=True)
    best, examined = scorer.first_best(islice(candidates, max_candidates))
    truncated = examined == max_candidates and next(candidates, None) is not None
    assert best is not None  # at least count devices are kept, so there is a combination
    key, gpus, positions = best
    devices = search.inventory.devices
    solution = ClaimSolution(
        search.claims[0],
        tuple(ChosenDevice(option.result_name, devices[p], option.spec) for p in positions),
        (option.device_class,),
        (option.subrequest_name or None,),
    )
    return _Found((solution,), gpus, key, examined, truncated)


def _positions(bits: int) -> list[int]:
    """The numbers of the set bits of a non-negative ``bits``, ascending."""
    positions = []
    while bits:
        low = bits & -bits
        positions.append(low.bit_length() - 1)
        bits ^= low
    return positions
