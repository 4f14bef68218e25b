"""Every subset of a node's GPUs scored once: the lookup tables ``choose_gpu_set`` answers from on nodes of
up to ``MAX_GPUS`` GPUs.

A subset is a bitmask over GPU positions (bit p: the p-th GPU of the link table). For all 2^n of them the
tables hold the set score of ``placement.core.gpu_sets`` (criteria 2-5: the best ring's weakest hop, the
weakest pair rank, the sum of pair ranks, the NUMA span) packed into one int64 that orders as the criteria
do. Pair tables are built by doubling (the masks that hold GPU i are the masks below bit i plus GPU i, whose
pairs with them are one more doubling of GPU i's row); rings by bitmask DP (``ring_bottlenecks``). For each
future size f of the fragmentation rule the tables also hold the best score of an f-subset *within* every
mask (a maximum over subsets, one pass per bit), so "the best f-set the GPUs left free could still form"
is one array lookup per candidate instead of a search of its own.

A decision then takes the k-subsets of the free GPUs (one vectorised filter of the masks of that size),
their best key (minus the preference penalty), and, among the tied ones, one candidate per count of
interchangeable GPUs; fragmentation and the final rank-sum rule are lookups. The tables take 2^n int64
entries per array and are built once per link table, on its first decision (tens of ms at 16 GPUs, see
docs/benchmarks.md); above ``MAX_GPUS`` the memory doubles with every GPU and ``choose_gpu_set`` keeps its
group search.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAX_GPUS = 16
# A rank no link has (NV250 and up would need it): the weakest pair and the ring of a set with fewer than
# two GPUs, where nothing is a bottleneck.
_RANK_BITS = 8
NO_PAIR_RANK = (1 << _RANK_BITS) - 1
_SPAN_BITS = 5  # a span of up to 31 NUMA nodes; at most MAX_GPUS here
_SUM_SHIFT = _SPAN_BITS
_SUM_BITS = 16  # 120 pairs of ranks below NO_PAIR_RANK fit
_WEAKEST_SHIFT = _SUM_SHIFT + _SUM_BITS
_RING_SHIFT = _WEAKEST_SHIFT + _RANK_BITS
# One GPU outside the preference costs more than any difference in criteria 2-5.
PREFERENCE_SHIFT = _RING_SHIFT + _RANK_BITS

Masks = npt.NDArray[np.int64]
Keys = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Score:
    """Criteria 2-5 unpacked from a key."""

    ring_rank: int | None  # None for fewer than two GPUs
    weakest_rank: int | None
    rank_sum: int
    numa_span: int


@dataclass(frozen=True)
class SubsetTables:
    """One link table's subsets, indexed by mask; build with ``build_subset_tables``."""

    keys: Keys  # the packed score of every subset
    rings: Keys  # the weakest hop of every subset's best ring (NO_PAIR_RANK below two GPUs)
    rank_sums: Keys  # the sum of pair ranks within every subset
    popcounts: npt.NDArray[np.int64]
    by_size: tuple[Masks, ...]  # the masks of each size, ascending
    best_within: dict[int, Keys]  # future size f -> the best key of an f-subset of every mask (-1: none)
    earlier_twins: tuple[int, ...]  # per position: the mask of its interchangeable GPUs at lower positions


@dataclass(frozen=True)
class Choice:
    """What ``choose`` found: the chosen mask and how the criteria came out."""

    mask: int
    score: Score
    outside_preference: int
    tied: int  # candidates equal on criteria 1-5, one per count of interchangeable GPUs
    best_left: tuple[tuple[int, Score], ...] | None  # criterion 6, when it had to decide
    left_rank_sum: int | None


def fits(gpu_count: int, top_rank: int) -> bool:
    """Whether a node's GPUs fit the tables: at most ``MAX_GPUS``, every rank below the no-pair mark."""
    return gpu_count <= MAX_GPUS and top_rank < NO_PAIR_RANK


