"""GPU set choice within a node: ours against NVIDIA go-gpuallocator's best-effort policy, against our
previous implementation, and our ring criterion against the weakest-pair rule it replaced.

    python -m benchmarks.gpu_sets [--seeds 20] [--steps 40] [--budget 50000] [--stress 50] [--irregular 3]
                                  [--only choice|stress|criteria]

For each machine, the same random request sequence (sizes 1, 2, 4, 8, 16 as they fit, with random
releases of earlier allocations) drives each policy on its own copy of the node, so a policy's
earlier choices shape what it has left later. Per request size it prints the mean set score of
``placement.core.gpu_sets`` (weakest pair rank, rank sum, NUMA span) for ours and the baseline, the
share of decisions where ours is at least as good and strictly better by our ordering (ring first), and
at least as good by go-gpuallocator's own pair-score sum ("fixed" reading), and median/p99 decision
time (best of three runs each) of ours, of the previous implementation (``choose_gpu_set_by_groups``,
the group search, asked on the same free GPUs) and of the baseline, next to the targets (<= 1 ms at 8
GPUs, <= 10 ms at 16); the header gives the one-time build of the machine's subset tables.

"stress" times ours, the subset tables without the ring (the previous criterion: their choices are
checked equal to the group search's) and the previous implementation on random 16-GPU link tables with
no interchangeable GPUs (the worst case for the group search; no real machine looks like that), for
every k, and counts the tables where the ring changed the choice.

"criteria" runs the request/release sequences on every machine above, DGX-1's partial NVLink mesh and
``--irregular`` random 16-GPU tables with both criteria, and counts the decisions where each one's set
has the worse ring bottleneck, weakest pair or NUMA span: each on its own copy of the node, both on the
weakest-pair copy's free GPUs, and on machines of up to 8 GPUs both on every free set.

The baseline is ``placement.core.gpuallocator``, a port of go-gpuallocator v0.6.0's best-effort policy
(``gpuallocator/besteffort_policy.go``, what NVIDIA's device plugin answers GetPreferredAllocation with):
the first partition of the available GPUs (padded with empty slots to a multiple of the size) into sets
of the requested size with the highest sum of set scores, and its highest-scoring set (the first one on
ties, both times, in Go's enumeration order). A set scores the sum of its pair scores; a pair scores
its PCIe link from NVML's common ancestor (SYS 10, NODE 20, PHB 30, PXB 40, PIX 50) plus 100 per NVLink,
up to eighteen. For a single GPU every partition scores 0, so it returns the lowest free index. Two link
readings:

- "published": NVLink counts as its ``GetNVLink`` finds them, by matching each link's remote PCI bus
  id against the peer GPU. Through NVSwitches the remote end is the switch, so it finds none on
  the DGX A100 / HGX H100 / HGX-2 machines; direct bridges are found exactly.
- "fixed": the true counts (nvidia-smi's NV<n>), as if that lookup were corrected.

The machines' PCIe class under an NVLink pair is not in a ``topo -m`` capture; it is taken as NODE
for two GPUs on one NUMA node and SYS otherwise (what NVML answers for GPUs on separate host
bridges). The port computes the best score over interchangeable GPUs instead of enumerating every
partition (16 free GPUs in pairs: 2,027,025 of them), but some requests on machines without them still
take long: a baseline decision past ``--budget`` search steps is not finished: it is counted as "over
budget", left out of the comparison, and that copy of the node takes our choice so that the sequence
goes on. A best set holding a padding slot (the Go plugin would panic on it) is completed with the
lowest free GPUs so that the sequence goes on.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TypeVar

from kubenexus.topology.model import DeviceLink, Gpu, Machine, NodeTopology, NvLink, NvLinkRemote, PathKind
from kubenexus.topology.topo_matrix import parse_topo_matrix
from placement.core import gpu_subsets
from placement.core.gpu_sets import (
    GpuLinkTable,
    SetScore,
    build_gpu_link_table,
    choose_gpu_set,
    choose_gpu_set_by_groups,
    score_gpu_set,
)
from placement.core.gpuallocator import SEARCH_LIMIT, PairScores, SearchTooLarge, best_effort_allocate, pair_scores

REPO = Path(__file__).resolve().parent.parent
GPU_DIR = Path(os.environ.get("KUBENEXUS_SHARED_DATA", REPO.parent / "shared" / "data")) / "gpu"
TARGET_MS = {8: 1.0, 16: 10.0}
REQUEST_SIZES = (1, 2, 4, 8, 16)
EVERY_FREE_SET_GPUS = 8  # the criterion evaluation asks both criteria on every free set of machines this small
RELEASE_CHANCE = 0.35
# Best of three runs per decision: filters out scheduler noise on a shared machine, where a
# 0.1 ms decision otherwise shows up at 3 ms now and then (the baseline's trivial ones as well).
TIMING_RUNS = 3
_Result = TypeVar("_Result")


@dataclass(frozen=True)
class BenchMachine:
    name: str
    topology: NodeTopology
    switched: bool  # NVLinks end at NVSwitches: remote-bus-id matching finds none


# --- the machines ---------------------------------------------------------------------------------


def machines() -> list[BenchMachine]:
    found: list[BenchMachine] = []
    captures = (
        (
            "p4d.24xlarge: DGX A100-style, NV12 via NVSwitch",
            "aws_p4d.24xlarge_8xA100__gnosia93-training-on-eks.txt",
            True,
        ),
        ("p5.48xlarge: HGX H100, NV18 via NVSwitch", "aws_p5.48xlarge_8xH100__gnosia93-training-on-eks.txt", True),
        ("8x PCIe, NV12 bridge pairs", "pcie_8gpu_nvlink_bridge_pairs_NV12__k8s-device-plugin-issue546.txt", False),
        ("g6e.12xlarge: 4x L40S PCIe", "aws_g6e.12xlarge_4xL40S__gnosia93-training-on-eks.txt", False),
    )
    for name, file_name, switched in captures:
        path = GPU_DIR / file_name
        if path.exists():
            found.append(BenchMachine(name, parse_topo_matrix(path.read_text()), switched))
        else:
            print(f"skipping {name}: {path} not found (set KUBENEXUS_SHARED_DATA)")
    found.append(BenchMachine("16-GPU HGX-2 style: NV6 via NVSwitch, 2 sockets", _hgx2(), True))
    found.append(BenchMachine("16-GPU 2-socket PCIe tree, NV12 bridge pairs", _pcie_tree_16(), False))
    return found


def _synthetic(count: int, numa_of: Callable[[int], int], link_of: Callable[[int, int], DeviceLink]) -> NodeTopology:
    gpus = tuple(Gpu(index=i, pci_bus_id=f"synthetic:GPU{i}", numa_node=numa_of(i)) for i in range(count))
    links = tuple(link_of(a, b) for a in range(count) for b in range(a + 1, count))
    machine = Machine(None, None, 2, None, 1, (0,), ())
    return NodeTopology(machine=machine, numa_cells=(), gpus=gpus, links=links, gpu_source="synthetic")


def _hgx2() -> NodeTopology:
    # DGX-2 / HGX-2: 16 V100 on two baseboards joined by 12 NVSwitches, 6 NVLinks per GPU, so
    # nvidia-smi shows NV6 for every pair; GPUs 0-7 on socket 0, 8-15 on socket 1.
    return _synthetic(16, lambda i: i // 8, lambda a, b: DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.NVLINK, 6))


def _pcie_tree_16() -> NodeTopology:
    # Two sockets, two host bridges each, a cascaded PCIe switch under each host bridge with two leaf
    # switches of two GPUs: same leaf PIX, same host bridge PXB, same socket NODE, else SYS; every
    # leaf pair also joined by an NVLink bridge (NV12, as on A100 PCIe cards).
    def link(a: int, b: int) -> DeviceLink:
        if a // 2 == b // 2:
            return DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.NVLINK, 12)
        path = PathKind.PXB if a // 4 == b // 4 else PathKind.NODE if a // 8 == b // 8 else PathKind.SYS
        return DeviceLink(f"GPU{a}", f"GPU{b}", path)

    return _synthetic(16, lambda i: i // 8, link)


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Decision:
    ring: int  # criterion 2: the weakest hop of the set's best ring (NO_PAIR_RANK below two GPUs)
    score: SetScore
    allocator_score: int  # go-gpuallocator's own set score of the chosen set ("fixed" reading)
    ms: float
    previous_ms: float | None = None  # ours only: the group search (the previous implementation), same free GPUs


@dataclass
class Tally:
    tables_ms: float  # building the subset tables, once per link table, before the first decision
    ours: dict[int, list[Decision]] = field(default_factory=dict)
    baseline: dict[str, dict[int, list[Decision | None]]] = field(default_factory=dict)


def _key(decision: Decision) -> tuple[int, int, int, int]:
    """Criteria 2-5 of ``placement.core.gpu_sets``, larger is better."""
    score = decision.score
    weakest = score.weakest_rank if score.weakest_rank is not None else gpu_subsets.NO_PAIR_RANK
    return (decision.ring, weakest, score.rank_sum, -score.numa_span)


def _ring(table: GpuLinkTable, gpus: Sequence[int]) -> int:
    assert table.subsets is not None  # every benchmark machine has at most 16 GPUs
    return int(table.subsets.rings[sum(1 << table.gpus.index(index) for index in gpus)])


def run_machine(machine: BenchMachine, seeds: int, steps: int, budget: int) -> Tally:
    table = build_gpu_link_table(machine.topology)
    published = _behind_switches(machine.topology) if machine.switched else machine.topology
    baselines = {"published": pair_scores(published), "fixed": pair_scores(machine.topology)}
    judge = baselines["fixed"]
    start = time.perf_counter()
    _ = table.subsets
    tally = Tally((time.perf_counter() - start) * 1000, baseline={mode: {} for mode in baselines})
    sizes = [k for k in REQUEST_SIZES if k <= len(table.gpus)]
    for seed in range(seeds):
        rng = random.Random(seed)
        ours_state: list[tuple[int, ...]] = []
        base_states: dict[str, list[tuple[int, ...]]] = {mode: [] for mode in baselines}
        for _ in range(steps):
            if ours_state and rng.random() < RELEASE_CHANCE:
                _release(rng.randrange(len(ours_state)), ours_state, base_states)
                continue
            k = rng.choice(sizes)
            while sum(map(len, ours_state)) + k > len(table.gpus):
                _release(rng.randrange(len(ours_state)), ours_state, base_states)
            ours = _decide_ours(table, judge, ours_state, k)
            tally.ours.setdefault(k, []).append(ours[0])
            for mode, baseline in baselines.items():
                decision = _decide_baseline(
                    table, baseline, base_states[mode], k, judge=judge, budget=budget, ours=ours[1]
                )
                tally.baseline[mode].setdefault(k, []).append(decision)
    return tally


def _behind_switches(topology: NodeTopology) -> NodeTopology:
    """The topology as NVML shows it on an NVSwitch machine: every GPU's NVLinks end at a switch, so
    go-gpuallocator's remote-bus-id matching finds none (a ``topo -m`` capture has no such records)."""
    switch_link = NvLink(link=0, active=True, remote_type=NvLinkRemote.SWITCH, remote_bus_id="nvswitch")
    return replace(topology, gpus=tuple(replace(gpu, nvlinks=(switch_link,)) for gpu in topology.gpus))


