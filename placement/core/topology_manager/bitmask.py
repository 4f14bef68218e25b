"""NUMA id sets with the kubelet's ordering (pkg/kubelet/cm/topologymanager/bitmask/bitmask.go).

The kubelet stores an affinity as a uint64 bitmask; which mask wins a tie is decided by comparing those
integers, so the port keeps the integer instead of a set to reproduce ``IsLessThan`` exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import combinations

MAX_BIT = 63  # bitmask.Add refuses bits outside 0-63


@dataclass(frozen=True, order=False)
class NumaMask:
    """A set of NUMA ids; ``bits`` is the uint64 the kubelet would hold."""

    bits: int = 0

    @classmethod
    def of(cls, *ids: int) -> NumaMask:
        return cls.from_ids(ids)

    @classmethod
    def from_ids(cls, ids: Iterable[int]) -> NumaMask:
        value = 0
        for numa_id in ids:
            if not 0 <= numa_id <= MAX_BIT:
                # Same limit and wording as bitmask.Add: the kubelet cannot represent such a node.
                raise ValueError(f"bit number must be in range 0-{MAX_BIT}, got {numa_id}")
            value |= 1 << numa_id
        return cls(value)

    @property
    def ids(self) -> tuple[int, ...]:
        """``GetBits``: the set ids, ascending."""
        ids: list[int] = []
        rest = self.bits
        while rest:
            low = rest & -rest
            ids.append(low.bit_length() - 1)
            rest ^= low
        return tuple(ids)

    def count(self) -> int:
        return self.bits.bit_count()

    def is_empty(self) -> bool:
        return self.bits == 0

    def is_set(self, numa_id: int) -> bool:
        return 0 <= numa_id <= MAX_BIT and bool(self.bits >> numa_id & 1)

    def any_set(self, ids: Iterable[int]) -> bool:
        return any(self.is_set(i) for i in ids)

    def __and__(self, other: NumaMask) -> NumaMask:
        return NumaMask(self.bits & other.bits)

    def __or__(self, other: NumaMask) -> NumaMask:
        return NumaMask(self.bits | other.bits)

    def is_less_than(self, other: NumaMask) -> bool:
        """``IsLessThan``: plain integer comparison, so {1,2} (0b110) is "less" than {0,3} (0b1001)."""
        return self.bits < other.bits

    def is_narrower_than(self, other: NumaMask) -> bool:
        """``IsNarrowerThan``: fewer NUMA nodes, ties broken by ``IsLessThan``."""
        if self.count() == other.count():
            return self.is_less_than(other)
        return self.count() < other.count()

    def __str__(self) -> str:
        return "{" + ",".join(map(str, self.ids)) + "}"


def iterate_masks(ids: Iterable[int]) -> Iterator[NumaMask]:
    """``IterateBitMasks``: every non-empty subset, by size, in lexicographic order of the ids given."""
    id_list = list(ids)
    for size in range(1, len(id_list) + 1):
        for combo in combinations(id_list, size):
            yield NumaMask.from_ids(combo)
