"""kubernetes/kubernetes ``pkg/scheduler/framework/plugins/interpodaffinity/``:

- ``filtering_test.go``: TestRequiredAffinitySingleNode, TestRequiredAffinityMultipleNodes (Filter);
- ``scoring_test.go``: TestPreferredAffinity, TestPreferredAffinityWithHardPodAffinitySymmetricWeight (Score).

The namespaces are the tests' own: ``namespaces`` of scoring_test.go (subteam1.team1 ... subteam2.team2,
labelled team=team1/team2) for the single-node and scoring tables, NS1 (no labels) for the multi-node one.
A PreFilter refusal for terms that do not parse is compared by kind and message start (``parsing pod:
requiredAffinityTerms``): the rest of upstream's message is Go's validation text.

Not ported: the scoring cases that need the plugin arguments this port fixes (``hardPodAffinityWeight``
0: "with zero weight"; ``ignorePreferredTermsOfExistingPods``: "Ignore preferred terms of existing pods"),
and "invalid Affinity/AntiAffinity fails PreScore" (such a pod is refused by PreFilter first: see
"PodAffinity fails PreFilter with an invalid affinity label syntax").

kube-scheduler v1.37.2's own plugins now judge these plugins on random GPU clusters too:
tests/upstream/test_oracle_scheduler.py (tests/oracles/scheduler).
"""

from __future__ import annotations

from placement.core.constraints.constraint_types import Labels, PlacedPod, PodAffinity, PodConstraints
from placement.core.constraints.terms import IncomingPod
from placement.core.constraints.verdicts import AFFINITY_MISMATCH, ANTI_AFFINITY_MISMATCH, EXISTING_ANTI_AFFINITY
from placement.core.vocabulary import RejectionKind
from tests.scheduler_cases.builders import (
    DNE,
    EXISTS,
    IN,
    NOT_IN,
    exists,
    in_,
    labels,
    node,
    not_in,
    placed,
    preferred,
    req,
    required,
    selector,
    term,
)
from tests.scheduler_cases.cases import Expected, FilterCase, Refused, ScoreCase

SINGLE = "interpodaffinity/filtering_test.go TestRequiredAffinitySingleNode"
MULTIPLE = "interpodaffinity/filtering_test.go TestRequiredAffinityMultipleNodes"
PREFERRED = "interpodaffinity/scoring_test.go TestPreferredAffinity"
HARD = "interpodaffinity/scoring_test.go TestPreferredAffinityWithHardPodAffinitySymmetricWeight"

NAMESPACES: dict[str, Labels] = {
    "subteam1.team1": labels({"team": "team1"}),
    "subteam2.team1": labels({"team": "team1"}),
    "subteam1.team2": labels({"team": "team2"}),
    "subteam2.team2": labels({"team": "team2"}),
}
AFF, ANTI, EXIST = AFFINITY_MISMATCH, ANTI_AFFINITY_MISMATCH, EXISTING_ANTI_AFFINITY
PARSE = Refused("parsing pod: requiredAffinityTerms", RejectionKind.NODE_CONSTRAINT)

POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
SECURITY_SCAN = in_("service", "securityscan", "value2")
NODE1 = node("node1", {"region": "r1", "zone": "z11"})
EXISTING = placed("node1", POD_LABEL)  # st.MakePod().Labels(podLabel).Node("node1")


def _pod(
    label_map: dict[str, str] | None = None,
    *,
    namespace: str = "",
    affinity: PodAffinity | None = None,
    anti: PodAffinity | None = None,
) -> IncomingPod:
    return IncomingPod(namespace, labels(label_map), PodConstraints(pod_affinity=affinity, pod_anti_affinity=anti))


def _single(name: str, pod: IncomingPod, pods: tuple[PlacedPod, ...], expected: Expected) -> FilterCase:
    plugin = "pod_refusal" if isinstance(expected, Refused) else "inter_pod_affinity"
    return FilterCase(
        SINGLE,
        name,
        plugin,
        pod,
        (NODE1,),
        {"node1": expected},
        pods=pods,
        namespaces=NAMESPACES,
    )


