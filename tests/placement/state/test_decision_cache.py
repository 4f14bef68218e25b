"""Kept per-node verdicts: the same answers as judging every node afresh, through any sequence of changes."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from kubenexus.topology.model import NodeTopology, ResourceAmount, ZoneResources
from kubenexus.topology.nrt import cell_resources
from placement.core.decision import order_of, rank
from placement.core.intent import NumaIntentPolicy, PodIntent
from placement.core.pods import PodUsage
from placement.core.scoring import combine, node_components
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import GPU_SHARE, PodDemand, demand_of
from placement.state import decision_cache
from placement.state.cluster_index import ClusterIndex
from placement.state.decision_cache import DecisionCache
from tests.machines.node_topologies import GIB, cpu_node, kubelet, l40s_node, nvswitch_node

FPGA = "example.com/fpga"
POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


def _demand(cpus: int, memory_gib: int = 1, *, gpus: int = 0, share: int = 0, containers: int = 1) -> PodDemand:
    devices = tuple(d for d in (("nvidia.com/gpu", gpus), (GPU_SHARE, share)) if d[1])
    main = Container("c", cpu_millis=cpus * 1000, memory=memory_gib * GIB, devices=devices)
    extra = tuple(Container(f"side{n}", cpu_millis=1000, memory=GIB) for n in range(containers - 1))
    return demand_of(Pod(containers=(main, *extra), qos=QOSClass.GUARANTEED))


SHAPES: tuple[tuple[PodDemand, PodIntent | None], ...] = (
    (_demand(4), None),
    (_demand(24, 256, gpus=4), None),
    (_demand(8, 16, gpus=1), PodIntent(policy=NumaIntentPolicy.SINGLE_NUMA)),
    (_demand(16, 64), PodIntent(policy=NumaIntentPolicy.ISOLATED, anti_affinity_node_ids=frozenset({1}))),
    (_demand(2, 4, share=300), None),
    (_demand(6, 8, containers=2), None),
    (demand_of(Pod(containers=(Container("c", cpu_millis=1000, devices=((FPGA, 1),)),))), None),
)


def _with_fpga(topology: NodeTopology) -> NodeTopology:
    """A resource no node offered before: the index grows a column for it."""
    zones = tuple(
        ZoneResources(cell.id, (*cell_resources(topology, cell), ResourceAmount(FPGA, 1, 1, 1)))
        for cell in topology.numa_cells
    )
    return replace(topology, zone_resources=zones)


def _machine(rng: random.Random) -> NodeTopology:
    settings = kubelet(rng.choice(POLICIES), rng.choice(("pod", "container")), memory=rng.random() < 0.3)
    kind = rng.randrange(4)
    if kind == 0:
        return cpu_node(cells=rng.choice((1, 2, 4)), cpus_per_cell=rng.choice((8, 32)), settings=settings)
    if kind == 1:
        return nvswitch_node(cells=rng.choice((1, 2, 4)), settings=settings)
    if kind == 2:
        return l40s_node(settings=settings)
    return cpu_node(cells=2, cpus_per_cell=4, memory_per_cell=8 * GIB, settings=settings)


def _assert_same_as_fresh(cache: DecisionCache, index: ClusterIndex, rows: np.ndarray) -> None:
    for demand, intent in SHAPES:
        fresh = rank(index.arrays(), rows, demand, intent=intent)
        kept = cache.filter(rows, demand, intent)
        np.testing.assert_array_equal(kept.feasible, fresh.filtered.feasible)
        assert [kept.reason(i) for i in range(len(rows))] == [fresh.filtered.reason(i) for i in range(len(rows))]
        np.testing.assert_array_equal(np.sort(kept.exact_rows), np.sort(fresh.filtered.exact_rows))
        feasible = rows[kept.feasible]
        scores = combine(index.arrays(), feasible, cache.components(feasible, demand, intent))
        np.testing.assert_array_equal(scores.total, fresh.scores.total)
        np.testing.assert_array_equal(scores.landing_cell, fresh.scores.landing_cell)
        for name, values in fresh.scores.components.items():
            np.testing.assert_array_equal(scores.components[name], values, err_msg=name)
        np.testing.assert_array_equal(order_of(scores), fresh.order)


@pytest.mark.parametrize("seed", range(6))
def test_kept_answers_equal_fresh_ones_through_random_changes(seed: int) -> None:
    """Nodes added (the arrays grow), reported again, removed and their slots reused; pods bound, reserved
    and removed (the workload model rebuilds); a new resource column: after each, every answer is exact."""
    rng = random.Random(seed)
    index = ClusterIndex(initial_capacity=2)
    cache = DecisionCache(index, shapes=len(SHAPES))
    pods: list[tuple[str, str]] = []
    for step in range(40):
        names = index.node_names()
        action = rng.random()
        if action < 0.25 or len(names) < 3:
            index.upsert_topology(f"n{step}", _machine(rng))
        elif action < 0.35:
            index.upsert_topology(rng.choice(names), _machine(rng))
        elif action < 0.45:
            index.remove_node(rng.choice(names))
        elif action < 0.8:
            node = rng.choice(names)
            demand, _ = rng.choice(SHAPES)
            cells = rng.choice(((), (0,), (1,)))
            usage = PodUsage("ns", f"p{step}", node, demand, cells=cells)
            (index.upsert_pod if rng.random() < 0.5 else index.assume_pod)(usage)
            pods.append(usage.key)
        elif pods:
            index.remove_pod(*pods.pop(rng.randrange(len(pods))))
        if step == 30:
            index.upsert_topology("fpga", _with_fpga(cpu_node(settings=kubelet("restricted"))))
        candidates = [name for name in index.node_names() if rng.random() < 0.8] or index.node_names()
        _assert_same_as_fresh(cache, index, index.slots_of(candidates))


def _index(count: int) -> ClusterIndex:
    index = ClusterIndex(initial_capacity=count)
    for n in range(count):
        index.upsert_topology(f"n{n}", nvswitch_node() if n % 2 else cpu_node())
    return index


def test_only_the_nodes_changed_since_are_judged_again() -> None:
    index = _index(10)
    cache = DecisionCache(index)
    rows = index.slots()
    demand, intent = SHAPES[1]
    first = cache.filter(rows, demand, intent)
    assert cache.judged == 10
    assert cache.filter(rows, demand, intent).feasible.tolist() == first.feasible.tolist()
    assert cache.judged == 10  # nothing changed: nothing judged
    feasible = rows[first.feasible]
    cache.components(feasible, demand, intent)
    scored = cache.scored
    assert scored == len(feasible) == 5

    # A pod bound on one GPU node takes all its GPUs: that node alone is judged again, and now refused.
    taken = index.name_of(int(feasible[0]))
    assert taken is not None
    index.upsert_pod(PodUsage("ns", "all-gpus", taken, _demand(8, 8, gpus=8), cells=(0, 1)))
    again = cache.filter(rows, demand, intent)
    assert cache.judged == 11
    assert again.feasible.sum() == 4
    assert again.reason(int(np.flatnonzero(rows == feasible[0])[0])).startswith("Insufficient nvidia.com/gpu")
    # Another shape is judged on its own.
    cache.filter(rows, *SHAPES[0])
    assert cache.judged == 21


def test_scores_are_computed_again_when_the_target_workload_is_rebuilt() -> None:
    index = _index(6)
    cache = DecisionCache(index)
    demand, intent = SHAPES[1]
    rows = index.slots()
    feasible = rows[cache.filter(rows, demand, intent).feasible]
    cache.components(feasible, demand, intent)
    before = cache.scored
    target = index.workload.target()
    # A pod on a CPU node: the GPU nodes are unchanged, but the workload the fragmentation measure reads is not.
    index.upsert_pod(PodUsage("ns", "cpu-pod", "n0", _demand(2)))
    assert index.workload.target() is not target
    kept = cache.components(feasible, demand, intent)
    # Only the fragmentation component measures against the workload: it alone is computed again.
    assert cache.scored == before
    assert cache.refragmented == len(feasible)
    fresh = node_components(index.arrays(), feasible, demand, intent=intent)
    np.testing.assert_array_equal(kept.fragmentation, fresh.fragmentation)
    np.testing.assert_array_equal(kept.fit, fresh.fit)


def test_shapes_beyond_the_limit_are_forgotten_oldest_first() -> None:
    index = _index(4)
    cache = DecisionCache(index, shapes=2)
    rows = index.slots()
    for demand, intent in SHAPES[:3]:
        cache.filter(rows, demand, intent)
    assert cache.judged == 12
    cache.filter(rows, *SHAPES[2])  # the newest: kept
    assert cache.judged == 12
    cache.filter(rows, *SHAPES[0])  # the oldest: forgotten, judged again
    assert cache.judged == 16
    with pytest.raises(ValueError, match="at least one"):
        DecisionCache(index, shapes=0)


def test_a_shape_with_too_many_messages_starts_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rejection messages are interned per shape; past the bound every verdict is judged again, still exact."""
    monkeypatch.setattr(decision_cache, "MAX_MESSAGES", 0)
    index = _index(6)
    cache = DecisionCache(index)
    rows = index.slots()
    demand, intent = SHAPES[1]
    first = cache.filter(rows, demand, intent)
    assert cache.judged == 6
    assert first.messages  # the CPU nodes are refused
    index.upsert_pod(PodUsage("ns", "p", "n1", _demand(2)))
    again = cache.filter(rows, demand, intent)
    assert cache.judged == 12  # one node changed, but the table was over its bound: all judged again
    fresh = rank(index.arrays(), rows, demand, intent=intent).filtered
    assert [again.reason(i) for i in range(len(rows))] == [fresh.reason(i) for i in range(len(rows))]
