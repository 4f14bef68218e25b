"""The pipeline: each extension point runs the profile's plugins in the registry's order, and the plugins together
answer exactly as the core's own ranking with the pod's whole judge (what Reserve, the gang planner and the
preemption search rank with), node by node and reason by reason."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from placement.core.annotations import POLICY_KEY
from placement.core.constraints.constraint_types import NodeFacts, Taint, TaintEffect
from placement.core.decision import rank
from placement.core.pods import ContainerSpec, PodSpec, validate_pod
from placement.core.vocabulary import Rejected, RejectionKind
from placement.service.engine import PlacementEngine
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.extension_points import NodeDraft
from placement.service.framework.pipeline import Pipeline
from placement.service.framework.profile import Profile
from placement.service.framework.registry import build
from placement.service.plugins import REGISTRY
from placement.state.cluster_index import ClusterIndex
from tests.machines.node_topologies import cpu_node, kubelet, l40s_node, nvswitch_node

ZONE = "topology.kubernetes.io/zone"
POLICIES = ("single-numa-node", "restricted", "best-effort", "none")


def _cluster(seed: int) -> PlacementEngine:
    """CPU nodes of every kubelet policy in two zones, some tainted, some busy; an H100 and an L40S node."""
    rng = random.Random(seed)
    index = ClusterIndex()
    names = []
    for number in range(16):
        name = f"cpu-{number}"
        index.upsert_topology(name, cpu_node(cpus_per_cell=16, settings=kubelet(POLICIES[number % 4])))
        names.append(name)
    index.upsert_topology("h100", nvswitch_node())
    index.upsert_topology("l40s", l40s_node(settings=kubelet("restricted")))
    names += ["h100", "l40s"]
    for name in names:
        taints = (Taint("dedicated", TaintEffect.NO_SCHEDULE, "infer"),) if rng.random() < 0.2 else ()
        labels = {ZONE: rng.choice(("zone-a", "zone-b")), "kubernetes.io/hostname": name}
        index.facts.set_node(NodeFacts(name, labels=tuple(sorted(labels.items())), taints=taints))
    engine = PlacementEngine.over(index)
    for number in range(24):  # some load, so that fit and the cells' free room differ from node to node
        engine.reserve(_pod(f"load-{number}", rng.choice((4, 8, 12)), 0), [rng.choice(names)])
    return engine


def _pod(name: str, cpus: int, gpus: int, **fields: Any) -> PodSpec:
    resources = {"cpu": str(cpus), "memory": "2Gi"} | ({"nvidia.com/gpu": str(gpus)} if gpus else {})
    container = ContainerSpec("main", requests=resources, limits=resources)
    return PodSpec(namespace="ml", name=name, containers=(container,), **fields)


def _random_pod(rng: random.Random, name: str) -> PodSpec:
    fields: dict[str, Any] = {}
    if rng.random() < 0.4:
        fields["node_selector"] = {ZONE: rng.choice(("zone-a", "zone-b"))}
    if rng.random() < 0.4:
        expression = {"key": ZONE, "operator": "In", "values": [rng.choice(("zone-a", "zone-b"))]}
        preferred = [{"weight": rng.randint(1, 100), "preference": {"matchExpressions": [expression]}}]
        fields["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}
    if rng.random() < 0.3:
        fields["tolerations"] = ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"},)
    if rng.random() < 0.3:
        fields["annotations"] = {POLICY_KEY: "single-numa"}
    return _pod(name, rng.choice((2, 6, 14, 24, 40)), rng.choice((0, 0, 1, 2, 4)), **fields)


def test_each_point_runs_its_plugins_in_the_registry_order() -> None:
    engine = PlacementEngine.over(ClusterIndex())
    assert engine.pipeline.points() == {
        "filter": ("NodeResources", "KubeConstraints", "GpuTopology", "DynamicResources"),
        "score": ("NodeResources", "KubeConstraints", "WorkloadPolicies", "DynamicResources"),
        "reserve": ("Gangs", "WorkloadPolicies"),
        "plan_node": ("GpuTopology", "DynamicResources"),
        "reserve_group": ("Gangs",),
        "permit": ("Gangs",),
        "post_filter": ("Preemption",),
        "background": ("Gangs", "WorkloadPolicies"),
        "observe_pod": ("Gangs",),
    }


@pytest.mark.parametrize("seed", range(6))
def test_the_plugins_together_answer_as_the_core_ranks_with_the_whole_judge(seed: int) -> None:
    rng = random.Random(seed)
    engine = _cluster(seed)
    index = engine.index
    rows = index.slots(sorted(index.node_names()))
    for number in range(12):
        pending = validate_pod(_random_pod(rng, f"p-{number}"))
        with index.lock:
            cycle = engine.pipeline.cycle(pending)
            verdict = engine.pipeline.filter(cycle, rows)
            scores = engine.pipeline.score(cycle, rows[verdict.feasible])
            ranked = rank(index.arrays(), rows, cycle.demand, intent=pending.intent, constraints=index.judge(pending))
        assert verdict.feasible.tolist() == ranked.filtered.feasible.tolist()
        assert [verdict.reason(i) for i in range(len(rows))] == [ranked.filtered.reason(i) for i in range(len(rows))]
        assert scores.rows.tolist() == ranked.scores.rows.tolist()
        np.testing.assert_allclose(scores.total, ranked.scores.total, rtol=0, atol=1e-9)
        assert dict(scores.shares) == pytest.approx(dict(ranked.scores.shares))
        assert scores.landing_cell.tolist() == ranked.scores.landing_cell.tolist()


def test_node_resources_must_open_each_point() -> None:
    """The registry's order is what the points need: a Filter or Score plugin before NodeResources is refused."""
    engine = PlacementEngine.over(ClusterIndex())
    engine.index.upsert_topology("n", cpu_node())
    plugins = engine.pipeline.plugins
    reordered = Pipeline(engine.pipeline.handle, (plugins[1], plugins[0], *plugins[2:]))
    pending = validate_pod(_pod("p", 2, 0, node_selector={ZONE: "nowhere"}))
    rows = engine.index.slots(["n"])
    with engine.index.lock, pytest.raises(ValueError, match="NodeResources opens the Filter verdict"):
        reordered.filter(CycleState(pending, engine.index), rows)


