"""kubernetes/kubernetes ``pkg/scheduler/framework/plugins/nodeaffinity/node_affinity_test.go``:
TestNodeAffinity (Filter, one node) and TestNodeAffinityPriority (Score, normalized).

Not ported: the cases configuring the plugin's ``addedAffinity`` (a scheduler profile argument this port has
no counterpart for): "Matches added affinity and Pod's node affinity", "Matches added affinity but not Pod's
node affinity", "Doesn't match added affinity", and the Priority cases "added affinity" and "added affinity
and pod has default affinity". Nodes without a name in the Go test have the empty name here too.

kube-scheduler v1.37.2's own plugins now judge these plugins on random GPU clusters too:
tests/upstream/test_oracle_scheduler.py (tests/oracles/scheduler).
"""

from __future__ import annotations

from placement.core.constraints.constraint_types import NodeAffinity, NodeSelectorTerm, PodConstraints
from placement.core.constraints.terms import IncomingPod
from placement.core.constraints.verdicts import NAME_CONFLICT, NODE_AFFINITY_MISMATCH, outside_pre_filter_result
from tests.scheduler_cases.builders import (
    EXISTS,
    GT,
    IN,
    NOT_IN,
    labels,
    name_in,
    node,
    node_affinity,
    node_preferences,
    node_term,
    req,
)
from tests.scheduler_cases.cases import FilterCase, ScoreCase

SOURCE = "nodeaffinity/node_affinity_test.go TestNodeAffinity"
PRIORITY = "nodeaffinity/node_affinity_test.go TestNodeAffinityPriority"
MISMATCH = NODE_AFFINITY_MISMATCH
OUTSIDE = outside_pre_filter_result(("NodeAffinity",))


def _case(
    name: str,
    constraints: PodConstraints,
    label_map: dict[str, str] | None,
    fits: bool,
    node_name: str = "",
    *,
    left_out: bool = False,
) -> FilterCase:
    """``left_out``: the case's wantPreFilterResult leaves the node out, so the whole filter
    refuses it unfiltered (``findNodesThatFitPod``)."""
    return FilterCase(
        SOURCE,
        name,
        "node_affinity",
        IncomingPod("", (), constraints),
        (node(node_name, label_map),),
        {node_name: None if fits else MISMATCH},
        combined={node_name: OUTSIDE} if left_out else {},
    )


def _selector(**pairs: str) -> PodConstraints:
    return PodConstraints(node_selector=labels(pairs))


def _affinity(*terms: NodeSelectorTerm) -> PodConstraints:
    return PodConstraints(node_affinity=node_affinity(*terms))


_GPU_EXISTS_NOT_AMD = _affinity(node_term(req("GPU", EXISTS), req("GPU", NOT_IN, "AMD", "INTER")))
_GPU = {"GPU": "NVIDIA-GRID-K1"}

