"""A pod's scheduling fields, read and validated as the API server validates them.

kube-scheduler reads more of a pod than its resources: ``spec.nodeName``, ``nodeSelector``, ``affinity``,
``tolerations``, ``topologySpreadConstraints``, the containers' host ports, ``schedulingGates``. They arrive
as the API carries them, JSON values: from ``pod_json`` as they are, from the ``Pod`` message converted by
the codec into the same form, so that one path checks both sources. This module turns them into the
frozen vocabulary of ``placement.core.constraints.constraint_types`` with the rules of
``k8s.io/kubernetes/pkg/apis/core/validation`` (``ValidateNodeSelectorRequirement``,
``ValidateNodeFieldSelectorRequirement``, ``validatePodAffinityTerm``, ``ValidateTolerations``,
``validateTopologySpreadConstraints``, ``validateContainerPorts``, ``validateSchedulingGates``) and
apimachinery's ``ValidateLabelSelector``. Every refusal is an ``InvalidField`` naming the field's path
(``spec.affinity.nodeAffinity....matchExpressions[1].operator``); ``placement.core.pods`` names the pod.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kubenexus.topology.labels import MAX_LABEL_VALUE, valid_dns_subdomain, valid_label_key, valid_label_value
from placement.core.constraints.constraint_types import (
    HostPort,
    InclusionPolicy,
    Labels,
    LabelSelector,
    NodeAffinity,
    NodeSelectorTerm,
    Operator,
    PodAffinity,
    PodAffinityTerm,
    PreferredSchedulingTerm,
    Requirement,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
    WhenUnsatisfiable,
)

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_PORT = (1, 65535)
_WEIGHT = (1, 100)
_PROTOCOLS = ("TCP", "UDP", "SCTP")
_NODE_OPERATORS = tuple(Operator)
_SELECTOR_OPERATORS = (Operator.IN, Operator.NOT_IN, Operator.EXISTS, Operator.DOES_NOT_EXIST)
_TOLERATION_OPERATORS = tuple(TolerationOperator)
_EFFECTS = tuple(TaintEffect)
_WHEN_UNSATISFIABLE = tuple(WhenUnsatisfiable)
_POLICIES = tuple(InclusionPolicy)
_WITH_VALUES = (Operator.IN, Operator.NOT_IN)
_INTEGER = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt, base 10: what Gt and Lt compare
_NODE_NAME_FIELD = "metadata.name"  # the one field a node selector term's matchFields may name
_KEY_ACCEPTED = (
    "an optional DNS subdomain prefix and '/', then 1-63 characters [A-Za-z0-9-_.] beginning and ending alphanumeric"
)
_VALUE_ACCEPTED = f"at most {MAX_LABEL_VALUE} characters [A-Za-z0-9-_.], beginning and ending alphanumeric"
_E = TypeVar("_E", bound=enum.Enum)
_T = TypeVar("_T")


class InvalidField(ValueError):
    """A scheduling field the API server would refuse: ``path`` names it as kubectl shows the pod."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")


# --- JSON values ---------------------------------------------------------------------------------------


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidField(path, "must be a JSON object")
    return value


