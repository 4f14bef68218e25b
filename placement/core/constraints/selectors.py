"""Label selectors, node selector terms, tolerations and host ports as kube-scheduler evaluates them.

Ported from ``k8s.io/apimachinery/pkg/labels/selector.go`` (``NewRequirement``, ``Requirement.Matches``),
``k8s.io/apimachinery/pkg/apis/meta/v1/helpers.go`` (``LabelSelectorAsSelector``),
``k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go`` (``NodeSelector``,
``nodeSelectorTerm.match``, ``GetRequiredNodeAffinity``, ``PreferredSchedulingTerms``),
``k8s.io/api/core/v1/toleration.go`` (``ToleratesTaint``) and ``framework.HostPortInfo``. The vectorised
plugins compute the same answers per slot; these are the definitions both implementations are checked
against.

Invalid input is judged as upstream judges it, not refused here: a node selector term that fails to parse
matches nothing (``LazyErrorNodeSelector``), and a label selector that fails to parse raises
``SelectorError`` for the caller to decide (the inter-pod plugin refuses the pod, as ``PreFilter`` does).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from placement.core.constraints.constraint_types import (
    HostPort,
    Labels,
    LabelSelector,
    NodeSelectorTerm,
    Operator,
    PodConstraints,
    Requirement,
    Taint,
    TaintEffect,
    Toleration,
    TolerationOperator,
)

NODE_NAME_FIELD = "metadata.name"  # metav1.ObjectNameField, the only field a node selector term may name
HOSTNAME_LABEL = "kubernetes.io/hostname"  # v1.LabelHostname: spread scoring counts it per node
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", TaintEffect.NO_SCHEDULE)  # v1.TaintNodeUnschedulable
WILDCARD_IP = "0.0.0.0"  # framework.DefaultBindAllHostIP

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_DECIMAL = re.compile(r"[+-]?[0-9]+")
# k8s.io/apimachinery/pkg/util/validation: qualifiedNameFmt, labelValueFmt, dns1123SubdomainFmt.
_NAME_PART = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_MAX, _VALUE_MAX, _PREFIX_MAX = 63, 63, 253
_LABEL_SELECTOR_OPERATORS = frozenset({Operator.IN, Operator.NOT_IN, Operator.EXISTS, Operator.DOES_NOT_EXIST})
_BLOCKING_EFFECTS = frozenset({TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE})


class SelectorError(ValueError):
    """A label selector ``LabelSelectorAsSelector`` refuses; the message says which part and why."""


def go_parse_int(text: str) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``: an optional sign and decimal digits, within int64; else None."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def label_key_error(key: str) -> str | None:
    """``validation.IsQualifiedName`` (``validateLabelKey``): an optional DNS subdomain prefix and a name."""
    prefix, slash, name = key.rpartition("/")
    if slash and "/" in prefix:
        return f"label key {key!r}: a qualified name has at most one '/'"
    if slash and not prefix:
        return f"label key {key!r}: the prefix part must be non-empty"
    if slash and (len(prefix) > _PREFIX_MAX or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return f"label key {key!r}: the prefix part must be a DNS subdomain"
    if not name or len(name) > _NAME_MAX or not _NAME_PART.fullmatch(name):
        return f"label key {key!r}: the name part must be 1-63 alphanumerics, '-', '_' or '.', alphanumeric ends"
    return None


def label_value_error(key: str, value: str) -> str | None:
    """``validation.IsValidLabelValue``: empty, or up to 63 alphanumerics, '-', '_', '.', alphanumeric ends."""
    if len(value) > _VALUE_MAX or not _LABEL_VALUE.fullmatch(value):
        return f"values[{key}]: invalid value {value!r}: not a valid label value"
    return None


def requirement_error(requirement: Requirement) -> str | None:
    """Why ``labels.NewRequirement`` refuses ``requirement`` (None: it is valid)."""
    key, operator, values = requirement.key, requirement.operator, requirement.values
    problem = label_key_error(key)
    if problem is None and operator in (Operator.IN, Operator.NOT_IN) and not values:
        problem = f"{key}: for 'in', 'notin' operators, values set can't be empty"
    elif problem is None and operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        problem = f"{key}: values set must be empty for exists and does not exist"
    elif problem is None and operator in (Operator.GT, Operator.LT):
        if len(values) != 1:
            problem = f"{key}: for 'Gt', 'Lt' operators, exactly one value is required"
        elif go_parse_int(values[0]) is None:
            problem = f"{key}: for 'Gt', 'Lt' operators, the value must be an integer"
    if problem is None:
        problem = next((p for p in (label_value_error(key, v) for v in values) if p is not None), None)
    return problem


def requirement_matches(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    """``labels.Requirement.Matches`` for a valid requirement."""
    operator, value = requirement.operator, labels.get(requirement.key)
    if operator is Operator.IN:
        return value is not None and value in requirement.values
    if operator is Operator.NOT_IN:
        return value is None or value not in requirement.values
    if operator is Operator.EXISTS:
        return value is not None
    if operator is Operator.DOES_NOT_EXIST:
        return value is None
    # Gt, Lt: the node's value must parse as an integer; the requirement's was checked when made.
    have = None if value is None else go_parse_int(value)
    want = go_parse_int(requirement.values[0]) if len(requirement.values) == 1 else None
    if have is None or want is None:
        return False
    return have > want if operator is Operator.GT else have < want


@dataclass(frozen=True)
class Selector:
    """A parsed label selector: ANDed requirements; ``requirements`` None is ``labels.Nothing()`` (matches
    no object), ``()`` is ``labels.Everything()``."""

    requirements: tuple[Requirement, ...] | None

    @property
    def is_everything(self) -> bool:
        """``Selector.Empty()``: restricts nothing (``labels.Nothing()`` is not empty: it matches nothing)."""
        return self.requirements == ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.requirements is None:
            return False
        return all(requirement_matches(r, labels) for r in self.requirements)

    def and_labels(self, labels: Labels) -> Selector:
        """``mergeLabelSetWithSelector`` (podtopologyspread/common.go): the set's labels ANDed in, except into
        ``Nothing``, which stays nothing."""
        if self.requirements is None or not labels:
            return self
        return Selector(tuple(Requirement(k, Operator.IN, (v,)) for k, v in labels) + self.requirements)


NOTHING = Selector(None)
EVERYTHING = Selector(())


def parse_label_selector(selector: LabelSelector | None) -> Selector:
    """``metav1.LabelSelectorAsSelector``: None selects nothing, an empty selector everything; raises
    ``SelectorError`` for an operator or a requirement it refuses."""
    if selector is None:
        return NOTHING
    if not selector.match_labels and not selector.match_expressions:
        return EVERYTHING
    requirements = [Requirement(k, Operator.IN, (v,)) for k, v in selector.match_labels]
    for expression in selector.match_expressions:
        if expression.operator not in _LABEL_SELECTOR_OPERATORS:
            raise SelectorError(f"{expression.operator.value!r} is not a valid label selector operator")
        requirements.append(expression)
    for requirement in requirements:
        problem = requirement_error(requirement)
        if problem is not None:
            raise SelectorError(problem)
    return Selector(tuple(requirements))


def with_label_keys(
    selector: LabelSelector | None, owner_labels: Labels, match_keys: Iterable[str], mismatch_keys: Iterable[str]
) -> LabelSelector | None:
    """``applyMatchLabelKeysAndMismatchLabelKeys`` (pkg/registry/core/pod/strategy.go): for each key the
    owner carries, ``key In (value)`` (matchLabelKeys) or ``key NotIn (value)`` (mismatchLabelKeys) is
    ANDed into the selector. The API server does this when the pod is created; doing it again here is
    harmless (the same requirement twice) and covers pods that arrive unmerged. A nil selector stays nil."""
    if selector is None:
        return None
    owner = dict(owner_labels)
    extra = tuple(Requirement(k, Operator.IN, (owner[k],)) for k in match_keys if k in owner) + tuple(
        Requirement(k, Operator.NOT_IN, (owner[k],)) for k in mismatch_keys if k in owner
    )
    if not extra:
        return selector
    return LabelSelector(selector.match_labels, selector.match_expressions + extra)


# --- node selector terms (component-helpers nodeaffinity) --------------------------------------------------


def field_requirement_error(requirement: Requirement) -> str | None:
    """``nodeSelectorRequirementsAsFieldSelector``: In or NotIn with exactly one value."""
    if requirement.operator not in (Operator.IN, Operator.NOT_IN):
        return f"{requirement.key}: field selector operator {requirement.operator.value!r} is not supported"
    if len(requirement.values) != 1:
        return f"{requirement.key}: must have one element"
    return None


def term_error(term: NodeSelectorTerm) -> str | None:
    """Why ``newNodeSelectorTerm`` records parse errors for ``term`` (None: it parses)."""
    problems = (requirement_error(r) for r in term.match_expressions)
    field_problems = (field_requirement_error(r) for r in term.match_fields)
    return next((p for p in (*problems, *field_problems) if p is not None), None)


def is_empty_term(term: NodeSelectorTerm) -> bool:
    """``isEmptyNodeSelectorTerm``: no requirements at all; such a term selects no node."""
    return not term.match_expressions and not term.match_fields


def field_requirement_matches(requirement: Requirement, node_name: str) -> bool:
    """``fields.OneTermEqualSelector`` / ``OneTermNotEqualSelector`` over the node's one field (its name);
    a field the node does not have reads as ""."""
    have = node_name if requirement.key == NODE_NAME_FIELD else ""
    want = requirement.values[0]
    return have == want if requirement.operator is Operator.IN else have != want


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], node_name: str) -> bool:
    """``nodeSelectorTerm.match``; an empty term or one that fails to parse matches nothing. A node without
    a name has no fields, and then ``matchFields`` is not consulted at all (as upstream)."""
    if is_empty_term(term) or term_error(term) is not None:
        return False
    if not all(requirement_matches(r, labels) for r in term.match_expressions):
        return False
    return not node_name or all(field_requirement_matches(r, node_name) for r in term.match_fields)


def terms_match(terms: Iterable[NodeSelectorTerm], labels: Mapping[str, str], node_name: str) -> bool:
    """``LazyErrorNodeSelector.Match``: the terms are ORed."""
    return any(term_matches(t, labels, node_name) for t in terms)


def required_node_affinity_matches(constraints: PodConstraints, labels: Mapping[str, str], node_name: str) -> bool:
    """``RequiredNodeAffinity.Match``: the pod's nodeSelector (``SelectorFromSet``, not validated) AND its
    required node affinity terms (ORed; absent: no constraint)."""
    if any(labels.get(k) != v for k, v in constraints.node_selector):
        return False
    affinity = constraints.node_affinity
    if affinity is None or affinity.required is None:
        return True
    return terms_match(affinity.required, labels, node_name)


@dataclass(frozen=True)
class PreFilterNames:
    """The ``PreFilterResult`` of the PreFilter plugins that name nodes, merged (``PreFilterResult.Merge``):
    NodeName (``spec.nodeName``) and NodeAffinity (required terms that all name nodes by ``metadata.name``).
    ``names`` None: every node is filtered; otherwise only those, and the others are refused unfiltered."""

    plugins: tuple[str, ...] = ()  # the plugins that named nodes, in profile order
    names: frozenset[str] | None = None
    conflict: bool = False  # NodeAffinity's own terms name no node (its PreFilter refuses the pod)


def pre_filter_names(constraints: PodConstraints) -> PreFilterNames:
    """nodename/node_name.go and nodeaffinity/node_affinity.go ``PreFilter``, merged as ``RunPreFilterPlugins``
    merges them (the intersection of the names each plugin gives)."""
    plugins: list[str] = []
    names: frozenset[str] | None = None
    if constraints.node_name:
        plugins.append("NodeName")
        names = frozenset((constraints.node_name,))
    affinity = constraints.node_affinity
    named = _affinity_names(affinity.required) if affinity is not None and affinity.required else None
    if named is not None and not named:
        return PreFilterNames(tuple(plugins), names, conflict=True)
    if named is not None:
        plugins.append("NodeAffinity")
        names = named if names is None else names & named
    return PreFilterNames(tuple(plugins), names)


def _affinity_names(terms: Iterable[NodeSelectorTerm]) -> frozenset[str] | None:
    """The union over the terms of the names each term's ``metadata.name In`` requirements intersect to;
    None when some term names no node that way (it may match any node)."""
    union: set[str] = set()
    for term in terms:
        found: set[str] | None = None
        for requirement in term.match_fields:
            if requirement.key == NODE_NAME_FIELD and requirement.operator is Operator.IN:
                values = set(requirement.values)
                found = values if found is None else found & values
        if found is None:
            return None
        union |= found
    return frozenset(union)


# --- tolerations (k8s.io/api/core/v1/toleration.go) ----------------------------------------------------------


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``Toleration.ToleratesTaint``: an empty effect matches every effect, an empty key every key (upstream
    checks the key only when set, whatever the operator), Exists any value, Equal the same value."""
    if toleration.effect is not None and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator is TolerationOperator.EXISTS:
        return True
    return toleration.value == taint.value


