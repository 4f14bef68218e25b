"""API objects read into the scheduling facts: Nodes, Namespaces, PriorityClasses, PersistentVolumeClaims,
PersistentVolumes, StorageClasses and PodDisruptionBudgets, as kube-scheduler reads them.

Each reader takes the object as the watch delivers it (JSON) and returns model values, or raises
``ObjectError`` naming the object and the field: the feed logs it and keeps what it knew. The API server
validated every object, so an error here means a newer API or a bug, not a user's typo.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from placement.core.constraints.constraint_types import (
    Labels,
    LabelSelector,
    NodeFacts,
    NodeSelectorTerm,
    Operator,
    Requirement,
    Taint,
    TaintEffect,
)
from placement.core.constraints.selectors import NOTHING, SelectorError, parse_label_selector
from placement.core.preemption_rules import DisruptionBudget
from placement.core.quantity import quantity_value
from placement.state.scheduling_facts import ClaimSource

# The claim's class before spec.storageClassName existed; upstream still reads it first.
BETA_STORAGE_CLASS_KEY = "volume.beta.kubernetes.io/storage-class"
SELECTED_NODE_KEY = "volume.kubernetes.io/selected-node"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


class ObjectError(ValueError):
    """An object the feed cannot read; the message names the object and the field."""


def node_facts(obj: Mapping[str, Any]) -> NodeFacts:
    """Labels, ``spec.taints`` and ``spec.unschedulable``. Readiness is not read from the ``Ready`` condition:
    kube-scheduler judges it by the ``node.kubernetes.io/not-ready`` and ``unreachable`` taints the node
    lifecycle controller sets, which a pod may tolerate."""
    metadata, spec = _part(obj, "metadata"), _part(obj, "spec")
    name = str(metadata.get("name") or "")
    where = f"node {name}"
    taints = []
    for position, item in enumerate(_list(spec.get("taints"), f"{where}: spec.taints")):
        taint = _mapping(item, f"{where}: spec.taints[{position}]")
        try:
            effect = TaintEffect(str(taint.get("effect")))
        except ValueError:
            raise ObjectError(f"{where}: spec.taints[{position}].effect {taint.get('effect')!r} is unknown") from None
        taints.append(Taint(key=_intern(taint.get("key")), effect=effect, value=_intern(taint.get("value") or "")))
    return NodeFacts(
        name=name,
        labels=labels_of(obj),
        taints=tuple(taints),
        unschedulable=spec.get("unschedulable") is True,
    )


def node_allocatable(obj: Mapping[str, Any]) -> tuple[int, int] | None:
    """``status.allocatable``'s whole CPUs and memory bytes; None while the kubelet has not reported them."""
    allocatable = _mapping(_part(obj, "status").get("allocatable") or {}, "status.allocatable")
    if "cpu" not in allocatable or "memory" not in allocatable:
        return None
    cpu, memory = quantity_value(allocatable["cpu"]), quantity_value(allocatable["memory"])
    if cpu is None or memory is None:
        raise ObjectError(f"Node {_name(obj)!r}: status.allocatable: cpu and memory must be quantities")
    return int(cpu), int(memory)


def labels_of(obj: Mapping[str, Any]) -> Labels:
    """``metadata.labels`` as sorted pairs, the strings interned (nodes and namespaces repeat them)."""
    labels = _mapping(_part(obj, "metadata").get("labels"), f"{_name(obj)}: metadata.labels")
    return tuple(sorted((_intern(key), _intern(value)) for key, value in labels.items()))


def priority_class(obj: Mapping[str, Any]) -> tuple[int, bool]:
    """(value, globalDefault) of a PriorityClass."""
    value = obj.get("value")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ObjectError(f"priority class {_name(obj)}: value {value!r} is not an integer")
    return value, obj.get("globalDefault") is True


def claim_source(obj: Mapping[str, Any]) -> ClaimSource:
    """The volume a PersistentVolumeClaim is bound to, its class, and the node provisioning started for."""
    metadata, spec = _part(obj, "metadata"), _part(obj, "spec")
    annotations = _mapping(metadata.get("annotations"), f"claim {_name(obj)}: metadata.annotations")
    storage_class = annotations.get(BETA_STORAGE_CLASS_KEY) or spec.get("storageClassName") or ""
    return ClaimSource(
        volume=str(spec.get("volumeName") or ""),
        storage_class=str(storage_class),
        selected_node=str(annotations.get(SELECTED_NODE_KEY) or ""),
    )


