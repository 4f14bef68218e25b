"""What the upstream tables do not cover: scheduling gates, readiness (by its taints only), the nodes left
out of the PreFilterResult, VolumeBinding as far as it is supported, the merge with the resource verdict,
and the memo's lifetimes."""

from __future__ import annotations

import numpy as np
import pytest

from placement.cluster.objects import node_facts
from placement.core.constraints import reference
from placement.core.constraints.cache import ConstraintCache
from placement.core.constraints.constraint_types import (
    ClaimFacts,
    LabelSelector,
    NodeAffinity,
    NodeFacts,
    NodeSelectorTerm,
    Operator,
    PlacedPod,
    PodAffinity,
    PodAffinityTerm,
    PodConstraints,
    Requirement,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    WhenUnsatisfiable,
)
from placement.core.constraints.context import PodInCluster
from placement.core.constraints.filtering import constraint_filter
from placement.core.constraints.scores import constraint_scores
from placement.core.constraints.terms import IncomingPod
from placement.core.constraints.verdicts import (
    EXISTING_ANTI_AFFINITY,
    NODE_UNSCHEDULABLE,
    SPREAD_MISMATCH,
    UNBOUND_IMMEDIATE_CLAIMS,
    UNTOLERATED_TAINT,
    VOLUME_BIND_CONFLICT,
    VOLUME_NODE_CONFLICT,
    WAITS_FOR_FIRST_CONSUMER,
    ConstraintVerdict,
    FilterStage,
    claim_not_found,
    merge_with_resources,
    scheduling_gate_refusal,
)
from placement.core.feasibility import FilterResult
from placement.core.vocabulary import Rejected, RejectionKind
from tests.constraint_cluster import ListCluster

ZONE_A = (("zone", "a"),)
ZONE_B = (("zone", "b"),)


def _verdicts(cluster: ListCluster, pod: IncomingPod) -> list[Rejected | None]:
    """The vectorised verdict per node, checked against the reference on the way."""
    verdict = constraint_filter(cluster, cluster.rows(), pod.namespace, pod.labels, pod.constraints)
    facts = cluster.facts()
    found = []
    for position, node in enumerate(facts.nodes):
        judged = reference.filter_node(facts, pod, node.name)
        assert verdict.rejected(position) == (None if judged is None else judged[1])
        found.append(verdict.rejected(position))
    return found


def test_a_gated_pod_is_refused_everywhere_before_anything_else() -> None:
    constraints = PodConstraints(scheduling_gates=("example.com/quota", "example.com/ready"), claims=("absent",))
    refused = scheduling_gate_refusal(constraints)
    assert refused == Rejected(
        "waiting for scheduling gates: [example.com/quota example.com/ready]", RejectionKind.NODE_CONSTRAINT
    )
    cluster = ListCluster.of([NodeFacts("a", unschedulable=True), NodeFacts("b")])
    verdict = constraint_filter(cluster, cluster.rows(), "ns", (), constraints)
    assert [verdict.rejected(i) for i in range(2)] == [refused, refused]
    assert verdict.stage(0) is FilterStage.SCHEDULING_GATES
    assert scheduling_gate_refusal(PodConstraints()) is None


NOT_READY = Taint("node.kubernetes.io/not-ready", TaintEffect.NO_SCHEDULE)


def test_a_not_ready_node_refuses_by_its_taint_and_takes_a_pod_that_tolerates_it() -> None:
    """Issue #28: kube-scheduler has no readiness filter, only the taint the node lifecycle controller adds
    (TaintToleration); a pod tolerating ``node.kubernetes.io/not-ready`` goes there (kube-scheduler v1.37.2
    answers the same: tests/oracles/scheduler/schedule_test.go)."""
    cluster = ListCluster.of([NodeFacts("a", taints=(NOT_READY,)), NodeFacts("b", unschedulable=True)])
    assert _verdicts(cluster, IncomingPod("ns")) == [UNTOLERATED_TAINT, NODE_UNSCHEDULABLE]
    tolerates = Toleration("node.kubernetes.io/not-ready", TolerationOperator.EXISTS)
    assert _verdicts(cluster, IncomingPod("ns", constraints=PodConstraints(tolerations=(tolerates,)))) == [
        None,
        NODE_UNSCHEDULABLE,
    ]


