"""go-gpuallocator's best-effort policy and pair scores (``placement.core.gpuallocator``).

Three kinds of evidence: upstream's own test cases (``tests/gpuallocator_cases.py``); a line-by-line
transliteration of ``besteffort_policy.go`` below, Go's slice sharing included, that the port must match
answer for answer (the port computes the same answer without enumerating every partition); and the pair
scores of the fake-NVML machines as the agent discovers them.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from kubenexus.topology.model import DeviceLink, Gpu, Machine, NodeTopology, NvLink, NvLinkRemote, PathKind
from placement.core.gpuallocator import PairScores, SearchTooLarge, Slot, best_effort_allocate, pair_scores
from tests.discovered_topologies import nvml_machine_topology
from tests.gpuallocator_cases import BEST_EFFORT_ALLOCATE, MACHINES, SEQUENTIAL_ALLOCATIONS, dgx1_volta
from tests.machines.gpu_hardware import DGX_A100, HGX_H100, PCIE_NVLINK_BRIDGES


class _GoSlice:
    """A Go slice: appending writes into the backing array while it has room, else copies into one of
    twice the capacity, so slices appended to from one parent share their last elements."""

    def __init__(self, array: list[tuple[Slot, ...] | None], length: int) -> None:
        self.array, self.length = array, length

    def append(self, item: tuple[Slot, ...]) -> _GoSlice:
        if self.length < len(self.array):
            self.array[self.length] = item
            return _GoSlice(self.array, self.length + 1)
        capacity = max(1, 2 * len(self.array))
        return _GoSlice([*self.array[: self.length], item, *[None] * (capacity - self.length - 1)], self.length + 1)

    def items(self) -> list[tuple[Slot, ...]]:
        return [item for item in self.array[: self.length] if item is not None]


def go_allocate(scores: PairScores, available: Sequence[int], required: Sequence[int], size: int) -> tuple[Slot, ...]:
    """``bestEffortPolicy.Allocate`` transliterated: every partition, in ``iterateGPUPartitions``' order."""
    if size <= 0 or len(available) < size or len(required) > size or len(required) > len(available):
        return ()
    wanted = set(required)
    best: list[_GoSlice] = []
    best_score = [0]

    def callback(view: _GoSlice) -> None:
        partition = view.items()
        if not any(wanted <= set(s) and None not in s for s in partition):
            return
        score = sum(scores.set_score(s) for s in partition)
        if score > best_score[0] or not best:
            best[:] = [view]  # Go keeps the slice, not a copy
            best_score[0] = score

    if size == 1:
        for gpu in available:
            callback(_GoSlice([(gpu,)], 1))
    else:
        devices: list[Slot] = [*available, *([None] * (-len(available) % size))]
        padding = devices.count(None)

        def iterate(remaining: list[Slot], accum: _GoSlice) -> None:
            if len(remaining) == size:
                callback(accum.append(tuple(remaining)))
                return
            for rest in itertools.combinations(remaining[1:], size - 1):
                gpu_set = (remaining[0], *rest)
                if gpu_set.count(None) not in (0, padding):
                    continue
                # gpuSetContains(set, nil) is true for every padding slot once the set holds one.
                left = [g for g in remaining if not (g in gpu_set if g is not None else None in gpu_set)]
                iterate(left, accum.append(gpu_set))

        iterate(devices, _GoSlice([], 0))
    if not best:
        return ()
    holding = [s for s in best[0].items() if wanted <= set(s)]
    if not holding:
        return ()
    chosen = holding[0]
    for gpu_set in holding[1:]:
        if scores.set_score(gpu_set) > scores.set_score(chosen):
            chosen = gpu_set
    return chosen


def _scores(count: int, score: Callable[[tuple[int, int]], int]) -> PairScores:
    return PairScores.from_pairs({pair: score(pair) for pair in itertools.combinations(range(count), 2)})


# --- upstream's cases ------------------------------------------------------------------------------


