"""kubernetes/kubernetes ``pkg/scheduler/framework/plugins/podtopologyspread/``:

- ``filtering_test.go``: TestSingleConstraint, TestMultipleConstraints (Filter; the shape with
  ``SpreadConstraint(maxSkew, key, mode, selector, minDomains, nodeAffinityPolicy, nodeTaintsPolicy,
  matchLabelKeys)`` and the NodeInclusionPolicy cases);
- ``scoring_test.go``: TestPodTopologySpreadScore (Score, normalized).

Upstream states codes only: ``Unschedulable`` is the skew refusal, ``UnschedulableAndUnresolvable`` the
missing-label refusal. Where the Go test runs the spread plugin alone over nodes another plugin refuses
(its comments: "in real case, it's false"), ``combined`` gives the whole filter's answer.

Not ported: "terminating Pods should be excluded" (filter and score: the model has no deletion timestamp;
the cluster state leaves terminating pods out), "system defaulting, nodes don't have zone, pods match
service" (default constraints from Services are not modelled) and "matchLabelKeys ignored when feature gate
disabled" (matchLabelKeys is always honoured).

kube-scheduler v1.37.2's own plugins now judge these plugins on random GPU clusters too:
tests/upstream/test_oracle_scheduler.py (tests/oracles/scheduler).
"""

from __future__ import annotations

from placement.core.constraints.constraint_types import (
    Labels,
    NodeAffinity,
    NodeFacts,
    PlacedPod,
    PodConstraints,
    TopologySpreadConstraint,
)
from placement.core.constraints.terms import IncomingPod
from placement.core.constraints.verdicts import (
    NODE_AFFINITY_MISMATCH,
    SPREAD_MISMATCH,
    SPREAD_MISSING_LABEL,
    UNTOLERATED_TAINT,
)
from placement.core.vocabulary import Rejected
from tests.scheduler_cases.builders import (
    BAR,
    DO_NOT_SCHEDULE,
    FOO,
    HONOR,
    HOSTNAME,
    IGNORE,
    IN,
    NOT_IN,
    SCHEDULE_ANYWAY,
    UNSCHEDULABLE_TAINT,
    labels,
    node,
    node_affinity,
    node_term,
    placed,
    req,
    selector,
    spread,
)
from tests.scheduler_cases.cases import FilterCase, ScoreCase

SINGLE = "podtopologyspread/filtering_test.go TestSingleConstraint"
MULTIPLE = "podtopologyspread/filtering_test.go TestMultipleConstraints"
SCORE_SOURCE = "podtopologyspread/scoring_test.go TestPodTopologySpreadScore"
OK: Rejected | None = None
MM, MISSING = SPREAD_MISMATCH, SPREAD_MISSING_LABEL
AFFINITY = NODE_AFFINITY_MISMATCH
TAINTED = UNTOLERATED_TAINT

