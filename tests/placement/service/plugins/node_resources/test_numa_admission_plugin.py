"""NodeResources on its own: its Filter is the kubelet's admission over every candidate (with the NUMA reason
where the Topology Manager refuses), and its Score opens the topology score with the pod's predicted cell."""

from __future__ import annotations

import numpy as np
import pytest

from placement.core.pods import ContainerSpec, PodSpec, validate_pod
from placement.core.scoring import COMPONENTS
from placement.core.vocabulary import RejectionKind
from placement.service.engine import PlacementEngine
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.verdict_edits import passing, unscored
from placement.service.plugins.node_resources import NodeResources
from placement.state.cluster_index import ClusterIndex
from tests.machines.node_topologies import cpu_node, kubelet


def _pod(name: str, cpus: int) -> PodSpec:
    resources = {"cpu": str(cpus), "memory": "1Gi"}
    return PodSpec(namespace="ml", name=name, containers=(ContainerSpec("main", requests=resources, limits=resources),))


@pytest.fixture
def engine() -> PlacementEngine:
    """Two 2x16-CPU nodes: one whose kubelet aligns to a single NUMA cell, one that does not align."""
    index = ClusterIndex()
    index.upsert_topology("single", cpu_node(cpus_per_cell=16, settings=kubelet("single-numa-node")))
    index.upsert_topology("none", cpu_node(cpus_per_cell=16, settings=kubelet("none")))
    return PlacementEngine.over(index)


def test_filter_refuses_where_the_topology_manager_would_and_passes_elsewhere(engine: PlacementEngine) -> None:
    plugin = NodeResources(engine.pipeline.handle)
    rows = engine.index.slots(["single", "none"])
    with engine.index.lock:
        verdict = plugin.filter(CycleState(validate_pod(_pod("wide", 24)), engine.index), passing(rows))
        fits = plugin.filter(CycleState(validate_pod(_pod("small", 8)), engine.index), passing(rows))
    assert verdict.feasible.tolist() == [False, True]  # 24 CPUs span two cells: single-numa-node refuses
    refusal = verdict.rejected(0)
    assert refusal is not None
    assert refusal.kind is RejectionKind.KUBELET_TOPOLOGY
    assert fits.feasible.tolist() == [True, True]


def test_score_opens_the_topology_score_at_the_pods_predicted_cell(engine: PlacementEngine) -> None:
    engine.reserve(_pod("filler", 12), ["single"])  # cell 0 of "single" is now the fuller one
    plugin = NodeResources(engine.pipeline.handle)
    rows = engine.index.slots(["single"])
    with engine.index.lock:
        scores = plugin.score(CycleState(validate_pod(_pod("p", 2)), engine.index), unscored(rows))
    assert set(scores.components) == set(COMPONENTS)
    assert sum(scores.shares.values()) == pytest.approx(100.0)
    assert 0 < float(scores.total[0]) <= 100
    # The fit curve prefers the fuller cell that still holds the pod: the 12 CPUs taken leave 4 in cell 0.
    assert int(engine.index.arrays().cell_ids[rows[0], scores.landing_cell[0]]) == 0
    np.testing.assert_allclose(scores.total, sum(scores.shares[c] * scores.components[c] for c in COMPONENTS))


def test_score_refuses_to_come_after_another_scorer(engine: PlacementEngine) -> None:
    plugin = NodeResources(engine.pipeline.handle)
    rows = engine.index.slots(["single"])
    with engine.index.lock:
        cycle = CycleState(validate_pod(_pod("p", 2)), engine.index)
        opened = plugin.score(cycle, unscored(rows))
        with pytest.raises(ValueError, match="NodeResources opens the score"):
            plugin.score(cycle, opened)