def build_subset_tables(
    ranks: Sequence[Sequence[int]],
    numa_nodes: Sequence[int | None],
    groups: Sequence[Sequence[int]],
    *,
    by_ring: bool = True,
) -> SubsetTables:
    """The tables of a node's pair ranks, NUMA nodes and interchangeable groups (by position).

    ``by_ring=False`` leaves the ring out of the keys: the weakest-pair rule that ranked GPU sets before
    the ring did, for its evaluation in ``benchmarks.gpu_sets`` and the tests' check against the group
    search (``rings`` still holds every subset's ring).
    """
    count = len(numa_nodes)
    if not fits(count, max((max(row, default=0) for row in ranks), default=0)):
        raise ValueError(f"subset tables take at most {MAX_GPUS} GPUs with ranks below {NO_PAIR_RANK} (got {count})")
    weakest, rank_sums = _pair_tables(ranks)
    masks = np.arange(1 << count, dtype=np.int64)
    popcounts = _popcounts(masks, count)
    spans = np.zeros(1 << count, dtype=np.int64)
    for node in {n for n in numa_nodes if n is not None}:
        on_node = sum(1 << p for p, n in enumerate(numa_nodes) if n == node)
        spans += (masks & on_node) != 0
    unknown = sum(1 << p for p, n in enumerate(numa_nodes) if n is None)
    spans += popcounts[masks & unknown]
    order = np.argsort(popcounts, kind="stable")
    edges = np.searchsorted(popcounts[order], np.arange(count + 2))
    by_size = tuple(masks[order[edges[size] : edges[size + 1]]] for size in range(count + 1))
    rings = ring_bottlenecks(ranks, weakest, popcounts, by_size)
    keys = (
        ((rings if by_ring else 0) << _RING_SHIFT)
        | (weakest << _WEAKEST_SHIFT)
        | (rank_sums << _SUM_SHIFT)
        | ((1 << _SPAN_BITS) - 1 - spans)
    )
    best_within = {}
    size = 2
    while size < count:
        best_within[size] = _best_within(np.where(popcounts == size, keys, -1), count)
        size *= 2
    earlier = [0] * count
    for members in groups:
        for place, position in enumerate(members):
            earlier[position] = sum(1 << p for p in members[:place])
    return SubsetTables(keys, rings, rank_sums, popcounts, by_size, best_within, tuple(earlier))


def ring_bottlenecks(
    ranks: Sequence[Sequence[int]], weakest: Keys, popcounts: npt.NDArray[np.int64], by_size: Sequence[Masks]
) -> Keys:
    """For every subset, the weakest hop of its best ring: the highest rank w such that a cycle through
    all its GPUs uses only pairs ranked w or better (two GPUs: their pair; fewer: ``NO_PAIR_RANK``).

    Exact: for each rank w above the lowest, Hamiltonian paths from every mask's lowest GPU by bitmask
    DP over the pairs ranked w or better (per mask, the set of GPUs such a path through it can end at;
    one vectorised step per size and GPU). A set whose weakest pair already ranks w needs no path.
    """
    count = len(ranks)
    size = 1 << count
    masks = np.arange(size, dtype=np.int64)
    lowest = np.zeros(size, dtype=np.int64)
    for bit in reversed(range(count)):
        lowest[(masks >> bit) & 1 == 1] = bit
    # Every cycle of three or more GPUs is at least as strong as its weakest pair, and a triangle is
    # exactly that: the DP only has to lift sets of four or more above their weakest pair.
    rings = weakest.copy()
    pair_ranks = sorted({ranks[a][b] for a in range(count) for b in range(a + 1, count)})
    for threshold in pair_ranks[1:]:
        below = (popcounts >= 4) & (rings < threshold)
        if not below.any():
            break
        adjacent = np.array(
            [sum(1 << u for u in range(count) if u != v and ranks[v][u] >= threshold) for v in range(count)],
            dtype=np.int64,
        )
        ends = np.zeros(size, dtype=np.int64)
        ends[by_size[1]] = by_size[1]
        for layer in by_size[2:]:
            for v in range(count):
                through = layer[((layer >> v) & 1 == 1) & (lowest[layer] != v)]
                reached = (ends[through ^ (1 << v)] & adjacent[v]) != 0
                ends[through[reached]] |= 1 << v
        rings[below & ((ends & adjacent[lowest]) != 0)] = threshold
    return rings


def unpack(key: int) -> Score:
    """Criteria 2-5 of a packed key (no preference penalty in it)."""
    ring = (key >> _RING_SHIFT) & NO_PAIR_RANK
    weakest = (key >> _WEAKEST_SHIFT) & NO_PAIR_RANK
    return Score(
        None if ring == NO_PAIR_RANK else ring,
        None if weakest == NO_PAIR_RANK else weakest,
        (key >> _SUM_SHIFT) & ((1 << _SUM_BITS) - 1),
        (1 << _SPAN_BITS) - 1 - (key & ((1 << _SPAN_BITS) - 1)),
    )