def _release(position: int, ours: list[tuple[int, ...]], bases: dict[str, list[tuple[int, ...]]]) -> None:
    ours.pop(position)
    for state in bases.values():
        state.pop(position)


def _free(table: GpuLinkTable, state: list[tuple[int, ...]]) -> frozenset[int]:
    return frozenset(table.gpus) - {gpu for gpus in state for gpu in gpus}


def _decide_ours(
    table: GpuLinkTable, judge: PairScores, state: list[tuple[int, ...]], k: int
) -> tuple[Decision, tuple[int, ...]]:
    free = _free(table, state)
    choice, ms = _timed(lambda: choose_gpu_set(table, free, k))
    _, previous_ms = _timed(lambda: choose_gpu_set_by_groups(table, free, k))
    assert choice is not None
    state.append(choice.gpus)
    return Decision(_ring(table, choice.gpus), choice.score, judge.set_score(choice.gpus), ms, previous_ms), choice.gpus


def _decide_baseline(
    table: GpuLinkTable,
    baseline: PairScores,
    state: list[tuple[int, ...]],
    k: int,
    *,
    judge: PairScores,
    budget: int,
    ours: tuple[int, ...],
) -> Decision | None:
    free = sorted(_free(table, state))
    try:
        chosen, ms = _timed(lambda: best_effort_allocate(baseline, free, (), k, limit=budget))
    except SearchTooLarge:
        fallback = ours if set(ours) <= set(free) else tuple(free[:k])
        state.append(fallback)
        return None
    gpus = tuple(gpu for gpu in chosen if gpu is not None)
    if len(gpus) < k:  # a padded set: the Go Allocator would panic on it; keep the sequence going
        gpus = (*gpus, *[gpu for gpu in free if gpu not in gpus][: k - len(gpus)])
    state.append(gpus)
    return Decision(_ring(table, gpus), score_gpu_set(table, gpus), judge.set_score(gpus), ms)


