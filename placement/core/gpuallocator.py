"""NVIDIA go-gpuallocator (v0.6.0, the version NVIDIA's k8s-device-plugin vendors), ported: how it scores
GPU pairs from NVML and which set its best-effort policy returns.

**Pair scores** (``gpuallocator/device.go`` ``NewDevices``, ``internal/links/device.go`` ``GetP2PLink`` and
``GetNVLink``, ``gpuallocator/besteffort_policy.go`` ``calculateGPUPairScore``): a pair scores its PCIe
link, from NVML's common ancestor (``P2PLinkCrossCPU`` SYS 10, ``SameCPU`` NODE 20, ``HostBridge`` PHB 30,
``MultiSwitch`` PXB 40, ``SingleSwitch`` PIX 50), plus 100 per NVLink, counted up to 18 (``GetNVLink``
stops at ``EighteenNVLINKLinks``). ``GetNVLink`` counts the first GPU's active links whose remote PCI bus
id is the second GPU's, so through NVSwitches, where the remote end is the switch, it finds none
(``kubenexus.topology.nvlink``). ``pair_scores`` reads that from the published topology:

* the PCIe class is NVML's answer where the agent kept it (``DeviceLink.nvml_path``), else the sysfs class
  of a PCIe pair (the agent keeps NVML's only where the two disagree). Under an NVLink pair the model keeps
  no PCIe class, so it is classified again from the PCI devices when the topology has them, else taken as
  NODE for two GPUs on one NUMA node and SYS otherwise (GPUs on separate host bridges);
* the NVLink count is ``GetNVLink``'s own, from the lower GPU's NVLink records, where the topology has
  them (the agent's NVML source); a topology without them (an imported ``nvidia-smi topo -m``, the trace's
  machines) gives the matrix's ``NV<n>``, which on NVSwitch machines is more than go-gpuallocator sees.

NVML's ``TOPOLOGY_INTERNAL`` (two GPUs on one board, ``P2PLinkSameBoard`` 60) has no class in the model:
such a pair scores as PIX here.

**The best-effort policy** (``besteffort_policy.go`` ``Allocate``): every partition of the available
GPUs (padded with empty slots to a multiple of ``size``) into sets of ``size`` is enumerated in
``iterateGPUPartitions``' order (each set holds the first GPU left, the rest in ``iterateGPUSets``'
lexicographic order; a set holds no padding or all of it); among the partitions with a set that holds
every required GPU and no padding, the highest sum of set scores wins, the first one found on ties. Its
set with the highest score among those holding the required GPUs is returned, again the first on ties.
The order of ``available`` therefore breaks ties, and the caller chooses it.

Two Go behaviours are kept:

* ``size == 1`` is special-cased upstream: each GPU is a "partition" of one set, every one scores 0, so
  the first available GPU that holds the required ones wins;
* the partition under construction is a Go slice grown with ``append`` and shared by sibling branches
  whenever it has spare capacity (capacity 1, 2, 4, 8, ...), so the recorded best partition is
  overwritten by the branches enumerated after it, from the last reallocation on. For partitions of at
  most 6 sets this changes nothing; from 7 sets on (pairs out of 14 GPUs) the returned set may come
  from a partition that was never scored as such. ``_as_go_leaves_it`` reproduces that.

Upstream enumerates every partition (2,027,025 for pairs out of 16 GPUs, 22,422,400 for triples);
here the best score is computed over interchangeable GPUs first and the first partition reaching it is
then found in Go's order (``_Partitions``): the same answer. Machines without interchangeable GPUs can
still take long (16 GPUs with every pair different); past ``limit`` steps ``SearchTooLarge`` says the
answer was not computed.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from kubenexus.topology.model import NodeTopology, PathKind
from kubenexus.topology.nvlink import naive_remote_bus_matching
from kubenexus.topology.paths import classify_pci_path

# P2PLinkCrossCPU .. P2PLinkSingleSwitch, from NVML's common ancestor.
_P2P_SCORE = {PathKind.SYS: 10, PathKind.NODE: 20, PathKind.PHB: 30, PathKind.PXB: 40, PathKind.PIX: 50}
_NVLINK_SCORE = 100
_MAX_NVLINKS = 18

# About 0.1 s of search on a 2-core development machine; every machine of 8 GPUs or fewer, and 16 GPUs in
# interchangeable groups (NVSwitch baseboards), stays far below it.
SEARCH_LIMIT = 50_000

Slot = int | None  # a GPU index, or an empty (padding) slot


class SearchTooLarge(Exception):
    """The best-effort answer was not computed within the search limit."""


@dataclass(frozen=True)
class PairScores:
    """``calculateGPUPairScore`` for every GPU pair of one node; a pair not listed scores 0."""

    listed: tuple[tuple[int, int, int], ...]  # (lower index, higher index, score), ascending

    @classmethod
    def from_pairs(cls, scores: Mapping[tuple[int, int], int]) -> PairScores:
        return cls(tuple(sorted((min(a, b), max(a, b), score) for (a, b), score in scores.items())))

    @cached_property
    def _by_pair(self) -> dict[tuple[int, int], int]:
        return {(a, b): score for a, b, score in self.listed}

    def pair(self, a: Slot, b: Slot) -> int:
        if a is None or b is None or a == b:
            return 0
        return self._by_pair.get((min(a, b), max(a, b)), 0)

    def set_score(self, gpus: Sequence[Slot]) -> int:
        """``calculateGPUSetScore``: the sum over the set's pairs (padding adds nothing)."""
        return sum(self.pair(a, b) for a, b in itertools.combinations(gpus, 2))


