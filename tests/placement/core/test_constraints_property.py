"""The vectorised constraint plugins equal the reference, pod by pod and node by node.

Random clusters over a small vocabulary (so that labels, taints, ports and terms collide often): nodes with
labels (GPU Feature Discovery's among them, some malformed), taints and cordons, some slots free;
placed pods with labels, host ports and every kind of inter-pod term; namespaces with and without labels;
claims in every state. Random incoming pods use every operator, toleration form, spread policy, term field
and GPU requirement. The filter must give each node the same first
refusal (message, kind, stage) and the scores must be equal. The same memo is then reused after the cluster
changes (versions bumped), which must not change any answer.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.core.constraints import reference
from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.constraint_types import (
    ClaimFacts,
    GpuRequirements,
    HostPort,
    InclusionPolicy,
    Labels,
    LabelSelector,
    NodeAffinity,
    NodeFacts,
    NodeSelectorTerm,
    Operator,
    PlacedPod,
    PodAffinity,
    PodAffinityTerm,
    PodConstraints,
    PreferredSchedulingTerm,
    Requirement,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
    WhenUnsatisfiable,
)
from placement.core.constraints.context import PLUGIN_WEIGHTS, PodInCluster
from placement.core.constraints.filtering import constraint_filter
from placement.core.constraints.scores import constraint_scores
from placement.core.constraints.terms import IncomingPod
from placement.core.scoring import Scores, with_constraint_scores
from tests.constraint_cluster import ListCluster

NODE_KEYS = ("zone", "rack", "kubernetes.io/hostname", "gpu", "bad key!")
NODE_VALUES = ("a", "b", "c", "1", "10", "-3")
POD_KEYS = ("app", "role", "tier")
POD_VALUES = ("web", "db", "x", "")
NAMESPACES = ("", "ns1", "ns2", "ns3")  # ns3 is never known
NAMESPACE_LABELS = {"": (("team", "a"),), "ns1": (("team", "b"),), "ns2": ()}
TOPOLOGY_KEYS = ("zone", "rack", "kubernetes.io/hostname", "gpu", "missing")
TAINTS = tuple(
    Taint(key, effect, value)
    for key in ("t1", "t2", "node.kubernetes.io/unschedulable")
    for value in ("", "x")
    for effect in TaintEffect
)
PORTS = tuple(
    HostPort(p, proto, ip) for p in (80, 8080, 0) for proto in ("TCP", "UDP", "") for ip in ("", "0.0.0.0", "10.0.0.1")
)
CLAIM_NAMES = ("data", "logs", "cache", "absent")
NODE_NAMES = tuple(f"n{i}" for i in range(7))  # nodes are named from these, in order
# GPU Feature Discovery's labels, some missing or malformed, and the pods' GPU requirements over them.
GPU_PRODUCTS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB", "Tesla-T4")
GPU_MEMORIES = ("81559", "40960", "15360", "0", "x")
GPU_REQUIREMENTS: st.SearchStrategy[GpuRequirements | None] = st.one_of(
    st.none(),
    st.builds(
        lambda mib, models: GpuRequirements(f"{mib}Mi" if mib else "", mib, models),
        st.sampled_from((0, 1, 15360, 40960, 40961, 81559, 81920)),
        st.lists(st.sampled_from((*GPU_PRODUCTS, "NVIDIA-H200")), max_size=2, unique=True).map(tuple),
    ),
)


def _labels(keys: tuple[str, ...], values: tuple[str, ...]) -> st.SearchStrategy[Labels]:
    return st.dictionaries(st.sampled_from(keys), st.sampled_from(values), max_size=3).map(
        lambda d: tuple(sorted(d.items()))
    )


POD_LABELS = _labels(POD_KEYS, POD_VALUES)
NODE_LABELS = _labels(NODE_KEYS, NODE_VALUES)


@st.composite
def nodes(draw: st.DrawFn) -> list[NodeFacts | None]:
    count = draw(st.integers(1, 7))
    slots: list[NodeFacts | None] = []
    for i in range(count):
        if draw(st.integers(0, 9)) == 0:
            slots.append(None)
        name = NODE_NAMES[i]
        labels = dict(draw(NODE_LABELS))
        if draw(st.booleans()):
            labels["kubernetes.io/hostname"] = name  # as the kubelet labels it
        if draw(st.booleans()):
            labels["nvidia.com/gpu.memory"] = draw(st.sampled_from(GPU_MEMORIES))
        if draw(st.booleans()):
            labels["nvidia.com/gpu.product"] = draw(st.sampled_from(GPU_PRODUCTS))
        taints = tuple(draw(st.sets(st.sampled_from(TAINTS), max_size=2)))
        slots.append(
            NodeFacts(
                name=name,
                labels=tuple(sorted(labels.items())),
                taints=taints,
                unschedulable=draw(st.integers(0, 5)) == 0,
            )
        )
    return slots


def _requirement(
    keys: tuple[str, ...], values: tuple[str, ...], operators: tuple[Operator, ...]
) -> st.SearchStrategy[Requirement]:
    return st.builds(
        Requirement,
        st.sampled_from(keys),
        st.sampled_from(operators),
        st.lists(st.sampled_from((*values, "bad value!")), max_size=2).map(tuple),
    )


def label_selectors(keys: tuple[str, ...], values: tuple[str, ...]) -> st.SearchStrategy[LabelSelector | None]:
    valid = st.builds(
        LabelSelector,
        _labels(keys, values),
        st.lists(
            st.one_of(
                st.builds(
                    Requirement,
                    st.sampled_from(keys),
                    st.just(Operator.IN),
                    st.lists(st.sampled_from(values), min_size=1, max_size=2).map(tuple),
                ),
                st.builds(
                    Requirement,
                    st.sampled_from(keys),
                    st.just(Operator.NOT_IN),
                    st.lists(st.sampled_from(values), min_size=1, max_size=2).map(tuple),
                ),
                st.builds(
                    Requirement, st.sampled_from(keys), st.sampled_from((Operator.EXISTS, Operator.DOES_NOT_EXIST))
                ),
            ),
            max_size=2,
        ).map(tuple),
    )
    odd = st.builds(
        LabelSelector,
        st.just(()),
        st.lists(_requirement(keys, values, tuple(Operator)), min_size=1, max_size=1).map(tuple),
    )
    return st.one_of(st.none(), st.just(LabelSelector()), valid, valid, valid, odd)


def _affinity_terms() -> st.SearchStrategy[PodAffinityTerm]:
    return st.builds(
        PodAffinityTerm,
        st.sampled_from(TOPOLOGY_KEYS),
        label_selectors(POD_KEYS, POD_VALUES),
        st.one_of(st.just(()), st.lists(st.sampled_from(NAMESPACES), max_size=2).map(tuple)),
        st.one_of(st.none(), st.none(), label_selectors(("team",), ("a", "b"))),
        st.lists(st.sampled_from(POD_KEYS), max_size=1).map(tuple),
        st.lists(st.sampled_from(POD_KEYS), max_size=1).map(tuple),
    )


AFFINITY_TERMS = _affinity_terms()
POD_AFFINITIES: st.SearchStrategy[PodAffinity | None] = st.one_of(
    st.none(),
    st.builds(
        PodAffinity,
        st.lists(AFFINITY_TERMS, max_size=2).map(tuple),
        st.lists(st.builds(WeightedPodAffinityTerm, st.integers(1, 100), AFFINITY_TERMS), max_size=2).map(tuple),
    ),
)


@st.composite
def placed_pods(draw: st.DrawFn, node_names: list[str], minimum: int = 0) -> list[PlacedPod]:
    count = draw(st.integers(minimum, 9))
    return [
        PlacedPod(
            namespace=draw(st.sampled_from(NAMESPACES)),
            name=f"p{i}",
            node=draw(st.sampled_from([*node_names, "elsewhere"])),
            labels=draw(POD_LABELS),
            host_ports=tuple(draw(st.lists(st.sampled_from(PORTS), max_size=2))),
            pod_affinity=draw(POD_AFFINITIES),
            pod_anti_affinity=draw(POD_AFFINITIES),
        )
        for i in range(count)
    ]


def _node_terms() -> st.SearchStrategy[NodeSelectorTerm]:
    expressions = st.lists(
        st.one_of(
            _requirement(NODE_KEYS, NODE_VALUES, tuple(Operator)),
            st.builds(
                Requirement,
                st.sampled_from(NODE_KEYS),
                st.sampled_from((Operator.GT, Operator.LT)),
                st.sampled_from((("2",), ("-5",), ("x",))),
            ),
        ),
        max_size=2,
    ).map(tuple)
    fields = st.lists(
        st.builds(
            Requirement,
            st.sampled_from(("metadata.name", "metadata.name", "spec.other")),
            st.sampled_from((Operator.IN, Operator.NOT_IN, Operator.EXISTS)),
            st.lists(st.sampled_from((*NODE_NAMES, "ghost")), min_size=1, max_size=2).map(tuple),
        ),
        max_size=1,
    ).map(tuple)
    return st.builds(NodeSelectorTerm, expressions, fields)


NODE_TERMS = _node_terms()


SPREAD_CONSTRAINTS: st.SearchStrategy[TopologySpreadConstraint] = st.builds(
    TopologySpreadConstraint,
    st.integers(1, 3),
    st.sampled_from(TOPOLOGY_KEYS),
    st.sampled_from(tuple(WhenUnsatisfiable)),
    label_selectors(POD_KEYS, POD_VALUES),
    st.one_of(st.none(), st.integers(1, 5)),
    st.sampled_from(tuple(InclusionPolicy)),
    st.sampled_from(tuple(InclusionPolicy)),
    st.lists(st.sampled_from(POD_KEYS), max_size=1).map(tuple),
)


TOLERATIONS = st.builds(
    Toleration,
    st.sampled_from(("", "t1", "t2", "node.kubernetes.io/unschedulable")),
    st.sampled_from(tuple(TolerationOperator)),
    st.sampled_from(("", "x")),
    st.one_of(st.none(), st.sampled_from(tuple(TaintEffect))),
)
NODE_AFFINITIES: st.SearchStrategy[NodeAffinity | None] = st.one_of(
    st.none(),
    st.builds(
        NodeAffinity,
        st.one_of(st.none(), st.lists(NODE_TERMS, max_size=2).map(tuple)),
        st.lists(st.builds(PreferredSchedulingTerm, st.integers(0, 50), NODE_TERMS), max_size=2).map(tuple),
    ),
)


@st.composite
def incoming(draw: st.DrawFn, node_names: list[str]) -> IncomingPod:
    constraints = PodConstraints(
        node_name=draw(st.one_of(st.just(""), st.just(""), st.sampled_from([*node_names, "ghost"]))),
        node_selector=draw(st.one_of(st.just(()), NODE_LABELS)),
        node_affinity=draw(NODE_AFFINITIES),
        pod_affinity=draw(POD_AFFINITIES),
        pod_anti_affinity=draw(POD_AFFINITIES),
        tolerations=tuple(draw(st.lists(TOLERATIONS, max_size=3))),
        topology_spread=tuple(draw(st.lists(SPREAD_CONSTRAINTS, max_size=2))),
        host_ports=tuple(draw(st.lists(st.sampled_from(PORTS), max_size=2))),
        scheduling_gates=("gate",) if draw(st.integers(0, 30)) == 0 else (),
        claims=tuple(draw(st.lists(st.sampled_from(CLAIM_NAMES), max_size=2, unique=True))),
        gpu=draw(GPU_REQUIREMENTS),
    )
    return IncomingPod(draw(st.sampled_from(NAMESPACES)), draw(POD_LABELS), constraints)


@st.composite
def claims(draw: st.DrawFn, namespace: str, node_names: list[str]) -> dict[tuple[str, str], ClaimFacts]:
    """Every claim but "absent"; mostly bound, some unbound in each binding mode."""
    found = {}
    for name in CLAIM_NAMES[:-1]:
        kind = draw(st.integers(0, 9))
        if kind <= 5:
            terms = draw(st.one_of(st.none(), st.lists(NODE_TERMS, max_size=2).map(tuple)))
            found[(namespace, name)] = ClaimFacts(bound=True, node_affinity=terms)
        elif kind == 6:
            found[(namespace, name)] = ClaimFacts(bound=False)
        elif kind == 7:
            found[(namespace, name)] = ClaimFacts(bound=False, wait_for_first_consumer=True)
        else:
            selected = draw(st.sampled_from(node_names))
            only = (NodeSelectorTerm(match_fields=(Requirement("metadata.name", Operator.IN, (selected,)),)),)
            found[(namespace, name)] = ClaimFacts(bound=False, node_affinity=only, wait_for_first_consumer=True)
    return found


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ListCluster, IncomingPod, IncomingPod]:
    slots = draw(nodes())
    names = [n.name for n in slots if n is not None]
    pods = draw(placed_pods(names))
    first, second = draw(incoming(names)), draw(incoming(names))
    known = {ns: labels for ns, labels in NAMESPACE_LABELS.items() if draw(st.integers(0, 4)) != 0}
    cluster = ListCluster(slots, pods, known, draw(claims(first.namespace, names)))
    return cluster, first, second


def assert_same(cluster: ListCluster, pod: IncomingPod, cache: ConstraintCache) -> None:
    facts = cluster.facts()
    rows = cluster.rows()
    names = [n.name for n in facts.nodes]
    verdict = constraint_filter(cluster, rows, pod.namespace, pod.labels, pod.constraints, cache=cache)
    for position, name in enumerate(names):
        judged = reference.filter_node(facts, pod, name)
        got = verdict.rejected(position)
        assert got == (None if judged is None else judged[1]), name
        assert verdict.stage(position) == (None if judged is None else judged[0]), name
    candidates = [n for n, ok in zip(names, verdict.feasible.tolist(), strict=True) if ok] or names
    for chosen in (names, candidates):
        want = reference.score_nodes(facts, pod, chosen)
        got_scores = constraint_scores(
            cluster, cluster.rows(chosen), pod.namespace, pod.labels, pod.constraints, cache=cache
        )
        for plugin, expected in want.items():
            assert got_scores[plugin].tolist() == [float(v) for v in expected], plugin


@settings(max_examples=100)  # 300 before: 18 s of a suite that must stay under 5 minutes
@given(scenarios(), st.data())
def test_vectorised_equals_reference(
    scenario: tuple[ListCluster, IncomingPod, IncomingPod], data: st.DataObject
) -> None:
    cluster, first, second = scenario
    cache = ConstraintCache()
    assert_same(cluster, first, cache)
    assert_same(cluster, second, cache)
    # The cluster changes under the same memo: a pod arrives, a node is relabelled, a namespace relabelled.
    names = [n.name for n in cluster.slots if n is not None]
    cluster.pods.append(data.draw(placed_pods(names, minimum=1))[0])
    cluster.touch_pods()
    assert_same(cluster, first, cache)
    slot = data.draw(st.sampled_from([s for s, n in enumerate(cluster.slots) if n is not None]))
    node = cluster.slots[slot]
    assert node is not None
    cluster.slots[slot] = NodeFacts(node.name, data.draw(NODE_LABELS), node.taints, node.unschedulable)
    cluster.touch_labels()
    cluster.namespaces["ns2"] = (("team", "a"),)  # namespace labels may change without a version bump
    assert_same(cluster, second, cache)
    assert_same(cluster, first, cache)
    assert np.array_equal(cluster.rows(), cluster.rows())


@settings(max_examples=100)
@given(scenarios(), st.data())
def test_a_pod_that_constrains_nothing_gets_what_the_plugins_give(
    scenario: tuple[ListCluster, IncomingPod, IncomingPod], data: st.DataObject
) -> None:
    """``PodInCluster`` answers a pod that states no constraint without running the plugins when no node
    and no placed pod's term can tell nodes apart for it: the answer must be the plugins' own."""
    cluster, first, _ = scenario
    priority = data.draw(st.sampled_from([None, 0, 1000]))
    plain = PodConstraints(priority=priority)
    assert plain.constrains_nothing()
    cache = ConstraintCache()
    judged = PodInCluster(cluster, cache, first.namespace, first.labels, plain)
    rows = cluster.rows()
    want = constraint_filter(cluster, rows, first.namespace, first.labels, plain, cache=ConstraintCache())
    got = judged.verdict(rows)
    assert [got.rejected(i) for i in range(len(rows))] == [want.rejected(i) for i in range(len(rows))]
    feasible = rows[want.feasible] if want.feasible.any() else rows
    base = Scores(
        rows=feasible,
        total=np.full(len(feasible), 50.0),
        components={"fit": np.full(len(feasible), 0.5)},
        shares={"fit": 100.0},
        landing_cell=np.full(len(feasible), -1, dtype=np.int64),
    )
    plugins = constraint_scores(cluster, feasible, first.namespace, first.labels, plain, cache=ConstraintCache())
    expected = with_constraint_scores(base, plugins, PLUGIN_WEIGHTS)
    scored = judged.scored(base)
    assert scored.total.tolist() == expected.total.tolist()
    assert dict(scored.shares) == dict(expected.shares)


@settings(max_examples=80)
@given(scenarios(), st.data())
def test_a_kept_verdict_is_the_plugins_verdict_while_the_cluster_holds_still(
    scenario: tuple[ListCluster, IncomingPod, IncomingPod], data: st.DataObject
) -> None:
    """``PodInCluster`` keeps a pod's verdict over every slot while the view's versions stand; asked about
    any rows, before and after the cluster changes, it answers what the plugins answer for those rows."""
    cluster, first, second = scenario
    cache = ConstraintCache()

    def check(pod: IncomingPod) -> None:
        rows = cluster.rows()
        subset = rows[data.draw(st.lists(st.integers(0, len(rows) - 1), unique=True))] if len(rows) else rows
        for asked in (rows, subset):
            want = constraint_filter(cluster, asked, pod.namespace, pod.labels, pod.constraints)
            got = PodInCluster(cluster, cache, pod.namespace, pod.labels, pod.constraints).verdict(asked)
            assert [got.rejected(i) for i in range(len(asked))] == [want.rejected(i) for i in range(len(asked))]

    check(first)
    check(second)
    names = [n.name for n in cluster.slots if n is not None]
    cluster.pods.append(data.draw(placed_pods(names, minimum=1))[0])
    cluster.touch_pods()
    check(first)
    slot = data.draw(st.sampled_from([s for s, n in enumerate(cluster.slots) if n is not None]))
    node = cluster.slots[slot]
    assert node is not None
    cluster.slots[slot] = NodeFacts(node.name, data.draw(NODE_LABELS), node.taints, not node.unschedulable)
    cluster.touch_labels()
    check(first)
    check(second)
