"""The subset tables behind ``choose_gpu_set``, where enumerating the rules is out of reach.

On irregular 16-GPU machines (every pair a random class, so no two GPUs are interchangeable and the
group search gets no help from symmetry) the tables without the ring must choose exactly what the group
search chooses, with the same ties and fragmentation figures; with the ring they must never choose a
set ranked below the group search's by the documented order. Rings are held to every cyclic order on
small machines; ``tests/placement/core/test_gpu_sets.py`` holds whole choices to the enumerated rules there.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from kubenexus.topology.model import NodeTopology, PathKind
from placement.core import gpu_subsets
from placement.core.gpu_sets import (
    GpuChoice,
    GpuLinkTable,
    SetScore,
    build_gpu_link_table,
    choose_gpu_set,
    choose_gpu_set_by_groups,
)
from tests.placement.core.test_gpu_sets import NODE, NV12, NV18, PIX, SYS, Link, make_topology, uniform

# The benchmark's worst case: SYS, NODE, PIX, NV2, NV4 (benchmarks.gpu_sets, stress).
IRREGULAR_CLASSES: list[Link] = [SYS, NODE, PIX, (PathKind.NVLINK, 2), (PathKind.NVLINK, 4)]


def irregular(rng: random.Random, count: int = 16, classes: Sequence[Link] = IRREGULAR_CLASSES) -> NodeTopology:
    numa = [rng.choice((0, 1)) for _ in range(count)]
    links = {(a, b): rng.choice(classes) for a in range(count) for b in range(a + 1, count)}
    return make_topology(numa, links)


def outside_mask(table: GpuLinkTable, preference: frozenset[int] | None) -> int:
    if preference is None:
        return 0
    return sum(1 << p for p, node in enumerate(table.numa_nodes) if node not in preference)


def as_set_score(score: gpu_subsets.Score) -> SetScore:
    return SetScore(score.weakest_rank, score.rank_sum, score.numa_span)


def check_tables_equal_group_search(
    table: GpuLinkTable, free: frozenset[int], k: int, preference: frozenset[int] | None
) -> None:
    previous = choose_gpu_set_by_groups(table, free, k, numa_preference=preference)
    if k > len(free):
        assert previous is None
        return
    assert previous is not None
    tables = gpu_subsets.build_subset_tables(table.ranks, table.numa_nodes, table.groups, by_ring=False)
    found = gpu_subsets.choose(tables, sum(1 << table.gpus.index(i) for i in free), k, outside_mask(table, preference))
    assert tuple(i for p, i in enumerate(table.gpus) if found.mask >> p & 1) == previous.gpus
    assert (as_set_score(found.score), found.outside_preference, found.tied) == (
        previous.score,
        previous.outside_preference,
        previous.tied,
    )
    if previous.fragmentation is None:
        assert found.best_left is None
    else:
        assert found.best_left is not None
        assert tuple((size, as_set_score(score)) for size, score in found.best_left) == previous.fragmentation.best_left
        assert found.left_rank_sum == previous.fragmentation.left_rank_sum


def order_key(table: GpuLinkTable, choice: GpuChoice) -> tuple[int, int, int, int]:
    """Criteria 2-5 of a choice, the ring from the tables (the group search does not report it)."""
    assert table.subsets is not None
    mask = sum(1 << table.gpus.index(i) for i in choice.gpus)
    score = choice.score
    return (int(table.subsets.rings[mask]), score.weakest_rank or 0, score.rank_sum, -score.numa_span)


@st.composite
def irregular_cases(draw: st.DrawFn) -> tuple[NodeTopology, frozenset[int], int, frozenset[int] | None]:
    seed = draw(st.integers(0, 2**32 - 1))
    palette = draw(st.lists(st.sampled_from(IRREGULAR_CLASSES), min_size=2, max_size=5, unique=True))
    topology = irregular(random.Random(seed), classes=palette)
    free = frozenset(draw(st.sets(st.integers(0, 15), min_size=8)))
    k = draw(st.integers(0, len(free) + 1))
    preference = draw(st.none() | st.sampled_from([frozenset({0}), frozenset({1})]))
    return topology, free, k, preference


@settings(max_examples=60, deadline=None)
@given(irregular_cases())
def test_tables_without_the_ring_choose_what_the_group_search_chooses_on_irregular_16_gpus(
    case: tuple[NodeTopology, frozenset[int], int, frozenset[int] | None],
) -> None:
    topology, free, k, preference = case
    check_tables_equal_group_search(build_gpu_link_table(topology), free, k, preference)


def test_every_request_size_on_whole_irregular_16_gpu_machines_matches_the_group_search() -> None:
    for seed in range(3):
        table = build_gpu_link_table(irregular(random.Random(seed)))
        for k in range(17):
            check_tables_equal_group_search(table, frozenset(table.gpus), k, None)


@settings(max_examples=40, deadline=None)
@given(irregular_cases())
def test_the_ring_choice_never_ranks_below_the_weakest_pair_choice(
    case: tuple[NodeTopology, frozenset[int], int, frozenset[int] | None],
) -> None:
    topology, free, k, preference = case
    table = build_gpu_link_table(topology)
    ours = choose_gpu_set(table, free, k, numa_preference=preference)
    previous = choose_gpu_set_by_groups(table, free, k, numa_preference=preference)
    if ours is None or previous is None:
        assert ours is previous is None
        return
    assert ours.outside_preference <= previous.outside_preference
    if ours.outside_preference == previous.outside_preference:
        assert order_key(table, ours) >= order_key(table, previous)
    assert ours.ring_rank == (None if k < 2 else order_key(table, ours)[0])


def brute_force_ring(ranks: Sequence[Sequence[int]], positions: Sequence[int]) -> int:
    if len(positions) < 2:
        return gpu_subsets.NO_PAIR_RANK
    first, rest = positions[0], positions[1:]
    return max(
        min(ranks[a][b] for a, b in itertools.pairwise((first, *order, first)))
        for order in itertools.permutations(rest)
    )


def test_rings_are_the_best_cyclic_order_of_every_subset() -> None:
    rng = random.Random(7)
    for _ in range(12):
        count = rng.randint(2, 7)
        palette = [rng.choice(IRREGULAR_CLASSES) for _ in range(3)]
        table = build_gpu_link_table(irregular(rng, count, palette))
        assert table.subsets is not None
        for mask in range(1 << count):
            positions = [p for p in range(count) if mask >> p & 1]
            assert table.subsets.rings[mask] == brute_force_ring(table.ranks, positions), (table.ranks, positions)


def test_tables_are_built_on_the_first_choice_not_with_the_link_table() -> None:
    # The cluster index keeps a link table per machine type and never asks for a GPU set choice.
    table = build_gpu_link_table(irregular(random.Random(1)))
    assert "subsets" not in vars(table)
    choose_gpu_set(table, frozenset(table.gpus), 4)
    assert "subsets" in vars(table)


def test_nodes_over_16_gpus_are_answered_by_the_group_search() -> None:
    table = build_gpu_link_table(uniform(18, NV18, [0] * 9 + [1] * 9))
    assert table.subsets is None
    choice = choose_gpu_set(table, frozenset(table.gpus) - {0}, 4)
    assert choice is not None
    # Every pair is NV18: one NUMA node, then (both nodes keep an 8-GPU set) the lowest indices.
    assert (choice.gpus, choice.numa_nodes, choice.ring_rank, choice.score.weakest_link) == (
        (1, 2, 3, 4),
        (0,),
        None,
        "NV18",
    )
    assert choice == choose_gpu_set_by_groups(table, frozenset(table.gpus) - {0}, 4)


def test_an_nvlink_count_beyond_the_tables_ranks_is_refused_by_them_and_left_to_the_group_search() -> None:
    links = {(0, 1): (PathKind.NVLINK, 300), (0, 2): NV12, (1, 2): PIX}
    table = build_gpu_link_table(make_topology([0, 0, 0], links))
    assert table.subsets is None
    choice = choose_gpu_set(table, frozenset(table.gpus), 2)
    assert choice is not None
    assert choice.gpus == (0, 1)


def test_a_request_on_a_small_node_reports_its_ring() -> None:
    table = build_gpu_link_table(uniform(4, NODE, [0, 0, 1, 1]))
    choice = choose_gpu_set(table, frozenset(table.gpus), 4)
    assert choice is not None
    assert (choice.ring_link, choice.score.weakest_link) == ("NODE", "NODE")
    single = choose_gpu_set(table, frozenset(table.gpus), 1)
    assert single is not None
    assert single.ring_rank is None