def pair_scores(topology: NodeTopology) -> PairScores:
    """The pair scores go-gpuallocator computes from NVML on this node (see the module docstring)."""
    gpus = {gpu.index: gpu for gpu in topology.gpus}
    position = {f"GPU{index}": index for index in gpus}
    pci = {device.bus_id: device for device in topology.pci_devices}
    seen = naive_remote_bus_matching([gpu for gpu in topology.gpus if gpu.nvlinks])
    scores: dict[tuple[int, int], int] = {}
    for link in topology.links:
        first, second = position.get(link.a), position.get(link.b)
        if first is None or second is None or first == second:
            continue
        low, high = min(first, second), max(first, second)
        if link.nvml_path is not None:
            pcie = link.nvml_path
        elif link.path is not PathKind.NVLINK:
            pcie = link.path
        elif gpus[low].pci_bus_id in pci and gpus[high].pci_bus_id in pci:
            pcie = classify_pci_path(pci[gpus[low].pci_bus_id], pci[gpus[high].pci_bus_id], pci)
        else:
            same_node = gpus[low].numa_node is not None and gpus[low].numa_node == gpus[high].numa_node
            pcie = PathKind.NODE if same_node else PathKind.SYS
        nvlinks = seen.get((low, high), 0) if gpus[low].nvlinks else link.nvlinks
        scores[(low, high)] = _P2P_SCORE[pcie] + _NVLINK_SCORE * min(nvlinks, _MAX_NVLINKS)
    return PairScores.from_pairs(scores)


def best_effort_allocate(
    scores: PairScores,
    available: Sequence[int],
    required: Sequence[int],
    size: int,
    *,
    limit: int = SEARCH_LIMIT,
) -> tuple[Slot, ...]:
    """``bestEffortPolicy.Allocate(available, required, size)``: the GPUs in the order Go returns them,
    () where it returns an empty list. A ``None`` in the answer is a padding slot, which Go hands back as
    a nil device (the caller decides what that means). Raises ``SearchTooLarge`` past ``limit`` steps."""
    if size <= 0 or len(available) < size or len(required) > size or len(required) > len(available):
        return ()
    wanted = frozenset(required)
    if size == 1:
        return next(((gpu,) for gpu in available if wanted <= {gpu}), ())
    if not wanted <= set(available):
        return ()  # no set can hold a required GPU that is not available: no partition qualifies
    best = _Partitions(scores, available, wanted, size, limit).first_best()
    if best is None:
        return ()
    holding = [gpu_set for gpu_set in best if wanted <= set(gpu_set)]
    chosen = holding[0]
    for gpu_set in holding[1:]:
        if scores.set_score(gpu_set) > scores.set_score(chosen):
            chosen = gpu_set
    return chosen


