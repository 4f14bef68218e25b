"""The Go tests' wrappers, in the model's types (pkg/scheduler/testing/wrappers.go)."""

from __future__ import annotations

from collections.abc import Mapping

from placement.core.constraints.constraint_types import (
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

HOSTNAME = "kubernetes.io/hostname"  # v1.LabelHostname
DO_NOT_SCHEDULE = WhenUnsatisfiable.DO_NOT_SCHEDULE
SCHEDULE_ANYWAY = WhenUnsatisfiable.SCHEDULE_ANYWAY
HONOR, IGNORE = InclusionPolicy.HONOR, InclusionPolicy.IGNORE
NO_SCHEDULE = TaintEffect.NO_SCHEDULE
PREFER_NO_SCHEDULE = TaintEffect.PREFER_NO_SCHEDULE
NO_EXECUTE = TaintEffect.NO_EXECUTE
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", NO_SCHEDULE)  # the spread tests' ``taints``


def labels(mapping: Mapping[str, str] | None = None) -> Labels:
    return tuple(sorted((mapping or {}).items()))


def node(
    name: str,
    label_map: Mapping[str, str] | None = None,
    *,
    taints: tuple[Taint, ...] = (),
    unschedulable: bool = False,
) -> NodeFacts:
    return NodeFacts(name, labels(label_map), taints, unschedulable)


def placed(
    node_name: str,
    label_map: Mapping[str, str] | None = None,
    *,
    namespace: str = "",
    name: str = "",
    affinity: PodAffinity | None = None,
    anti: PodAffinity | None = None,
    ports: tuple[HostPort, ...] = (),
) -> PlacedPod:
    return PlacedPod(namespace, name, node_name, labels(label_map), ports, affinity, anti)


def req(key: str, operator: Operator, *values: str) -> Requirement:
    return Requirement(key, operator, values)


IN, NOT_IN, EXISTS, DNE, GT, LT = (
    Operator.IN,
    Operator.NOT_IN,
    Operator.EXISTS,
    Operator.DOES_NOT_EXIST,
    Operator.GT,
    Operator.LT,
)


def selector(*expressions: Requirement, match: Mapping[str, str] | None = None) -> LabelSelector:
    """``metav1.LabelSelector`` / ``st.MakeLabelSelector()``."""
    return LabelSelector(labels(match), expressions)


def exists(key: str) -> LabelSelector:
    return selector(req(key, EXISTS))


def in_(key: str, *values: str) -> LabelSelector:
    return selector(req(key, IN, *values))


def not_in(key: str, *values: str) -> LabelSelector:
    return selector(req(key, NOT_IN, *values))


def term(
    topology_key: str,
    label_selector: LabelSelector | None,
    *,
    namespaces: tuple[str, ...] = (),
    namespace_selector: LabelSelector | None = None,
) -> PodAffinityTerm:
    return PodAffinityTerm(topology_key, label_selector, namespaces, namespace_selector)


def required(*terms: PodAffinityTerm) -> PodAffinity:
    return PodAffinity(required=terms)


def preferred(*weighted: tuple[int, PodAffinityTerm]) -> PodAffinity:
    return PodAffinity(preferred=tuple(WeightedPodAffinityTerm(w, t) for w, t in weighted))


def node_term(*expressions: Requirement, fields: tuple[Requirement, ...] = ()) -> NodeSelectorTerm:
    return NodeSelectorTerm(expressions, fields)


def name_in(*names: str) -> Requirement:
    return Requirement("metadata.name", IN, names)


def node_affinity(*terms: NodeSelectorTerm) -> NodeAffinity:
    """``RequiredDuringSchedulingIgnoredDuringExecution`` with these terms."""
    return NodeAffinity(required=terms)


def node_preferences(*weighted: tuple[int, NodeSelectorTerm]) -> NodeAffinity:
    return NodeAffinity(preferred=tuple(PreferredSchedulingTerm(w, t) for w, t in weighted))


def toleration(
    key: str = "",
    value: str = "",
    effect: TaintEffect | None = None,
    *,
    exists_: bool = False,
) -> Toleration:
    operator = TolerationOperator.EXISTS if exists_ else TolerationOperator.EQUAL
    return Toleration(key, operator, value, effect)


def spread(
    max_skew: int,
    key: str,
    mode: WhenUnsatisfiable,
    label_selector: LabelSelector | None,
    *,
    min_domains: int | None = None,
    affinity_policy: InclusionPolicy = HONOR,
    taints_policy: InclusionPolicy = IGNORE,
    match_label_keys: tuple[str, ...] = (),
) -> TopologySpreadConstraint:
    """``st.MakePod().SpreadConstraint(maxSkew, key, mode, selector, minDomains, nodeAffinityPolicy,
    nodeTaintsPolicy, matchLabelKeys)``; a nil policy is its default (Honor, Ignore), so only the others are
    named here."""
    return TopologySpreadConstraint(
        max_skew, key, mode, label_selector, min_domains, affinity_policy, taints_policy, match_label_keys
    )


def port(spec: str) -> HostPort:
    """``newPod(host, "PROTOCOL/IP/PORT")`` of nodeports/node_ports_test.go."""
    protocol, ip, number = spec.split("/")
    return HostPort(int(number), protocol, ip)


FOO = exists("foo")  # the spread tests' fooSelector
BAR = exists("bar")  # barSelector