@pytest.mark.parametrize(("description", "available", "required", "size", "result"), BEST_EFFORT_ALLOCATE)
def test_upstream_best_effort_allocate(
    description: str, available: list[int], required: list[int], size: int, result: set[int]
) -> None:
    assert set(best_effort_allocate(dgx1_volta(), available, required, size)) == result, description


@pytest.mark.parametrize(("machine", "size", "results"), SEQUENTIAL_ALLOCATIONS)
def test_upstream_allocator_hands_out_sets_in_turn(machine: str, size: int, results: list[set[int]]) -> None:
    scores = MACHINES[machine]()
    remaining = set(range(8 if machine != "rtx8000_4x" else 4))
    for expected in results:
        chosen = best_effort_allocate(scores, sorted(remaining), [], size)
        assert set(chosen) == expected
        remaining -= set(chosen)


# --- against the transliteration -----------------------------------------------------------------------


def test_matches_go_on_random_tables_with_ties_padding_and_required_gpus() -> None:
    rng = random.Random(20250611)
    for _ in range(1500):
        count = rng.randint(2, 10)
        values = rng.sample([0, 10, 20, 30, 40, 50, 110, 220, 1220], rng.randint(1, 3))  # few values: many ties
        scores = PairScores.from_pairs({pair: rng.choice(values) for pair in itertools.combinations(range(count), 2)})
        available = rng.sample(range(count), rng.randint(1, count))  # any order: it breaks ties
        size = rng.randint(1, len(available) + 1)
        required = rng.sample(available, rng.randint(0, min(size, len(available)))) if rng.random() < 0.5 else []
        expected = go_allocate(scores, available, required, size)
        assert best_effort_allocate(scores, available, required, size) == expected, (scores, available, required)


def test_a_partition_of_seven_sets_is_overwritten_as_go_overwrites_it() -> None:
    # Pairs out of 14 GPUs: the only NVLinked pair (12, 13) is in the best partition's last set, but Go's
    # shared slice is overwritten by the branches after it: the answer is the first set, (0, 1).
    scores = _scores(14, lambda pair: 420 if pair == (12, 13) else 10)
    assert go_allocate(scores, range(14), [], 2) == (0, 1)
    assert best_effort_allocate(scores, range(14), [], 2) == (0, 1)
    # With 12 GPUs (6 sets) nothing is shared: the bridged pair wins.
    scores = _scores(12, lambda pair: 420 if pair == (10, 11) else 10)
    assert best_effort_allocate(scores, range(12), [], 2) == (10, 11)


def test_a_padded_set_can_be_the_answer() -> None:
    # Three GPUs out of five: GPUs 3 and 4 share a bridge. The first best partition (480 both ways) is
    # {0, 1, 2} + {3, 4, pad}, and its best set is the padded one: Go returns a nil device in it.
    scores = _scores(5, lambda pair: 420 if pair == (3, 4) else 20)
    assert best_effort_allocate(scores, [0, 1, 2, 3, 4], [], 3) == (3, 4, None)
    assert go_allocate(scores, [0, 1, 2, 3, 4], [], 3) == (3, 4, None)


def test_the_search_stops_at_its_limit() -> None:
    rng = random.Random(1)
    scores = _scores(16, lambda pair: rng.choice([10, 20, 50, 210, 420]))
    with pytest.raises(SearchTooLarge):
        best_effort_allocate(scores, range(16), [], 5, limit=1_000)