def test_a_node_whose_ready_condition_is_false_takes_a_pod_tolerating_its_not_ready_taint() -> None:
    """The Node as the watch delivers it: the Ready condition refuses nothing, the taint does."""
    node = node_facts(
        {
            "metadata": {"name": "a"},
            "spec": {"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        }
    )
    cluster = ListCluster.of([node])
    tolerates = Toleration("node.kubernetes.io/not-ready", TolerationOperator.EXISTS, effect=TaintEffect.NO_SCHEDULE)
    assert _verdicts(cluster, IncomingPod("ns", constraints=PodConstraints(tolerations=(tolerates,)))) == [None]
    assert _verdicts(cluster, IncomingPod("ns")) == [UNTOLERATED_TAINT]


def test_nodes_outside_the_pre_filter_result_are_refused_unfiltered() -> None:
    """NodeName's and NodeAffinity's PreFilter name nodes; the others are refused before any Filter with
    ``findNodesThatFitPod``'s words, and no node in common refuses the pod (``RunPreFilterPlugins``)."""
    cluster = ListCluster.of([NodeFacts("a", unschedulable=True), NodeFacts("b", unschedulable=True), NodeFacts("c")])
    named = PodConstraints(node_name="a")
    outside = Rejected("node(s) didn't satisfy plugin(s) [NodeName]", RejectionKind.NODE_CONSTRAINT)
    assert _verdicts(cluster, IncomingPod("ns", constraints=named)) == [NODE_UNSCHEDULABLE, outside, outside]
    by_field = NodeSelectorTerm(match_fields=(Requirement("metadata.name", Operator.IN, ("b",)),))
    both = PodConstraints(node_name="a", node_affinity=NodeAffinity(required=(by_field,)))
    nowhere = Rejected(
        "node(s) didn't satisfy plugin(s) [NodeAffinity NodeName] simultaneously", RejectionKind.NODE_CONSTRAINT
    )
    assert _verdicts(cluster, IncomingPod("ns", constraints=both)) == [nowhere, nowhere, nowhere]


def _claims_cluster(**claims: ClaimFacts) -> ListCluster:
    nodes = [NodeFacts("a", ZONE_A), NodeFacts("b", ZONE_B)]
    return ListCluster.of(nodes, claims={("ns", name): claim for name, claim in claims.items()})


def _pod_with(*claims: str) -> IncomingPod:
    return IncomingPod("ns", (), PodConstraints(claims=claims))


ZONE_A_VOLUME = (NodeSelectorTerm((Requirement("zone", Operator.IN, ("a",)),)),)


def test_the_refusals_read_as_kube_scheduler_v1_37_words() -> None:
    """The words v1.37.2 gives (volumebinding/binder.go ErrReasonNodeConflict, tainttoleration Filter), not
    the v1.25-v1.33 wording the port had: FailedScheduling events read the same as kube-scheduler's."""
    assert (VOLUME_NODE_CONFLICT.message, UNTOLERATED_TAINT.message) == (
        "node(s) didn't match PersistentVolume's node affinity",
        "node(s) had untolerated taint(s)",
    )


@pytest.mark.parametrize(
    ("claims", "names", "expected"),
    [
        pytest.param({}, ("data",), [claim_not_found("data")] * 2, id="unknown claim"),
        pytest.param({"data": ClaimFacts(bound=True)}, ("data", "gone"), [claim_not_found("gone")] * 2, id="one gone"),
        pytest.param({"data": ClaimFacts(bound=False)}, ("data",), [UNBOUND_IMMEDIATE_CLAIMS] * 2, id="immediate"),
        pytest.param(
            {"data": ClaimFacts(bound=False, wait_for_first_consumer=True)},
            ("data",),
            [WAITS_FOR_FIRST_CONSUMER] * 2,
            id="waits for a first consumer",
        ),
        pytest.param(
            {"data": ClaimFacts(bound=True, node_affinity=ZONE_A_VOLUME)},
            ("data",),
            [None, VOLUME_NODE_CONFLICT],
            id="bound to a volume in zone a",
        ),
        pytest.param(
            {"data": ClaimFacts(bound=True, node_affinity=())},
            ("data",),
            [VOLUME_NODE_CONFLICT, VOLUME_NODE_CONFLICT],
            id="bound to a volume no node matches",
        ),
        pytest.param(
            {
                "data": ClaimFacts(
                    bound=True,
                    node_affinity=(
                        NodeSelectorTerm(match_fields=(Requirement("metadata.name", Operator.IN, ("b",)),)),
                    ),
                )
            },
            ("data",),
            [None, None],
            id="a volume's match fields are not consulted",
        ),
        pytest.param(
            {
                "data": ClaimFacts(
                    bound=False,
                    wait_for_first_consumer=True,
                    node_affinity=(
                        NodeSelectorTerm(match_fields=(Requirement("metadata.name", Operator.IN, ("b",)),)),
                    ),
                )
            },
            ("data",),
            [VOLUME_BIND_CONFLICT, None],
            id="provisioning started for node b",
        ),
        pytest.param({"data": ClaimFacts(bound=True)}, ("data",), [None, None], id="bound anywhere"),
    ],
)
def test_volume_binding(claims: dict[str, ClaimFacts], names: tuple[str, ...], expected: list[Rejected | None]) -> None:
    assert _verdicts(_claims_cluster(**claims), _pod_with(*names)) == expected


def _resources(codes: list[int]) -> FilterResult:
    rows = np.arange(len(codes), dtype=np.int64)
    reason_codes = np.array(codes, dtype=np.int16)
    return FilterResult(
        rows, reason_codes == 0, reason_codes, ("Insufficient cpu",), (RejectionKind.INSUFFICIENT_RESOURCES,), rows[:0]
    )


def test_the_resource_verdict_sits_between_node_ports_and_volume_binding() -> None:
    early, late = NODE_UNSCHEDULABLE, EXISTING_ANTI_AFFINITY
    constraints = ConstraintVerdict(
        rows=np.arange(4, dtype=np.int64),
        reason_codes=np.array([1, 2, 0, 2], dtype=np.int16),
        messages=(early.message, late.message),
        kinds=(early.kind, late.kind),
        stages=(FilterStage.NODE_UNSCHEDULABLE, FilterStage.INTER_POD_AFFINITY),
    )
    merged = merge_with_resources(_resources([1, 1, 1, 0]), constraints)
    reasons = [merged.rejected(i) for i in range(4)]
    short = Rejected("Insufficient cpu", RejectionKind.INSUFFICIENT_RESOURCES)
    assert reasons == [early, short, short, late]
    assert merged.feasible.tolist() == [False, False, False, False]
    with pytest.raises(ValueError, match="different rows"):
        merge_with_resources(_resources([0, 0, 0]), constraints)


def _anti(key: str) -> PodAffinity:
    return PodAffinity(required=(PodAffinityTerm(key, LabelSelector(match_labels=(("app", "web"),))),))


def test_the_memo_follows_the_versions() -> None:
    nodes = [NodeFacts("a", ZONE_A), NodeFacts("b", ZONE_B)]
    cluster = ListCluster.of(nodes, [PlacedPod("ns", "p", "a", (("app", "db"),), pod_anti_affinity=_anti("zone"))])
    pod = IncomingPod("ns", (("app", "web"),), PodConstraints(node_selector=ZONE_A))
    cache = ConstraintCache()

    def feasible() -> list[bool]:
        verdict = constraint_filter(cluster, cluster.rows(), pod.namespace, pod.labels, pod.constraints, cache=cache)
        found: list[bool] = verdict.feasible.tolist()
        return found

    assert feasible() == [False, False]  # a: the existing pod repels web pods from zone a; b: not zone a
    cluster.slots[1] = NodeFacts("b", ZONE_A)
    assert feasible() == [False, False]  # the labels changed, the version did not: the memo still answers
    cluster.touch_labels()
    assert feasible() == [False, False]  # zone a now holds b too, and the existing pod repels from all of it
    cluster.pods[0] = PlacedPod("ns", "p", "a", (("app", "db"),), pod_anti_affinity=_anti("rack"))
    cluster.touch_pods()
    assert feasible() == [True, True]
    other = ListCluster.of(nodes)
    verdict = constraint_filter(other, other.rows(), pod.namespace, pod.labels, pod.constraints, cache=cache)
    assert verdict.feasible.tolist() == [True, False]  # another view: the memo starts over


def test_a_kept_verdict_follows_the_versions() -> None:
    """``PodInCluster`` keeps a pod's verdict while the versions stand, and judges afresh when either moves."""
    nodes = [NodeFacts("a", (("kubernetes.io/hostname", "a"), *ZONE_A)), NodeFacts("b", ZONE_B)]
    cluster = ListCluster.of(nodes)
    web = (("app", "web"),)
    apart = PodConstraints(node_selector=ZONE_A, pod_anti_affinity=_anti("kubernetes.io/hostname"))
    cache = ConstraintCache()

    def feasible() -> list[bool]:
        verdict = PodInCluster(cluster, cache, "ns", web, apart).verdict(cluster.rows())
        found: list[bool] = verdict.feasible.tolist()
        return found

    assert feasible() == [True, False]
    cluster.pods.append(PlacedPod("ns", "web-0", "a", web))
    cluster.touch_pods()
    assert feasible() == [False, False]  # a holds a web pod now
    cluster.slots[1] = NodeFacts("b", (("kubernetes.io/hostname", "b"), *ZONE_A))
    cluster.touch_labels()
    assert feasible() == [False, True]  # b joined zone a


def test_free_slots_count_nowhere() -> None:
    """A free slot (no node) is no domain: zone a's one web pod against an empty zone b refuses zone a."""
    web = (("app", "web"),)
    zones = TopologySpreadConstraint(1, "zone", WhenUnsatisfiable.DO_NOT_SCHEDULE, LabelSelector(match_labels=web))
    cluster = ListCluster([None, NodeFacts("a", ZONE_A), None, NodeFacts("b", ZONE_B)])
    cluster.pods.append(PlacedPod("ns", "p", "a", web))
    assert _verdicts(cluster, IncomingPod("ns", web, PodConstraints(topology_spread=(zones,)))) == [
        SPREAD_MISMATCH,
        None,
    ]
    scores = constraint_scores(cluster, cluster.rows(), "ns", (), PodConstraints())
    assert scores["TaintToleration"].tolist() == [100.0, 100.0]
