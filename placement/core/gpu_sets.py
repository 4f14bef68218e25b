"""Which k of a node's free GPUs are best: link quality, NUMA alignment, fragmentation.

A ``GpuLinkTable`` is built once per node from its ``NodeTopology`` (pair ranks, NUMA nodes and the
groups of interchangeable GPUs, and the pair scores NVIDIA's device plugin ranks sets by);
``choose_gpu_set`` then answers each request from that table. It is our criterion, for the GPUs we
choose (the gang planner's members, the simulator's measure of the best set available); the GPUs the
kubelet hands a device-plugin pod are predicted by ``placement.core.nvidia_device_plugin``.

Pair rank, higher is better, from the link the topology reports for the pair (``nvidia-smi topo -m``
order; a pair the topology does not report is ranked below SYS so that it is never preferred)::

    unknown 0 < SYS 1 < NODE 2 < PHB 3 < PXB 4 < PIX 5 < NV1 6 < NV2 7 < ... < NV<n> 5+n

Ranks are ordinal: the matrix tells path classes and link counts, not bandwidths, so no scale finer
than "which is better" is claimed.

The score of a set S, compared lexicographically, best first:

1. fewest GPUs outside ``numa_preference`` (only when one is given; a GPU with unknown NUMA is outside);
2. highest ring bottleneck: the weakest hop of the best ring through S (the order of S's GPUs around a
   cycle whose weakest pair ranks highest; for two GPUs their pair). Ring all-reduce, NCCL's within a
   node, runs at the pace of its slowest hop, and it uses only the hops of its ring: on a partial NVLink
   mesh such as DGX-1's hybrid cube-mesh, four GPUs without an NVLink between every pair can still form
   an NVLink ring. The rank order counts NVLinks as bandwidth (NV<n> = n links) with every PCIe class
   below one NVLink, and a bottleneck only compares, so no finer scale is needed;
3. highest weakest pair rank: among sets with the same ring, the one whose slowest pair (what a tree or
   all-to-all also crosses) is faster. For three GPUs or fewer, and on NVSwitch, PCIe-tree and
   bridge-pair nodes, 2 and 3 agree (docs/benchmarks.md, "GPU set choice");
4. highest sum of pair ranks: among sets with the same bottlenecks, the one with more fast pairs;
5. fewest NUMA nodes spanned, a GPU whose NUMA node is unknown counting as a node of its own (locality
   the host did not show is never promised); on NVSwitch nodes, where 2-4 tie, this decides.

Among sets equal on 1-5, fragmentation decides: with R the GPUs left free after taking S,

6. for each likely future size f (the powers of two from the largest that fits in R down to 2, largest
   first, since large requests are the hardest to place well), the best score (2-5) that an f-set of R
   could still get, higher first; then the sum of pair ranks within R, higher first (the choice that
   breaks the fewest good pairs, e.g. the GPU whose NVLink-bridge partner is already in use);
7. the lowest GPU indices (the sorted index tuple, lexicographically): deterministic.

Search: GPUs that are interchangeable (the same NUMA node and the same rank to every other GPU; such
"twins" form groups whose internal pairs share one rank too) are grouped once per node. On nodes of up
to 16 GPUs (``placement.core.gpu_subsets.MAX_GPUS``) every subset's score, and the best f-set within every
subset for each future size f, are tabulated once per link table (on its first decision): a decision
filters the k-subsets of the free GPUs, keeps the best, one per count of each group's GPUs, and settles
fragmentation by lookups.

Nodes of more than 16 GPUs (none among the machines we know of: DGX-2 and HGX-2 have 16) use the group
search (``choose_gpu_set_by_groups``), which ranks by criteria 1 and 3-7 without the ring: the rule before
the ring was adopted. A choice is a count per group (an NVSwitch node has one group per NUMA node, an
NVLink-bridge node one group per bridged pair), searched depth first with branch and bound (each partial
choice bounds what any completion can reach), keeping every vector tied with the best; only the tied ones
are scored for fragmentation, and a tied choice that misses one of the best f-sets of all free GPUs is
known to leave that set's score without a search of its own. On the weakest-pair rule both searches give
the same choice (``tests/placement/core/test_gpu_sets.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from kubenexus.topology.model import DeviceLink, NodeTopology, PathKind
from placement.core import gpu_subsets
from placement.core.gpuallocator import PairScores, pair_scores

UNKNOWN_RANK = 0
_PCIE_RANKS = {PathKind.SYS: 1, PathKind.NODE: 2, PathKind.PHB: 3, PathKind.PXB: 4, PathKind.PIX: 5}
_NVLINK_BASE = max(_PCIE_RANKS.values())  # NV<n> ranks above every PCIe class: one NVLink beats PIX
_LABELS = {rank: kind.value for kind, rank in _PCIE_RANKS.items()} | {UNKNOWN_RANK: "unknown"}
_NO_PAIR = 1 << 30  # the weakest rank of a set with no pairs: nothing in it can be a bottleneck

# (-outside preference, weakest rank, rank sum, -NUMA span): larger is better.
_Key = tuple[int, int, int, int]
_Counts = tuple[int, ...]
# A choice in progress: (weakest rank, rank sum, GPUs outside the preference, NUMA span).
_Partial = tuple[int, int, int, int]


def link_rank(link: DeviceLink) -> int:
    """The pair rank of one link (see the module docstring)."""
    if link.path is PathKind.NVLINK:
        return _NVLINK_BASE + max(link.nvlinks, 1)  # an NVLINK pair with no count still has a link
    return _PCIE_RANKS.get(link.path, UNKNOWN_RANK)


def rank_label(rank: int) -> str:
    """The ``nvidia-smi topo -m`` name of a pair rank: ``NV12``, ``PIX``, ``SYS``, or ``unknown``."""
    return _LABELS.get(rank, f"NV{rank - _NVLINK_BASE}")


@dataclass(frozen=True)
class GpuLinkTable:
    """One node's GPUs as ``choose_gpu_set`` and the device plugin's prediction need them; build it with
    ``build_gpu_link_table``.

    GPUs are addressed by position (their order in ``gpus``) inside the table and by index outside. The
    table holds no UUIDs: nothing predicted orders them (``placement.core.nvidia_device_plugin``), and
    nodes of one machine type share one table.
    """

    gpus: tuple[int, ...]  # GPU indices, ascending
    numa_nodes: tuple[int | None, ...]  # the host NUMA node of each GPU; None where the host did not say
    ranks: tuple[tuple[int, ...], ...]  # pair rank by position; the diagonal is 0
    groups: tuple[tuple[int, ...], ...]  # positions of interchangeable GPUs, lowest first
    group_numa: tuple[int | None, ...]
    group_internal_rank: tuple[int, ...]  # the rank between two members; 0 for a single GPU
    group_ranks: tuple[tuple[int, ...], ...]  # the rank between a member of one group and one of another
    # What NVIDIA's device plugin ranks GPU sets by (go-gpuallocator's pair scores), to predict its answer.
    plugin_scores: PairScores

    @cached_property
    def subsets(self) -> gpu_subsets.SubsetTables | None:
        """Every subset scored, for ``choose_gpu_set``; None above ``gpu_subsets.MAX_GPUS`` GPUs.

        Built on the first decision, not with the table: the cluster index holds a table for every
        machine type, and only the GPU set choice reads these (4 MiB at 16 GPUs).
        """
        if not gpu_subsets.fits(len(self.gpus), max((max(row, default=0) for row in self.ranks), default=0)):
            return None
        return gpu_subsets.build_subset_tables(self.ranks, self.numa_nodes, self.groups)


def build_gpu_link_table(topology: NodeTopology) -> GpuLinkTable:
    """Pair ranks, NUMA nodes and interchangeable groups of the node's GPUs; links to NICs are ignored."""
    gpus = tuple(sorted({gpu.index for gpu in topology.gpus}))
    position = {f"GPU{index}": place for place, index in enumerate(gpus)}
    numa_by_index = {gpu.index: gpu.numa_node for gpu in topology.gpus}
    numa_nodes = tuple(numa_by_index[index] for index in gpus)
    size = len(gpus)
    ranks = [[UNKNOWN_RANK] * size for _ in range(size)]
    for link in topology.links:
        first, second = position.get(link.a), position.get(link.b)
        if first is not None and second is not None and first != second:
            ranks[first][second] = ranks[second][first] = link_rank(link)
    groups = _twin_groups(ranks, numa_nodes)
    return GpuLinkTable(
        gpus=gpus,
        numa_nodes=numa_nodes,
        ranks=tuple(tuple(row) for row in ranks),
        groups=groups,
        group_numa=tuple(numa_nodes[members[0]] for members in groups),
        group_internal_rank=tuple(ranks[members[0]][members[1]] if len(members) > 1 else 0 for members in groups),
        group_ranks=tuple(tuple(ranks[mine[0]][theirs[0]] for theirs in groups) for mine in groups),
        plugin_scores=pair_scores(topology),
    )


