"""Pods, read in one place: the pods clients ask about and the pods the watch shows bound.

A pod asked about comes from a client (the scheduler shim, a person with grpcurl) before anything checked
it: ``PodSpec`` is the pod as the API carries it, and ``validate_pod`` turns it into the ``PendingPod`` the
core decides on, validating every field with a message that names the pod, the container and the field
(negative or malformed quantities, requests above limits, fractional devices, unknown intent values).
A pod the watch shows bound or reserved becomes a ``PodUsage`` (``pod_usage``, ``reserved_usage``) through
the same conversion of its containers (``pod_model``), plus the placement annotations the service wrote.

Every refusal is a ``PodParseError``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np

from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    POLICY_KEY,
    RESERVED_NODE_KEY,
    InvalidValue,
    parse_ids,
)
from placement.core.intent import NumaIntentPolicy, PodIntent, parse_pod_intent
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import PodDemand, demand_of

MAX_CONTAINERS = 256  # per list; bounds the exact model's per-container work on one request
MAX_AMOUNT = Decimal(2) ** 53  # amounts are float64 in the index: exact below this
# ``pod_json`` bounds, checked before parsing. No Kubernetes object exceeds 1.5 MiB (etcd's default request
# limit), and a Pod is shallow: its deepest paths (managedFields' fieldsV1, affinity terms, projected
# volumes) are under 20 levels. A document past either bound is refused, never parsed: json.loads recurses
# once per level and fails on a deep enough document with RecursionError.
MAX_POD_JSON_CHARS = 1536 * 1024
MAX_POD_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string literal, escapes included
_OPENERS, _CLOSERS = (ord("["), ord("{")), (ord("]"), ord("}"))
_CPU_MEMORY = ("cpu", "memory")
_QUANTITY = re.compile(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([A-Za-z]*)")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


class PodParseError(ValueError):
    """A pod the service cannot read, asked about or watched; the message names the pod and the field."""


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    restartable: bool = False  # an init container with restartPolicy: Always


@dataclass(frozen=True)
class PodSpec:
    """A pod as the API carries it: identity, labels, annotations and containers; nothing validated yet."""

    namespace: str
    name: str
    containers: tuple[ContainerSpec, ...]
    init_containers: tuple[ContainerSpec, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PendingPod:
    """A validated pod to place: the kubelet-level model the core admits, its NUMA intent, and what gang
    scheduling reads (its group labels and annotations, its priority)."""

    namespace: str
    name: str
    pod: Pod
    intent: PodIntent = field(default_factory=PodIntent)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0  # spec.priority

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def pod_spec_from_json(text: str) -> PodSpec:
    """A Kubernetes Pod object as JSON (``kubectl get pod -o json``), within the bounds above."""
    if len(text) > MAX_POD_JSON_CHARS:
        raise PodParseError(f"pod_json is {len(text)} characters, more than the {MAX_POD_JSON_CHARS} accepted")
    depth = json_depth(text)
    if depth > MAX_POD_JSON_DEPTH:
        raise PodParseError(
            f"pod_json nests {depth} levels deep, more than the {MAX_POD_JSON_DEPTH} a Kubernetes Pod needs"
        )
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise PodParseError(f"pod_json is not valid JSON: {error}") from None
    return pod_spec_from_object(document)


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in a JSON text (brackets inside strings do not count)."""
    structure = _JSON_STRING.sub("", text).encode("utf-8", "replace")
    codes = np.frombuffer(structure, dtype=np.uint8)
    steps = np.isin(codes, _OPENERS).astype(np.int64) - np.isin(codes, _CLOSERS)
    return int(np.cumsum(steps).max(initial=0))


def pod_spec_from_object(document: Any) -> PodSpec:
    """A Kubernetes Pod object as a decoded JSON document."""
    if not isinstance(document, dict):
        raise PodParseError("pod_json must be a JSON object (a Kubernetes Pod)")
    metadata = _object(document.get("metadata"), "metadata")
    spec = _object(document.get("spec"), "spec")
    return PodSpec(
        namespace=_string(metadata.get("namespace", ""), "metadata.namespace"),
        name=_string(metadata.get("name", ""), "metadata.name"),
        labels=_string_map(metadata.get("labels"), "metadata.labels"),
        annotations=_string_map(metadata.get("annotations"), "metadata.annotations"),
        containers=_containers(spec.get("containers"), "spec.containers", init=False),
        init_containers=_containers(spec.get("initContainers"), "spec.initContainers", init=True),
    )


