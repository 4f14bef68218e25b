"""kubernetes/kubernetes ``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/
nodeaffinity_test.go``: TestNodeSelectorMatch, TestPreferredSchedulingTermsScore,
TestNodeSelectorRequirementsAsSelector, TestPodMatchesNodeSelectorAndAffinityTerms; and
``staging/src/k8s.io/api/core/v1/toleration_test.go``: TestTolerationToleratesTaint.

Where upstream expects ``NewNodeSelector`` / ``NewPreferredSchedulingTerms`` to fail, the port states which
terms fail to parse (the lazy selector the Filter plugin uses then treats those terms as matching nothing).
Not ported: "nil node" (no such node here), and the toleration cases with the alpha Gt/Lt operators.

kube-scheduler v1.37.2's own plugins (whose node affinity and tolerations these helpers are) now judge
the port on random GPU clusters too: tests/upstream/test_oracle_scheduler.py (tests/oracles/scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.core.constraints.constraint_types import (
    NodeAffinity,
    NodeSelectorTerm,
    PodConstraints,
    Requirement,
    Taint,
    Toleration,
)
from tests.scheduler_cases.builders import (
    EXISTS,
    GT,
    IN,
    LT,
    NO_EXECUTE,
    NO_SCHEDULE,
    NOT_IN,
    labels,
    name_in,
    node_affinity,
    node_term,
    req,
    toleration,
)

NODE_AFFINITY = "component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go"
TOLERATION = "api/core/v1/toleration_test.go TestTolerationToleratesTaint"


@dataclass(frozen=True)
class SelectorCase:
    """TestNodeSelectorMatch: terms (ORed), which fail to parse, the node, whether they match it."""

    name: str
    terms: tuple[NodeSelectorTerm, ...]
    invalid: tuple[int, ...]  # positions of the terms that do not parse
    node_name: str = ""
    node_labels: tuple[tuple[str, str], ...] = ()
    matches: bool = False


_LABEL_1 = req("label_1", IN, "label_1_val")

SELECTOR_MATCH: list[SelectorCase] = [
    SelectorCase(
        "invalid field selector and label selector",
        (
            node_term(fields=(name_in("host_1", "host_2"),)),
            node_term(_LABEL_1, fields=(name_in("host_1"),)),
            node_term(req("invalid key", IN, "label_value")),
        ),
        invalid=(0, 2),
    ),
    SelectorCase(
        "node matches field selector, but not labels",
        (node_term(_LABEL_1, fields=(name_in("host_1"),)),),
        (),
        "host_1",
    ),
    SelectorCase(
        "node matches field selector and label selector",
        (node_term(_LABEL_1, fields=(name_in("host_1"),)),),
        (),
        "host_1",
        labels({"label_1": "label_1_val"}),
        True,
    ),
    SelectorCase(
        "second term matches",
        (node_term(_LABEL_1), node_term(fields=(name_in("host_1"),))),
        (),
        "host_1",
        (),
        True,
    ),
]


@dataclass(frozen=True)
class PreferredCase:
    """TestPreferredSchedulingTermsScore: weighted terms, which fail to parse, the node, the raw score."""

    name: str
    terms: tuple[tuple[int, NodeSelectorTerm], ...]
    invalid: tuple[int, ...]
    node_name: str = ""
    node_labels: tuple[tuple[str, str], ...] = ()
    score: int = 0


PREFERRED_SCORE: list[PreferredCase] = [
    PreferredCase(
        "invalid field selector and label selector",
        (
            (1, node_term(fields=(name_in("host_1", "host_2"),))),
            (1, node_term(_LABEL_1, fields=(name_in("host_1"),))),
            (1, node_term(req("invalid key", IN, "label_value"))),
        ),
        invalid=(0, 2),
    ),
    PreferredCase(
        "invalid field selector but no weight, error not reported",
        ((0, node_term(fields=(name_in("host_1", "host_2"),))),),
        invalid=(0,),
        node_name="host_1",
        score=0,
    ),
    PreferredCase(
        "first and third term match",
        (
            (5, node_term(fields=(name_in("host_1"),))),
            (7, node_term(req("unknown_label", IN, "unknown_label_val"))),
            (11, node_term(_LABEL_1)),
        ),
        invalid=(),
        node_name="host_1",
        node_labels=labels({"label_1": "label_1_val"}),
        score=16,
    ),
]

# TestNodeSelectorRequirementsAsSelector: (requirements, whether they parse)
REQUIREMENTS_AS_SELECTOR: list[tuple[str, tuple[Requirement, ...], bool]] = [
    ("foo in (baz,bar)", (req("foo", IN, "bar", "baz"),), True),
    ("exists with values", (req("foo", EXISTS, "bar", "baz"),), False),
    ("foo>1", (req("foo", GT, "1"),), True),
    ("bar<7", (req("bar", LT, "7"),), True),
]


@dataclass(frozen=True)
class MatchCase:
    """TestPodMatchesNodeSelectorAndAffinityTerms: the pod's constraints, the node, the verdict."""

    name: str
    constraints: PodConstraints
    node_labels: tuple[tuple[str, str], ...] = ()
    node_name: str = ""
    matches: bool = True