_TEAM1 = in_("team", "team1")

SINGLE_NODE: list[FilterCase] = [
    _single(
        "A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
        _pod(),
        (),
        None,
    ),
    _single(
        "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that "
        "matches the existing pod",
        _pod(POD_LABEL2, affinity=required(term("region", SECURITY_SCAN))),
        (EXISTING,),
        None,
    ),
    _single(
        "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in "
        "operator in labelSelector that matches the existing pod",
        _pod(POD_LABEL2, affinity=required(term("region", not_in("service", "securityscan3", "value3")))),
        (EXISTING,),
        None,
    ),
    _single(
        "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
        _pod(POD_LABEL2, affinity=required(term("", SECURITY_SCAN, namespaces=("DiffNameSpace",)))),
        (placed("node1", {"service": "securityscan"}, namespace="ns"),),
        AFF,
    ),
    _single(
        "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
        _pod(POD_LABEL, affinity=required(term("", in_("service", "antivirusscan", "value2")))),
        (EXISTING,),
        AFF,
    ),
    _single(
        "satisfies the PodAffinity with different label Operators in multiple RequiredDuringSchedulingIgnoredDuring"
        "Execution ",
        _pod(
            POD_LABEL2,
            affinity=required(
                term("region", selector(req("service", EXISTS), req("wrongkey", DNE))),
                term("region", selector(req("service", IN, "securityscan"), req("service", NOT_IN, "WrongValue"))),
            ),
        ),
        (EXISTING,),
        None,
    ),
    _single(
        "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the "
        "node because one of the matchExpression item don't match.",
        _pod(
            POD_LABEL2,
            affinity=required(
                term("region", selector(req("service", EXISTS), req("wrongkey", DNE))),
                term("region", selector(req("service", IN, "securityscan2"), req("service", NOT_IN, "WrongValue"))),
            ),
        ),
        (EXISTING,),
        AFF,
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
        _pod(
            POD_LABEL2,
            affinity=required(term("region", SECURITY_SCAN)),
            anti=required(term("node", in_("service", "antivirusscan", "value2"))),
        ),
        (EXISTING,),
        None,
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
        _pod(
            POD_LABEL2,
            affinity=required(term("region", SECURITY_SCAN)),
            anti=required(term("node", in_("service", "antivirusscan", "value2"))),
        ),
        (placed("node1", POD_LABEL, anti=required(term("node", in_("service", "antivirusscan", "value2")))),),
        None,
    ),
    _single(
        "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
        _pod(POD_LABEL2, affinity=required(term("region", SECURITY_SCAN)), anti=required(term("zone", SECURITY_SCAN))),
        (EXISTING,),
        ANTI,
    ),
    _single(
        "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the "
        "existing pod",
        _pod(
            POD_LABEL,
            affinity=required(term("region", SECURITY_SCAN)),
            anti=required(term("node", in_("service", "antivirusscan", "value2"))),
        ),
        (placed("node1", POD_LABEL, anti=required(term("zone", SECURITY_SCAN))),),
        EXIST,
    ),
    _single(
        "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
        _pod(POD_LABEL, affinity=required(term("region", not_in("service", "securityscan", "value2")))),
        (placed("node2", {"service": "securityscan"}),),  # node2 is not in the cluster
        AFF,
    ),
    _single(
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. "
        "doesn't satisfy PodAntiAffinity symmetry with the existing pod",
        _pod(POD_LABEL),
        (placed("node1", POD_LABEL, anti=required(term("zone", SECURITY_SCAN))),),
        EXIST,
    ),
    _single(
        "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. "
        "satisfy PodAntiAffinity symmetry with the existing pod",
        _pod(POD_LABEL),
        (placed("node1", POD_LABEL, anti=required(term("zone", not_in("service", "securityscan", "value2")))),),
        None,
    ),
    _single(
        "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with "
        "incoming pod",
        _pod(POD_LABEL, anti=required(term("region", exists("service")), term("region", exists("security")))),
        (placed("node1", POD_LABEL2, anti=required(term("zone", exists("security")))),),
        ANTI,
    ),
    _single(
        "PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on AffinityTerms",
        _pod(POD_LABEL, anti=required(term("zone", exists("service")), term("zone", exists("security")))),
        (placed("node1", POD_LABEL2, anti=required(term("zone", exists("security")))),),
        ANTI,
    ),
    _single(
        "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
        _pod(POD_LABEL2, anti=required(term("zone", exists("security")))),
        (placed("node1", POD_LABEL, anti=required(term("zone", exists("service")), term("zone", exists("security")))),),
        EXIST,
    ),
    _single(
        "PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on AffinityTerms",
        _pod({"abc": "", "xyz": ""}, anti=required(term("zone", exists("abc")), term("zone", exists("def")))),
        (
            placed(
                "node1", {"def": "", "xyz": ""}, anti=required(term("zone", exists("abc")), term("zone", exists("def")))
            ),
        ),
        ANTI,
    ),
    _single(
        "PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on AffinityTerms",
        _pod({"def": "", "xyz": ""}, anti=required(term("zone", exists("abc")), term("zone", exists("def")))),
        (
            placed(
                "node1", {"abc": "", "xyz": ""}, anti=required(term("zone", exists("abc")), term("zone", exists("def")))
            ),
        ),
        ANTI,
    ),
    _single(
        "PodAffinity fails PreFilter with an invalid affinity label syntax",
        _pod(
            POD_LABEL,
            affinity=required(
                term("region", in_("service", "{{.bad-value.}}")),
                term("node", in_("service", "antivirusscan", "value2")),
            ),
        ),
        (),
        PARSE,
    ),
    _single(
        "PodAntiAffinity fails PreFilter with an invalid antiaffinity label syntax",
        _pod(
            POD_LABEL,
            affinity=required(term("region", in_("service", "foo")), term("node", in_("service", "{{.bad-value.}}"))),
        ),
        (),
        PARSE,
    ),
    _single(
        "affinity with NamespaceSelector",
        _pod(POD_LABEL2, affinity=required(term("region", SECURITY_SCAN, namespace_selector=_TEAM1))),
        (placed("node1", POD_LABEL, namespace="subteam1.team1"),),
        None,
    ),
    _single(
        "affinity with non-matching NamespaceSelector",
        _pod(POD_LABEL2, affinity=required(term("region", SECURITY_SCAN, namespace_selector=_TEAM1))),
        (placed("node1", POD_LABEL, namespace="subteam1.team2"),),
        AFF,
    ),
    _single(
        "anti-affinity with matching NamespaceSelector",
        _pod(
            POD_LABEL2,
            namespace="subteam1.team1",
            anti=required(term("zone", SECURITY_SCAN, namespace_selector=_TEAM1)),
        ),
        (placed("node1", POD_LABEL, namespace="subteam2.team1"),),
        ANTI,
    ),
    _single(
        "anti-affinity with matching all NamespaceSelector",
        _pod(
            POD_LABEL2,
            namespace="subteam1.team1",
            anti=required(term("zone", SECURITY_SCAN, namespace_selector=selector())),
        ),
        (placed("node1", POD_LABEL, namespace="subteam2.team1"),),
        ANTI,
    ),
    _single(
        "anti-affinity with non-matching NamespaceSelector",
        _pod(
            POD_LABEL2,
            namespace="subteam1.team1",
            anti=required(term("zone", SECURITY_SCAN, namespace_selector=_TEAM1)),
        ),
        (placed("node1", POD_LABEL, namespace="subteam1.team2"),),
        None,
    ),
]