def volume_node_affinity(obj: Mapping[str, Any]) -> tuple[NodeSelectorTerm, ...] | None:
    """A PersistentVolume's ``spec.nodeAffinity.required`` terms (ORed); None: it fits every node."""
    where = f"volume {_name(obj)}: spec.nodeAffinity.required"
    required = _part(_part(obj, "spec"), "nodeAffinity").get("required")
    if required is None:
        return None
    terms = _list(_mapping(required, where).get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    return tuple(_term(term, f"{where}.nodeSelectorTerms[{n}]") for n, term in enumerate(terms))


def waits_for_first_consumer(obj: Mapping[str, Any]) -> bool:
    """A StorageClass's ``volumeBindingMode`` is ``WaitForFirstConsumer`` (the default is Immediate)."""
    return obj.get("volumeBindingMode") == WAIT_FOR_FIRST_CONSUMER


def disruption_budget(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A PodDisruptionBudget (policy/v1) as preemption reads it: its selector, ``status.disruptionsAllowed``
    and ``status.disruptedPods``. A budget whose status lags its spec (``observedGeneration`` <
    ``generation``) allows nothing: the Eviction API refuses evictions under it until the disruption
    controller catches up. A selector that does not parse matches nothing, as upstream."""
    metadata, spec, status = _part(obj, "metadata"), _part(obj, "spec"), _part(obj, "status")
    where = f"pod disruption budget {_name(obj)}"
    allowed = status.get("disruptionsAllowed", 0)
    if isinstance(allowed, bool) or not isinstance(allowed, int):
        raise ObjectError(f"{where}: status.disruptionsAllowed {allowed!r} is not an integer")
    generation, observed = metadata.get("generation"), status.get("observedGeneration")
    if isinstance(generation, int) and (not isinstance(observed, int) or observed < generation):
        allowed = 0
    selector_value = spec.get("selector")
    if selector_value is None:
        selector = NOTHING
    else:
        raw = _mapping(selector_value, f"{where}: spec.selector")
        labels = _mapping(raw.get("matchLabels"), f"{where}: spec.selector.matchLabels")
        model = LabelSelector(
            match_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
            match_expressions=_requirements(raw.get("matchExpressions"), f"{where}: spec.selector.matchExpressions"),
        )
        try:
            selector = parse_label_selector(model)
        except SelectorError:
            selector = NOTHING
    disrupted = _mapping(status.get("disruptedPods"), f"{where}: status.disruptedPods")
    return DisruptionBudget(
        namespace=str(metadata.get("namespace") or "default"),
        name=str(metadata.get("name") or ""),
        selector=selector,
        disruptions_allowed=allowed,
        disrupted_pods={
            str(pod): _epoch(at, f"{where}: status.disruptedPods[{pod!r}]") for pod, at in disrupted.items()
        },
    )


def _epoch(value: Any, where: str) -> float:
    """An RFC 3339 time (``metav1.Time``) as seconds since the epoch."""
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ObjectError(f"{where} {value!r} is not an RFC 3339 time") from None


def _term(value: Any, where: str) -> NodeSelectorTerm:
    term = _mapping(value, where)
    return NodeSelectorTerm(
        match_expressions=_requirements(term.get("matchExpressions"), f"{where}.matchExpressions"),
        match_fields=_requirements(term.get("matchFields"), f"{where}.matchFields"),
    )


def _requirements(value: Any, where: str) -> tuple[Requirement, ...]:
    result = []
    for position, item in enumerate(_list(value, where)):
        requirement = _mapping(item, f"{where}[{position}]")
        try:
            operator = Operator(str(requirement.get("operator")))
        except ValueError:
            raise ObjectError(f"{where}[{position}].operator {requirement.get('operator')!r} is unknown") from None
        values = _list(requirement.get("values"), f"{where}[{position}].values")
        result.append(
            Requirement(key=str(requirement.get("key") or ""), operator=operator, values=tuple(map(str, values)))
        )
    return tuple(result)


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return _mapping(obj.get(key), f"{_name(obj) or 'an object'}: {key}")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ObjectError(f"{where} must be an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ObjectError(f"{where} must be a list")
    return value


def _intern(value: Any) -> str:
    return sys.intern(str(value or ""))


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata")
    return str(metadata.get("name") or "") if isinstance(metadata, Mapping) else ""