def _list(value: Any, path: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise InvalidField(path, "must be a list")
    return value


def _string(value: Any, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidField(path, "must be a string")
    return value


def _strings(value: Any, path: str) -> tuple[str, ...]:
    return tuple(_string(item, f"{path}[{i}]") for i, item in enumerate(_list(value, path)))


def integer(value: Any, path: str, bounds: tuple[int, int] = _INT32) -> int | None:
    """A JSON integer within ``bounds`` (the field's Go type); None when absent."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(path, f"must be an integer, got {value!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise InvalidField(path, f"must be between {bounds[0]} and {bounds[1]}, inclusive, got {value}")
    return value


def _choice(value: Any, accepted: Sequence[_E], path: str) -> _E:
    text = _string(value, path)
    for member in accepted:
        if member.value == text:
            return member
    raise InvalidField(path, f"unsupported value {text!r}; accepted: {', '.join(str(m.value) for m in accepted)}")


# --- names and labels ----------------------------------------------------------------------------------


def _label_key(key: str, path: str) -> str:
    """``ValidateLabelName``: a qualified name."""
    if not valid_label_key(key):
        raise InvalidField(path, f"{key!r} is not a valid label key: {_KEY_ACCEPTED}")
    return key


def _label_value(value: str, path: str) -> str:
    if not valid_label_value(value):
        raise InvalidField(path, f"{value!r} is not a valid label value: {_VALUE_ACCEPTED}")
    return value


def label_map(labels: Mapping[str, str], path: str) -> Labels:
    """``ValidateLabels``: every key a qualified name, every value a label value; sorted by key."""
    for key, value in labels.items():
        _label_key(key, path)
        _label_value(value, f"{path}[{key!r}]")
    return tuple(sorted(labels.items()))


def object_name(name: str, path: str) -> str:
    """A DNS subdomain: the name of a node, a PriorityClass, a PersistentVolumeClaim."""
    if not valid_dns_subdomain(name):
        raise InvalidField(path, f"{name!r} is not a valid name: at most 253 characters [a-z0-9-.], lowercase RFC 1123")
    return name


def _namespace(name: str, path: str) -> str:
    if len(name) > MAX_LABEL_VALUE or "." in name or not valid_dns_subdomain(name):
        raise InvalidField(path, f"{name!r} is not a valid namespace name: at most 63 characters [a-z0-9-], RFC 1123")
    return name


# --- selectors -----------------------------------------------------------------------------------------


def _requirement(value: Any, path: str, accepted: Sequence[Operator], *, check_values: bool) -> Requirement:
    """A ``NodeSelectorRequirement`` (every operator) or a ``LabelSelectorRequirement`` (no Gt, Lt)."""
    item = _object(value, path)
    operator = _choice(item.get("operator"), accepted, f"{path}.operator")
    key = _label_key(_string(item.get("key"), f"{path}.key"), f"{path}.key")
    values = _strings(item.get("values"), f"{path}.values")
    if operator in _WITH_VALUES and not values:
        raise InvalidField(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")
    if operator in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        raise InvalidField(f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
    if operator in (Operator.GT, Operator.LT):
        if len(values) != 1:
            raise InvalidField(f"{path}.values", "must be one value when `operator` is 'Gt' or 'Lt'")
        if not _INTEGER.fullmatch(values[0]) or not _INT64[0] <= int(values[0]) <= _INT64[1]:
            raise InvalidField(f"{path}.values[0]", f"{values[0]!r} is not an integer, which 'Gt' and 'Lt' compare")
    if check_values:
        for position, text in enumerate(values):
            _label_value(text, f"{path}.values[{position}]")
    return Requirement(key=key, operator=operator, values=values)


def _field_requirement(value: Any, path: str) -> Requirement:
    """``ValidateNodeFieldSelectorRequirement``: ``metadata.name`` In or NotIn one node name."""
    item = _object(value, path)
    operator = _choice(item.get("operator"), _WITH_VALUES, f"{path}.operator")
    values = _strings(item.get("values"), f"{path}.values")
    if len(values) != 1:
        raise InvalidField(
            f"{path}.values", "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"
        )
    key = _string(item.get("key"), f"{path}.key")
    if key != _NODE_NAME_FIELD:
        raise InvalidField(f"{path}.key", f"{key!r} is not a valid field selector key; accepted: {_NODE_NAME_FIELD}")
    return Requirement(key=key, operator=operator, values=(object_name(values[0], f"{path}.values[0]"),))


def _node_selector_term(value: Any, path: str, *, check_values: bool) -> NodeSelectorTerm:
    term = _object(value, path)
    expressions, fields = f"{path}.matchExpressions", f"{path}.matchFields"
    return NodeSelectorTerm(
        match_expressions=tuple(
            _requirement(item, f"{expressions}[{i}]", _NODE_OPERATORS, check_values=check_values)
            for i, item in enumerate(_list(term.get("matchExpressions"), expressions))
        ),
        match_fields=tuple(
            _field_requirement(item, f"{fields}[{i}]") for i, item in enumerate(_list(term.get("matchFields"), fields))
        ),
    )


def _label_selector(value: Any, path: str) -> LabelSelector | None:
    """``ValidateLabelSelector``; None for a selector not given (it selects nothing where one is optional)."""
    if value is None:
        return None
    selector = _object(value, path)
    expressions = f"{path}.matchExpressions"
    return LabelSelector(
        match_labels=label_map(_string_map(selector.get("matchLabels"), f"{path}.matchLabels"), f"{path}.matchLabels"),
        match_expressions=tuple(
            _requirement(item, f"{expressions}[{i}]", _SELECTOR_OPERATORS, check_values=True)
            for i, item in enumerate(_list(selector.get("matchExpressions"), expressions))
        ),
    )


def _string_map(value: Any, path: str) -> dict[str, str]:
    return {key: _string(item, f"{path}[{key!r}]") for key, item in _object(value, path).items()}


def _weight(value: Any, path: str) -> int:
    weight = integer(value, path) or 0
    if not _WEIGHT[0] <= weight <= _WEIGHT[1]:
        raise InvalidField(path, f"must be in the range {_WEIGHT[0]}-{_WEIGHT[1]}, got {weight}")
    return weight


# --- affinity ------------------------------------------------------------------------------------------

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def parse_affinity(
    value: Any, path: str, pod_labels: Mapping[str, str]
) -> tuple[NodeAffinity | None, PodAffinity | None, PodAffinity | None]:
    """``spec.affinity``: node affinity, pod affinity, pod anti-affinity; None for each one not asked for."""
    affinity = _object(value, path)
    return (
        _node_affinity(affinity.get("nodeAffinity"), f"{path}.nodeAffinity"),
        _pod_affinity(affinity.get("podAffinity"), f"{path}.podAffinity", pod_labels),
        _pod_affinity(affinity.get("podAntiAffinity"), f"{path}.podAntiAffinity", pod_labels),
    )


def _node_affinity(value: Any, path: str) -> NodeAffinity | None:
    affinity = _object(value, path)
    required = None
    if affinity.get(_REQUIRED) is not None:
        terms_path = f"{path}.{_REQUIRED}.nodeSelectorTerms"
        terms = _list(_object(affinity[_REQUIRED], f"{path}.{_REQUIRED}").get("nodeSelectorTerms"), terms_path)
        if not terms:
            raise InvalidField(terms_path, "must have at least one node selector term")
        # Label values are checked in required terms only, as the API server does (allowInvalidLabelValue...).
        required = tuple(
            _node_selector_term(term, f"{terms_path}[{i}]", check_values=True) for i, term in enumerate(terms)
        )
    preferred = tuple(
        PreferredSchedulingTerm(weight, term)
        for weight, term in _weighted(
            affinity.get(_PREFERRED),
            f"{path}.{_PREFERRED}",
            "preference",
            lambda value, at: _node_selector_term(value, at, check_values=False),
        )
    )
    if required is None and not preferred:
        return None
    return NodeAffinity(required=required, preferred=preferred)


def _pod_affinity(value: Any, path: str, pod_labels: Mapping[str, str]) -> PodAffinity | None:
    affinity = _object(value, path)
    required_path = f"{path}.{_REQUIRED}"
    required = tuple(
        _pod_affinity_term(item, f"{required_path}[{i}]", pod_labels)
        for i, item in enumerate(_list(affinity.get(_REQUIRED), required_path))
    )
    preferred = tuple(
        WeightedPodAffinityTerm(weight, term)
        for weight, term in _weighted(
            affinity.get(_PREFERRED),
            f"{path}.{_PREFERRED}",
            "podAffinityTerm",
            lambda value, at: _pod_affinity_term(value, at, pod_labels),
        )
    )
    if not required and not preferred:
        return None
    return PodAffinity(required=required, preferred=preferred)


def _weighted(value: Any, path: str, term_key: str, read_term: Callable[[Any, str], _T]) -> list[tuple[int, _T]]:
    """Preferred terms: each a ``weight`` (1-100) and the term under ``term_key``."""
    result = []
    for i, item in enumerate(_list(value, path)):
        at = f"{path}[{i}]"
        entry = _object(item, at)
        result.append(
            (_weight(entry.get("weight"), f"{at}.weight"), read_term(entry.get(term_key), f"{at}.{term_key}"))
        )
    return result


def _pod_affinity_term(value: Any, path: str, pod_labels: Mapping[str, str]) -> PodAffinityTerm:
    term = _object(value, path)
    selector = _label_selector(term.get("labelSelector"), f"{path}.labelSelector")
    namespaces = _strings(term.get("namespaces"), f"{path}.namespaces")
    for position, name in enumerate(namespaces):
        _namespace(name, f"{path}.namespaces[{position}]")
    match_keys = _label_keys(term.get("matchLabelKeys"), f"{path}.matchLabelKeys", selector, pod_labels)
    mismatch_keys = _label_keys(term.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys", selector, {})
    for position, key in enumerate(match_keys):
        if key in mismatch_keys:
            raise InvalidField(
                f"{path}.matchLabelKeys[{position}]", "exists in both matchLabelKeys and mismatchLabelKeys"
            )
    topology_key = _string(term.get("topologyKey"), f"{path}.topologyKey")
    if not topology_key:
        raise InvalidField(f"{path}.topologyKey", "can not be empty")
    return PodAffinityTerm(
        topology_key=_label_key(topology_key, f"{path}.topologyKey"),
        label_selector=selector,
        namespaces=namespaces,
        namespace_selector=_label_selector(term.get("namespaceSelector"), f"{path}.namespaceSelector"),
        match_label_keys=match_keys,
        mismatch_label_keys=mismatch_keys,
    )


def _label_keys(
    value: Any, path: str, selector: LabelSelector | None, pod_labels: Mapping[str, str]
) -> tuple[str, ...]:
    """``matchLabelKeys`` / ``mismatchLabelKeys``: label keys, only beside a label selector.

    A ``matchLabelKeys`` key must not be named by the selector too. The API server checks it after it merged
    each key the pod carries into the selector as ``key In (value)`` (when it creates the pod), so it refuses
    a key the merged selector names twice. A pod sent here may be merged already (a real pod) or not (a
    template): the merge is counted unless the selector holds the merged requirement.
    """
    keys = _strings(value, path)
    if not keys:
        return keys
    if selector is None:
        raise InvalidField(path, "must not be specified when labelSelector is not set")
    for position, key in enumerate(keys):
        _label_key(key, f"{path}[{position}]")
        if key not in pod_labels:
            continue
        merged = Requirement(key, Operator.IN, (pod_labels[key],))
        named = sum(k == key for k, _ in selector.match_labels) + sum(r.key == key for r in selector.match_expressions)
        if named + (merged not in selector.match_expressions) > 1:
            raise InvalidField(f"{path}[{position}]", "exists in both matchLabelKeys and labelSelector")
    return keys


# --- tolerations, topology spread ----------------------------------------------------------------------


def parse_tolerations(value: Any, path: str) -> tuple[Toleration, ...]:
    """``ValidateTolerations``."""
    result = []
    for i, item in enumerate(_list(value, path)):
        at = f"{path}[{i}]"
        toleration = _object(item, at)
        key = _string(toleration.get("key"), f"{at}.key")
        operator_text = _string(toleration.get("operator"), f"{at}.operator")
        value_text = _string(toleration.get("value"), f"{at}.value")
        effect_text = _string(toleration.get("effect"), f"{at}.effect")
        seconds = integer(toleration.get("tolerationSeconds"), f"{at}.tolerationSeconds", _INT64)
        if key:
            _label_key(key, f"{at}.key")
        elif operator_text != TolerationOperator.EXISTS:
            raise InvalidField(
                f"{at}.operator", 'must be Exists when `key` is empty, which means "match all values and all keys"'
            )
        if seconds is not None and effect_text != TaintEffect.NO_EXECUTE:
            raise InvalidField(f"{at}.effect", "must be 'NoExecute' when `tolerationSeconds` is set")
        operator = _choice(operator_text or TolerationOperator.EQUAL.value, _TOLERATION_OPERATORS, f"{at}.operator")
        if operator is TolerationOperator.EQUAL:
            _label_value(value_text, f"{at}.value")
        elif value_text:
            raise InvalidField(f"{at}.value", "must be empty when `operator` is 'Exists'")
        result.append(
            Toleration(
                key=key,
                operator=operator,
                value=value_text,
                effect=_choice(effect_text, _EFFECTS, f"{at}.effect") if effect_text else None,
                toleration_seconds=seconds,
            )
        )
    return tuple(result)


def parse_topology_spread(value: Any, path: str, pod_labels: Mapping[str, str]) -> tuple[TopologySpreadConstraint, ...]:
    """``validateTopologySpreadConstraints``."""
    items = [_object(item, f"{path}[{i}]") for i, item in enumerate(_list(value, path))]
    pairs = [(item.get("topologyKey"), item.get("whenUnsatisfiable")) for item in items]
    result = []
    for i, item in enumerate(items):
        at = f"{path}[{i}]"
        max_skew = integer(item.get("maxSkew"), f"{at}.maxSkew") or 0
        if max_skew <= 0:
            raise InvalidField(f"{at}.maxSkew", "must be greater than zero")
        topology_key = _string(item.get("topologyKey"), f"{at}.topologyKey")
        if not topology_key:
            raise InvalidField(f"{at}.topologyKey", "can not be empty")
        when = _choice(item.get("whenUnsatisfiable"), _WHEN_UNSATISFIABLE, f"{at}.whenUnsatisfiable")
        if pairs[i] in pairs[i + 1 :]:
            raise InvalidField(
                f"{at}.{{topologyKey, whenUnsatisfiable}}", f"duplicate value {{{topology_key}, {when}}}"
            )
        min_domains = integer(item.get("minDomains"), f"{at}.minDomains")
        if min_domains is not None and min_domains <= 0:
            raise InvalidField(f"{at}.minDomains", "must be greater than zero")
        if min_domains is not None and when is not WhenUnsatisfiable.DO_NOT_SCHEDULE:
            raise InvalidField(
                f"{at}.minDomains",
                f"can only use minDomains if whenUnsatisfiable={WhenUnsatisfiable.DO_NOT_SCHEDULE}, not {when}",
            )
        selector = _label_selector(item.get("labelSelector"), f"{at}.labelSelector")
        result.append(
            TopologySpreadConstraint(
                max_skew=max_skew,
                topology_key=topology_key,
                when_unsatisfiable=when,
                label_selector=selector,
                min_domains=min_domains,
                node_affinity_policy=_policy(item.get("nodeAffinityPolicy"), f"{at}.nodeAffinityPolicy", "Honor"),
                node_taints_policy=_policy(item.get("nodeTaintsPolicy"), f"{at}.nodeTaintsPolicy", "Ignore"),
                match_label_keys=_label_keys(item.get("matchLabelKeys"), f"{at}.matchLabelKeys", selector, pod_labels),
            )
        )
    return tuple(result)


def _policy(value: Any, path: str, default: str) -> InclusionPolicy:
    return _choice(default if value is None else value, _POLICIES, path)


# --- host ports, scheduling gates ----------------------------------------------------------------------


def parse_host_ports(containers: Sequence[tuple[str, Any, bool]], *, host_network: bool) -> tuple[HostPort, ...]:
    """The host ports kube-scheduler's NodePorts reads (``GetHostPorts``: the app containers' and the sidecars'),
    every container's ports validated (``validateContainerPorts``, unique host ports).

    ``containers``: each container's path, its ``ports`` as the API carries them, and whether it runs beside
    the app containers (an app container or a sidecar); an init container that runs alone only has to be
    consistent with itself. With ``hostNetwork`` a port's host port defaults to its container port and must
    equal it, as the API server defaults and validates.
    """
    running: set[tuple[str, str, int]] = set()
    result = []
    for container_path, ports, runs_with_app in containers:
        taken = running if runs_with_app else set()
        for j, item in enumerate(_list(ports, f"{container_path}.ports")):
            at = f"{container_path}.ports[{j}]"
            port = _object(item, at)
            container_port = integer(port.get("containerPort"), f"{at}.containerPort", _PORT)
            if container_port is None:
                raise InvalidField(f"{at}.containerPort", "is required")
            host_port = integer(port.get("hostPort"), f"{at}.hostPort", (0, _PORT[1])) or 0
            if host_network and host_port in (0, container_port):
                host_port = container_port
            elif host_network:
                raise InvalidField(f"{at}.hostPort", "must match `containerPort` when `hostNetwork` is true")
            protocol = _string(port.get("protocol"), f"{at}.protocol") or _PROTOCOLS[0]
            if protocol not in _PROTOCOLS:
                raise InvalidField(
                    f"{at}.protocol", f"unsupported value {protocol!r}; accepted: {', '.join(_PROTOCOLS)}"
                )
            host_ip = _string(port.get("hostIP"), f"{at}.hostIP")
            if not host_port:
                continue
            if (protocol, host_ip, host_port) in taken:
                raise InvalidField(f"{at}.hostPort", f"duplicate value '{protocol}/{host_ip}/{host_port}'")
            taken.add((protocol, host_ip, host_port))
            if runs_with_app:
                result.append(HostPort(port=host_port, protocol=protocol, host_ip=host_ip))
    return tuple(result)


def parse_scheduling_gates(names: Sequence[str], path: str, *, node_name: str) -> tuple[str, ...]:
    """``validateSchedulingGates``: qualified names, each once, and no node name while any remains."""
    if names and node_name:
        raise InvalidField("spec.nodeName", "cannot be set until all schedulingGates have been cleared")
    for position, name in enumerate(names):
        at = f"{path}[{position}].name"
        if not valid_label_key(name):
            raise InvalidField(at, f"{name!r} is not a valid scheduling gate name: {_KEY_ACCEPTED}")
        if name in names[:position]:
            raise InvalidField(at, f"duplicate value {name!r}")
    return tuple(names)