_CHINA = {"region": "China"}
_CHINA_AZ1 = {"region": "China", "az": "az1"}
_INDIA = {"region": "India"}


def _r1(name: str, zone: str = "z1") -> dict[str, str]:
    return {"region": "r1", "zone": zone, "hostname": name}


def _multiple(
    name: str,
    pod: IncomingPod,
    pods: tuple[PlacedPod, ...],
    nodes: list[tuple[str, dict[str, str]]],
    want: list[Expected],
) -> FilterCase:
    return FilterCase(
        MULTIPLE,
        name,
        "inter_pod_affinity",
        pod,
        tuple(node(n, m) for n, m in nodes),
        {n: w for (n, _), w in zip(nodes, want, strict=True)},
        pods=pods,
        namespaces={"NS1": ()},
    )


_CHINA_INDIA = [("nodeA", _CHINA), ("nodeB", _CHINA_AZ1), ("nodeC", _INDIA)]
_AB_SAME_ZONE = [("nodeA", _r1("nodeA")), ("nodeB", _r1("nodeB"))]
_AB = [("nodeA", _r1("nodeA")), ("nodeB", _r1("nodeB", "z2"))]

MULTIPLE_NODES: list[FilterCase] = [
    _multiple(
        "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them "
        "has an existing pod that matches the affinity rules",
        _pod(affinity=required(term("region", in_("foo", "bar")))),
        (placed("node1", {"foo": "bar"}, name="p1"),),
        [("node1", _CHINA), ("node2", _CHINA_AZ1), ("node3", _INDIA)],
        [None, None, AFF],
    ),
    _multiple(
        "The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of "
        "the collection should not be blocked from being scheduled onto any node, even there's no existing pod "
        "that matches the rule anywhere.",
        _pod(
            {"foo": "bar", "service": "securityscan"},
            affinity=required(term("zone", in_("foo", "bar")), term("zone", in_("service", "securityscan"))),
        ),
        (placed("nodeA", {"foo": "bar"}, name="p1"),),
        [("nodeA", {"zone": "az1", "hostname": "h1"}), ("nodeB", {"zone": "az2", "hostname": "h2"})],
        [None, None],
    ),
    _multiple(
        "The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
        _pod(
            {"foo": "bar", "service": "securityscan"},
            affinity=required(term("zone", in_("foo", "bar")), term("zone", in_("service", "securityscan"))),
        ),
        (placed("nodeA", {"foo": "bar"}, name="p1"),),
        [("nodeA", {"zoneLabel": "az1", "hostname": "h1"}), ("nodeB", {"zoneLabel": "az2", "hostname": "h2"})],
        [AFF, AFF],
    ),
    _multiple(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter "
        "pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
        _pod(anti=required(term("region", in_("foo", "abc")))),
        (placed("nodeA", {"foo": "abc"}),),
        [("nodeA", {"region": "r1", "hostname": "nodeA"}), ("nodeB", {"region": "r1", "hostname": "nodeB"})],
        [ANTI, ANTI],
    ),
    _multiple(
        "This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches a pod.",
        _pod(anti=required(term("region", in_("foo", "abc")), term("zone", in_("service", "securityscan")))),
        (placed("nodeA", {"foo": "abc", "service": "securityscan"}),),
        [("nodeA", _r1("nodeA")), ("nodeB", _r1("nodeB", "z2"))],
        [ANTI, ANTI],
    ),
    _multiple(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter "
        "pod affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
        _pod(anti=required(term("region", in_("foo", "abc")))),
        (placed("nodeA", {"foo": "abc"}),),
        _CHINA_INDIA,
        [ANTI, ANTI, None],
    ),
    _multiple(
        "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter "
        "pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC "
        "(NodeC has an existing pod that match the inter pod affinity rule but in different namespace)",
        _pod({"foo": "123"}, namespace="NS1", anti=required(term("region", in_("foo", "bar")))),
        (
            placed("nodeA", {"foo": "bar"}, namespace="NS1"),
            placed("nodeC", namespace="NS2", anti=required(term("region", in_("foo", "123")))),
        ),
        _CHINA_INDIA,
        [ANTI, ANTI, None],
    ),
    _multiple(
        "Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, labelSelector "
        "of the term is firstly checked, and then topologyKey of the term is also checked",
        _pod({"foo": ""}),
        (placed("nodeA", anti=required(term("invalid-node-label", exists("foo")))),),
        _AB_SAME_ZONE,
        [None, None],
    ),
    _multiple(
        "Test incoming pod's anti-affinity: even if labelSelector matches, we still check if topologyKey matches",
        _pod(anti=required(term("invalid-node-label", exists("foo")))),
        (placed("nodeA", {"foo": ""}),),
        _AB_SAME_ZONE,
        [None, None],
    ),
    _multiple(
        "Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it violates each "
        "existingPod's terms on all nodes",
        _pod({"foo": "", "bar": ""}),
        (
            placed("nodeA", anti=required(term("zone", exists("foo")))),
            placed("nodeA", anti=required(term("region", exists("bar")))),
        ),
        _AB,
        [EXIST, EXIST],
    ),
    _multiple(
        "Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least violates one "
        "anti-affinity rule of existingPod",
        _pod(anti=required(term("zone", exists("foo")), term("region", exists("bar")))),
        (placed("nodeA", {"foo": ""}), placed("nodeB", {"bar": ""})),
        _AB,
        [ANTI, ANTI],
    ),
    _multiple(
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a "
        "single term match - case when one term has invalid topologyKey",
        _pod({"foo": "", "bar": ""}),
        (placed("nodeA", anti=required(term("invalid-node-label", exists("foo")), term("zone", exists("bar")))),),
        _AB,
        [EXIST, None],
    ),
    _multiple(
        "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a "
        "single term match - case when one term has invalid topologyKey",
        _pod(anti=required(term("invalid-node-label", exists("foo")), term("zone", exists("bar")))),
        (placed("nodeA", {"foo": "", "bar": ""}, name="podA"),),
        _AB,
        [ANTI, None],
    ),
    _multiple(
        "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a "
        "single term match - case when all terms have valid topologyKey",
        _pod({"foo": "", "bar": ""}),
        (placed("nodeA", anti=required(term("region", exists("foo")), term("zone", exists("bar")))),),
        _AB,
        [EXIST, EXIST],
    ),
    _multiple(
        "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a "
        "single term match - case when all terms have valid topologyKey",
        _pod(anti=required(term("region", exists("foo")), term("zone", exists("bar")))),
        (placed("nodeA", {"foo": "", "bar": ""}),),
        _AB,
        [ANTI, ANTI],
    ),
    _multiple(
        "Test existing pod's anti-affinity: existingPod on nodeA and nodeB has at least one anti-affinity term "
        "matches incoming pod, so incoming pod can only be scheduled to nodeC",
        _pod({"foo": "", "bar": ""}),
        (
            placed("nodeA", anti=required(term("zone", exists("foo")), term("zone", exists("labelA")))),
            placed("nodeB", anti=required(term("zone", exists("bar")), term("zone", exists("labelB")))),
        ),
        [("nodeA", _r1("nodeA")), ("nodeB", _r1("nodeB", "z2")), ("nodeC", _r1("nodeC", "z3"))],
        [EXIST, EXIST, None],
    ),
    _multiple(
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all "
        "topologyKeys match",
        _pod(affinity=required(term("region", exists("foo")), term("zone", exists("bar")))),
        (placed("nodeA", {"foo": "", "bar": ""}, name="pod1"),),
        _AB_SAME_ZONE,
        [None, None],
    ),
    _multiple(
        "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all "
        "topologyKeys match, and the match logic should be satisfied on the same pod",
        _pod(affinity=required(term("region", exists("foo")), term("zone", exists("bar")))),
        (placed("nodeA", {"foo": ""}, name="pod1"), placed("nodeB", {"bar": ""}, name="pod2")),
        _AB,
        [AFF, AFF],
    ),
]