Partition = list[tuple[Slot, ...]]
_Counts = tuple[int, ...]


class _Partitions:
    """The partition ``Allocate`` settles on, without enumerating them all.

    Go keeps the first partition, in enumeration order, whose score no later one beats: the first with
    the highest score among those that qualify. The highest score over the partitions of any remaining
    slots is computed once per multiset of GPUs: GPUs with the same pair score to every other GPU (and
    the same "required" standing; padding slots form a group of their own) are interchangeable, so a
    state is a count per group (``_best``, memoised). The first best partition then follows in Go's
    order: at each level the first set, in ``iterateGPUSets`` order, from which the rest can still reach
    the best score. A partition qualifies when the required GPUs sit in one set without padding, so a
    set takes all of them or none, and none together with padding.
    """

    def __init__(
        self, scores: PairScores, available: Sequence[int], required: frozenset[int], size: int, limit: int
    ) -> None:
        self.scores, self.size, self.steps = scores, size, limit
        self.padded: list[Slot] = [*available, *([None] * (-len(available) % size))]
        self.padding = self.padded.count(None)
        self.required = required
        groups: list[list[Slot]] = []
        for slot in self.padded:
            group = next((members for members in groups if self._twins(members[0], slot)), None)
            if group is None:
                groups.append([slot])
            else:
                group.append(slot)
        self.members = groups
        self.group_of = {slot: g for g, members in enumerate(groups) for slot in members}
        self.sizes = tuple(len(members) for members in groups)
        firsts = [members[0] for members in groups]
        self.internal = [scores.pair(members[0], members[1]) if len(members) > 1 else 0 for members in groups]
        self.cross = [[scores.pair(a, b) for b in firsts] for a in firsts]
        self.pad_group = self.group_of.get(None, -1)
        self.required_groups = [g for g, first in enumerate(firsts) if first in required]
        self.memo: dict[_Counts, int | None] = {}

    def _twins(self, a: Slot, b: Slot) -> bool:
        if (a is None) != (b is None) or (a in self.required) != (b in self.required):
            return False
        return a is None or all(
            self.scores.pair(a, other) == self.scores.pair(b, other) for other in self.padded if other not in (a, b)
        )

    def first_best(self) -> Partition | None:
        remaining = self.padded
        target = self._best(self._counts(remaining))
        if target is None:
            return None
        sets: Partition = []
        while len(remaining) > self.size:
            for picked in self._sets_formed(remaining):
                gpu_set = tuple(remaining[i] for i in picked)
                if not self._holds_required_rightly(gpu_set, remaining):
                    continue
                # Go drops every slot the set "contains", all padding at once when it holds one: with no
                # padding or all of it in the set, that is dropping the picked positions.
                left = [slot for i, slot in enumerate(remaining) if i not in picked]
                after = self._best(self._counts(left))
                gained = self.scores.set_score(gpu_set)
                if after is not None and gained + after == target:
                    break
            else:
                raise AssertionError("the best score has no partition")  # _best is exact
            sets.append(gpu_set)
            target -= gained
            remaining = left
        sets.append(tuple(remaining))
        return _as_go_leaves_it(sets, self.padded, self.size)

    def _sets_formed(self, remaining: Sequence[Slot]) -> Iterator[tuple[int, ...]]:
        """Positions of the sets ``iterateGPUPartitions`` forms at this level, in its order: the first slot
        and ``size - 1`` of the rest in ``iterateGPUSets``' lexicographic order, keeping only sets with no
        padding or all of it (generated directly: the sets it skips can be most of them)."""
        real = [i for i in range(1, len(remaining)) if remaining[i] is not None]
        pads = tuple(i for i in range(1, len(remaining)) if remaining[i] is None)
        streams: list[Iterator[tuple[int, ...]]] = [itertools.combinations(real, self.size - 1)]
        if pads:
            with_padding = itertools.combinations(real, self.size - 1 - len(pads))
            streams.append((*combo, *pads) for combo in with_padding)
        # Padding slots sit after every GPU, so both streams are in lexicographic order: merging them
        # gives Go's order.
        for rest in heapq.merge(*streams):
            yield (0, *rest)

    def _holds_required_rightly(self, gpu_set: tuple[Slot, ...], remaining: Sequence[Slot]) -> bool:
        """A set with some required GPU must hold all those left and no padding, or the partition cannot
        qualify."""
        taken = self.required.intersection(gpu_set)
        return not taken or (taken == self.required.intersection(remaining) and None not in gpu_set)

    def _counts(self, slots: Sequence[Slot]) -> _Counts:
        counts = [0] * len(self.sizes)
        for slot in slots:
            counts[self.group_of[slot]] += 1
        return tuple(counts)

    def _best(self, counts: _Counts) -> int | None:
        """The highest score of a qualifying partition of these slots; None when none qualifies."""
        if counts in self.memo:
            return self.memo[counts]
        if not any(counts):
            return 0
        if sum(counts) == self.size:  # one set left: it takes everything
            return self.scores.set_score(self._slots(counts)) if self._takes_allowed(counts, counts) else None
        groups = len(counts)
        anchor = next(g for g in range(groups) if counts[g])  # one set holds a GPU of the first group
        taken = [0] * groups
        attach = [0] * groups  # per group: the pair scores from one of its GPUs to the set so far
        best: int | None = None

        def extend(g: int, left: int, score: int) -> None:
            nonlocal best
            self.steps -= 1
            if self.steps < 0:
                raise SearchTooLarge
            if left == 0:
                if self._takes_allowed(taken, counts):
                    rest = self._best(tuple(have - used for have, used in zip(counts, taken, strict=True)))
                    if rest is not None and (best is None or score + rest > best):
                        best = score + rest
                return
            if g == groups:
                return
            row = self.cross[g]
            for count in range(min(counts[g], left), 0, -1):
                taken[g] = count
                for h in range(g + 1, groups):
                    attach[h] += count * row[h]
                extend(g + 1, left - count, score + count * (count - 1) // 2 * self.internal[g] + count * attach[g])
                for h in range(g + 1, groups):
                    attach[h] -= count * row[h]
            taken[g] = 0
            if g != anchor:
                extend(g + 1, left, score)

        extend(anchor, self.size, 0)
        self.memo[counts] = best
        return best

    def _slots(self, counts: _Counts) -> list[Slot]:
        """Slots with these counts per group (any members: they are interchangeable)."""
        return [slot for g, count in enumerate(counts) for slot in self.members[g][:count]]

    def _takes_allowed(self, taken: Sequence[int], counts: _Counts) -> bool:
        padding = taken[self.pad_group] if self.pad_group >= 0 else 0
        if padding not in (0, counts[self.pad_group] if self.pad_group >= 0 else 0):
            return False
        required = sum(taken[g] for g in self.required_groups)
        return not required or (required == sum(counts[g] for g in self.required_groups) and not padding)


def _as_go_leaves_it(best: Partition, padded: list[Slot], size: int) -> Partition:
    """The best partition as Go's shared slice holds it once the enumeration is over.

    ``append`` on the partition in progress reallocates only when it is full (capacities 0, 1, 2, 4,
    8, ...: a new backing array at lengths 1, 2, 3, 5, 9, 17, ...). The array the best partition lives
    in was allocated at the last such length ``a`` not beyond its set count; every branch below that
    point writes sets ``a``, ``a + 1``, ... into the same array, the last branch enumerated last. That
    branch takes, at each level, the first slot left and the last ``size - 1`` ones.
    """
    fresh = capacity = 0
    while capacity < len(best):  # appending at length ``capacity`` reallocates: a new array of that length + 1
        fresh, capacity = capacity + 1, max(1, 2 * capacity)
    kept = best[:fresh]
    used = {slot for gpu_set in kept for slot in gpu_set}
    left = [slot for slot in padded if slot not in used]
    tail: Partition = []
    while len(left) > size:
        tail.append((left[0], *left[len(left) - size + 1 :]))
        left = left[1 : len(left) - size + 1]
    if left:
        tail.append(tuple(left))
    return [*kept, *tail]