def _timed(decide: Callable[[], _Result]) -> tuple[_Result, float]:
    """The decision and its best time in ms over ``TIMING_RUNS`` runs (decisions are pure)."""
    best = float("inf")
    for _ in range(TIMING_RUNS):
        start = time.perf_counter()
        result = decide()
        best = min(best, (time.perf_counter() - start) * 1000)
    return result, best


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def report(machine: BenchMachine, tally: Tally) -> None:
    count = len(machine.topology.gpus)
    target = TARGET_MS.get(8 if count <= 8 else 16, 10.0)
    print(
        f"\n{machine.name} ({count} GPUs; target <= {target:g} ms per decision; "
        f"subset tables built once in {tally.tables_ms:.1f} ms)"
    )
    header = (
        f"{'k':>3} {'n':>5} {'ours weakest/sum/span':>22} {'baseline':>10} {'base weakest/sum/span':>22} "
        f"{'ours>=base':>10} {'ours>base':>9} {'by its score':>12} {'ours p50/p99 ms':>16} {'prev. p50/p99 ms':>16} "
        f"{'base p50/p99 ms':>16} {'over budget':>11}"
    )
    print(header)
    for k in sorted(tally.ours):
        ours = tally.ours[k]
        ours_ms = [d.ms for d in ours]
        for mode, by_size in tally.baseline.items():
            pairs = [(o, b) for o, b in zip(ours, by_size[k], strict=True) if b is not None]
            # Means over the decisions both answered, so that over-budget ones do not skew the comparison.
            ours_text = _means([o for o, _ in pairs] or ours)
            skipped = len(ours) - len(pairs)
            base = [b for _, b in pairs]
            if base:
                at_least = sum(1 for o, b in pairs if _key(o) >= _key(b)) / len(pairs)
                better = sum(1 for o, b in pairs if _key(o) > _key(b)) / len(pairs)
                better_its = sum(1 for o, b in pairs if o.allocator_score >= b.allocator_score) / len(pairs)
                base_text = _means(base)
                base_ms = f"{_percentile([b.ms for b in base], 0.5):.3f}/{_percentile([b.ms for b in base], 0.99):.3f}"
                shares = f"{at_least:>10.0%} {better:>9.0%} {better_its:>12.0%}"
            else:
                base_text, base_ms, shares = "-", "-", f"{'-':>10} {'-':>9} {'-':>12}"
            ours_time = f"{_percentile(ours_ms, 0.5):.3f}/{_percentile(ours_ms, 0.99):.3f}"
            previous_ms = [d.previous_ms for d in ours if d.previous_ms is not None]
            previous_time = f"{_percentile(previous_ms, 0.5):.3f}/{_percentile(previous_ms, 0.99):.3f}"
            print(
                f"{k:>3} {len(ours):>5} {ours_text:>22} {mode:>10} {base_text:>22} {shares} "
                f"{ours_time:>16} {previous_time:>16} {base_ms:>16} {skipped:>11}"
            )


