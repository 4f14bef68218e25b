"""NVIDIA go-gpuallocator's best-effort GPU set policy, ported (``gpuallocator/besteffort_policy.go``).

Every partition of the available GPUs (padded with empty slots to a multiple of the size) into sets of the
requested size is enumerated; the partition with the highest sum of set scores wins (the first one found on
ties), and its highest-scoring set (again the first on ties) is returned. A set scores the sum of its pair
scores; a pair scores its PCIe link from NVML's common ancestor (SYS 10, NODE 20, PHB 30, PXB 40, PIX 50)
plus, when NVLinks join the pair, 100 per link up to twelve. Used by ``benchmarks.gpu_sets`` and by the
simulator's ``gpuallocator`` baseline.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from kubenexus.topology.model import DeviceLink, NodeTopology, PathKind

# go-gpuallocator's pair score for the PCIe part (P2PLink* types) and per NVLink.
_P2P_SCORE = {PathKind.SYS: 10, PathKind.NODE: 20, PathKind.PHB: 30, PathKind.PXB: 40, PathKind.PIX: 50}
_NVLINK_SCORE = 100
_MAX_SCORED_NVLINKS = 12


class OverBudget(Exception):
    """The baseline enumerated more partitions than allowed for one decision."""


Pad = int | None  # a GPU index, or None for a padding slot


class BestEffortBaseline:
    """go-gpuallocator's best-effort policy over one node's pair scores."""

    def __init__(self, topology: NodeTopology, *, true_nvlinks: bool) -> None:
        numa = {gpu.index: gpu.numa_node for gpu in topology.gpus}
        self._pair: dict[tuple[int, int], int] = {}
        for link in topology.links:
            if not (link.a.startswith("GPU") and link.b.startswith("GPU")):
                continue
            a, b = int(link.a[3:]), int(link.b[3:])
            score = _p2p_score(link, numa[a], numa[b])
            if link.path is PathKind.NVLINK and true_nvlinks and link.nvlinks <= _MAX_SCORED_NVLINKS:
                score += _NVLINK_SCORE * link.nvlinks
            self._pair[(a, b)] = self._pair[(b, a)] = score

    def pair_score(self, a: Pad, b: Pad) -> int:
        if a is None or b is None or a == b:
            return 0
        return self._pair.get((a, b), 0)

    def set_score(self, gpus: Sequence[Pad]) -> int:
        return sum(self.pair_score(a, b) for a, b in itertools.combinations(gpus, 2))

    def allocate(self, available: Sequence[int], size: int, budget: int) -> tuple[Pad, ...]:
        """``Allocate(available, required=nil, size)``; raise OverBudget past ``budget`` partitions."""
        if size <= 0 or len(available) < size:
            return ()
        best_partition: list[tuple[Pad, ...]] | None = None
        best_score = 0
        for seen, candidate in enumerate(_partitions(list(available), size)):
            if seen >= budget:
                raise OverBudget
            # gpuPartitionContainsSetWithAll with no required GPUs: some set without padding.
            if not any(None not in gpu_set for gpu_set in candidate):
                continue
            score = sum(self.set_score(gpu_set) for gpu_set in candidate)
            if score > best_score or best_partition is None:
                best_partition, best_score = candidate, score
        assert best_partition is not None
        # With no required GPUs every set of the partition passes the filter, padded ones included.
        best_set = best_partition[0]
        best_set_score = self.set_score(best_set)
        for gpu_set in best_partition[1:]:
            score = self.set_score(gpu_set)
            if score > best_set_score:
                best_set, best_set_score = gpu_set, score
        return best_set


def _p2p_score(link: DeviceLink, numa_a: int | None, numa_b: int | None) -> int:
    if link.path is PathKind.NVLINK:
        pcie = link.nvml_path or (PathKind.NODE if numa_a is not None and numa_a == numa_b else PathKind.SYS)
    else:
        pcie = link.path
    return _P2P_SCORE.get(pcie, 0)


def _partitions(devices: list[int], size: int) -> Iterator[list[tuple[Pad, ...]]]:
    """``iterateGPUPartitions``: the same partitions in the same order."""
    if size == 1:
        for device in devices:
            yield [(device,)]
        return
    padded: list[Pad] = [*devices, *([None] * (-len(devices) % size))]
    padding = padded.count(None)

    def iterate(remaining: list[Pad], accum: list[tuple[Pad, ...]]) -> Iterator[list[tuple[Pad, ...]]]:
        if len(remaining) == size:
            yield [*accum, tuple(remaining)]
            return
        # itertools.combinations visits sets in the order of iterateGPUSets' unrolled loops.
        for rest in itertools.combinations(remaining[1:], size - 1):
            gpu_set = (remaining[0], *rest)
            if gpu_set.count(None) not in (0, padding):
                continue
            left = list(remaining[1:])
            for gpu in rest:
                left.remove(gpu)  # removes a None slot for a None: padding slots are interchangeable
            yield from iterate(left, [*accum, gpu_set])

    yield from iterate(padded, [])
