"""Pod affinity terms and topology spread constraints resolved for the pod that owns them.

Upstream parses a pod's terms once into ``framework.AffinityTerm`` (``pkg/scheduler/framework/types.go``:
``newAffinityTerm``, ``getNamespacesFromPodAffinityTerm``, ``AffinityTerm.Matches``) and its spread
constraints into ``topologySpreadConstraint`` (``podtopologyspread/common.go``:
``filterTopologySpreadConstraints``, ``mergeLabelSetWithSelector``). The resolved values here are hashable,
so the vectorised plugins memoise on them and the reference implementation shares them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.core.constraints.constraint_types import (
    InclusionPolicy,
    Labels,
    PlacedPod,
    PodAffinity,
    PodAffinityTerm,
    PodConstraints,
    WhenUnsatisfiable,
)
from placement.core.constraints.selectors import (
    Selector,
    SelectorError,
    parse_label_selector,
    with_label_keys,
)

HARD_POD_AFFINITY_WEIGHT = 1  # InterPodAffinityArgs.hardPodAffinityWeight's default


@dataclass(frozen=True)
class IncomingPod:
    """The pod to place, as the plugins read it: its namespace and labels travel beside its constraints."""

    namespace: str
    labels: Labels = ()
    constraints: PodConstraints = field(default_factory=PodConstraints)


@dataclass(frozen=True)
class AffinityTerm:
    """``framework.AffinityTerm``: a term with its namespaces settled for its owner."""

    topology_key: str
    selector: Selector  # matchLabelKeys / mismatchLabelKeys already ANDed in
    namespaces: frozenset[str]
    namespace_selector: Selector  # NOTHING when the term has none


@dataclass(frozen=True)
class WeightedTerm:
    term: AffinityTerm
    weight: int


def resolve_term(term: PodAffinityTerm, owner_namespace: str, owner_labels: Labels) -> AffinityTerm:
    """``newAffinityTerm``: no namespaces and no namespace selector mean the owner's own namespace. Raises
    ``SelectorError`` when a selector does not parse."""
    selector = with_label_keys(term.label_selector, owner_labels, term.match_label_keys, term.mismatch_label_keys)
    own = not term.namespaces and term.namespace_selector is None
    return AffinityTerm(
        topology_key=term.topology_key,
        selector=parse_label_selector(selector),
        namespaces=frozenset((owner_namespace,) if own else term.namespaces),
        namespace_selector=parse_label_selector(term.namespace_selector),
    )


def matches_existing(
    term: AffinityTerm, namespace: str, labels: dict[str, str], namespace_labels: Labels | None
) -> bool:
    """Whether a pod (``namespace``, ``labels``) matches a term of the INCOMING pod. Upstream unrolls the term's
    namespace selector into the namespaces the lister knows (``mergeAffinityTermNamespacesIfNotEmpty``): an
    empty selector keeps matching every namespace, any other matches only known namespaces (``None``:
    the pod's namespace is unknown) whose labels it selects."""
    if namespace not in term.namespaces:
        selector = term.namespace_selector
        if not selector.is_everything and (namespace_labels is None or not selector.matches(dict(namespace_labels))):
            return False
    return term.selector.matches(labels)


def matches_incoming(term: AffinityTerm, namespace: str, labels: dict[str, str], namespace_labels: Labels) -> bool:
    """``AffinityTerm.Matches``: whether the incoming pod matches a term of an EXISTING pod; the incoming
    pod's namespace labels are read as empty when the namespace is unknown (``GetNamespaceLabelsSnapshot``)."""
    if namespace not in term.namespaces and not term.namespace_selector.matches(dict(namespace_labels)):
        return False
    return term.selector.matches(labels)


@dataclass(frozen=True)
class PodTerms:
    """The four kinds of inter-pod terms of one pod, resolved (``framework.PodInfo``)."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedTerm, ...] = ()


NO_TERMS = PodTerms()


def _required(affinity: PodAffinity | None, namespace: str, labels: Labels) -> tuple[AffinityTerm, ...]:
    if affinity is None:
        return ()
    return tuple(resolve_term(t, namespace, labels) for t in affinity.required)


def _preferred(affinity: PodAffinity | None, namespace: str, labels: Labels) -> tuple[WeightedTerm, ...]:
    if affinity is None:
        return ()
    return tuple(WeightedTerm(resolve_term(w.term, namespace, labels), w.weight) for w in affinity.preferred)


def incoming_terms(
    namespace: str, labels: Labels, affinity: PodAffinity | None, anti_affinity: PodAffinity | None
) -> PodTerms:
    """The incoming pod's terms; raises ``SelectorError`` naming the kind of term that fails to parse, as
    ``framework.NewPodInfo`` reports it (the inter-pod ``PreFilter`` then refuses the pod)."""
    kind = "requiredAffinityTerms"
    try:
        required_affinity = _required(affinity, namespace, labels)
        kind = "requiredAntiAffinityTerms"
        required_anti = _required(anti_affinity, namespace, labels)
        kind = "preferredAffinityTerms"
        preferred_affinity = _preferred(affinity, namespace, labels)
        kind = "preferredAntiAffinityTerms"
        preferred_anti = _preferred(anti_affinity, namespace, labels)
    except SelectorError as error:
        raise SelectorError(f"{kind}: {error}") from None
    return PodTerms(required_affinity, required_anti, preferred_affinity, preferred_anti)


def placed_pod_terms(pod: PlacedPod) -> PodTerms:
    """An existing pod's terms. A kind that fails to parse contributes no term at all (``GetAffinityTerms``
    returns nothing on the first error, and the scheduler's cache keeps the pod with its other kinds)."""
    namespace, labels = pod.namespace, pod.labels
    affinity, anti = pod.pod_affinity, pod.pod_anti_affinity
    if affinity is None and anti is None:
        return NO_TERMS
    return PodTerms(
        _required_or_none(affinity, namespace, labels),
        _required_or_none(anti, namespace, labels),
        _preferred_or_none(affinity, namespace, labels),
        _preferred_or_none(anti, namespace, labels),
    )


def _required_or_none(affinity: PodAffinity | None, namespace: str, labels: Labels) -> tuple[AffinityTerm, ...]:
    try:
        return _required(affinity, namespace, labels)
    except SelectorError:
        return ()


def _preferred_or_none(affinity: PodAffinity | None, namespace: str, labels: Labels) -> tuple[WeightedTerm, ...]:
    try:
        return _preferred(affinity, namespace, labels)
    except SelectorError:
        return ()


@dataclass(frozen=True)
class SpreadConstraint:
    """``topologySpreadConstraint`` (podtopologyspread/common.go): the selector parsed, matchLabelKeys merged,
    the defaults applied (minDomains 1, nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore)."""

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int
    honor_node_affinity: bool
    honor_node_taints: bool

    @property
    def counts_pods(self) -> bool:
        """``countPodsMatchSelector`` counts nothing for an empty selector (and nothing matches ``Nothing``),
        while the incoming pod still matches an empty selector itself: upstream's own asymmetry."""
        return bool(self.selector.requirements)


def spread_constraints(
    constraints: PodConstraints, pod_labels: Labels, when: WhenUnsatisfiable
) -> tuple[SpreadConstraint, ...]:
    """``filterTopologySpreadConstraints`` for one ``whenUnsatisfiable``; raises ``SelectorError``. The pod's
    values for ``matchLabelKeys`` are ANDed into the selector (``mergeLabelSetWithSelector``), as the API
    server also does since the selector merge went to admission; doing both is harmless."""
    own = dict(pod_labels)
    resolved = []
    for constraint in constraints.topology_spread:
        if constraint.when_unsatisfiable is not when:
            continue
        selector = parse_label_selector(constraint.label_selector)
        present = tuple(sorted({(k, own[k]) for k in constraint.match_label_keys if k in own}))
        resolved.append(
            SpreadConstraint(
                max_skew=constraint.max_skew,
                topology_key=constraint.topology_key,
                selector=selector.and_labels(present),
                min_domains=1 if constraint.min_domains is None else constraint.min_domains,
                honor_node_affinity=constraint.node_affinity_policy is InclusionPolicy.HONOR,
                honor_node_taints=constraint.node_taints_policy is InclusionPolicy.HONOR,
            )
        )
    return tuple(resolved)


def spread_keys(constraints: Sequence[SpreadConstraint]) -> tuple[str, ...]:
    """The keys a node must carry to count as a domain for ``constraints`` (``nodeLabelsMatchSpreadConstraints``)."""
    return tuple(dict.fromkeys(c.topology_key for c in constraints))


def topology_normalizing_weight(size: int) -> float:
    """podtopologyspread/scoring.go ``topologyNormalizingWeight``: log(size + 2), from ``math`` in both
    implementations so that their scores agree to the last bit."""
    return math.log(size + 2)