def _twin_groups(ranks: Sequence[Sequence[int]], numa_nodes: Sequence[int | None]) -> tuple[tuple[int, ...], ...]:
    # Being twins (same NUMA node, same rank to every third GPU) is an equivalence relation, and the
    # pairs inside a group all share one rank, so comparing a GPU with each group's first member is enough.
    size = len(numa_nodes)
    groups: list[list[int]] = []
    for gpu in range(size):
        for members in groups:
            first = members[0]
            if numa_nodes[first] == numa_nodes[gpu] and all(
                ranks[first][other] == ranks[gpu][other] for other in range(size) if other not in (first, gpu)
            ):
                members.append(gpu)
                break
        else:
            groups.append([gpu])
    return tuple(tuple(members) for members in groups)


@dataclass(frozen=True)
class SetScore:
    """Criteria 3-5 of the module docstring for one GPU set: what its pairs and NUMA nodes are."""

    weakest_rank: int | None  # None for a set of fewer than two GPUs
    rank_sum: int
    numa_span: int

    @property
    def weakest_link(self) -> str | None:
        return None if self.weakest_rank is None else rank_label(self.weakest_rank)


@dataclass(frozen=True)
class Fragmentation:
    """Criterion 6 for the GPUs a choice leaves free."""

    # (future size, criteria 3-5 of the best set still free), largest size first
    best_left: tuple[tuple[int, SetScore], ...]
    left_rank_sum: int  # the sum of pair ranks among the GPUs left free