_ZONES = {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"}


def _zoned(
    *names: str, extra: dict[str, dict[str, str]] | None = None, tainted: tuple[str, ...] = ()
) -> tuple[NodeFacts, ...]:
    extra = extra or {}
    return tuple(
        node(
            n,
            {"zone": _ZONES[n], "node": n, **extra.get(n, {})},
            taints=(UNSCHEDULABLE_TAINT,) if n in tainted else (),
        )
        for n in names
    )


_FOUR = _zoned("node-a", "node-b", "node-x", "node-y")


def _pod(
    *constraints: TopologySpreadConstraint,
    labels_of: tuple[str, ...] = ("foo",),
    node_selector: Labels = (),
    node_affinity: NodeAffinity | None = None,
) -> IncomingPod:
    own = labels(dict.fromkeys(labels_of, ""))
    return IncomingPod(
        "", own, PodConstraints(node_selector=node_selector, node_affinity=node_affinity, topology_spread=constraints)
    )


def _pods(*spec: str, label_of: str = "foo") -> tuple[PlacedPod, ...]:
    """Pods "p-a1" and so on on the node its name says ("p-a1" on node-a), labelled ``label_of``."""
    return tuple(placed(f"node-{s[2]}", {label_of: ""}, name=s) for s in spec)


def _case(
    source: str,
    name: str,
    pod: IncomingPod,
    cluster: tuple[tuple[NodeFacts, ...], tuple[PlacedPod, ...]],
    expected: list[Rejected | None],
    *,
    combined: dict[str, Rejected | None] | None = None,
) -> FilterCase:
    nodes, pods = cluster
    return FilterCase(
        source,
        name,
        "pod_topology_spread",
        pod,
        nodes,
        {n.name: e for n, e in zip(nodes, expected, strict=True)},
        pods=pods,
        combined=dict(combined or {}),
    )


_ZONE = spread(1, "zone", DO_NOT_SCHEDULE, FOO)
_NODE = spread(1, "node", DO_NOT_SCHEDULE, FOO)
_SPREAD_2103 = _pods("p-a1", "p-a2", "p-b1", "p-y1", "p-y2", "p-y3")
_THREE_NODES = tuple(node(n, {"node": n}) for n in ("node-a", "node-b", "node-c"))
_FOO_NODES = (
    node("node-a", {"node": "node-a", "foo": ""}),
    node("node-b", {"node": "node-b", "foo": ""}),
    node("node-x", {"node": "node-x", "foo": ""}),
    node("node-y", {"node": "node-y"}),
)
_FOO_NODES_TAINTED_Y = (*_FOO_NODES[:3], node("node-y", {"node": "node-y"}, taints=(UNSCHEDULABLE_TAINT,)))
_POLICY_PODS = (
    placed("node-a", {"foo": ""}, name="p-b1"),
    placed("node-b", {"foo": ""}, name="p-b2"),
    placed("node-y", {"foo": ""}, name="p-y1"),
)
_FOO_IN_EMPTY = node_affinity(node_term(req("foo", IN, "")))

SINGLE_CONSTRAINT: list[FilterCase] = [
    _case(SINGLE, "no existing pods", _pod(_ZONE), (_FOUR, ()), [OK, OK, OK, OK]),
    _case(
        SINGLE,
        "no existing pods, incoming pod doesn't match itself",
        _pod(spread(1, "zone", DO_NOT_SCHEDULE, BAR)),
        (_FOUR, ()),
        [OK, OK, OK, OK],
    ),
    _case(
        SINGLE,
        "existing pods in a different namespace do not count",
        _pod(_ZONE),
        (
            _FOUR,
            (
                placed("node-a", {"foo": ""}, namespace="ns1", name="p-a1"),
                placed("node-a", {"foo": ""}, namespace="ns2", name="p-b1"),
                placed("node-x", {"foo": ""}, name="p-x1"),
                placed("node-y", {"foo": ""}, name="p-y1"),
            ),
        ),
        [OK, OK, MM, MM],
    ),
    _case(
        SINGLE,
        "existing pods do not match null selector",
        _pod(spread(1, "zone", DO_NOT_SCHEDULE, None)),
        (_FOUR, _pods("p-x1", "p-y1")),
        [OK, OK, OK, OK],
    ),
    _case(
        SINGLE,
        "pods spread across zones as 3/3, all nodes fit",
        _pod(_ZONE),
        (_FOUR, _SPREAD_2103),
        [OK, OK, OK, OK],
    ),
    _case(
        SINGLE,
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        _pod(_ZONE),
        (
            (
                node("node-a", {"zone": "zone1", "node": "node-a"}),
                node("node-b", {"zon": "zone1", "node": "node-b"}),
                *_zoned("node-x", "node-y"),
            ),
            _pods("p-a1", "p-b1", "p-x1", "p-y1"),
        ),
        [OK, MISSING, MM, MM],
    ),
    _case(
        SINGLE,
        "pod cannot be scheduled as all nodes don't have label 'rack'",
        _pod(spread(1, "rack", DO_NOT_SCHEDULE, FOO)),
        (_zoned("node-a", "node-x"), ()),
        [MISSING, MISSING],
    ),
    _case(
        SINGLE,
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        _pod(_NODE),
        (_FOUR, _SPREAD_2103),
        [MM, MM, OK, MM],
    ),
    _case(
        SINGLE,
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        _pod(spread(2, "node", DO_NOT_SCHEDULE, FOO)),
        (_FOUR, _SPREAD_2103),
        [MM, OK, OK, MM],
    ),
    _case(
        SINGLE,
        "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
        _pod(_NODE, labels_of=("bar",)),
        (_FOUR, _SPREAD_2103),
        [MM, OK, OK, MM],
    ),
    _case(
        SINGLE,
        "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
        _pod(_NODE, node_affinity=node_affinity(node_term(req("node", IN, "node-a", "node-y")))),
        (_FOUR, _SPREAD_2103),
        [OK, OK, OK, MM],
        combined={"node-b": AFFINITY, "node-x": AFFINITY},
    ),
    _case(
        SINGLE,
        "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
        _pod(_ZONE, node_affinity=node_affinity(node_term(req("node", NOT_IN, "node-b")))),
        (_FOUR, _pods("p-b1", "p-b2", "p-y1")),
        [OK, OK, MM, MM],
        combined={"node-b": AFFINITY},
    ),
    _case(
        SINGLE,
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third "
        "node fits",
        _pod(spread(2, "node", DO_NOT_SCHEDULE, FOO, min_domains=4)),
        (_THREE_NODES, _pods("p-a1", "p-a2", "p-b1", "p-b2", "p-c1")),
        [MM, MM, OK],
    ),
    _case(
        SINGLE,
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all "
        "nodes fit",
        _pod(spread(2, "node", DO_NOT_SCHEDULE, FOO, min_domains=2)),
        (_THREE_NODES, _pods("p-a1", "p-a2", "p-b1", "p-b2", "p-c1")),
        [OK, OK, OK],
    ),
    _case(
        SINGLE,
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and "
        "fourth nodes fit",
        _pod(spread(2, "zone", DO_NOT_SCHEDULE, FOO, min_domains=3)),
        (
            _FOUR,
            (
                placed("node-a", {"foo": ""}, name="p-b1"),
                placed("node-b", {"foo": ""}, name="p-b2"),
                placed("node-y", {"foo": ""}, name="p-y1"),
            ),
        ),
        [MM, MM, OK, OK],
    ),
    _case(
        SINGLE,
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
        _pod(spread(2, "zone", DO_NOT_SCHEDULE, FOO, min_domains=1)),
        (
            _FOUR,
            (
                placed("node-a", {"foo": ""}, name="p-b1"),
                placed("node-b", {"foo": ""}, name="p-b2"),
                placed("node-y", {"foo": ""}, name="p-y1"),
            ),
        ),
        [OK, OK, OK, OK],
    ),
    _case(
        SINGLE,
        "NodeAffinityPolicy honored with labelSelectors",
        _pod(_NODE, node_selector=labels({"foo": ""})),
        (_FOO_NODES, _POLICY_PODS),
        [MM, MM, OK, OK],
        combined={"node-y": AFFINITY},
    ),
    _case(
        SINGLE,
        "NodeAffinityPolicy ignored with labelSelectors",
        _pod(spread(1, "node", DO_NOT_SCHEDULE, FOO, affinity_policy=IGNORE), node_selector=labels({"foo": ""})),
        (_FOO_NODES, _POLICY_PODS),
        [MM, MM, OK, MM],
        combined={"node-y": AFFINITY},
    ),
    _case(
        SINGLE,
        "NodeAffinityPolicy honored with nodeAffinity",
        _pod(_NODE, node_affinity=_FOO_IN_EMPTY),
        (_FOO_NODES, _POLICY_PODS),
        [MM, MM, OK, OK],
        combined={"node-y": AFFINITY},
    ),
    _case(
        SINGLE,
        "NodeAffinityPolicy ignored with labelSelectors (the nodeAffinity case)",
        _pod(spread(1, "node", DO_NOT_SCHEDULE, FOO, affinity_policy=IGNORE), node_affinity=_FOO_IN_EMPTY),
        (_FOO_NODES, _POLICY_PODS),
        [MM, MM, OK, MM],
        combined={"node-y": AFFINITY},
    ),
    _case(
        SINGLE,
        "NodeTaintsPolicy honored",
        _pod(spread(1, "node", DO_NOT_SCHEDULE, FOO, taints_policy=HONOR)),
        (_FOO_NODES_TAINTED_Y, _POLICY_PODS),
        [MM, MM, OK, OK],
        combined={"node-y": TAINTED},
    ),
    _case(
        SINGLE,
        "NodeTaintsPolicy ignored",
        _pod(_NODE),
        (_FOO_NODES_TAINTED_Y, _POLICY_PODS),
        [MM, MM, OK, MM],
        combined={"node-y": TAINTED},
    ),
]

MULTIPLE_CONSTRAINTS: list[FilterCase] = [
    _case(
        MULTIPLE,
        "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
        _pod(_ZONE, _NODE),
        (_FOUR, _SPREAD_2103),
        [MM, MM, OK, MM],
    ),
    _case(
        MULTIPLE,
        "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
        _pod(_ZONE, _NODE),
        (_FOUR, _pods("p-a1", "p-a2", "p-b1", "p-y1", "p-y2", "p-y3", "p-y4")),
        [MM, MM, MM, MM],
    ),
    _case(
        MULTIPLE,
        "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
        _pod(_ZONE, spread(1, "node", DO_NOT_SCHEDULE, BAR), labels_of=("foo", "bar")),
        (_FOUR, (*_pods("p-a1"), *_pods("p-y1", label_of="bar"))),
        [MM, MM, OK, MM],
    ),
    _case(
        MULTIPLE,
        "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
        _pod(_ZONE, spread(1, "node", DO_NOT_SCHEDULE, BAR), labels_of=("foo", "bar")),
        (_FOUR, (*_pods("p-a1"), *_pods("p-x1", "p-y1", label_of="bar"))),
        [MM, MM, MM, MM],
    ),
    _case(
        MULTIPLE,
        "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
        _pod(_ZONE, spread(1, "node", DO_NOT_SCHEDULE, BAR), labels_of=("foo", "bar")),
        (
            _FOUR,
            (
                placed("node-a", {"foo": ""}, name="p-a1"),
                placed("node-a", {"foo": "", "bar": ""}, name="p-a2"),
                placed("node-y", {"foo": ""}, name="p-y1"),
                placed("node-y", {"foo": "", "bar": ""}, name="p-y2"),
                placed("node-y", {"foo": ""}, name="p-y3"),
            ),
        ),
        [MM, OK, MM, MM],
    ),
    _case(
        MULTIPLE,
        "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
        _pod(_ZONE, spread(1, "node", DO_NOT_SCHEDULE, BAR), labels_of=("bar",)),
        (_FOUR, (*_pods("p-a1"), *_pods("p-x1", "p-y1", label_of="bar"))),
        [OK, OK, MM, MM],
    ),
    _case(
        MULTIPLE,
        "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
        _pod(_ZONE, _NODE),
        ((*_zoned("node-a", "node-b"), node("node-x", {"zone": "zone2"}), *_zoned("node-y")), _pods("p-a1", "p-y3")),
        [MM, OK, MISSING, MM],
    ),
    _case(
        MULTIPLE,
        "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
        _pod(_ZONE, spread(1, "node", DO_NOT_SCHEDULE, FOO, affinity_policy=IGNORE), node_selector=labels({"foo": ""})),
        (
            _zoned(
                "node-a", "node-b", "node-x", "node-y", extra={n: {"foo": ""} for n in ("node-a", "node-b", "node-x")}
            ),
            _pods("p-a1", "p-b1", "p-y1"),
        ),
        [MM, MM, OK, MM],
        combined={"node-y": AFFINITY},
    ),
    _case(
        MULTIPLE,
        "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
        _pod(spread(1, "zone", DO_NOT_SCHEDULE, FOO, taints_policy=HONOR), _NODE),
        (
            _zoned(
                "node-a",
                "node-b",
                "node-x",
                "node-y",
                extra={n: {"foo": ""} for n in ("node-a", "node-b", "node-x")},
                tainted=("node-y",),
            ),
            _pods("p-a1", "p-b1", "p-y1"),
        ),
        [MM, MM, OK, MM],
        combined={"node-y": TAINTED},
    ),
    _case(
        MULTIPLE,
        "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
        _pod(_ZONE, _NODE, node_selector=labels({"foo": ""})),
        (
            _zoned(
                "node-a",
                "node-b",
                "node-x",
                "node-y",
                extra={n: {"foo": ""} for n in ("node-a", "node-x", "node-y")},
                tainted=("node-y",),
            ),
            _pods("p-a1", "p-b1", "p-y1"),
        ),
        [MM, OK, OK, MM],
        combined={"node-b": AFFINITY, "node-y": TAINTED},
    ),
    _case(
        MULTIPLE,
        "two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
        _pod(
            spread(1, "zone", DO_NOT_SCHEDULE, FOO, taints_policy=HONOR),
            spread(1, "node", DO_NOT_SCHEDULE, FOO, affinity_policy=IGNORE),
            node_selector=labels({"foo": ""}),
        ),
        (
            _zoned(
                "node-a",
                "node-b",
                "node-x",
                "node-y",
                extra={n: {"foo": ""} for n in ("node-a", "node-x", "node-y")},
                tainted=("node-y",),
            ),
            _pods("p-a1", "p-b1", "p-y1"),
        ),
        [MM, MM, OK, MM],
        combined={"node-b": AFFINITY, "node-y": TAINTED},
    ),
]

# --- scoring ----------------------------------------------------------------------------------------------


def _hosts(*names: str, zone: dict[str, str] | None = None) -> tuple[NodeFacts, ...]:
    return tuple(node(n, {HOSTNAME: n, **({"zone": zone[n]} if zone else {})}) for n in names)


def _scored(
    name: str,
    pod: IncomingPod,
    nodes: tuple[NodeFacts, ...],
    pods: tuple[PlacedPod, ...],
    want: list[int],
    *,
    failed: tuple[NodeFacts, ...] = (),
) -> ScoreCase:
    return ScoreCase(SCORE_SOURCE, name, "PodTopologySpread", pod, nodes, tuple(want), pods=pods, failed=failed)


_HOST = spread(1, HOSTNAME, SCHEDULE_ANYWAY, FOO)
_SOFT_ZONE = spread(1, "zone", SCHEDULE_ANYWAY, FOO)
_2103 = _pods("p-a1", "p-a2", "p-b1", "p-d1", "p-d2", "p-d3")
_4321 = _pods("p-a1", "p-a2", "p-a3", "p-a4", "p-b1", "p-b2", "p-b3", "p-c1", "p-c2", "p-d1")
_4213 = _pods("p-a1", "p-a2", "p-a3", "p-a4", "p-b1", "p-b2", "p-x1", "p-y1", "p-y2", "p-y3")
_ZONE_OF = {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"}
_ZONE_OF_ABCD = {"node-a": "zone1", "node-b": "zone1", "node-c": "zone2", "node-d": "zone2"}
_SOFT_NODE_PODS = (
    placed("node-a", {"foo": ""}, name="p-a1"),
    placed("node-a", {"foo": ""}, name="p-a2"),
    placed("node-b", {"foo": ""}, name="p-b1"),
    placed("node-c", {"foo": ""}, name="p-c1"),
)
_SOFT_NODES = (
    node("node-a", {"node": "node-a", "foo": ""}),
    node("node-b", {"node": "node-b", "foo": ""}),
    node("node-c", {"node": "node-c"}),
)
_SOFT_TAINT_NODES = (
    node("node-a", {"node": "node-a"}),
    node("node-b", {"node": "node-b"}),
    node("node-c", {"node": "node-c"}, taints=(UNSCHEDULABLE_TAINT,)),
)
_DIFFERENT_SELECTORS = (
    placed("node-a", {"foo": ""}, name="p-a1"),
    placed("node-b", {"foo": "", "bar": ""}, name="p-b1"),
    placed("node-y", {"foo": ""}, name="p-y1"),
    placed("node-y", {"bar": ""}, name="p-y2"),
)
_MATCH_KEY_NODES = _hosts("node-a", "node-b", "node-c", "node-d", zone=_ZONE_OF_ABCD)

SCORES: list[ScoreCase] = [
    _scored("one constraint on node, no existing pods", _pod(_HOST), _hosts("node-a", "node-b"), (), [100, 100]),
    _scored(
        "one constraint on node, only one node is candidate",
        _pod(_HOST),
        _hosts("node-a"),
        _pods("p-a1", "p-a2", "p-b1"),
        [100],
        failed=_hosts("node-b"),
    ),
    _scored(
        "one constraint on node, all nodes have the same number of matching pods",
        _pod(_HOST),
        _hosts("node-a", "node-b"),
        _pods("p-a1", "p-b1"),
        [100, 100],
    ),
    _scored(
        "one constraint on node, all 4 nodes are candidates",
        _pod(_HOST),
        _hosts("node-a", "node-b", "node-c", "node-d"),
        _2103,
        [20, 60, 100, 0],
    ),
    _scored(
        "one constraint on node, null selector",
        _pod(spread(1, HOSTNAME, SCHEDULE_ANYWAY, None)),
        _hosts("node-a", "node-b", "node-c", "node-d"),
        _2103,
        [100, 100, 100, 100],
    ),
    _scored(
        "one constraint on node, all 4 nodes are candidates, maxSkew=2",
        _pod(spread(2, HOSTNAME, SCHEDULE_ANYWAY, FOO)),
        _hosts("node-a", "node-b", "node-c", "node-d"),
        _2103,
        [33, 66, 100, 16],
    ),
    _scored(
        "one constraint on node, all 4 nodes are candidates, maxSkew=3",
        _pod(spread(3, HOSTNAME, SCHEDULE_ANYWAY, FOO)),
        _hosts("node-a", "node-b", "node-c", "node-d"),
        _4321,
        [44, 66, 77, 100],
    ),
    _scored(
        "one constraint on node, 3 out of 4 nodes are candidates",
        _pod(_HOST),
        _hosts("node-a", "node-b", "node-x"),
        _4213,
        [33, 83, 100],
        failed=_hosts("node-y"),
    ),
    _scored(
        "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
        _pod(_HOST),
        (node("node-a", {HOSTNAME: "node-a"}), node("node-b", {"n": "node-b"}), node("node-x", {HOSTNAME: "node-x"})),
        _4213,
        [16, 0, 100],
        failed=_hosts("node-y"),
    ),
    _scored(
        "one constraint on zone, 3 out of 4 nodes are candidates",
        _pod(_SOFT_ZONE),
        _hosts("node-a", "node-b", "node-x", zone=_ZONE_OF),
        _4213,
        [75, 75, 100],
        failed=_hosts("node-y", zone=_ZONE_OF),
    ),
    _scored(
        "two Constraints on zone and node, 2 out of 4 nodes are candidates",
        _pod(_SOFT_ZONE, _HOST),
        _hosts("node-a", "node-x", zone=_ZONE_OF),
        _pods("p-a1", "p-a2", "p-b1", "p-x1", "p-x2", "p-y1", "p-y2", "p-y3", "p-y4"),
        [100, 63],
        failed=_hosts("node-b", "node-y", zone=_ZONE_OF),
    ),
    _scored(
        "two Constraints on zone and node, with different labelSelectors",
        _pod(_SOFT_ZONE, spread(1, HOSTNAME, SCHEDULE_ANYWAY, BAR), labels_of=("foo", "bar")),
        _hosts("node-a", "node-b", "node-x", "node-y", zone=_ZONE_OF),
        _DIFFERENT_SELECTORS,
        [60, 20, 100, 60],
    ),
    _scored(
        "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
        _pod(_SOFT_ZONE, spread(1, HOSTNAME, SCHEDULE_ANYWAY, BAR), labels_of=("foo", "bar")),
        _hosts("node-a", "node-b", "node-x", "node-y", zone=_ZONE_OF),
        (
            placed("node-b", {"bar": ""}, name="p-b1"),
            placed("node-x", {"foo": ""}, name="p-x1"),
            placed("node-y", {"foo": "", "bar": ""}, name="p-y1"),
        ),
        [100, 60, 40, 0],
    ),
    _scored(
        "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
        _pod(_SOFT_ZONE, spread(1, HOSTNAME, SCHEDULE_ANYWAY, BAR), labels_of=("foo", "bar")),
        _hosts("node-a", "node-b", "node-x", zone=_ZONE_OF),
        _DIFFERENT_SELECTORS,
        [50, 25, 100],
        failed=_hosts("node-y", zone=_ZONE_OF),
    ),
    _scored(
        "existing pods in a different namespace do not count",
        _pod(_HOST),
        _hosts("node-a", "node-b"),
        (
            placed("node-a", {"foo": ""}, namespace="ns1", name="p-a1"),
            placed("node-a", {"foo": ""}, name="p-a2"),
            placed("node-b", {"foo": ""}, name="p-b1"),
            placed("node-b", {"foo": ""}, name="p-b2"),
        ),
        [100, 33],
    ),
    _scored(
        "minDomains has no effect when ScheduleAnyway",
        _pod(spread(2, "node", SCHEDULE_ANYWAY, FOO, min_domains=10)),
        _THREE_NODES,
        _pods("p-a1", "p-a2", "p-b1", "p-b2", "p-c1"),
        [75, 75, 100],
    ),
    _scored(
        "NodeAffinityPolicy honoed with labelSelectors",
        _pod(spread(1, "node", SCHEDULE_ANYWAY, FOO), node_selector=labels({"foo": ""})),
        _SOFT_NODES,
        _SOFT_NODE_PODS,
        [0, 33, 100],
    ),
    _scored(
        "NodeAffinityPolicy ignored with labelSelectors",
        _pod(spread(1, "node", SCHEDULE_ANYWAY, FOO, affinity_policy=IGNORE), node_selector=labels({"foo": ""})),
        _SOFT_NODES,
        _SOFT_NODE_PODS,
        [66, 100, 100],
    ),
    _scored(
        "NodeAffinityPolicy honoed with nodeAffinity",
        _pod(spread(1, "node", SCHEDULE_ANYWAY, FOO), node_affinity=_FOO_IN_EMPTY),
        _SOFT_NODES,
        _SOFT_NODE_PODS,
        [0, 33, 100],
    ),
    _scored(
        "NodeAffinityPolicy ignored with nodeAffinity",
        _pod(spread(1, "node", SCHEDULE_ANYWAY, FOO, affinity_policy=IGNORE), node_affinity=_FOO_IN_EMPTY),
        _SOFT_NODES,
        _SOFT_NODE_PODS,
        [66, 100, 100],
    ),
    _scored(
        "NodeTaintsPolicy honored",
        _pod(spread(1, "node", SCHEDULE_ANYWAY, FOO, taints_policy=HONOR)),
        _SOFT_TAINT_NODES,
        _SOFT_NODE_PODS,
        [0, 33, 100],
    ),
    _scored(
        "NodeTaintsPolicy ignored",
        _pod(spread(1, "node", SCHEDULE_ANYWAY, FOO)),
        _SOFT_TAINT_NODES,
        _SOFT_NODE_PODS,
        [66, 100, 100],
    ),
    _scored(
        "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
        _pod(
            spread(1, "zone", SCHEDULE_ANYWAY, selector(), match_label_keys=("foo",)),
            spread(1, HOSTNAME, SCHEDULE_ANYWAY, selector(), match_label_keys=("bar",)),
            labels_of=("foo", "bar"),
        ),
        _MATCH_KEY_NODES,
        (
            placed("node-a", {"foo": ""}, name="p-a1"),
            placed("node-b", {"foo": "", "bar": ""}, name="p-b1"),
            placed("node-c", {"foo": ""}, name="p-y1"),
            placed("node-c", {"bar": ""}, name="p-y2"),
        ),
        [60, 20, 60, 100],
    ),
    _scored(
        "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
        _pod(
            _SOFT_ZONE,
            spread(1, HOSTNAME, SCHEDULE_ANYWAY, BAR, match_label_keys=("baz",)),
            labels_of=("foo", "bar", "baz"),
        ),
        _MATCH_KEY_NODES,
        (
            placed("node-a", {"foo": ""}, name="p-a1"),
            placed("node-b", {"foo": "", "bar": "", "baz": ""}, name="p-b1"),
            placed("node-c", {"foo": ""}, name="p-c1"),
            placed("node-c", {"bar": ""}, name="p-c2"),
            placed("node-c", {"bar": "", "baz": ""}, name="p-d3"),
        ),
        [60, 20, 60, 100],
    ),
]