FILTER: list[FilterCase] = [
    _case("missing labels", _selector(foo="bar"), None, False),
    _case("same labels", _selector(foo="bar"), {"foo": "bar"}, True),
    _case("node labels are superset", _selector(foo="bar"), {"foo": "bar", "baz": "blah"}, True),
    _case("node labels are subset", _selector(foo="bar", baz="blah"), {"foo": "bar"}, False),
    _case(
        "Pod with matchExpressions using In operator that matches the existing node",
        _affinity(node_term(req("foo", IN, "bar", "value2"))),
        {"foo": "bar"},
        True,
    ),
    _case(
        "Pod with matchExpressions using Gt operator that matches the existing node",
        _affinity(node_term(req("kernel-version", GT, "0204"))),
        {"kernel-version": "0206"},
        True,
    ),
    _case(
        "Pod with matchExpressions using NotIn operator that matches the existing node",
        _affinity(node_term(req("mem-type", NOT_IN, "DDR", "DDR2"))),
        {"mem-type": "DDR3"},
        True,
    ),
    _case(
        "Pod with matchExpressions using Exists operator that matches the existing node",
        _affinity(node_term(req("GPU", EXISTS))),
        _GPU,
        True,
    ),
    _case(
        "Pod with affinity that don't match node's labels won't schedule onto the node",
        _affinity(node_term(req("foo", IN, "value1", "value2"))),
        {"foo": "bar"},
        False,
    ),
    _case(
        "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node",
        _affinity(node_term()),
        {"foo": "bar"},
        False,
    ),
    _case("Pod with no Affinity will schedule onto a node", PodConstraints(), {"foo": "bar"}, True),
    _case(
        "Pod with Affinity but nil NodeSelector will schedule onto a node",
        PodConstraints(node_affinity=NodeAffinity(required=None)),
        {"foo": "bar"},
        True,
    ),
    _case("Pod with multiple matchExpressions ANDed that matches the existing node", _GPU_EXISTS_NOT_AMD, _GPU, True),
    _case(
        "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
        _affinity(node_term(req("GPU", EXISTS), req("GPU", IN, "AMD", "INTER"))),
        _GPU,
        False,
    ),
    _case(
        "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto "
        "the node",
        _affinity(node_term(req("foo", IN, "bar", "value2")), node_term(req("diffkey", IN, "wrong", "value2"))),
        {"foo": "bar"},
        True,
    ),
    _case(
        "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) both are "
        "satisfied, will schedule onto the node",
        PodConstraints(
            node_selector=labels({"foo": "bar"}), node_affinity=node_affinity(node_term(req("foo", EXISTS)))
        ),
        {"foo": "bar"},
        True,
    ),
    _case(
        "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are "
        "deprecating) is not satisfied, won't schedule onto the node",
        PodConstraints(
            node_selector=labels({"foo": "bar"}), node_affinity=node_affinity(node_term(req("foo", EXISTS)))
        ),
        {"foo": "barrrrrr"},
        False,
    ),
    _case(
        "Pod with an invalid value in Affinity term won't be scheduled onto the node",
        _affinity(node_term(req("foo", NOT_IN, "invalid value: ___@#$%^"))),
        {"foo": "bar"},
        False,
    ),
    _case(
        "Pod with matchFields using In operator that matches the existing node",
        _affinity(node_term(fields=(name_in("node1"),))),
        None,
        True,
        "node1",
    ),
    _case(
        "Pod with matchFields using In operator that does not match the existing node",
        _affinity(node_term(fields=(name_in("node1"),))),
        None,
        False,
        "node2",
        left_out=True,
    ),
    _case(
        "Pod with two terms: matchFields does not match, but matchExpressions matches",
        _affinity(node_term(fields=(name_in("node1"), name_in("node2"))), node_term(req("foo", IN, "bar"))),
        {"foo": "bar"},
        True,
        "node2",
    ),
    _case(
        "Pod with one term: matchFields does not match, but matchExpressions matches",
        _affinity(node_term(req("foo", IN, "bar"), fields=(name_in("node1"),))),
        {"foo": "bar"},
        False,
        "node2",
        left_out=True,
    ),
    _case(
        "Pod with one term: both matchFields and matchExpressions match",
        _affinity(node_term(req("foo", IN, "bar"), fields=(name_in("node1"),))),
        {"foo": "bar"},
        True,
        "node1",
    ),
    _case(
        "Pod with two terms: both matchFields and matchExpressions do not match",
        _affinity(node_term(fields=(name_in("node1"),)), node_term(req("foo", IN, "not-match-to-bar"))),
        {"foo": "bar"},
        False,
        "node2",
    ),
    _case(
        "Pod with two terms of node.Name affinity",
        _affinity(node_term(fields=(name_in("node1"),)), node_term(fields=(name_in("node2"),))),
        None,
        True,
        "node2",
    ),
    FilterCase(
        SOURCE,
        "Pod with two conflicting mach field requirements",
        "node_affinity",
        IncomingPod("", (), _affinity(node_term(fields=(name_in("node1"), name_in("node2"))))),
        (node("node2", {"foo": "bar"}),),
        {"node2": MISMATCH},
        combined={"node2": NAME_CONFLICT},  # wantPreFilterStatus: errReasonConflict
    ),
    _case(
        "Matches node selector correctly even if PreFilter is not called",
        _selector(foo="bar"),
        {"foo": "bar", "baz": "blah"},
        True,
    ),
    _case("Matches node affinity correctly even if PreFilter is not called", _GPU_EXISTS_NOT_AMD, _GPU, True),
]

_LABEL1 = {"foo": "bar"}
_LABEL2 = {"key": "value"}
_LABEL3 = {"az": "az1"}
_LABEL4 = {"abc": "az11", "def": "az22"}
_LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}
_AFFINITY1 = node_preferences((2, node_term(req("foo", IN, "bar"))))
_AFFINITY2 = node_preferences(
    (2, node_term(req("foo", IN, "bar"))),
    (4, node_term(req("key", IN, "value"))),
    (5, node_term(req("foo", IN, "bar"), req("key", IN, "value"), req("az", IN, "az1"))),
)


def _priority(
    name: str, affinity: NodeAffinity | None, nodes: list[tuple[str, dict[str, str]]], want: list[int]
) -> ScoreCase:
    return ScoreCase(
        PRIORITY,
        name,
        "NodeAffinity",
        IncomingPod("", (), PodConstraints(node_affinity=affinity)),
        tuple(node(n, m) for n, m in nodes),
        tuple(want),
    )


SCORE: list[ScoreCase] = [
    _priority(
        "all nodes are same priority as NodeAffinity is nil",
        None,
        [("node1", _LABEL1), ("node2", _LABEL2), ("node3", _LABEL3)],
        [0, 0, 0],
    ),
    _priority(
        "no node matches preferred scheduling requirements in NodeAffinity of pod so all nodes' priority is zero",
        _AFFINITY1,
        [("node1", _LABEL4), ("node2", _LABEL2), ("node3", _LABEL3)],
        [0, 0, 0],
    ),
    _priority(
        "only node1 matches the preferred scheduling requirements of pod",
        _AFFINITY1,
        [("node1", _LABEL1), ("node2", _LABEL2), ("node3", _LABEL3)],
        [100, 0, 0],
    ),
    _priority(
        "all nodes matches the preferred scheduling requirements of pod but with different priorities ",
        _AFFINITY2,
        [("node1", _LABEL1), ("node5", _LABEL5), ("node2", _LABEL2)],
        [18, 100, 36],
    ),
    _priority(
        "calculate the priorities correctly even if PreScore is not called",
        _AFFINITY2,
        [("node1", _LABEL1), ("node5", _LABEL5), ("node2", _LABEL2)],
        [18, 100, 36],
    ),
]