@dataclass(frozen=True)
class GpuChoice:
    """The chosen GPUs and why: every criterion of the module docstring, as it came out."""

    gpus: tuple[int, ...]  # GPU indices, ascending
    # Criterion 2: the weakest hop of the best ring; None below two GPUs and from the group search (above
    # 16 GPUs), which does not rank by it.
    ring_rank: int | None
    score: SetScore  # criteria 3-5
    numa_nodes: tuple[int, ...]  # the known NUMA nodes of the chosen GPUs, ascending
    outside_preference: int  # criterion 1; 0 when no preference was given
    tied: int  # how many choices were equal on criteria 1-5
    fragmentation: Fragmentation | None  # criterion 6 for the chosen set; None when criteria 1-5 decided alone

    @property
    def ring_link(self) -> str | None:
        return None if self.ring_rank is None else rank_label(self.ring_rank)


def score_gpu_set(table: GpuLinkTable, gpus: Iterable[int]) -> SetScore:
    """Criteria 3-5 for any set of the node's GPUs (e.g. one another allocator chose)."""
    positions = _positions(table, gpus)
    weakest = _NO_PAIR
    total = 0
    for place, first in enumerate(positions):
        for second in positions[place + 1 :]:
            rank = table.ranks[first][second]
            weakest = min(weakest, rank)
            total += rank
    known = {table.numa_nodes[p] for p in positions if table.numa_nodes[p] is not None}
    unknown = sum(1 for p in positions if table.numa_nodes[p] is None)
    return SetScore(None if weakest == _NO_PAIR else weakest, total, len(known) + unknown)