def _affinity(*terms: NodeSelectorTerm) -> PodConstraints:
    return PodConstraints(node_affinity=node_affinity(*terms))


def _selector(**pairs: str) -> PodConstraints:
    return PodConstraints(node_selector=labels(pairs))


_GPU = labels({"GPU": "NVIDIA-GRID-K1"})
_FOO_BAR = labels({"foo": "bar"})
_FOO_EXISTS_WITH_SELECTOR = PodConstraints(
    node_selector=_FOO_BAR, node_affinity=node_affinity(node_term(req("foo", EXISTS)))
)

PODS_MATCH: list[MatchCase] = [
    MatchCase("no selector", PodConstraints()),
    MatchCase("missing labels", _selector(foo="bar"), matches=False),
    MatchCase("same labels", _selector(foo="bar"), _FOO_BAR),
    MatchCase("node labels are superset", _selector(foo="bar"), labels({"foo": "bar", "baz": "blah"})),
    MatchCase("node labels are subset", _selector(foo="bar", baz="blah"), _FOO_BAR, matches=False),
    MatchCase(
        "Pod with matchExpressions using In operator that matches the existing node",
        _affinity(node_term(req("foo", IN, "bar", "value2"))),
        _FOO_BAR,
    ),
    MatchCase(
        "Pod with matchExpressions using Gt operator that matches the existing node",
        _affinity(node_term(req("kernel-version", GT, "0204"))),
        labels({"kernel-version": "0206"}),
    ),
    MatchCase(
        "Pod with matchExpressions using NotIn operator that matches the existing node",
        _affinity(node_term(req("mem-type", NOT_IN, "DDR", "DDR2"))),
        labels({"mem-type": "DDR3"}),
    ),
    MatchCase(
        "Pod with matchExpressions using Exists operator that matches the existing node",
        _affinity(node_term(req("GPU", EXISTS))),
        _GPU,
    ),
    MatchCase(
        "Pod with affinity that don't match node's labels won't schedule onto the node",
        _affinity(node_term(req("foo", IN, "value1", "value2"))),
        _FOO_BAR,
        matches=False,
    ),
    MatchCase(
        "Pod with a nil []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto the node",
        PodConstraints(node_affinity=NodeAffinity(required=())),
        _FOO_BAR,
        matches=False,
    ),
    MatchCase(
        "Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels and won't schedule onto "
        "the node",
        PodConstraints(node_affinity=NodeAffinity(required=())),
        _FOO_BAR,
        matches=False,
    ),
    MatchCase(
        "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto the node",
        _affinity(node_term()),
        _FOO_BAR,
        matches=False,
    ),
    MatchCase("Pod with no Affinity will schedule onto a node", PodConstraints(), _FOO_BAR),
    MatchCase(
        "Pod with Affinity but nil NodeSelector will schedule onto a node",
        PodConstraints(node_affinity=NodeAffinity(required=None)),
        _FOO_BAR,
    ),
    MatchCase(
        "Pod with multiple matchExpressions ANDed that matches the existing node",
        _affinity(node_term(req("GPU", EXISTS), req("GPU", NOT_IN, "AMD", "INTER"))),
        _GPU,
    ),
    MatchCase(
        "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
        _affinity(node_term(req("GPU", EXISTS), req("GPU", IN, "AMD", "INTER"))),
        _GPU,
        matches=False,
    ),
    MatchCase(
        "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels and will schedule onto "
        "the node",
        _affinity(node_term(req("foo", IN, "bar", "value2")), node_term(req("diffkey", IN, "wrong", "value2"))),
        _FOO_BAR,
    ),
    MatchCase(
        "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) both are "
        "satisfied, will schedule onto the node",
        _FOO_EXISTS_WITH_SELECTOR,
        _FOO_BAR,
    ),
    MatchCase(
        "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing that we are "
        "deprecating) is not satisfied, won't schedule onto the node",
        _FOO_EXISTS_WITH_SELECTOR,
        labels({"foo": "barrrrrr"}),
        matches=False,
    ),
    MatchCase(
        "Pod with an invalid value in Affinity term won't be scheduled onto the node",
        _affinity(node_term(req("foo", NOT_IN, "invalid value: ___@#$%^"))),
        _FOO_BAR,
        matches=False,
    ),
    MatchCase(
        "Pod with matchFields using In operator that matches the existing node",
        _affinity(node_term(fields=(name_in("node_1"),))),
        node_name="node_1",
    ),
    MatchCase(
        "Pod with matchFields using In operator that does not match the existing node",
        _affinity(node_term(fields=(name_in("node_1"),))),
        node_name="node_2",
        matches=False,
    ),
    MatchCase(
        "Pod with two terms: matchFields does not match, but matchExpressions matches",
        _affinity(node_term(fields=(name_in("node_1"),)), node_term(req("foo", IN, "bar"))),
        _FOO_BAR,
        "node_2",
    ),
    MatchCase(
        "Pod with one term: matchFields does not match, but matchExpressions matches",
        _affinity(node_term(req("foo", IN, "bar"), fields=(name_in("node_1"),))),
        _FOO_BAR,
        "node_2",
        matches=False,
    ),
    MatchCase(
        "Pod with one term: both matchFields and matchExpressions match",
        _affinity(node_term(req("foo", IN, "bar"), fields=(name_in("node_1"),))),
        _FOO_BAR,
        "node_1",
    ),
    MatchCase(
        "Pod with two terms: both matchFields and matchExpressions do not match",
        _affinity(node_term(fields=(name_in("node_1"),)), node_term(req("foo", IN, "not-match-to-bar"))),
        _FOO_BAR,
        "node_2",
        matches=False,
    ),
]

