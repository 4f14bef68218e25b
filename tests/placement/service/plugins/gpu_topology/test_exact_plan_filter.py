"""GpuTopology's Filter: for a pod whose NUMA intent restricts its cells, Filter confirms its feasible nodes with
Reserve's exact plan, so that Filter (and Score) pass exactly the nodes Reserve takes.

For an intent, the vectorised rules check only that some allowed cell set fits; where the kubelet would put the
pod is the plan's (``plan_on_slot``). A scheduler that binds on Filter's answer (kube-scheduler with the extender)
would otherwise choose, at every retry, a node that Reserve refuses at bind (tests/cluster/test_cluster_extender.py
shows it with kube-scheduler).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from placement.core.annotations import AFFINITY_KEY, ANTI_AFFINITY_KEY, POLICY_KEY
from placement.core.pods import ContainerSpec, PodSpec
from placement.core.vocabulary import RejectionKind
from placement.service.engine import PlacementEngine
from placement.service.results import Rejections
from placement.state.cluster_index import ClusterIndex
from tests.machines.node_topologies import cpu_node, kubelet, l40s_node, nvswitch_node

OUTSIDE_CELL_1 = "the kubelet would use NUMA cells [0], outside the allowed [1]"


def _numa_pod(name: str, annotations: Mapping[str, str], *, cpus: int = 4, gpus: int = 0) -> PodSpec:
    resources = {"cpu": str(cpus), "memory": "1Gi"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    container = ContainerSpec("main", requests=resources, limits=resources)
    return PodSpec(namespace="ml", name=name, containers=(container,), annotations=annotations)


def _take_cell_0(engine: PlacementEngine, node: str) -> None:
    """30 of the 32 CPUs of ``node``'s cell 0 reserved: the kubelet then pins a small pod to cell 1."""
    filler = _numa_pod(f"filler-{node}", {POLICY_KEY: "single-numa", AFFINITY_KEY: "0"}, cpus=30)
    placement = engine.reserve(filler, [node]).placement
    assert placement is not None
    assert (placement.node, placement.cells) == (node, (0,))


def _reserved_on(engine: PlacementEngine, pod: PodSpec, node: str) -> bool:
    """Whether Reserve takes ``pod`` on ``node`` alone; what it reserved is released."""
    if engine.reserve(pod, [node]).placement is None:
        return False
    assert engine.unreserve(pod.namespace, pod.name)
    return True


@pytest.mark.parametrize(
    ("annotations", "feasible", "refused", "reason"),
    [
        ({POLICY_KEY: "single-numa", AFFINITY_KEY: "1"}, "cell-0-taken", "empty", OUTSIDE_CELL_1),
        ({AFFINITY_KEY: "1"}, "cell-0-taken", "empty", OUTSIDE_CELL_1),
        ({ANTI_AFFINITY_KEY: "0"}, "cell-0-taken", "empty", OUTSIDE_CELL_1),
        ({POLICY_KEY: "restricted", AFFINITY_KEY: "1"}, "cell-0-taken", "empty", OUTSIDE_CELL_1),
        # The plan takes the empty node (the kubelet's cell 0 is the allowed one); the vectorised rules refuse
        # the other (no allowed cell fits).
        (
            {POLICY_KEY: "single-numa", AFFINITY_KEY: "0"},
            "empty",
            "cell-0-taken",
            "intent single-numa: no allowed NUMA cell fits the pod",
        ),
    ],
    ids=["single-numa-in-1", "affinity-1", "anti-affinity-0", "restricted-in-1", "single-numa-in-0"],
)
def test_filter_drops_a_node_where_reserves_plan_refuses_the_intent(
    annotations: dict[str, str], feasible: str, refused: str, reason: str
) -> None:
    """Both nodes have a free cell 1, so the vectorised rules pass both for a pod that must be in cell 1; the
    kubelet (single-numa-node) pins the pod to the first cell that fits: cell 0 of the empty node, cell 1 of
    the other. Filter drops the empty node with the plan's reason, which is Reserve's, and keeps the other."""
    index = ClusterIndex()
    for node in ("empty", "cell-0-taken"):
        index.upsert_topology(node, cpu_node(settings=kubelet("single-numa-node")))
    engine = PlacementEngine.over(index)
    _take_cell_0(engine, "cell-0-taken")
    pod = _numa_pod("p", annotations)

    filtered = engine.filter(pod, ["empty", "cell-0-taken"])
    assert filtered.feasible == (feasible,)
    assert filtered.rejected == (Rejections(reason, RejectionKind.INTENT, (refused,)),)
    assert engine.reserve(pod, [refused]).rejected == filtered.rejected
    assert _reserved_on(engine, pod, feasible)


def _numa_cluster() -> tuple[PlacementEngine, list[str]]:
    """Each kubelet policy on an empty 2-cell CPU node and on one whose cell 0 is taken; an H100 node (two
    cells, four GPUs each) and an L40S node (one cell)."""
    index = ClusterIndex()
    policies = ("single-numa-node", "restricted", "best-effort", "none")
    for policy in policies:
        for state in ("empty", "cell-0-taken"):
            index.upsert_topology(f"{policy}-{state}", cpu_node(settings=kubelet(policy)))
    index.upsert_topology("h100", nvswitch_node())
    index.upsert_topology("l40s", l40s_node(settings=kubelet("restricted")))
    engine = PlacementEngine.over(index)
    for policy in policies:
        _take_cell_0(engine, f"{policy}-cell-0-taken")
    return engine, [name for name in index.slot_names() if name is not None]


NUMA_INTENTS = {
    "single-numa-in-1": {POLICY_KEY: "single-numa", AFFINITY_KEY: "1"},
    "single-numa-in-0": {POLICY_KEY: "single-numa", AFFINITY_KEY: "0"},
    "affinity-1": {AFFINITY_KEY: "1"},
    "anti-affinity-0": {ANTI_AFFINITY_KEY: "0"},
    "restricted-in-1": {POLICY_KEY: "restricted", AFFINITY_KEY: "1"},
    "best-effort-not-1": {POLICY_KEY: "best-effort", ANTI_AFFINITY_KEY: "1"},
    "single-numa": {POLICY_KEY: "single-numa"},
    "isolated": {POLICY_KEY: "isolated"},
}
POD_SHAPES = ((4, 0), (20, 0), (40, 0), (8, 2), (4, 4))  # (CPUs, GPUs)


@pytest.mark.parametrize("annotations", NUMA_INTENTS.values(), ids=NUMA_INTENTS.keys())
def test_filter_and_score_pass_exactly_the_nodes_reserve_takes_for_a_numa_intent(annotations: dict[str, str]) -> None:
    """Every node, every pod shape: in Filter's feasible list, and among Score's nodes (the scheduler plugin's
    one call per cycle), if and only if Reserve takes the pod there, and every node refused once with a reason
    otherwise, the same by both."""
    engine, nodes = _numa_cluster()
    for cpus, gpus in POD_SHAPES:
        pod = _numa_pod("p", annotations, cpus=cpus, gpus=gpus)
        filtered = engine.filter(pod, nodes)
        scored = engine.score(pod, nodes)
        reserved = [node for node in nodes if _reserved_on(engine, pod, node)]
        assert sorted(filtered.feasible) == sorted(reserved), f"{cpus} CPUs, {gpus} GPUs"
        assert sorted(scored.nodes) == sorted(reserved), f"{cpus} CPUs, {gpus} GPUs"
        rejected = [node for group in filtered.rejected for node in group.nodes]
        assert sorted([*filtered.feasible, *rejected]) == sorted(nodes)
        assert sorted(scored.rejected) == sorted(filtered.rejected)