def choose_gpu_set(
    table: GpuLinkTable, free: frozenset[int], k: int, *, numa_preference: frozenset[int] | None = None
) -> GpuChoice | None:
    """The best k-set of the ``free`` GPU indices by the module docstring's rules; None if fewer are free.

    ``numa_preference`` is soft: it ranks first, but a set outside it is still returned when nothing
    inside fits. Pass only the allowed GPUs in ``free`` to make a placement rule hard.
    """
    subsets = table.subsets
    if subsets is None:
        return choose_gpu_set_by_groups(table, free, k, numa_preference=numa_preference)
    _check_request(table, free, k)
    if k > len(free):
        return None
    place = {index: p for p, index in enumerate(table.gpus)}
    outside = 0
    if numa_preference is not None:
        outside = sum(1 << p for p, node in enumerate(table.numa_nodes) if node not in numa_preference)
    found = gpu_subsets.choose(subsets, sum(1 << place[index] for index in free), k, outside)
    chosen = tuple(index for p, index in enumerate(table.gpus) if found.mask >> p & 1)
    fragmentation = None
    if found.best_left is not None and found.left_rank_sum is not None:
        best_left = tuple((size, _from_subsets(score)) for size, score in found.best_left)
        fragmentation = Fragmentation(best_left, found.left_rank_sum)
    return GpuChoice(
        gpus=chosen,
        ring_rank=found.score.ring_rank,
        score=_from_subsets(found.score),
        numa_nodes=tuple(sorted({n for i in chosen if (n := table.numa_nodes[place[i]]) is not None})),
        outside_preference=found.outside_preference,
        tied=found.tied,
        fragmentation=fragmentation,
    )


def choose_gpu_set_by_groups(
    table: GpuLinkTable, free: frozenset[int], k: int, *, numa_preference: frozenset[int] | None = None
) -> GpuChoice | None:
    """The best k-set by criteria 1 and 3-7 (no ring), by the group search, on any number of GPUs.

    ``choose_gpu_set`` answers from it above ``gpu_subsets.MAX_GPUS`` GPUs. It was ``choose_gpu_set``
    before the subset tables and the ring: ``benchmarks.gpu_sets`` times it side by side with them and
    evaluates the ring against its choices, and the tests hold the subset tables without the ring to it.
    """
    _check_request(table, free, k)
    if k > len(free):
        return None
    members = [tuple(p for p in group if table.gpus[p] in free) for group in table.groups]
    live = [g for g, group in enumerate(members) if group]
    # Best-connected groups first: the search then meets a strong choice early and prunes more.
    live.sort(
        key=lambda g: (
            -sum(len(members[h]) * table.group_ranks[g][h] for h in live if h != g)
            - (len(members[g]) - 1) * table.group_internal_rank[g]
        )
    )
    search = _GroupSearch(table, live, [len(members[g]) for g in live], numa_preference)
    best, tied = search.best(k)
    fragmentation = None
    finalists = tied
    if len(tied) > 1:
        finalists, fragmentation = search.least_fragmenting(tied)
    # Interchangeable GPUs are equal on every criterion, so each group gives its lowest indices (rule 7).
    chosen = min(
        tuple(sorted(table.gpus[p] for g, count in zip(live, counts, strict=True) for p in members[g][:count]))
        for counts in finalists
    )
    outside, weakest, total, span = best
    return GpuChoice(
        gpus=chosen,
        ring_rank=None,
        score=_set_score(weakest, total, span),
        numa_nodes=tuple(sorted({n for i in chosen if (n := table.numa_nodes[table.gpus.index(i)]) is not None})),
        outside_preference=-outside,
        tied=len(tied),
        fragmentation=fragmentation,
    )


def choose_shared_gpu(left: Mapping[int, int], share: int) -> int | None:
    """The GPU a pod asking ``share`` thousandths of one GPU goes on; None when no GPU has that much left.

    ``left`` holds the thousandths left on each GPU the pod may use (a free GPU has them all). Best fit:
    the GPU with the least left that still fits, so partly used GPUs fill up before a whole one breaks
    (whole-GPU requests need those); then the lowest index.
    """
    fitting = [(amount, index) for index, amount in left.items() if amount >= share]
    return min(fitting)[1] if fitting else None


def _check_request(table: GpuLinkTable, free: frozenset[int], k: int) -> None:
    if k < 0:
        raise ValueError(f"a GPU request cannot be negative (asked for {k})")
    _positions(table, free)  # rejects GPUs the node does not have


def _from_subsets(score: gpu_subsets.Score) -> SetScore:
    return SetScore(score.weakest_rank, score.rank_sum, score.numa_span)


def _set_score(weakest: int, total: int, negative_span: int) -> SetScore:
    return SetScore(None if weakest == _NO_PAIR else weakest, total, -negative_span)


def _positions(table: GpuLinkTable, gpus: Iterable[int]) -> list[int]:
    place = {index: p for p, index in enumerate(table.gpus)}
    unknown = sorted(set(gpus) - place.keys())
    if unknown:
        raise ValueError(f"GPU indices {unknown} are not on this node (its GPUs: {list(table.gpus)})")
    return sorted(place[index] for index in gpus)