# TestTolerationToleratesTaint: (description, toleration, taint, tolerated)
TOLERATES: list[tuple[str, Toleration, Taint, bool]] = [
    (
        "toleration and taint have the same key and effect, and operator is Exists, and taint has no value, expect "
        "tolerated",
        toleration("foo", effect=NO_SCHEDULE, exists_=True),
        Taint("foo", NO_SCHEDULE),
        True,
    ),
    (
        "toleration and taint have the same key and effect, and operator is Exists, and taint has some value, "
        "expect tolerated",
        toleration("foo", effect=NO_SCHEDULE, exists_=True),
        Taint("foo", NO_SCHEDULE, "bar"),
        True,
    ),
    (
        "toleration and taint have the same effect, toleration has empty key and operator is Exists, means match "
        "all taints, expect tolerated",
        toleration("", effect=NO_SCHEDULE, exists_=True),
        Taint("foo", NO_SCHEDULE, "bar"),
        True,
    ),
    (
        "toleration and taint have the same key, effect and value, and operator is Equal, expect tolerated",
        toleration("foo", "bar", NO_SCHEDULE),
        Taint("foo", NO_SCHEDULE, "bar"),
        True,
    ),
    (
        "toleration and taint have the same key and effect, but different values, and operator is Equal, expect "
        "not tolerated",
        toleration("foo", "value1", NO_SCHEDULE),
        Taint("foo", NO_SCHEDULE, "value2"),
        False,
    ),
    (
        "toleration and taint have the same key and value, but different effects, and operator is Equal, expect "
        "not tolerated",
        toleration("foo", "bar", NO_SCHEDULE),
        Taint("foo", NO_EXECUTE, "bar"),
        False,
    ),
]
