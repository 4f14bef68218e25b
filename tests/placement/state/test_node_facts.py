"""The scheduling facts in step with the index's slots: label columns, taints, cordon and readiness per slot,
placed pods with their slots, and the versions the constraint plugins memoise on."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from placement.core.constraints.constraint_types import (
    ClaimFacts,
    NodeFacts,
    NodeSelectorTerm,
    Operator,
    PlacedPod,
    Requirement,
    Taint,
    TaintEffect,
)
from placement.core.constraints.view import ClusterView
from placement.state.cluster_index import ClusterIndex
from placement.state.scheduling_facts import ABSENT, ClaimSource, SchedulingFacts
from tests.machines.node_topologies import cpu_node

NO_SCHEDULE = Taint("dedicated", TaintEffect.NO_SCHEDULE, "ml")
NOT_READY = Taint("node.kubernetes.io/not-ready", TaintEffect.NO_EXECUTE)


def _with_slot(index: ClusterIndex, name: str) -> int:
    index.upsert_topology(name, cpu_node())
    slot = index.slot_of(name)
    assert slot is not None
    return slot


def _labels_at(view: ClusterView, key: str, slot: int) -> str | None:
    codes, values = view.label_column(key)
    code = int(codes[slot])
    return None if code == ABSENT else values[code]


def _taints_at(view: ClusterView, slot: int) -> set[Taint]:
    taints, matrix = view.taint_columns()
    assert matrix.shape == (view.capacity, len(taints))
    return {taint for taint, carried in zip(taints, matrix[slot], strict=True) if carried}


def _placed(view: ClusterView) -> dict[tuple[str, str], int]:
    pods, slots = view.placed_pods()
    assert len(pods) == len(slots)
    return {(pod.namespace, pod.name): int(slot) for pod, slot in zip(pods, slots, strict=True)}


def test_the_index_keeps_a_cluster_view() -> None:
    view: ClusterView = ClusterIndex().facts
    assert view.capacity == 64
    assert len(view.node_names()) == view.unschedulable.shape[0] == 64


def test_node_facts_wait_by_name_for_the_slot_and_follow_label_changes_slot_by_slot() -> None:
    index = ClusterIndex()
    facts = index.facts
    facts.set_node(NodeFacts("a", labels=(("zone", "z1"),)))  # the Node object before the topology
    assert facts.label_column("zone") == (facts.label_column("nothing")[0], ())  # no slot carries it yet
    a = _with_slot(index, "a")
    b = _with_slot(index, "b")  # a topology without a Node object (yet): the model's defaults
    assert facts.node_names()[a] == "a"
    assert (_labels_at(facts, "zone", a), _labels_at(facts, "zone", b)) == ("z1", None)
    assert not facts.unschedulable[b]

    codes, _ = facts.label_column("zone")
    version = facts.labels_version
    facts.set_node(NodeFacts("b", labels=(("zone", "z2"),)))
    assert facts.labels_version == version + 1
    assert facts.label_column("zone")[0] is codes, "a change writes the slot, the column stays"
    assert (_labels_at(facts, "zone", a), _labels_at(facts, "zone", b)) == ("z1", "z2")
    facts.set_node(NodeFacts("a", labels=(("zone", "z2"), ("rack", "r1"))))
    assert _labels_at(facts, "zone", a) == "z2"
    assert _labels_at(facts, "rack", a) == "r1"
    assert facts.label_column("zone")[1][int(codes[a])] == "z2"
    facts.set_node(NodeFacts("a"))
    assert _labels_at(facts, "zone", a) is None
    assert _labels_at(facts, "rack", a) is None
    assert facts.label_column("rack") == (facts.label_column("nothing")[0], ()), "no node carries rack now"


def test_an_absent_key_allocates_nothing_and_cannot_be_written() -> None:
    facts = ClusterIndex().facts
    codes, values = facts.label_column("typo.example.com/key")
    assert values == ()
    assert (codes == ABSENT).all()
    assert not codes.flags.writeable


def test_taints_grow_columns_and_a_taint_no_node_carries_gives_its_column_back() -> None:
    index = ClusterIndex()
    facts = index.facts
    a, b = _with_slot(index, "a"), _with_slot(index, "b")
    many = [Taint(f"key-{n}", TaintEffect.NO_SCHEDULE) for n in range(20)]  # more than the first columns
    facts.set_node(NodeFacts("a", taints=(NO_SCHEDULE, *many)))
    facts.set_node(NodeFacts("b", taints=(NO_SCHEDULE, NOT_READY)))
    assert _taints_at(facts, a) == {NO_SCHEDULE, *many}
    assert _taints_at(facts, b) == {NO_SCHEDULE, NOT_READY}
    facts.set_node(NodeFacts("a", taints=(NOT_READY,)))
    taints, matrix = facts.taint_columns()
    assert set(taints) == {NO_SCHEDULE, NOT_READY}, "the columns stay dense"
    assert _taints_at(facts, a) == {NOT_READY}
    assert _taints_at(facts, b) == {NO_SCHEDULE, NOT_READY}
    assert matrix.sum() == 3


def test_cordon_and_uncordon() -> None:
    index = ClusterIndex()
    facts = index.facts
    a = _with_slot(index, "a")
    facts.set_node(NodeFacts("a", unschedulable=True))
    assert facts.unschedulable[a]
    facts.set_node(NodeFacts("a"))
    assert not facts.unschedulable[a]


def test_unchanged_facts_bump_no_version() -> None:
    index = ClusterIndex()
    facts = index.facts
    _with_slot(index, "a")
    node = NodeFacts("a", labels=(("zone", "z1"),), taints=(NO_SCHEDULE,))
    assert facts.set_node(node)
    versions = (facts.labels_version, facts.pods_version, index.changes)
    for _ in range(3):
        assert not facts.set_node(NodeFacts("a", labels=(("zone", "z1"),), taints=(NO_SCHEDULE,)))
    facts.put_pod(PlacedPod("ns", "p", "a"))
    pods_version = facts.pods_version
    facts.put_pod(PlacedPod("ns", "p", "a"))
    assert (facts.labels_version, facts.pods_version) == (versions[0], pods_version)
    assert index.changes == versions[2], "the index's resource verdicts are not touched by facts"


def test_node_removal_frees_the_slot_and_a_reused_slot_starts_clean() -> None:
    index = ClusterIndex(initial_capacity=2)
    facts = index.facts
    facts.set_node(NodeFacts("a", labels=(("zone", "z1"),), taints=(NO_SCHEDULE,), unschedulable=True))
    a = _with_slot(index, "a")
    facts.put_pod(PlacedPod("ns", "on-a", "a"))
    assert _labels_at(facts, "zone", a) == "z1"
    version = facts.labels_version
    index.remove_node("a")
    assert facts.labels_version > version
    assert facts.node_names()[a] is None
    assert facts.label_column("zone")[1] == (), "no slot carries the key now"
    assert not facts.unschedulable[a]
    assert facts.taint_columns()[0] == ()
    assert _placed(facts) == {}
    c = _with_slot(index, "c")
    assert c == a, "the freed slot is reused"
    assert _labels_at(facts, "zone", c) is None
    assert _taints_at(facts, c) == set()
    assert not facts.unschedulable[c]
    # "a" comes back (its Node object never went): its facts and pods come back with it.
    a = _with_slot(index, "a")
    assert _labels_at(facts, "zone", a) == "z1"
    assert _placed(facts) == {("ns", "on-a"): a}
    facts.remove_node("a")  # the Node object deleted: the slot holds the defaults until the index frees it
    assert _labels_at(facts, "zone", a) is None


def test_growth_keeps_every_column_in_step() -> None:
    index = ClusterIndex(initial_capacity=2)
    facts = index.facts
    for n in range(2):
        facts.set_node(NodeFacts(f"n{n}", labels=(("zone", f"z{n}"),), taints=(NO_SCHEDULE,)))
        _with_slot(index, f"n{n}")
    codes, _ = facts.label_column("zone")
    assert len(codes) == 2
    for n in range(2, 9):
        facts.set_node(NodeFacts(f"n{n}", labels=(("zone", f"z{n}"),), unschedulable=True))
        _with_slot(index, f"n{n}")
    assert facts.capacity == index.capacity == 16
    assert len(facts.label_column("zone")[0]) == facts.taint_columns()[1].shape[0] == 16
    for n in range(9):
        slot = index.slot_of(f"n{n}")
        assert slot is not None
        assert _labels_at(facts, "zone", slot) == f"z{n}"
        assert bool(facts.unschedulable[slot]) == (n >= 2)
        assert _taints_at(facts, slot) == ({NO_SCHEDULE} if n < 2 else set())


def test_a_column_of_mostly_dead_values_is_made_again() -> None:
    index = ClusterIndex()
    facts = index.facts
    a = _with_slot(index, "a")
    facts.label_column("host")  # made while no node has the key: nothing kept
    facts.set_node(NodeFacts("a", labels=(("host", "h0"),)))
    facts.label_column("host")
    for n in range(1, 200):  # a node renamed over and over: 199 values no node carries
        facts.set_node(NodeFacts("a", labels=(("host", f"h{n}"),)))
    codes, values = facts.label_column("host")
    assert len(values) < 100
    assert values[int(codes[a])] == "h199"


def test_placed_pods_follow_puts_moves_and_removals_with_their_slots() -> None:
    index = ClusterIndex()
    facts = index.facts
    a, b = _with_slot(index, "a"), _with_slot(index, "b")
    facts.put_pod(PlacedPod("ns", "p1", "a", labels=(("app", "web"),)))
    facts.put_pod(PlacedPod("ns", "p2", "b"))
    facts.put_pod(PlacedPod("ns", "p3", "a"))
    assert _placed(facts) == {("ns", "p1"): a, ("ns", "p2"): b, ("ns", "p3"): a}
    version = facts.pods_version
    facts.put_pod(PlacedPod("ns", "p1", "a", labels=(("app", "api"),)))  # relabelled
    assert facts.pods_version == version + 1
    assert facts.pod("ns", "p1") == PlacedPod("ns", "p1", "a", labels=(("app", "api"),))
    facts.put_pod(PlacedPod("ns", "p1", "b"))  # moved (a reservation bound elsewhere)
    assert _placed(facts) == {("ns", "p1"): b, ("ns", "p2"): b, ("ns", "p3"): a}
    facts.remove_pod("ns", "p2")
    facts.remove_pod("ns", "never-seen")
    assert _placed(facts) == {("ns", "p1"): b, ("ns", "p3"): a}
    pods, _ = facts.placed_pods()
    assert {pod.name: pod.labels for pod in pods}["p1"] == ()


def test_pods_on_a_node_without_a_slot_count_once_it_has_one() -> None:
    index = ClusterIndex()
    facts = index.facts
    facts.put_pod(PlacedPod("ns", "early", "late-node"))
    version = facts.pods_version
    assert _placed(facts) == {}
    facts.put_pod(PlacedPod("ns", "early", "late-node", labels=(("v", "2"),)))  # not in the view: no bump
    assert facts.pods_version == version
    slot = _with_slot(index, "late-node")
    assert facts.pods_version > version
    assert _placed(facts) == {("ns", "early"): slot}
    assert facts.pod("ns", "early") == PlacedPod("ns", "early", "late-node", labels=(("v", "2"),))
    facts.put_pod(PlacedPod("ns", "early", "elsewhere"))
    assert _placed(facts) == {}
    facts.remove_pod("ns", "early")
    assert facts.pod("ns", "early") is None


def test_namespaces_priority_classes_and_claims() -> None:
    facts = SchedulingFacts()
    assert facts.namespace_labels("ml") is None
    version = facts.pods_version
    facts.set_namespace("ml", (("team", "a"),))
    facts.set_namespace("ml", (("team", "a"),))
    assert facts.pods_version == version + 1, "namespace selectors read the labels; an unchanged write bumps nothing"
    assert facts.namespace_labels("ml") == (("team", "a"),)
    facts.remove_namespace("ml")
    assert facts.namespace_labels("ml") is None

    assert facts.priority("") == 0
    facts.set_priority_class("high", 1000, global_default=False)
    facts.set_priority_class("low", -5, global_default=True)
    facts.set_priority_class("lower", -10, global_default=True)  # two defaults: admission takes the lowest
    assert (facts.priority("high"), facts.priority(""), facts.priority("missing")) == (1000, -10, None)
    facts.remove_priority_class("lower")
    assert facts.priority("") == -5

    zone = NodeSelectorTerm(match_expressions=(Requirement("zone", Operator.IN, ("z1",)),))
    facts.set_claim("ml", "data", ClaimSource(volume="pv-1"))
    assert facts.claim("ml", "data") is None, "bound to a volume not seen yet"
    facts.set_volume("pv-1", (zone,))
    assert facts.claim("ml", "data") == ClaimFacts(bound=True, node_affinity=(zone,))
    facts.set_volume("pv-1", None)
    assert facts.claim("ml", "data") == ClaimFacts(bound=True)
    facts.set_claim("ml", "scratch", ClaimSource(storage_class="local"))
    assert facts.claim("ml", "scratch") == ClaimFacts(bound=False)
    facts.set_storage_class("local", wait_for_first_consumer=True)
    assert facts.claim("ml", "scratch") == ClaimFacts(bound=False, wait_for_first_consumer=True)
    facts.set_claim("ml", "scratch", ClaimSource(storage_class="local", selected_node="n1"))
    only_n1 = NodeSelectorTerm(match_fields=(Requirement("metadata.name", Operator.IN, ("n1",)),))
    assert facts.claim("ml", "scratch") == ClaimFacts(
        bound=False, node_affinity=(only_n1,), wait_for_first_consumer=True
    )
    facts.remove_claim("ml", "scratch")
    facts.remove_volume("pv-1")
    facts.remove_storage_class("local")
    assert facts.claim("ml", "scratch") is None
    assert facts.claim("ml", "data") is None


def test_nodes_and_pods_share_their_label_pairs_taints_and_label_sets() -> None:
    facts = SchedulingFacts()
    for name in ("a", "b"):  # strings and tuples made apart, as two watch events make them
        facts.set_node(NodeFacts(name, labels=(("".join(["zo", "ne"]), "".join(["z", "1"])),), taints=(NO_SCHEDULE,)))
    a, b = facts.node("a"), facts.node("b")
    assert a is not None
    assert b is not None
    assert a.labels[0] is b.labels[0]
    assert a.taints[0] is b.taints[0]
    for n in range(3000):  # past the pool's first sweep: label sets of pods gone are dropped
        facts.put_pod(PlacedPod("ns", f"p{n}", "a", labels=(("app", f"app-{n}"),)))
        if n >= 10:
            facts.remove_pod("ns", f"p{n - 10}")
    for n in range(2990, 3000):
        pod = facts.pod("ns", f"p{n}")
        assert pod is not None
        assert pod.labels == (("app", f"app-{n}"),)
    facts.put_pod(PlacedPod("ns", "twin", "a", labels=(("app", "app-2999"),)))
    twin, original = facts.pod("ns", "twin"), facts.pod("ns", "p2999")
    assert twin is not None
    assert original is not None
    assert twin.labels is original.labels


# --- the columns against a plain model, over random histories -----------------------------------------

NAMES = ("a", "b", "c", "d", "e")
TAINTS = (NO_SCHEDULE, NOT_READY, Taint("gpu", TaintEffect.PREFER_NO_SCHEDULE, "x"))
KEYS = ("zone", "rack", "host")

node_facts = st.builds(
    NodeFacts,
    name=st.sampled_from(NAMES),
    labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(("1", "2", "3")), max_size=3).map(
        lambda labels: tuple(sorted(labels.items()))
    ),
    taints=st.sets(st.sampled_from(TAINTS)).map(tuple),
    unschedulable=st.booleans(),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("node"), node_facts),
        st.tuples(st.just("node gone"), st.sampled_from(NAMES)),
        st.tuples(st.just("slot"), st.sampled_from(NAMES)),
        st.tuples(st.just("slot gone"), st.sampled_from(NAMES)),
        st.tuples(st.just("pod"), st.tuples(st.integers(0, 6), st.sampled_from(NAMES))),
        st.tuples(st.just("pod gone"), st.integers(0, 6)),
        st.tuples(st.just("read"), st.sampled_from(KEYS)),
    ),
    max_size=40,
)


@given(steps)
def test_the_view_equals_a_plain_model_after_any_history(history: list[tuple[str, object]]) -> None:
    index = ClusterIndex(initial_capacity=2)
    facts = index.facts
    nodes: dict[str, NodeFacts] = {}
    pods: dict[int, str] = {}
    for step, value in history:
        if step == "node":
            assert isinstance(value, NodeFacts)
            facts.set_node(value)
            nodes[value.name] = value
        elif step == "node gone":
            facts.remove_node(str(value))
            nodes.pop(str(value), None)
        elif step == "slot":
            index.upsert_topology(str(value), cpu_node())
        elif step == "slot gone":
            index.remove_node(str(value))
        elif step == "pod":
            assert isinstance(value, tuple)
            facts.put_pod(PlacedPod("ns", str(value[0]), value[1]))
            pods[value[0]] = value[1]
        elif step == "pod gone":
            facts.remove_pod("ns", str(value))
            pods.pop(int(str(value)), None)
        else:
            facts.label_column(str(value))  # a column made mid-history is kept in step from then on
    for slot, name in enumerate(facts.node_names()):
        assert name == index.name_of(slot)
        expected = None if name is None else nodes.get(name, NodeFacts(name))
        labels = dict(expected.labels) if expected is not None else {}
        assert {key: _labels_at(facts, key, slot) for key in KEYS} == {key: labels.get(key) for key in KEYS}
        assert _taints_at(facts, slot) == (set(expected.taints) if expected is not None else set())
        assert bool(facts.unschedulable[slot]) == (expected is not None and expected.unschedulable)
    slots = {name: index.slot_of(name) for name in NAMES}
    assert _placed(facts) == {("ns", str(pod)): slots[node] for pod, node in pods.items() if slots[node] is not None}
    assert len(set(facts.taint_columns()[0])) == len(facts.taint_columns()[0])


def test_label_columns_are_integer_codes_per_slot() -> None:
    index = ClusterIndex()
    facts = index.facts
    for n in range(3):
        facts.set_node(NodeFacts(f"n{n}", labels=(("zone", f"z{n % 2}"),)))
        _with_slot(index, f"n{n}")
    codes, values = facts.label_column("zone")
    assert codes.dtype == np.int64
    assert sorted({values[int(codes[slot])] for slot in range(index.capacity) if codes[slot] != ABSENT}) == ["z0", "z1"]