def choose(tables: SubsetTables, free: int, k: int, outside: int) -> Choice:
    """The best k-subset of the ``free`` mask by criteria 1-7 of ``placement.core.gpu_sets``.

    ``outside`` is the mask of GPUs outside the NUMA preference (0 without one). The caller checks that
    at least k GPUs are free.
    """
    candidates = tables.by_size[k]
    candidates = candidates[(candidates & ~free) == 0]
    keys = tables.keys[candidates]
    if outside:
        keys = keys - (tables.popcounts[candidates & outside] << PREFERENCE_SHIFT)
    best = int(keys.max())
    tied = _one_per_count(tables, candidates[keys == best], free)
    finalists = tied
    best_left: tuple[tuple[int, Score], ...] | None = None
    left_rank_sum: int | None = None
    if len(tied) > 1:
        finalists, best_left, left_rank_sum = _least_fragmenting(tables, tied, free)
    chosen = min(finalists.tolist(), key=_positions) if len(finalists) > 1 else int(finalists[0])
    outside_count = int(tables.popcounts[chosen & outside])
    return Choice(chosen, unpack(int(tables.keys[chosen])), outside_count, len(tied), best_left, left_rank_sum)


def _least_fragmenting(
    tables: SubsetTables, tied: Masks, free: int
) -> tuple[Masks, tuple[tuple[int, Score], ...], int]:
    # Criterion 6: for each future size, largest first, keep the candidates whose leftover GPUs can still
    # form the best f-set; then those leaving the highest rank sum.
    left = free & ~tied
    remaining = int(tables.popcounts[free]) - int(tables.popcounts[tied[0]])
    sizes = []
    size = 2
    while size <= remaining:
        sizes.append(size)
        size *= 2
    best_left = []
    for size in reversed(sizes):
        reach = tables.best_within[size][left]
        top = int(reach.max())
        keep = reach == top
        tied, left = tied[keep], left[keep]
        best_left.append((size, unpack(top)))
    sums = tables.rank_sums[left]
    most = int(sums.max())
    return tied[sums == most], tuple(best_left), most


def _one_per_count(tables: SubsetTables, tied: Masks, free: int) -> Masks:
    # Interchangeable GPUs score alike on every criterion, so of the masks that take the same count from
    # each group only the one taking each group's lowest free members is kept: it is the one rule 7 picks.
    keep = np.ones(len(tied), dtype=bool)
    for position, twins in enumerate(tables.earlier_twins):
        if twins & free:
            holds = (tied >> position) & 1 == 1
            keep &= ~holds | ((twins & free & ~tied) == 0)
    return tied[keep]


def _positions(mask: int) -> tuple[int, ...]:
    return tuple(p for p in range(mask.bit_length()) if mask >> p & 1)


def _pair_tables(ranks: Sequence[Sequence[int]]) -> tuple[Keys, Keys]:
    """The weakest pair rank and the sum of pair ranks of every subset, by doubling over the GPUs."""
    weakest = np.full(1, NO_PAIR_RANK, dtype=np.int64)
    sums = np.zeros(1, dtype=np.int64)
    for gpu, row in enumerate(ranks):
        # Over the masks of the GPUs below this one: its weakest rank and rank sum to the mask's GPUs.
        row_min = np.full(1, NO_PAIR_RANK, dtype=np.int64)
        row_sum = np.zeros(1, dtype=np.int64)
        for other in range(gpu):
            row_min = np.concatenate([row_min, np.minimum(row_min, row[other])])
            row_sum = np.concatenate([row_sum, row_sum + row[other]])
        weakest = np.concatenate([weakest, np.minimum(weakest, row_min)])
        sums = np.concatenate([sums, sums + row_sum])
    return weakest, sums


def _popcounts(masks: Masks, count: int) -> npt.NDArray[np.int64]:
    counts = np.zeros(len(masks), dtype=np.int64)
    for bit in range(count):
        counts += (masks >> bit) & 1
    return counts


def _best_within(keys: Keys, count: int) -> Keys:
    # A maximum over subsets: after bit b, every mask holds the best of its subsets that differ from it
    # in bits 0..b only; after the last bit, the best of all its subsets.
    best = keys.copy()
    for bit in range(count):
        halves = best.reshape(-1, 2, 1 << bit)
        np.maximum(halves[:, 1, :], halves[:, 0, :], out=halves[:, 1, :])
    return best