class _GroupSearch:
    """Branch and bound over how many GPUs each group of interchangeable free GPUs gives."""

    def __init__(
        self, table: GpuLinkTable, live: Sequence[int], available: Sequence[int], preference: frozenset[int] | None
    ) -> None:
        self.available = list(available)
        self.numa = [table.group_numa[g] for g in live]
        self.internal = [table.group_internal_rank[g] for g in live]
        self.ranks = [[table.group_ranks[g][h] for h in live] for g in live]
        self.inside = [preference is None or (table.group_numa[g] in preference) for g in live]

    def best(self, k: int) -> tuple[_Key, list[_Counts]]:
        """The best key for a k-set of the free GPUs and every count vector reaching it."""
        return _Run(self, self.available, self.inside, keep_ties=True).solve(k)

    def least_fragmenting(self, tied: Sequence[_Counts]) -> tuple[list[_Counts], Fragmentation]:
        """Criterion 6: the tied count vectors that leave the best GPUs free, and what they leave."""
        remaining = sum(self.available) - sum(tied[0])
        sizes = []
        size = 2
        while size <= remaining:
            sizes.append(size)
            size *= 2
        lefts = {counts: [have - used for have, used in zip(self.available, counts, strict=True)] for counts in tied}
        # Future requests bring preferences of their own: every group counts as inside here.
        anywhere = [True] * len(self.available)
        # Candidates that leave the most connectivity free tend to leave the best sets too: trying them
        # first raises the floor early.
        survivors = sorted(tied, key=lambda counts: -self._rank_sum(lefts[counts]))
        best_left: list[tuple[int, SetScore]] = []
        for size in reversed(sizes):
            # No choice leaves better than the best f-sets of all free GPUs, and a choice that misses
            # one of them leaves exactly that: often the question is settled without a search per choice.
            top, top_sets = _Run(self, self.available, anywhere, keep_ties=True).solve(size)
            missing_one = [
                counts
                for counts in survivors
                if any(
                    all(a + b <= have for a, b, have in zip(counts, v, self.available, strict=True)) for v in top_sets
                )
            ]
            if missing_one:
                survivors = missing_one
                best_left.append((size, _set_score(top[1], top[2], top[3])))
                continue
            # Otherwise the best key so far is the floor for the next choice's search: one that cannot
            # reach it is out, and the search proves that with far fewer visits than finding its own best.
            floor: _Key | None = None
            level: list[_Counts] = []
            for counts in survivors:
                key, reached = _Run(self, lefts[counts], anywhere, keep_ties=False).solve(size, floor)
                if floor is None or key > floor:
                    floor, level = key, [counts]
                elif reached:  # equal to the floor
                    level.append(counts)
            assert floor is not None
            survivors = level
            best_left.append((size, _set_score(floor[1], floor[2], floor[3])))
        sums = {counts: self._rank_sum(lefts[counts]) for counts in survivors}
        most = max(sums.values())
        return [counts for counts in survivors if sums[counts] == most], Fragmentation(tuple(best_left), most)

    def _rank_sum(self, left: Sequence[int]) -> int:
        total = 0
        for g, count in enumerate(left):
            total += count * (count - 1) // 2 * self.internal[g]
            for h in range(g + 1, len(left)):
                total += count * left[h] * self.ranks[g][h]
        return total