# --- scoring ----------------------------------------------------------------------------------------------

_S1 = {"security": "S1"}
_S2 = {"security": "S2"}
_AZ1 = {"az": "az1"}
_AZ2 = {"az": "az2"}
_STAY_WITH_S1_IN_REGION = preferred((5, term("region", in_("security", "S1"))))
_STAY_WITH_S2_IN_REGION = preferred((6, term("region", in_("security", "S2"))))
_AFFINITY3 = preferred(
    (8, term("region", selector(req("security", NOT_IN, "S1"), req("security", IN, "S2")))),
    (2, term("region", selector(req("security", EXISTS), req("wrongkey", DNE)))),
)
_HARD_AFFINITY = required(
    term("region", in_("security", "S1", "value2")),
    term("region", selector(req("security", EXISTS), req("wrongkey", DNE))),
)
_AWAY_FROM_S1_IN_AZ = preferred((5, term("az", in_("security", "S1"))))
_AWAY_FROM_S2_IN_AZ = preferred((5, term("az", in_("security", "S2"))))
_S1_REGION_AWAY_S2_AZ = (preferred((8, term("region", in_("security", "S1")))), _AWAY_FROM_S2_IN_AZ)
_BY_NAMESPACE = term("region", in_("security", "S1"), namespaces=("subteam2.team2",), namespace_selector=_TEAM1)
_AFFINITY_NAMESPACE_SELECTOR = preferred((5, _BY_NAMESPACE))