def _means(decisions: Sequence[Decision]) -> str:
    weakest = [d.score.weakest_rank for d in decisions if d.score.weakest_rank is not None]
    weakest_text = f"{statistics.mean(weakest):.2f}" if weakest else "-"
    rank_sum = statistics.mean(d.score.rank_sum for d in decisions)
    span = statistics.mean(d.score.numa_span for d in decisions)
    return f"{weakest_text}/{rank_sum:.1f}/{span:.2f}"


def _random_16(rng: random.Random) -> NodeTopology:
    classes = [(PathKind.SYS, 0), (PathKind.NODE, 0), (PathKind.PIX, 0), (PathKind.NVLINK, 2), (PathKind.NVLINK, 4)]
    numa = [rng.choice((0, 1)) for _ in range(16)]
    pairs = {(a, b): rng.choice(classes) for a in range(16) for b in range(a + 1, 16)}
    return _synthetic(16, numa.__getitem__, lambda a, b: DeviceLink(f"GPU{a}", f"GPU{b}", *pairs[(a, b)]))


def stress(samples: int) -> None:
    """Decision time where symmetry cannot help: 16 GPUs, every pair a random class, random NUMA, all free.

    Ours (``choose_gpu_set``: subset tables, ring first), the subset tables without the ring (the previous
    criterion, whose choices must equal the previous implementation's), and the previous implementation
    (``choose_gpu_set_by_groups``: the group search), on the same tables in the same run.
    """
    print(f"\nstress: 16 GPUs, random pair classes (no interchangeable GPUs), all free; {samples} tables per k")
    tables = [build_gpu_link_table(_random_16(random.Random(seed))) for seed in range(samples)]
    builds = []
    for table in tables:
        start = time.perf_counter()
        _ = table.subsets
        builds.append((time.perf_counter() - start) * 1000)
    without_ring = [
        gpu_subsets.build_subset_tables(table.ranks, table.numa_nodes, table.groups, by_ring=False) for table in tables
    ]
    print(f"subset tables, built once per link table: p50 {_percentile(builds, 0.5):.1f} ms, max {max(builds):.1f} ms")
    print(
        f"{'k':>3} {'ours p50/p99 ms':>16} {'no ring p50/p99':>16} {'prev. p50/p99 ms':>17} {'target p99':>11} "
        f"{'ring changed':>12}"
    )
    for k in range(1, 17):
        ours, same_rule, previous = [], [], []
        changed = 0
        for table, weakest_tables in zip(tables, without_ring, strict=True):
            free = frozenset(table.gpus)
            choice, ms = _timed(partial(choose_gpu_set, table, free, k))
            found, same_ms = _timed(partial(gpu_subsets.choose, weakest_tables, (1 << len(table.gpus)) - 1, k, 0))
            previous_choice, previous_ms = _timed(partial(choose_gpu_set_by_groups, table, free, k))
            assert choice is not None
            assert previous_choice is not None
            if tuple(i for p, i in enumerate(table.gpus) if found.mask >> p & 1) != previous_choice.gpus:
                raise AssertionError(f"k={k}: the group search chose {previous_choice}, the tables {found}")
            changed += choice.gpus != previous_choice.gpus
            ours.append(ms)
            same_rule.append(same_ms)
            previous.append(previous_ms)
        print(
            f"{k:>3} {_p50_p99(ours, 3):>16} {_p50_p99(same_rule, 3):>16} {_p50_p99(previous, 2):>17} "
            f"{'<= 10':>11} {changed:>12}"
        )


