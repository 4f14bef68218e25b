"""Preemption decisions (``placement.state.preemption_search``): who is evicted, where the preemptor goes, and when
nothing may be evicted. Pods are placed in a real ``ClusterIndex`` on catalogue machines; the kubelet's
admission and the device plugin's GPU choice are the service's own models."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from kubenexus.topology.model import NodeTopology
from placement.cluster.objects import disruption_budget
from placement.core.annotations import GROUP_NAME_KEY
from placement.core.constraints.constraint_types import NodeFacts, PlacedPod
from placement.core.dra.claims import parse_resource_claim
from placement.core.dra.pod_claims import PodResourceClaim
from placement.core.kueue import KUEUE_MANAGED_KEY
from placement.core.podgroup import DomainConstraint
from placement.core.pods import (
    ContainerSpec,
    PendingPod,
    PodParseError,
    PodSpec,
    PodUsage,
    pod_spec_from_object,
    validate_pod,
)
from placement.core.preemption_rules import DisruptionBudget, Unit, UnitPod, budget_violations, reprieve
from placement.core.topology_manager import Container, Pod
from placement.core.vocabulary import GPU_SHARE, demand_of
from placement.state.cluster_index import ClusterIndex
from placement.state.preemption_search import NoPreemption, Preemption, find_preemption
from tests.dra_cluster import gpu_claim
from tests.dra_victims import allocated_claim, dra_index, place_claiming
from tests.gang_fixtures import member, pod
from tests.machines.node_topologies import GIB, kubelet, nvswitch_node, pcie_node

NOW = 1_700_000_000.0
RACK_KEY = "topology.kubenexus.io/rack"


class Scene:
    """An index with nodes, and pods placed on them with known GPUs, priorities and groups."""

    def __init__(self, nodes: Mapping[str, NodeTopology], labels: Mapping[str, Mapping[str, str]] | None = None):
        self.index = ClusterIndex()
        for name, topology in nodes.items():
            self.index.upsert_topology(name, topology)
        if labels:
            for name, node_labels in labels.items():
                self.index.facts.set_node(NodeFacts(name, tuple(sorted(node_labels.items()))))

    def place(
        self,
        name: str,
        node: str,
        gpus: Sequence[int],
        *,
        priority: int,
        group: str = "",
        labels: Mapping[str, str] | None = None,
        cpus: int = 8,
        cells: tuple[int, ...] = (),
        kueue: bool = False,
    ) -> None:
        demand = demand_of(pod(cpus=cpus, memory_gib=32, gpus=len(gpus)))
        self.index.upsert_pod(PodUsage("ns", name, node, demand, cells=cells, gpus=tuple(gpus)))
        pod_labels = dict(labels or {})
        if group:
            pod_labels[GROUP_NAME_KEY] = group
        self.index.facts.put_pod(
            PlacedPod(
                "ns",
                name,
                node,
                labels=tuple(sorted(pod_labels.items())),
                priority=priority,
                group=f"ns/{group}" if group else "",
                kueue_admitted=kueue,
            )
        )

    def preempt(self, preemptors: Sequence[PendingPod], **options: Any) -> Preemption | NoPreemption:
        with self.index.lock:
            return find_preemption(self.index, preemptors, now=NOW, **options)


def hgx() -> NodeTopology:
    """8 H100s behind NVSwitches on 2 NUMA cells, its kubelet aligning best-effort (an 8-GPU pod spans both)."""
    return nvswitch_node(settings=kubelet("best-effort"))


def preemptor(gpus: int, priority: int = 100, *, name: str = "big", cpus: int = 8) -> PendingPod:
    return PendingPod("ns", name, pod(cpus=cpus, memory_gib=32, gpus=gpus), priority=priority)


def evicted(result: Preemption | NoPreemption) -> set[str]:
    assert isinstance(result, Preemption), result
    return {victim.name for victim in result.victims}


def two_full_nodes(priority_a: int, priority_b: int) -> Scene:
    scene = Scene({"a": hgx(), "b": hgx()})
    for i in range(4):
        scene.place(f"a{i}", "a", (2 * i, 2 * i + 1), priority=priority_a)
        scene.place(f"b{i}", "b", (2 * i, 2 * i + 1), priority=priority_b)
    return scene


def test_a_lone_pod_takes_the_node_whose_victims_have_the_lowest_priority() -> None:
    result = two_full_nodes(priority_a=10, priority_b=5).preempt([preemptor(gpus=2)])
    assert isinstance(result, Preemption)
    assert result.nominations == ((("ns", "big"), "b"),)
    assert len(result.victims) == 1
    assert {v.node for v in result.victims} == {"b"}
    assert {v.priority for v in result.victims} == {5}
    assert "ns/big" in result.reason
    assert "b" in result.reason


def test_fewer_victims_win_a_tie_on_priority() -> None:
    scene = Scene({"a": hgx(), "b": hgx()})
    for i in range(4):  # node a: four 2-GPU pods
        scene.place(f"a{i}", "a", (2 * i, 2 * i + 1), priority=5)
    scene.place("b0", "b", (0, 1, 2, 3), priority=5)  # node b: two 4-GPU pods
    scene.place("b1", "b", (4, 5, 6, 7), priority=5)
    result = scene.preempt([preemptor(gpus=4)])
    assert evicted(result) == {"b0"} or evicted(result) == {"b1"}
    assert isinstance(result, Preemption)
    assert result.nominations[0][1] == "b"


def test_pods_of_equal_or_higher_priority_are_never_evicted() -> None:
    result = two_full_nodes(priority_a=100, priority_b=200).preempt([preemptor(gpus=2, priority=100)])
    assert isinstance(result, NoPreemption)
    assert "ns/big" in result.reason


def test_preemption_policy_never_evicts_nobody() -> None:
    spec = pod_spec_from_object(
        {
            "metadata": {"name": "big", "namespace": "ns"},
            "spec": {
                "priority": 100,
                "preemptionPolicy": "Never",
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            },
        }
    )
    pending = validate_pod(spec)
    assert pending.preempt_never
    result = two_full_nodes(priority_a=0, priority_b=0).preempt([pending])
    assert isinstance(result, NoPreemption)
    assert "preemptionPolicy Never" in result.reason


def test_an_unknown_preemption_policy_is_refused_naming_the_field() -> None:
    spec = PodSpec("ns", "p", (ContainerSpec("main"),), preemption_policy="Sometimes")
    with pytest.raises(PodParseError, match=r"spec.preemptionPolicy 'Sometimes' is not one of PreemptLowerPriority"):
        validate_pod(spec)
    assert not validate_pod(PodSpec("ns", "p", (ContainerSpec("main"),), preemption_policy="")).preempt_never


def test_a_gang_is_evicted_whole_with_its_members_on_other_nodes() -> None:
    scene = Scene({"a": hgx(), "b": hgx()})
    scene.place("lone", "a", (0, 1, 2, 3), priority=6)
    scene.place("g0", "a", (4, 5, 6, 7), priority=5, group="train")
    scene.place("g1", "b", (0, 1, 2, 3), priority=5, group="train")
    scene.place("keep", "b", (4, 5, 6, 7), priority=500)
    result = scene.preempt([preemptor(gpus=4)])
    assert evicted(result) == {"g0", "g1"}  # never g0 alone, though only node a's GPUs are needed
    assert isinstance(result, Preemption)
    assert {v.group for v in result.victims} == {"ns/train"}
    assert "gang(s) ns/train evicted whole" in result.reason


def test_a_gang_of_mixed_shapes_preempts_on_nodes_that_each_hold_one_of_its_shapes() -> None:
    """A driver asking CPUs only and an executor asking 8 GPUs: node a frees GPUs but keeps its CPUs for a
    pod of higher priority; node c frees CPUs but its GPUs are held. Each takes one of the two shapes, and
    only together do they hold the gang: a node may count a smaller member when the larger does not fit."""
    scene = Scene({"a": hgx(), "c": hgx()})  # 96 CPUs on each of 2 NUMA cells
    scene.place("cpu-high", "a", (), priority=1000, cpus=80, cells=(0,))
    scene.place("cpu-high-1", "a", (), priority=1000, cpus=80, cells=(1,))
    for gpu in range(8):
        scene.place(f"gpu-low{gpu}", "a", (gpu,), priority=1, cpus=2, cells=(gpu // 4,))
    scene.place("gpu-high", "c", tuple(range(8)), priority=1000, cpus=16, cells=(0, 1))
    scene.place("cpu-low", "c", (), priority=1, cpus=80, cells=(0,))
    scene.place("cpu-low-1", "c", (), priority=1, cpus=80, cells=(1,))
    executor = member("executor", "spark", 2, gpus=8, cpus=16, memory_gib=32, priority=100)
    driver = member("driver", "spark", 2, cpus=120, memory_gib=32, priority=100)
    result = scene.preempt([driver, executor])
    assert isinstance(result, Preemption), result
    assert dict(result.nominations) == {("ns", "executor"): "a", ("ns", "driver"): "c"}
    assert evicted(result) == {"cpu-low", "cpu-low-1", *(f"gpu-low{gpu}" for gpu in range(8))}


def test_a_gang_with_a_member_of_higher_priority_is_not_a_victim() -> None:
    scene = Scene({"a": hgx(), "b": hgx()})
    scene.place("g0", "a", (0, 1, 2, 3, 4, 5, 6, 7), priority=5, group="train")
    scene.place("g1", "b", (0, 1, 2, 3, 4, 5, 6, 7), priority=900, group="train")
    assert isinstance(scene.preempt([preemptor(gpus=4)]), NoPreemption)


KUEUE_ONLY = "pods admitted by Kueue are evicted by Kueue only"


def test_pods_kueue_admitted_are_never_victims_even_of_the_lowest_priority() -> None:
    scene = Scene({"a": hgx(), "b": hgx()})
    scene.place("a0", "a", (0, 1), priority=1, kueue=True)  # the cheapest victim anywhere, but Kueue's
    for i in range(1, 4):
        scene.place(f"a{i}", "a", (2 * i, 2 * i + 1), priority=50)
    for i in range(4):
        scene.place(f"b{i}", "b", (2 * i, 2 * i + 1), priority=1, kueue=True)
    result = scene.preempt([preemptor(gpus=2)])
    assert isinstance(result, Preemption)
    assert result.nominations == ((("ns", "big"), "a"),)
    assert [(v.name in {"a1", "a2", "a3"}, v.priority) for v in result.victims] == [(True, 50)]


def test_a_pod_kueue_admitted_still_preempts_pods_kueue_does_not_manage() -> None:
    scene = two_full_nodes(priority_a=10, priority_b=5)
    queued = PendingPod(
        "ns", "big", pod(cpus=8, memory_gib=32, gpus=2), labels={KUEUE_MANAGED_KEY: "true"}, priority=100
    )
    assert len(evicted(scene.preempt([queued]))) == 1


def test_a_gang_with_a_member_kueue_admitted_is_not_a_victim() -> None:
    scene = Scene({"a": hgx(), "b": hgx()})
    scene.place("g0", "a", tuple(range(8)), priority=5, group="train")
    scene.place("g1", "b", tuple(range(8)), priority=5, group="train", kueue=True)
    result = scene.preempt([preemptor(gpus=4)])
    assert isinstance(result, NoPreemption)
    # Node a's bound counts g0 (Kueue did not admit it), but its unit holds g1: passed over, and said so.
    assert result.reason == (
        "no preemption for pod ns/big (priority 100): no set of lower-priority pods Kueue did not admit frees "
        f"enough room ({KUEUE_ONLY})"
    )


@pytest.mark.parametrize("gang", [False, True], ids=["lone-pod", "gang"])
def test_when_only_pods_kueue_admitted_would_free_room_the_answer_says_so(gang: bool) -> None:
    scene = Scene({"a": hgx(), "b": hgx()})
    for node in ("a", "b"):
        for i in range(4):
            scene.place(f"{node}{i}", node, (2 * i, 2 * i + 1), priority=1, kueue=True)
    preemptors = (
        [member(f"m{i}", "train", 2, gpus=4, cpus=8, memory_gib=32, priority=100) for i in range(2)]
        if gang
        else [preemptor(gpus=4)]
    )
    result = scene.preempt(preemptors)
    assert isinstance(result, NoPreemption)
    assert result.reason.endswith(f": only evicting pods admitted by Kueue might free enough room, and {KUEUE_ONLY}")
    # With none of them Kueue's, the same cluster preempts.
    plain = Scene({"a": hgx(), "b": hgx()})
    for node in ("a", "b"):
        for i in range(4):
            plain.place(f"{node}{i}", node, (2 * i, 2 * i + 1), priority=1)
    assert isinstance(plain.preempt(preemptors), Preemption)


def _db_budget(allowed: int) -> DisruptionBudget:
    return disruption_budget(
        {
            "metadata": {"name": "db", "namespace": "ns", "generation": 2},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"observedGeneration": 2, "disruptionsAllowed": allowed},
        }
    )


def test_a_budget_of_one_lets_at_most_one_protected_pod_go() -> None:
    scene = Scene({"a": hgx()})
    scene.place("db0", "a", (0, 1, 2, 3), priority=5, labels={"app": "db"})
    scene.place("db1", "a", (4, 5, 6, 7), priority=5, labels={"app": "db"})
    scene.index.facts.set_disruption_budget(_db_budget(allowed=1))
    one = scene.preempt([preemptor(gpus=4)])
    assert len(evicted(one)) == 1
    both = scene.preempt([preemptor(gpus=8)])
    assert isinstance(both, NoPreemption)
    assert "PodDisruptionBudget ns/db" in both.reason
    assert "allows 1" in both.reason


def test_a_budget_whose_status_lags_its_spec_allows_nothing() -> None:
    lagging = disruption_budget(
        {
            "metadata": {"name": "db", "namespace": "ns", "generation": 3},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"observedGeneration": 2, "disruptionsAllowed": 4},
        }
    )
    assert lagging.disruptions_allowed == 0


def test_budgets_are_counted_across_every_victim_and_skip_pods_already_disrupted() -> None:
    budget = disruption_budget(
        {
            "metadata": {"name": "db", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}},
            "status": {"disruptionsAllowed": 1, "disruptedPods": {"db0": "2023-11-14T22:13:00Z"}},
        }
    )
    labels = (("app", "db"),)
    units = [Unit("", (UnitPod(("ns", f"db{i}"), "a", 0, labels, 0),)) for i in range(3)]
    # db0 is already counted by the API server (disrupted 20 s before NOW); db1 takes the one disruption left.
    assert budget_violations(units, [budget], NOW) == [False, False, True]
    # Two minutes on, the disruption controller has given up on db0: it counts again.
    assert budget_violations(units, [budget], NOW + 200) == [False, True, True]
    everything = disruption_budget(
        {"metadata": {"name": "all", "namespace": "ns"}, "spec": {"selector": {}}, "status": {"disruptionsAllowed": 0}}
    )
    assert budget_violations(units, [everything], NOW) == [False, False, False]  # an empty selector: nothing


def test_the_reprieve_keeps_the_most_important_victims_that_can_stay() -> None:
    units = [Unit("", (UnitPod(("ns", name), "a", priority, (), 1),)) for name, priority in (("x", 1), ("y", 3))]

    def fits(evicted: frozenset[tuple[str, str]]) -> bool:
        return len(evicted) >= 1

    victims = reprieve(units, fits, [], NOW)
    assert victims is not None
    assert [unit.name for unit in victims] == ["ns/x"]  # y (priority 3) is tried first and stays
    assert reprieve(units, lambda evicted: False, [], NOW) is None


def test_freed_room_split_over_numa_cells_evicts_nothing_on_a_single_numa_node() -> None:
    node = nvswitch_node(cells=2, settings=kubelet("single-numa-node"))  # GPUs 0-3 on cell 0, 4-7 on cell 1
    scene = Scene({"a": node})
    scene.place("low0", "a", (0, 1), priority=1)
    scene.place("low1", "a", (4, 5), priority=1)
    scene.place("high0", "a", (2, 3), priority=1000)
    scene.place("high1", "a", (6, 7), priority=1000)
    result = scene.preempt([preemptor(gpus=4)])
    assert isinstance(result, NoPreemption)  # 4 GPUs freed in all, 2 per cell: TopologyAffinityError
    assert "kubelet" in result.reason
    assert "a" in result.reason


def test_an_eight_gpu_pod_on_an_hgx_node_evicts_the_pods_holding_the_nvlink_set() -> None:
    scene = Scene({"hgx": hgx(), "other": hgx()})
    for gpu in range(8):
        scene.place(f"low{gpu}", "hgx", (gpu,), priority=1, cpus=4)
    scene.place("other-high", "other", tuple(range(8)), priority=1000)
    result = scene.preempt([preemptor(gpus=8, cpus=16)])
    assert evicted(result) == {f"low{gpu}" for gpu in range(8)}
    assert isinstance(result, Preemption)
    assert result.nominations == ((("ns", "big"), "hgx"),)


def test_gpus_held_by_shares_count_as_freed_when_the_shares_go() -> None:
    """Every GPU of the node holds a GPU share (``alibabacloud.com/gpu-milli``): the node counts each as taken
    for whole-GPU requests, and only evicting the shares frees them."""
    scene = Scene({"shared": hgx(), "busy": hgx()})
    for gpu in range(8):
        share = Pod(containers=(Container("main", cpu_millis=2000, memory=GIB, devices=((GPU_SHARE, 500),)),))
        scene.index.upsert_pod(PodUsage("ns", f"share{gpu}", "shared", demand_of(share), gpus=(gpu,)))
        scene.index.facts.put_pod(PlacedPod("ns", f"share{gpu}", "shared", priority=1))
    scene.place("busy-high", "busy", tuple(range(8)), priority=1000)
    result = scene.preempt([preemptor(gpus=8, cpus=16)])
    assert evicted(result) == {f"share{gpu}" for gpu in range(8)}
    assert isinstance(result, Preemption)
    assert result.nominations == ((("ns", "big"), "shared"),)


def test_a_two_gpu_pod_evicts_the_pods_on_an_nvlink_bridged_pair() -> None:
    scene = Scene({"pcie": pcie_node(policy="none")})  # bridged pairs 0-2, 1-3, 4-5, 6-7; SYS otherwise
    for gpu in range(8):
        scene.place(f"low{gpu}", "pcie", (gpu,), priority=1, cpus=2)
    result = scene.preempt([preemptor(gpus=2, cpus=4)])
    victims = evicted(result)
    bridged = [{"low0", "low2"}, {"low1", "low3"}, {"low4", "low5"}, {"low6", "low7"}]
    assert victims in bridged


def test_a_gang_requiring_one_rack_preempts_inside_one_rack() -> None:
    nodes = {f"n{i}": hgx() for i in range(4)}
    racks = {"n0": "r1", "n1": "r2", "n2": "r1", "n3": "r2"}
    scene = Scene(nodes, labels={name: {RACK_KEY: rack} for name, rack in racks.items()})
    scene.place("cheap", "n0", tuple(range(8)), priority=1)  # rack r1
    scene.place("dear", "n2", tuple(range(8)), priority=50)  # rack r1
    scene.place("mid1", "n1", tuple(range(8)), priority=10)  # rack r2
    scene.place("mid3", "n3", tuple(range(8)), priority=10)  # rack r2
    members = [member(f"m{i}", "job", 2, gpus=8, priority=100) for i in range(2)]
    result = scene.preempt(members, constraints=(DomainConstraint("rack", required=True),))
    # Rack r1 would cost a priority-50 victim; r2's highest victim priority is 10.
    assert evicted(result) == {"mid1", "mid3"}
    assert isinstance(result, Preemption)
    assert sorted(node for _, node in result.nominations) == ["n1", "n3"]
    unconstrained = scene.preempt(members)
    assert evicted(unconstrained) == {"cheap", "mid1"} or evicted(unconstrained) == {"cheap", "mid3"}


def test_a_gang_waits_when_no_rack_can_hold_it() -> None:
    nodes = {f"n{i}": hgx() for i in range(2)}
    scene = Scene(nodes, labels={"n0": {RACK_KEY: "r1"}, "n1": {RACK_KEY: "r2"}})
    scene.place("a", "n0", tuple(range(8)), priority=1)
    scene.place("b", "n1", tuple(range(8)), priority=1)
    members = [member(f"m{i}", "job", 2, gpus=8, priority=100) for i in range(2)]
    result = scene.preempt(members, constraints=(DomainConstraint("rack", required=True),))
    assert isinstance(result, NoPreemption)
    assert result.reason.endswith("its members must all be in one rack")


def claiming_preemptor(claim: str, *, name: str = "big", priority: int = 100) -> PendingPod:
    """A pod of ``ns`` whose GPUs come from the ResourceClaim ``claim``."""
    return PendingPod(
        "ns",
        name,
        pod(cpus=8, memory_gib=32),
        priority=priority,
        uid=f"uid-{name}",
        resource_claims=(PodResourceClaim(name="gpus", claim_name=claim),),
    )


def dra_scene(*nodes: str) -> Scene:
    scene = Scene({})
    scene.index = dra_index(*nodes)
    return scene


def test_a_pod_with_a_gpu_claim_preempts_exactly_the_pod_whose_claim_holds_the_devices_it_needs() -> None:
    scene = dra_scene("a")
    place_claiming(scene.index, "low", "a", gpus=(0, 1, 2, 3), priority=5, namespace="ns")
    place_claiming(scene.index, "higher", "a", gpus=(4, 5, 6, 7), priority=50, namespace="ns")
    place_claiming(scene.index, "cpu-only", "a", priority=1, namespace="ns")  # no devices: not needed
    scene.index.dra.set_claim(parse_resource_claim(gpu_claim("big-gpus", 4, namespace="ns")))
    result = scene.preempt([claiming_preemptor("big-gpus")])
    assert evicted(result) == {"low"}
    assert isinstance(result, Preemption)
    assert result.nominations == ((("ns", "big"), "a"),)
    with scene.index.lock:
        taken = scene.index.dra.inventory("a", {"kubernetes.io/hostname": "a"}).taken
    assert len(taken) == 8  # the decision itself frees nothing


def test_a_claim_shared_with_a_higher_priority_pod_is_never_counted_as_freed() -> None:
    scene = dra_scene("a")
    place_claiming(scene.index, "low", "a", priority=5, namespace="ns")
    place_claiming(scene.index, "keeper", "a", priority=500, namespace="ns")
    shared = allocated_claim("shared", "a", (0, 1, 2, 3), namespace="ns", reserved_for=["low", "keeper"])
    scene.index.dra.set_claim(parse_resource_claim(shared))
    place_claiming(scene.index, "mid", "a", gpus=(4, 5, 6, 7), priority=10, namespace="ns")
    scene.index.dra.set_claim(parse_resource_claim(gpu_claim("big-gpus", 4, namespace="ns")))
    # "low" has the lowest priority, but its claim stays with "keeper": only "mid" frees devices.
    assert evicted(scene.preempt([claiming_preemptor("big-gpus")])) == {"mid"}
    with scene.index.lock:
        assert scene.index.dra.freed_by({("ns", "low"): "uid-low"}) == frozenset()
        both = scene.index.dra.freed_by({("ns", "low"): "uid-low", ("ns", "keeper"): "uid-keeper"})
    assert sorted(ref.device for ref in both) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_claims_that_no_eviction_frees_enough_devices_for_evict_nobody() -> None:
    scene = dra_scene("a")
    place_claiming(scene.index, "low", "a", gpus=(0, 1), priority=5, namespace="ns")
    place_claiming(scene.index, "high", "a", gpus=(2, 3, 4, 5, 6, 7), priority=500, namespace="ns")
    scene.index.dra.set_claim(parse_resource_claim(gpu_claim("big-gpus", 4, namespace="ns")))
    result = scene.preempt([claiming_preemptor("big-gpus")])
    assert isinstance(result, NoPreemption)
    assert "its ResourceClaims do not fit even with them all gone, on node a, cannot allocate all claims" in (
        result.reason
    )


def test_a_preemptor_whose_claim_is_allocated_on_another_node_is_refused_with_the_reason() -> None:
    scene = dra_scene("a", "b")
    place_claiming(scene.index, "low", "a", gpus=tuple(range(8)), priority=5, namespace="ns")
    place_claiming(scene.index, "other", "b", gpus=(0,), priority=5, namespace="ns")
    placed = allocated_claim("big-gpus", "b", (1, 2, 3, 4), namespace="ns", reserved_for=[])
    scene.index.dra.set_claim(parse_resource_claim(placed))
    result = scene.preempt([claiming_preemptor("big-gpus")], candidates=["a"])
    assert isinstance(result, NoPreemption)
    assert result.reason == (
        "pod ns/big (priority 100) uses ResourceClaims ns/big-gpus allocated already to devices that no candidate "
        "node can use: it must run where they are, and eviction does not move an allocated claim, so it evicts "
        "nobody"
    )


def claiming_gang(scene: Scene, size: int, *, gpus: int = 4) -> list[PendingPod]:
    """The pending members ``m0``.. of a gang, each with its own unallocated claim for ``gpus`` GPUs."""
    for i in range(size):
        scene.index.dra.set_claim(parse_resource_claim(gpu_claim(f"m{i}-gpus", gpus, namespace="ns")))
    return [claiming_preemptor(f"m{i}-gpus", name=f"m{i}") for i in range(size)]


def test_a_gang_with_gpu_claims_preempts_exactly_the_holders_of_the_devices_it_needs() -> None:
    scene = dra_scene("a", "b")
    for node in ("a", "b"):
        place_claiming(scene.index, f"low-{node}", node, gpus=(0, 1, 2, 3), priority=5, namespace="ns")
        place_claiming(scene.index, f"high-{node}", node, gpus=(4, 5, 6, 7), priority=500, namespace="ns")
        place_claiming(scene.index, f"cpu-only-{node}", node, priority=1, namespace="ns")  # frees no device
    result = scene.preempt(claiming_gang(scene, 2))
    assert evicted(result) == {"low-a", "low-b"}
    assert isinstance(result, Preemption)
    assert sorted(result.nominations) == [(("ns", "m0"), "a"), (("ns", "m1"), "b")]
    with scene.index.lock:
        assert len(scene.index.dra.inventory("a", {"kubernetes.io/hostname": "a"}).taken) == 8  # nothing freed


def test_two_members_that_need_the_same_freed_devices_are_not_both_counted_on_one_node() -> None:
    scene = dra_scene("a", "b", "c")
    for node, rack in (("a", "r1"), ("b", "r2"), ("c", "r2")):
        scene.index.facts.set_node(NodeFacts(node, labels=(("kubernetes.io/hostname", node), (RACK_KEY, rack))))
    # Evicting "cheap" frees 4 GPUs on a: either member alone fits there, both together do not, so rack r1
    # cannot hold the gang (counted twice, the cheapest rack would be r1, and the gang would wait).
    place_claiming(scene.index, "cheap", "a", gpus=(0, 1, 2, 3), priority=5, namespace="ns")
    place_claiming(scene.index, "keeper", "a", gpus=(4, 5, 6, 7), priority=500, namespace="ns")
    place_claiming(scene.index, "dearer-b", "b", gpus=tuple(range(8)), priority=10, namespace="ns")
    place_claiming(scene.index, "dearer-c", "c", gpus=tuple(range(8)), priority=10, namespace="ns")
    result = scene.preempt(claiming_gang(scene, 2), constraints=(DomainConstraint("rack", required=True),))
    # 8 GPUs freed on b hold both members: each takes 4 of them, not the same 4.
    assert evicted(result) == {"dearer-b"}
    assert isinstance(result, Preemption)
    assert sorted(result.nominations) == [(("ns", "m0"), "b"), (("ns", "m1"), "b")]


def test_a_gang_whose_claims_no_eviction_frees_enough_devices_for_evicts_nobody_naming_the_claim() -> None:
    scene = dra_scene("a")
    place_claiming(scene.index, "low", "a", gpus=(0, 1), priority=5, namespace="ns")
    place_claiming(scene.index, "high", "a", gpus=(2, 3, 4, 5, 6, 7), priority=500, namespace="ns")
    result = scene.preempt(claiming_gang(scene, 2))
    assert isinstance(result, NoPreemption)
    assert result.reason.startswith("no preemption for the 2 pending members of ns/... (priority 100)")
    assert (
        "its members' ResourceClaims do not fit even with them all gone, on node a, member ns/m0: cannot allocate "
        "all claims: claim ns/m0-gpus"
    ) in result.reason


def test_a_gang_member_whose_claim_is_allocated_on_another_node_stays_there() -> None:
    scene = dra_scene("a", "b")
    place_claiming(scene.index, "low-a", "a", gpus=tuple(range(8)), priority=5, namespace="ns")
    place_claiming(scene.index, "low-b", "b", gpus=(4, 5, 6, 7), priority=5, namespace="ns")
    gang = claiming_gang(scene, 2)
    placed = allocated_claim("m1-gpus", "b", (0, 1, 2, 3), namespace="ns", reserved_for=[])
    scene.index.dra.set_claim(parse_resource_claim(placed))
    result = scene.preempt(gang)
    assert isinstance(result, Preemption), result
    assert dict(result.nominations)[("ns", "m1")] == "b"
    refused = scene.preempt(gang, candidates=["a"])
    assert isinstance(refused, NoPreemption)
    assert "on node a, member ns/m1: resourceclaim not available on the node" in refused.reason


def test_the_tenant_tier_breaks_a_tie_before_the_node_name() -> None:
    scene = Scene({"a": hgx(), "b": hgx()})
    scene.place("gold", "a", tuple(range(8)), priority=5, labels={"tier": "gold"})
    scene.place("bronze", "b", tuple(range(8)), priority=5, labels={"tier": "bronze"})

    def tier(namespace: str, labels: Mapping[str, str]) -> int:
        return {"gold": 2, "bronze": 1}.get(labels.get("tier", ""), 0)

    assert evicted(scene.preempt([preemptor(gpus=8)])) == {"gold"}  # node a sorts first without tiers
    assert evicted(scene.preempt([preemptor(gpus=8)], victim_tier=tier)) == {"bronze"}


def test_the_decision_changes_nothing() -> None:
    scene = two_full_nodes(priority_a=1, priority_b=1)
    before = scene.index.arrays().cell_free.copy()
    scene.preempt([preemptor(gpus=8)])
    assert (scene.index.arrays().cell_free == before).all()
    assert len(scene.index.pods_on("a")) == 4