def test_interchangeable_gpus_keep_sixteen_gpu_switch_machines_quick() -> None:
    # An HGX-2 as go-gpuallocator sees it (no NVLink through the switches): 22,422,400 partitions
    # for triples, which the search never enumerates.
    scores = _scores(16, lambda pair: 20 if pair[0] // 8 == pair[1] // 8 else 10)
    assert best_effort_allocate(scores, range(16), [], 3, limit=5_000) == (0, 1, 2)


# --- pair scores from the published topology -------------------------------------------------------------


def _topology(
    links: Sequence[DeviceLink], numa: Sequence[int | None], **gpu_nvlinks: tuple[NvLink, ...]
) -> NodeTopology:
    gpus = tuple(
        Gpu(index=i, pci_bus_id=f"0000:{0x10 + i:02x}:00.0", numa_node=node, nvlinks=gpu_nvlinks.get(f"gpu{i}", ()))
        for i, node in enumerate(numa)
    )
    return NodeTopology(
        machine=Machine(None, None, None, None, 1, (0,), ()), numa_cells=(), gpus=gpus, links=tuple(links)
    )


def test_pair_scores_count_up_to_eighteen_nvlinks_over_nvmls_pcie_class() -> None:
    topology = _topology(
        [
            DeviceLink("GPU0", "GPU1", PathKind.NVLINK, 18),
            DeviceLink("GPU0", "GPU2", PathKind.NVLINK, 24),  # NV24 is counted as 18: GetNVLink stops there
            DeviceLink("GPU1", "GPU2", PathKind.NODE, nvml_path=PathKind.SYS),  # NVML's answer, not sysfs'
            DeviceLink("GPU0", "NIC0", PathKind.PIX),
        ],
        [0, 0, 1],
    )
    scores = pair_scores(topology)
    assert (scores.pair(0, 1), scores.pair(0, 2), scores.pair(1, 2)) == (1820, 1810, 10)


def test_nvlinks_that_end_at_a_switch_are_not_seen() -> None:
    switch = (NvLink(0, True, remote_type=NvLinkRemote.SWITCH, remote_bus_id="0000:c0:00.0"),)
    bridge = (NvLink(0, True, remote_type=NvLinkRemote.GPU, remote_bus_id="0000:11:00.0"),) * 4
    topology = _topology(
        [DeviceLink("GPU0", "GPU1", PathKind.NVLINK, 4), DeviceLink("GPU1", "GPU2", PathKind.NVLINK, 12)],
        [0, 0, 0],
        gpu0=bridge,
        gpu1=switch,
    )
    scores = pair_scores(topology)
    # GPU0's records name GPU1's bus id four times; GPU1's end at a switch, so GetNVLink finds none.
    assert (scores.pair(0, 1), scores.pair(1, 2)) == (420, 20)


def test_fake_nvml_machines_score_as_go_gpuallocator_reads_them(tmp_path: Path) -> None:
    dgx = pair_scores(nvml_machine_topology(DGX_A100, tmp_path / "dgx"))
    hgx = pair_scores(nvml_machine_topology(HGX_H100, tmp_path / "hgx"))
    bridges = pair_scores(nvml_machine_topology(PCIE_NVLINK_BRIDGES, tmp_path / "pcie"))
    # DGX A100: NVLinks through NVSwitches are invisible; GPUs 0 and 1 share a PCIe switch (PIX, from the PCI
    # tree since NVML agreed with sysfs), NPS4 puts every other pair on different NUMA nodes (SYS).
    assert (dgx.pair(0, 1), dgx.pair(0, 2), dgx.pair(2, 3)) == (50, 10, 50)
    # HGX H100: the same switch blindness; NODE within a socket, SYS across.
    assert (hgx.pair(0, 3), hgx.pair(3, 4)) == (20, 10)
    # PCIe cards: the bridges' 12 links are found by bus id.
    assert (bridges.pair(0, 2), bridges.pair(4, 5), bridges.pair(0, 1)) == (1220, 1220, 10)


def test_a_topology_without_nvlink_records_counts_the_matrix_links() -> None:
    records = (NvLink(0, True, remote_type=NvLinkRemote.SWITCH, remote_bus_id="switch"),)
    matrix = _topology([DeviceLink("GPU0", "GPU1", PathKind.NVLINK, 12)], [0, 0])
    assert pair_scores(matrix).pair(0, 1) == 1220
    switched = replace(matrix, gpus=tuple(replace(gpu, nvlinks=records) for gpu in matrix.gpus))
    assert pair_scores(switched).pair(0, 1) == 20