def _scored(
    name: str, pod: IncomingPod, pods: tuple[PlacedPod, ...], nodes: list[tuple[str, dict[str, str]]], want: list[int]
) -> ScoreCase:
    """A TestPreferredAffinity row."""
    return ScoreCase(
        PREFERRED,
        name,
        "InterPodAffinity",
        pod,
        tuple(node(n, m) for n, m in nodes),
        tuple(want),
        pods=pods,
        namespaces=NAMESPACES,
    )


def _hard(name: str, pod: IncomingPod, want: list[int]) -> ScoreCase:
    """A TestPreferredAffinityWithHardPodAffinitySymmetricWeight row: two pods with required affinity."""
    return ScoreCase(
        HARD,
        name,
        "InterPodAffinity",
        pod,
        tuple(node(n, m) for n, m in _THREE),
        tuple(want),
        pods=_HARD_PODS,
        namespaces=NAMESPACES,
    )


_on = placed  # st.MakePod().Node(...) in the scoring tables


_THREE = [("node1", _CHINA), ("node2", _INDIA), ("node3", _AZ1)]
_FIVE_REGIONS = [("node1", _CHINA), ("node2", _INDIA), ("node3", _CHINA), ("node4", _CHINA), ("node5", _INDIA)]

PREFERRED_SCORES: list[ScoreCase] = [
    _scored("all nodes are same priority as Affinity is nil", _pod(_S1), (), _THREE, [0, 0, 0]),
    _scored(
        "Affinity: pod that matches topology key & pods in nodes will get high score comparing to otherswhich "
        "doesn't match either pods in nodes or in topology key",
        _pod(_S1, affinity=_STAY_WITH_S1_IN_REGION),
        (_on("node1", _S1), _on("node2", _S2), _on("node3", _S1)),
        _THREE,
        [100, 0, 0],
    ),
    _scored(
        "All the nodes that have the same topology key & label value with one of them has an existing pod that "
        "match the affinity rules, have the same score",
        _pod(affinity=_STAY_WITH_S1_IN_REGION),
        (_on("node1", _S1),),
        [("node1", _CHINA), ("node2", _CHINA_AZ1), ("node3", _INDIA)],
        [100, 100, 0],
    ),
    _scored(
        "Affinity: nodes in one region has more matching pods comparing to other region, so the region which has "
        "more matches will get high score",
        _pod(_S1, affinity=_STAY_WITH_S2_IN_REGION),
        tuple(_on(n, _S2) for n in ("node1", "node1", "node2", "node3", "node4", "node5")),
        _FIVE_REGIONS,
        [100, 0, 100, 100, 0],
    ),
    _scored(
        "Affinity: different Label operators and values for pod affinity scheduling preference, including some "
        "match failures ",
        _pod(_S1, affinity=_AFFINITY3),
        (_on("node1", _S1), _on("node2", _S2), _on("node3", _S1)),
        _THREE,
        [20, 100, 0],
    ),
    _scored(
        "Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in pod affinity "
        "symmetry",
        _pod(_S2),
        (_on("node1", _S1, affinity=_STAY_WITH_S1_IN_REGION), _on("node2", _S2, affinity=_STAY_WITH_S2_IN_REGION)),
        _THREE,
        [0, 100, 0],
    ),
    _scored(
        "Affinity symmetry with namespace selector",
        _pod(_S1, namespace="subteam1.team1"),
        (
            _on("node1", _S1, affinity=_AFFINITY_NAMESPACE_SELECTOR),
            _on("node2", _S2, affinity=_STAY_WITH_S2_IN_REGION),
        ),
        _THREE,
        [100, 0, 0],
    ),
    _scored(
        "AntiAffinity symmetry with namespace selector",
        _pod(_S1, namespace="subteam1.team1"),
        (
            _on("node1", _S1, anti=preferred((5, _BY_NAMESPACE))),
            _on("node2", _S2, affinity=_STAY_WITH_S2_IN_REGION),
        ),
        _THREE,
        [0, 100, 100],
    ),
    _scored(
        "Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
        _pod(_S1),
        (_on("node1", _S1, affinity=_HARD_AFFINITY), _on("node2", _S2, affinity=_HARD_AFFINITY)),
        _THREE,
        [100, 100, 0],
    ),
    _scored(
        "Anti Affinity: pod that does not match existing pods in node will get high score ",
        _pod(_S1, anti=_AWAY_FROM_S1_IN_AZ),
        (_on("node1", _S1), _on("node2", _S2)),
        [("node1", _AZ1), ("node2", _CHINA)],
        [0, 100],
    ),
    _scored(
        "Anti Affinity: pod that does not match topology key & match the pods in nodes will get higher score "
        "comparing to others ",
        _pod(_S1, anti=_AWAY_FROM_S1_IN_AZ),
        (_on("node1", _S1), _on("node2", _S1)),
        [("node1", _AZ1), ("node2", _CHINA)],
        [0, 100],
    ),
    _scored(
        "Anti Affinity: one node has more matching pods comparing to other node, so the node which has more "
        "unmatches will get high score",
        _pod(_S1, anti=_AWAY_FROM_S1_IN_AZ),
        (_on("node1", _S1), _on("node1", _S1), _on("node2", _S2)),
        [("node1", _AZ1), ("node2", _INDIA)],
        [0, 100],
    ),
    _scored(
        "Anti Affinity symmetry: the existing pods in node which has anti affinity match will get high score",
        _pod(_S2),
        (_on("node1", _S1, anti=_AWAY_FROM_S2_IN_AZ), _on("node2", _S2, anti=_AWAY_FROM_S1_IN_AZ)),
        [("node1", _AZ1), ("node2", _AZ2)],
        [0, 100],
    ),
    _scored(
        "Affinity and Anti Affinity: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod "
        "affinity & anti affinity",
        _pod(_S1, affinity=_S1_REGION_AWAY_S2_AZ[0], anti=_S1_REGION_AWAY_S2_AZ[1]),
        (_on("node1", _S1), _on("node2", _S1)),
        [("node1", _CHINA), ("node2", _AZ1)],
        [100, 0],
    ),
    _scored(
        "Affinity and Anti Affinity: considering both affinity and anti-affinity, the pod to schedule and existing "
        "pods have the same labels",
        _pod(_S1, affinity=_S1_REGION_AWAY_S2_AZ[0], anti=_S1_REGION_AWAY_S2_AZ[1]),
        tuple(_on(n, _S1) for n in ("node1", "node1", "node2", "node3", "node3", "node4", "node5")),
        [("node1", _CHINA_AZ1), ("node2", _INDIA), ("node3", _CHINA), ("node4", _CHINA), ("node5", _INDIA)],
        [100, 0, 100, 100, 0],
    ),
    _scored(
        "Affinity and Anti Affinity and symmetry: considered only preferredDuringSchedulingIgnoredDuringExecution "
        "in both pod affinity & anti affinity & symmetry",
        _pod(_S1, affinity=_S1_REGION_AWAY_S2_AZ[0], anti=_S1_REGION_AWAY_S2_AZ[1]),
        (
            _on("node1", _S1),
            _on("node2", _S2),
            _on("node3", affinity=_S1_REGION_AWAY_S2_AZ[0], anti=_S1_REGION_AWAY_S2_AZ[1]),
            _on("node4", anti=_AWAY_FROM_S1_IN_AZ),
        ),
        [("node1", _CHINA), ("node2", _AZ1), ("node3", _INDIA), ("node4", _AZ2)],
        [100, 0, 100, 0],
    ),
    _scored(
        "Avoid panic when partial nodes in a topology don't have pods with affinity",
        _pod(_S1),
        (_on("node1", _S1), _on("node2", affinity=_S1_REGION_AWAY_S2_AZ[0], anti=_S1_REGION_AWAY_S2_AZ[1])),
        [("node1", _CHINA), ("node2", _CHINA)],
        [0, 0],
    ),
    _scored(
        "Affinity with pods matching NamespaceSelector",
        _pod(_S1, namespace="subteam1.team1", affinity=_AFFINITY_NAMESPACE_SELECTOR),
        (
            _on("node1", _S1, namespace="subteam1.team1"),
            _on("node1", _S1, namespace="subteam1.team1"),
            _on("node1", _S1, namespace="subteam1.team2"),
            _on("node2", _S1, namespace="subteam2.team1"),
        ),
        [("node1", _CHINA), ("node2", _INDIA)],
        [100, 0],
    ),
    _scored(
        "Affinity with pods matching both NamespaceSelector and Namespaces fields",
        _pod(_S1, namespace="subteam1.team1", affinity=_AFFINITY_NAMESPACE_SELECTOR),
        (
            _on("node1", _S1, namespace="subteam1.team1"),
            _on("node1", _S1, namespace="subteam1.team1"),
            _on("node1", _S1, namespace="subteam2.team2"),
            _on("node2", _S1, namespace="subteam2.team1"),
        ),
        [("node1", _CHINA), ("node2", _INDIA)],
        [100, 0],
    ),
    _scored(
        "Affinity with pods matching NamespaceSelector (anti-affinity)",
        _pod(_S1, namespace="subteam1.team1", anti=_AFFINITY_NAMESPACE_SELECTOR),
        (
            _on("node1", _S1, namespace="subteam1.team1"),
            _on("node1", _S1, namespace="subteam1.team1"),
            _on("node1", _S1, namespace="subteam1.team2"),
            _on("node2", _S1, namespace="subteam2.team1"),
        ),
        [("node1", _CHINA), ("node2", _INDIA)],
        [0, 100],
    ),
    _scored(
        "Affinity with pods matching both NamespaceSelector and Namespaces fields (anti-affinity)",
        _pod(_S1, namespace="subteam1.team1", anti=_AFFINITY_NAMESPACE_SELECTOR),
        (
            _on("node1", _S1, namespace="subteam1.team1"),
            _on("node1", _S1, namespace="subteam1.team1"),
            _on("node1", _S1, namespace="subteam2.team2"),
            _on("node2", _S1, namespace="subteam2.team1"),
        ),
        [("node1", _CHINA), ("node2", _INDIA)],
        [0, 100],
    ),
    _scored(
        "Do not ignore preferred terms of existing pods",
        _pod(_S2),
        (
            _on("node1", _S1, affinity=_S1_REGION_AWAY_S2_AZ[0], anti=_S1_REGION_AWAY_S2_AZ[1]),
            _on("node2", _S2, affinity=_STAY_WITH_S2_IN_REGION),
        ),
        [("node1", _CHINA), ("node2", _INDIA)],
        [0, 100],
    ),
    _scored("No nodes to score", _pod(_S2), (), [], []),
]

_HARD_POD_AFFINITY = required(
    term(
        "region",
        in_("service", "S1"),
        namespaces=("", "subteam2.team2"),
        namespace_selector=_TEAM1,
    )
)
_SERVICE_S1 = {"service": "S1"}
_HARD_PODS = (_on("node1", affinity=_HARD_POD_AFFINITY), _on("node2", affinity=_HARD_POD_AFFINITY))

HARD_SCORES: list[ScoreCase] = [
    _hard("with default weight", _pod(_SERVICE_S1), [100, 100, 0]),
    _hard("with no matching namespace", _pod(_SERVICE_S1, namespace="subteam1.team2"), [0, 0, 0]),
    _hard("with matching NamespaceSelector", _pod(_SERVICE_S1, namespace="subteam1.team1"), [100, 100, 0]),
    _hard("with matching Namespaces", _pod(_SERVICE_S1, namespace="subteam2.team2"), [100, 100, 0]),
]