def _p50_p99(values: Sequence[float], digits: int) -> str:
    return f"{_percentile(values, 0.5):.{digits}f}/{_percentile(values, 0.99):.{digits}f}"


# --- the criterion evaluation: the weakest pair against the best ring's weakest hop ----------------------


def _dgx1_v100() -> NodeTopology:
    # DGX-1 with V100: the hybrid cube-mesh, 6 NVLinks per GPU bonded as NV1/NV2 to four peers, SYS for the
    # rest; GPUs 0-3 on socket 0, 4-7 on socket 1. The `nvidia-smi topo -m` of one, as published in
    # microsoft/msccl-tools tests/test_topologies.py (test_nvlink_only).
    nvlinks = {
        (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
        (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2,
    }  # fmt: skip

    def link(a: int, b: int) -> DeviceLink:
        count = nvlinks.get((a, b))
        if count is None:
            return DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.SYS)
        return DeviceLink(f"GPU{a}", f"GPU{b}", PathKind.NVLINK, count)

    return _synthetic(8, lambda i: i // 4, link)


@dataclass
class CriteriaCounts:
    decisions: int = 0
    # (measure, which criterion's set is worse) -> decisions; measures: "ring", "weakest", "span".
    worse: dict[tuple[str, str], int] = field(default_factory=dict)


def compare_criteria(machine: BenchMachine, seeds: int, steps: int) -> tuple[dict[int, CriteriaCounts], ...]:
    """The weakest-pair rule (the previous criterion: the subset tables without the ring, which choose what
    ``choose_gpu_set_by_groups`` chooses) against the ring (``choose_gpu_set``) on the benchmark's
    request/release sequences: per request size, how often each one's set has the worse ring bottleneck,
    weakest pair or NUMA span. Readings: each criterion on its own copy of the node; both asked on the
    weakest-pair copy's free GPUs; and, on machines of up to 8 GPUs, both asked on every free set for
    every size from 2 to all of it."""
    table = build_gpu_link_table(machine.topology)
    assert table.subsets is not None
    rings = table.subsets.rings
    weakest_tables = gpu_subsets.build_subset_tables(table.ranks, table.numa_nodes, table.groups, by_ring=False)
    place = {index: p for p, index in enumerate(table.gpus)}

    def mask_of(gpus: Sequence[int]) -> int:
        return sum(1 << place[index] for index in gpus)

    def by_ring(free: frozenset[int], k: int) -> tuple[int, ...]:
        choice = choose_gpu_set(table, free, k)
        assert choice is not None
        return choice.gpus

    def by_weakest(free: frozenset[int], k: int) -> tuple[int, ...]:
        found = gpu_subsets.choose(weakest_tables, mask_of(sorted(free)), k, 0)
        return tuple(index for p, index in enumerate(table.gpus) if found.mask >> p & 1)

    def tally(counts: CriteriaCounts, weakest_set: tuple[int, ...], ring_set: tuple[int, ...]) -> None:
        counts.decisions += 1
        first, second = score_gpu_set(table, weakest_set), score_gpu_set(table, ring_set)
        ring_of = {"weakest pair": int(rings[mask_of(weakest_set)]), "ring": int(rings[mask_of(ring_set)])}
        pairs_of = {"weakest pair": first.weakest_rank or 0, "ring": second.weakest_rank or 0}
        span_of = {"weakest pair": -first.numa_span, "ring": -second.numa_span}
        for measure, values in (("ring", ring_of), ("weakest", pairs_of), ("span", span_of)):
            for name, other in (("weakest pair", "ring"), ("ring", "weakest pair")):
                if values[name] < values[other]:
                    counts.worse[(measure, name)] = counts.worse.get((measure, name), 0) + 1

    sizes = [k for k in REQUEST_SIZES if k <= len(table.gpus)]
    own: dict[int, CriteriaCounts] = {}
    same: dict[int, CriteriaCounts] = {}
    for seed in range(seeds):
        rng = random.Random(seed)
        weakest_state: list[tuple[int, ...]] = []
        ring_state: list[tuple[int, ...]] = []
        for _ in range(steps):
            if weakest_state and rng.random() < RELEASE_CHANCE:
                position = rng.randrange(len(weakest_state))
                weakest_state.pop(position)
                ring_state.pop(position)
                continue
            k = rng.choice(sizes)
            while sum(map(len, weakest_state)) + k > len(table.gpus):
                position = rng.randrange(len(weakest_state))
                weakest_state.pop(position)
                ring_state.pop(position)
            free = _free(table, weakest_state)
            weakest_set = by_weakest(free, k)
            tally(same.setdefault(k, CriteriaCounts()), weakest_set, by_ring(free, k))
            ring_set = by_ring(_free(table, ring_state), k)
            tally(own.setdefault(k, CriteriaCounts()), weakest_set, ring_set)
            weakest_state.append(weakest_set)
            ring_state.append(ring_set)
    every: dict[int, CriteriaCounts] = {}
    if len(table.gpus) <= EVERY_FREE_SET_GPUS:
        for size in range(2, len(table.gpus) + 1):
            for gpus in itertools.combinations(table.gpus, size):
                free = frozenset(gpus)
                for k in range(2, size + 1):
                    tally(every.setdefault(k, CriteriaCounts()), by_weakest(free, k), by_ring(free, k))
    return own, same, every


def report_criteria(machine: BenchMachine, readings: tuple[dict[int, CriteriaCounts], ...]) -> None:
    print(f"\n{machine.name}: decisions where a criterion's set is worse than the other's (weakest pair / ring)")
    print(
        f"{'k':>3} {'n':>5} {'reading':>10} {'worse ring bottleneck':>22} {'worse weakest pair':>19} "
        f"{'more NUMA nodes':>16}"
    )
    for name, reading in zip(("own copy", "same free", "every free"), readings, strict=True):
        for k in sorted(reading):
            counts = reading[k]
            cells = [
                f"{counts.worse.get((measure, 'weakest pair'), 0)} / {counts.worse.get((measure, 'ring'), 0)}"
                for measure in ("ring", "weakest", "span")
            ]
            print(f"{k:>3} {counts.decisions:>5} {name:>10} {cells[0]:>22} {cells[1]:>19} {cells[2]:>16}")


def criteria_machines(samples: int) -> list[BenchMachine]:
    """The fixture machines, DGX-1's partial NVLink mesh, and ``samples`` irregular 16-GPU tables."""
    extra = [BenchMachine("DGX-1 V100: NV1/NV2 hybrid cube-mesh, SYS across sockets", _dgx1_v100(), False)]
    irregular = [
        BenchMachine(f"irregular 16 GPUs, random pair classes (seed {seed})", _random_16(random.Random(seed)), False)
        for seed in range(samples)
    ]
    return machines() + extra + irregular


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--budget", type=int, default=SEARCH_LIMIT, help="search steps per baseline decision")
    parser.add_argument("--stress", type=int, default=50, help="random asymmetric 16-GPU tables per size")
    parser.add_argument("--irregular", type=int, default=3, help="irregular 16-GPU tables in the criterion evaluation")
    parser.add_argument(
        "--only", choices=("choice", "stress", "criteria"), help="run one part: the fixture machines, stress, criteria"
    )
    args = parser.parse_args()
    print("pair ranks: unknown 0, SYS 1, NODE 2, PHB 3, PXB 4, PIX 5, NV<n> 5+n")
    if args.only in (None, "choice"):
        for machine in machines():
            report(machine, run_machine(machine, args.seeds, args.steps, args.budget))
    if args.only in (None, "stress"):
        stress(args.stress)
    if args.only in (None, "criteria"):
        for machine in criteria_machines(args.irregular):
            report_criteria(machine, compare_criteria(machine, args.seeds, args.steps))


if __name__ == "__main__":
    main()