def test_a_registry_must_list_every_plugin_the_profiles_know() -> None:
    engine = PlacementEngine.over(ClusterIndex())
    with pytest.raises(ValueError, match="the registry lists"):
        build(REGISTRY[:-1], engine.pipeline.handle, Profile())


def test_a_profile_without_gangs_or_preemption_runs_the_rest() -> None:
    engine = PlacementEngine.over(ClusterIndex(), profile=Profile.without(["Gangs", "Preemption"]))
    points = engine.pipeline.points()
    assert points["reserve_group"] == points["permit"] == points["post_filter"] == ()
    assert points["reserve"] == ("WorkloadPolicies",)
    assert engine.gangs is None  # nothing coordinates groups that no plugin places


@pytest.mark.parametrize("seed", range(3))
def test_reserve_through_the_plugins_decides_as_reserve_on_the_whole_judge(seed: int) -> None:
    """Two copies of one cluster: the engine's Reserve (ranked by the Filter and Score plugins, planned by the
    PlanNode plugins) and the assume cache deciding alone (``decision.rank`` and ``plan_on_slot`` on the pod's
    whole judge) take the same pods, in the same order, to the same nodes, cells and GPUs."""
    rng = random.Random(seed)
    through_plugins, alone = _cluster(seed), _cluster(seed)
    for number in range(30):
        spec = _random_pod(rng, f"p-{number}")
        answer = through_plugins.reserve(spec).placement
        decision = alone.reservations.decide(validate_pod(spec))
        expected = decision.placement
        assert (answer is None) == (expected is None), spec.name
        if answer is not None and expected is not None:
            assert (answer.node, answer.cells, answer.gpus, answer.pinned) == (
                expected.node,
                expected.cells,
                expected.gpus,
                expected.pinned,
            )
            assert answer.score == pytest.approx(expected.score)


class RefuseFirst:
    """A PlanNode plugin that refuses the first node it is asked about and records every one."""

    name = "RefuseFirst"

    def __init__(self) -> None:
        self.asked: list[int] = []

    def plan_node(self, cycle: CycleState, draft: NodeDraft) -> NodeDraft | Rejected:
        self.asked.append(draft.row)
        return Rejected("refused here", RejectionKind.NODE_CONSTRAINT) if len(self.asked) == 1 else draft


def test_reserve_plans_each_node_best_first_until_one_holds() -> None:
    engine = _cluster(0)
    refuser = RefuseFirst()
    pipeline = Pipeline(engine.pipeline.handle, (*engine.pipeline.plugins, refuser))
    assert pipeline.points()["plan_node"] == ("GpuTopology", "DynamicResources", "RefuseFirst")
    pending = validate_pod(_pod("p", 2, 0))
    names = sorted(engine.index.node_names())
    with engine.index.lock:
        cycle = pipeline.cycle(pending)
        ranking = pipeline.rank(cycle, engine.index.slots(names))
        decision, closed = pipeline.reserve(cycle, names)
    best_two = [int(row) for row in ranking.ranked_rows()[:2]]
    assert refuser.asked == best_two  # the best node refused, the second held
    assert decision.placement is not None
    assert decision.placement.row == best_two[1]
    assert decision.rejections()[engine.index.name_of(best_two[0]) or ""].message == "refused here"
    assert closed == []