def tolerated(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """``TolerationsTolerateTaint``: some toleration tolerates the taint."""
    return any(tolerates(t, taint) for t in tolerations)


def blocks_scheduling(taint: Taint) -> bool:
    """The taints the TaintToleration filter (and ``DoNotScheduleTaintsFilterFunc``) consider."""
    return taint.effect in _BLOCKING_EFFECTS


def taint_order(taint: Taint) -> tuple[str, str, str]:
    """A fixed order of taints, for the memo's first untolerated taint of a slot (the index keeps a node's
    taints as a set). Which one is first does not show: the refusal names none (``UNTOLERATED_TAINT``)."""
    return taint.key, taint.value, taint.effect.value


def first_untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first untolerated NoSchedule or NoExecute taint in ``taint_order``; None if none."""
    kept = tuple(tolerations)
    untolerated = [t for t in taints if blocks_scheduling(t) and not tolerated(kept, t)]
    return min(untolerated, key=taint_order, default=None)


# --- host ports (framework.HostPortInfo) -------------------------------------------------------------------


def sanitized_port(port: HostPort) -> tuple[str, str, int]:
    """``HostPortInfo``'s ``sanitize``: an empty IP is every address, an empty protocol TCP."""
    return port.host_ip or WILDCARD_IP, port.protocol or "TCP", port.port


def ports_conflict(wanted: tuple[str, str, int], used: tuple[str, str, int]) -> bool:
    """``HostPortInfo.CheckConflict`` for one used port: the same protocol and port, on the same IP or on
    0.0.0.0 on either side. Ports <= 0 are no ports (``Add`` and ``CheckConflict`` skip them)."""
    ip, protocol, port = wanted
    used_ip, used_protocol, used_port = used
    if port <= 0 or used_port <= 0 or (protocol, port) != (used_protocol, used_port):
        return False
    return ip == WILDCARD_IP or used_ip in (WILDCARD_IP, ip)