class _Run:
    """One depth-first search; groups are visited in order, taking as many as possible first.

    The bound at a partial choice: every GPU still to come adds its pairs to the GPUs already
    placed (at most the best ``left`` of the per-group sums kept in ``_attach``, and a weakest
    pair no better than the best per-group minimum in ``_attach_min``) and pairs among
    themselves (at most the best rank between groups not yet visited).
    """

    def __init__(self, search: _GroupSearch, available: list[int], inside: list[bool], *, keep_ties: bool) -> None:
        self._s = search
        self._available = available
        self._inside = inside
        self._keep_ties = keep_ties
        count = len(available)
        self._capacity_from = [0] * (count + 1)
        self._inside_from = [0] * (count + 1)
        self._top_among_from = [0] * (count + 1)  # best rank of a pair within groups g.. (no pair: 0)
        for g in reversed(range(count)):
            own = [search.internal[g]] if available[g] > 1 else []
            later = [search.ranks[g][h] for h in range(g + 1, count) if available[h] > 0] if available[g] else []
            self._capacity_from[g] = self._capacity_from[g + 1] + available[g]
            self._inside_from[g] = self._inside_from[g + 1] + (available[g] if inside[g] else 0)
            self._top_among_from[g] = max([self._top_among_from[g + 1], *own, *later])
        self._counts = [0] * count
        self._taken: list[int] = []  # groups with a positive count, in visiting order
        self._attach = [0] * count  # per group: the rank sum from one of its GPUs to all GPUs placed
        self._attach_min = [_NO_PAIR] * count  # per group: the weakest rank from one of its GPUs to one placed
        self._numa_users: dict[int, int] = {}
        self._best: _Key | None = None
        self._tied: list[_Counts] = []

    def solve(self, k: int, floor: _Key | None = None) -> tuple[_Key, list[_Counts]]:
        """The best key for a k-set and the count vectors reaching it (one unless keeping ties).

        With a ``floor`` only keys at least that good count: the vectors are empty and the floor
        comes back when none reaches it.
        """
        self._best = floor
        self._visit(0, k, 0, (_NO_PAIR, 0, 0, 0))
        assert self._best is not None  # k never exceeds the capacity: callers check
        return self._best, self._tied

    def _bound(self, g: int, left: int, partial: _Partial) -> _Key:
        weakest, total, outside, span = partial
        gains: list[tuple[int, int]] = []
        reachable_weakest = 0
        for h in range(g, len(self._available)):
            if self._available[h]:
                gains.append((self._attach[h], self._available[h]))
                reachable_weakest = max(reachable_weakest, self._attach_min[h])
        gains.sort(reverse=True)
        gain = 0
        still = left
        for value, capacity in gains:
            take = min(capacity, still)
            gain += take * value
            still -= take
            if not still:
                break
        among = self._top_among_from[g]
        bound_weakest = min(weakest, reachable_weakest, among if left > 1 else _NO_PAIR)
        return (
            -(outside + max(0, left - self._inside_from[g])),
            bound_weakest,
            total + gain + left * (left - 1) // 2 * among,
            -span,
        )

    def _visit(self, g: int, left: int, placed: int, partial: _Partial) -> None:
        weakest, total, outside, span = partial
        if left == 0:
            self._record((-outside, weakest, total, -span))
            return
        if self._capacity_from[g] < left:
            return
        if self._best is not None:
            bound = self._bound(g, left, partial)
            # Without ties to collect, a branch that can at best equal a found key is not worth a visit.
            if bound < self._best or (bound == self._best and self._tied and not self._keep_ties):
                return
        s = self._s
        ranks = s.ranks[g]
        for count in range(min(self._available[g], left), 0, -1):
            new_weakest, new_total = weakest, total + count * self._attach[g]
            if placed:
                new_weakest = min(new_weakest, self._attach_min[g])
            if count > 1:
                new_weakest = min(new_weakest, s.internal[g])
                new_total += count * (count - 1) // 2 * s.internal[g]
            numa = s.numa[g]
            if numa is None:
                new_span = span + count
            else:
                new_span = span + (0 if self._numa_users.get(numa, 0) else 1)
                self._numa_users[numa] = self._numa_users.get(numa, 0) + 1
            new_outside = outside + (0 if self._inside[g] else count)
            saved_min = self._attach_min[:]
            for h, rank in enumerate(ranks):
                self._attach[h] += count * rank
                self._attach_min[h] = min(self._attach_min[h], rank)
            self._counts[g] = count
            self._visit(g + 1, left - count, placed + count, (new_weakest, new_total, new_outside, new_span))
            self._counts[g] = 0
            for h, rank in enumerate(ranks):
                self._attach[h] -= count * rank
            self._attach_min = saved_min
            if numa is not None:
                self._numa_users[numa] -= 1
        self._visit(g + 1, left, placed, partial)

    def _record(self, key: _Key) -> None:
        if self._best is None or key > self._best:
            self._best = key
            self._tied = [tuple(self._counts)]
        elif key == self._best and (self._keep_ties or not self._tied):
            self._tied.append(tuple(self._counts))