def _containers(value: Any, where: str, *, init: bool) -> tuple[ContainerSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PodParseError(f"{where} must be a list")
    result = []
    for position, item in enumerate(value):
        container = _object(item, f"{where}[{position}]")
        resources = _object(container.get("resources"), f"{where}[{position}].resources")
        result.append(
            ContainerSpec(
                name=_string(container.get("name", ""), f"{where}[{position}].name"),
                requests=_quantity_map(resources.get("requests"), f"{where}[{position}].resources.requests"),
                limits=_quantity_map(resources.get("limits"), f"{where}[{position}].resources.limits"),
                restartable=init and container.get("restartPolicy") == "Always",
            )
        )
    return tuple(result)


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodParseError(f"{where} must be a JSON object")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise PodParseError(f"{where} must be a string")
    return value


def _string_map(value: Any, where: str) -> dict[str, str]:
    return {key: _string(item, f"{where}[{key!r}]") for key, item in _object(value, where).items()}


def _quantity_map(value: Any, where: str) -> dict[str, str]:
    # JSON numbers are valid quantities (`"cpu": 2`); bool is an int in Python but not a quantity.
    result = {}
    for key, item in _object(value, where).items():
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise PodParseError(f"{where}[{key!r}] must be a Kubernetes quantity string")
        result[key] = str(item)
    return result


def validate_pod(spec: PodSpec) -> PendingPod:
    """The pod the core decides on; raises ``PodParseError`` naming the first invalid field."""
    if not spec.name:
        raise PodParseError("pod name is required")
    namespace = spec.namespace or "default"
    where = f"pod {namespace}/{spec.name}"
    if not spec.containers:
        raise PodParseError(f"{where}: at least one container is required")
    for kind, containers in (("containers", spec.containers), ("init containers", spec.init_containers)):
        if len(containers) > MAX_CONTAINERS:
            raise PodParseError(f"{where}: {len(containers)} {kind}, more than the {MAX_CONTAINERS} accepted")
    try:
        intent = parse_pod_intent(spec.annotations, spec.labels)
    except InvalidValue as error:
        raise PodParseError(f"{where}: {error}") from None
    return PendingPod(
        namespace=namespace,
        name=spec.name,
        pod=pod_model(spec, where),
        intent=intent,
        labels=dict(spec.labels),
        annotations=dict(spec.annotations),
    )


def pod_model(spec: PodSpec, where: str) -> Pod:
    """The kubelet-level pod: each container's effective requests and the pod's QoS class.

    The one conversion of a pod's containers, for pods a client asks about and for pods the watch shows
    bound (``pod_usage``); raises ``PodParseError`` naming the container and field.
    """
    all_containers = (*spec.init_containers, *spec.containers)
    amounts = [_amounts(c, f"{where} container {c.name or '?'}") for c in all_containers]
    return Pod(
        containers=tuple(
            _model(c, a) for c, a in zip(spec.containers, amounts[len(spec.init_containers) :], strict=True)
        ),
        init_containers=tuple(
            _model(c, a) for c, a in zip(spec.init_containers, amounts[: len(spec.init_containers)], strict=True)
        ),
        qos=_qos(amounts),
    )


def parse_quantity(text: str | int | float, *, where: str) -> Decimal:
    """A Kubernetes quantity ("500m", "4Gi", "1e3") as a Decimal in base units."""
    match = _QUANTITY.fullmatch(str(text).strip())
    if match is None or match.group(2) not in _SUFFIX:
        raise PodParseError(f"{where}: {text!r} is not a Kubernetes quantity")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        raise PodParseError(f"{where}: {text!r} is not a Kubernetes quantity") from None


@dataclass(frozen=True)
class _Amounts:
    requests: dict[str, Decimal]  # the effective requests: a limit without a request sets the request
    limits: dict[str, Decimal]


def _amounts(container: ContainerSpec, where: str) -> _Amounts:
    def parse(values: Mapping[str, str], kind: str) -> dict[str, Decimal]:
        parsed = {}
        for name, text in values.items():
            label = f"{where}: {kind}.{name}"
            amount = parse_quantity(text, where=label)
            if not amount.is_finite() or amount < 0:
                raise PodParseError(f"{label} must not be negative, got {text!r}")
            if amount > MAX_AMOUNT:
                raise PodParseError(f"{label} is too large: {text!r}")
            if name not in _CPU_MEMORY and amount != amount.to_integral_value():
                raise PodParseError(f"{label} must be a whole number, got {text!r}")
            parsed[name] = amount
        return parsed

    limits = parse(container.limits, "limits")
    requests = {**limits, **parse(container.requests, "requests")}
    for name, limit in limits.items():
        if requests[name] > limit:
            raise PodParseError(f"{where}: requests.{name} {requests[name]} exceeds limits.{name} {limit}")
    return _Amounts(requests=requests, limits=limits)


def _model(container: ContainerSpec, amounts: _Amounts) -> Container:
    requests = amounts.requests
    hugepages = tuple((n, int(v)) for n, v in sorted(requests.items()) if n.startswith("hugepages-"))
    devices = tuple((n, int(v)) for n, v in sorted(requests.items()) if "/" in n and not n.startswith("hugepages-"))
    return Container(
        name=container.name,
        cpu_millis=math.ceil(requests.get("cpu", Decimal(0)) * 1000),
        memory=int(requests.get("memory", Decimal(0))),
        hugepages=hugepages,
        devices=devices,
        restartable=container.restartable,
    )


def _qos(amounts: Sequence[_Amounts]) -> QOSClass:
    """``GetPodQOS`` over cpu and memory: Guaranteed when every container's requests equal its limits."""
    if not any(name in a.requests or name in a.limits for a in amounts for name in _CPU_MEMORY):
        return QOSClass.BEST_EFFORT
    guaranteed = all(
        name in a.limits and a.requests.get(name) == a.limits[name] for a in amounts for name in _CPU_MEMORY
    )
    return QOSClass.GUARANTEED if guaranteed else QOSClass.BURSTABLE


# --- bound pods -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodUsage:
    """One pod on one node: its demand, and where it sits when we placed it."""

    namespace: str
    name: str
    node: str
    demand: PodDemand
    cells: tuple[int, ...] = ()  # NUMA ids when known; () = unknown
    gpus: tuple[int, ...] = ()  # GPU indices when known
    isolated: bool = False  # holds its cell exclusively against our other pods

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """The usage of a bound pod object; None for a pod not bound to a node or already finished."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if not node or phase in ("Succeeded", "Failed"):
        return None
    namespace, name = str(metadata.get("namespace", "default")), str(metadata.get("name", ""))
    where = f"pod {namespace}/{name}"
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    model = pod_model(pod_spec_from_object(pod), where)
    return PodUsage(
        namespace=namespace,
        name=name,
        node=str(node),
        demand=demand_of(model),
        cells=_ids(annotations, ASSIGNED_CELLS_KEY, where),
        gpus=_ids(annotations, ASSIGNED_GPUS_KEY, where),
        isolated=annotations.get(POLICY_KEY) == NumaIntentPolicy.ISOLATED.value,
    )


def reserved_usage(obj: Mapping[str, Any]) -> PodUsage | None:
    """The reservation a pending pod carries in ``RESERVED_NODE_KEY``; None when it carries none."""
    metadata = obj.get("metadata") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    node = annotations.get(RESERVED_NODE_KEY)
    if not node or (obj.get("spec") or {}).get("nodeName"):
        return None
    # pod_usage reads the requests and our cell / GPU annotations of a bound pod: present the pod as
    # bound to the reserved node to read them the same way.
    placed = {**obj, "spec": {**(obj.get("spec") or {}), "nodeName": node}}
    return pod_usage(placed)


def _ids(annotations: Mapping[str, str], key: str, where: str) -> tuple[int, ...]:
    try:
        return parse_ids(key, annotations.get(key))
    except InvalidValue as error:
        raise PodParseError(f"{where}: {error}") from None
