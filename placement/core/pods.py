"""Pods, read in one place: the pods clients ask about and the pods the watch shows bound.

A pod asked about comes from a client (the scheduler shim, a person with grpcurl) before anything checked
it: ``PodSpec`` is the pod as the API carries it, and ``validate_pod`` turns it into the ``PendingPod`` the
core decides on, validating every field with a message that names the pod, the container and the field
(negative or malformed quantities, requests above limits, fractional devices, unknown intent values, GPU
requirement annotations (``placement.core.gpu_annotations``), and the scheduling fields as the API server
validates them: ``placement.core.pod_constraints``).
A pod the watch shows bound or reserved becomes a ``PodUsage`` (``pod_usage``, ``reserved_usage``) through
the same conversion of its containers (``pod_model``), plus the placement annotations the service wrote;
and a ``PlacedPod`` (``placed_pod``): what the constraint plugins and preemption read of it.

Every refusal is a ``PodParseError``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

import numpy as np

from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    GROUP_NAME_KEY,
    POLICY_KEY,
    RESERVED_NODE_KEY,
    SCHEDULER_PLUGINS_KEY,
    InvalidValue,
    parse_ids,
)
from placement.core.constraints.constraint_types import GpuRequirements, HostPort, PlacedPod, PodConstraints
from placement.core.constraints.gpu_labels import accepted_gpu_models
from placement.core.dra.pod_claims import PodResourceClaim
from placement.core.gang_sources import GangSourceError
from placement.core.gang_sources import group_of as gang_group_of
from placement.core.gpu_annotations import parse_gpu_requirements
from placement.core.intent import NumaIntentPolicy, PodIntent, parse_pod_intent
from placement.core.kueue import kueue_admitted
from placement.core.pod_constraints import (
    InvalidField,
    integer,
    label_map,
    object_name,
    parse_affinity,
    parse_host_ports,
    parse_scheduling_gates,
    parse_tolerations,
    parse_topology_spread,
)
from placement.core.quantity import quantity_value
from placement.core.topology_manager import Container, Pod, QOSClass
from placement.core.vocabulary import GPU_RESOURCE, GPU_SHARE, PodDemand, demand_of
from placement.core.workload_policies import WORKLOAD_CLASS_KEY, parse_workload_class, workload_key

MAX_CONTAINERS = 256  # per list; bounds the exact model's per-container work on one request
MAX_AMOUNT = Decimal(2) ** 53  # amounts are float64 in the index: exact below this
# ``pod_json`` bounds, checked before parsing. No Kubernetes object exceeds 1.5 MiB (etcd's default request
# limit), and a Pod is shallow: its deepest paths (managedFields' fieldsV1, affinity terms, projected
# volumes) are under 20 levels. A document past either bound is refused, never parsed: json.loads recurses
# once per level and fails on a deep enough document with RecursionError.
MAX_POD_JSON_CHARS = 1536 * 1024
MAX_POD_JSON_DEPTH = 64
MAX_POD_RESOURCE_CLAIMS = 32  # core/v1 validation: maxPodResourceClaims
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # RFC 1123 label
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string literal, escapes included
_OPENERS, _CLOSERS = (ord("["), ord("{")), (ord("]"), ord("}"))
_CPU_MEMORY = ("cpu", "memory")
_FINISHED = ("Succeeded", "Failed")
# spec.preemptionPolicy as core/v1 accepts it; "" (unset) is the API server's default, PreemptLowerPriority.
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPT_NEVER = "Never"
_PREEMPTION_POLICIES = (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER)


class PodParseError(ValueError):
    """A pod the service cannot read, asked about or watched; the message names the pod and the field."""


# A JSON value as the Kubernetes API carries it (``pod_json`` as it is; the ``Pod`` message's nested fields
# converted by the codec into the same form), checked by ``validate_pod`` alone.
Json = Any


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    restartable: bool = False  # an init container with restartPolicy: Always
    ports: Json = ()  # ports: [{containerPort, hostPort, protocol, hostIP}]


@dataclass(frozen=True)
class PodSpec:
    """A pod as the API carries it: identity, labels, annotations, containers and the scheduling fields;
    nothing validated yet."""

    namespace: str
    name: str
    containers: tuple[ContainerSpec, ...]
    init_containers: tuple[ContainerSpec, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_name: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: Json = None  # {nodeAffinity, podAffinity, podAntiAffinity}
    tolerations: Json = ()
    topology_spread_constraints: Json = ()
    host_network: bool = False  # the containers' ports are host ports
    priority: int | None = None  # None: not resolved (the API server's Priority admission sets it)
    priority_class_name: str = ""
    preemption_policy: str = ""  # spec.preemptionPolicy: PreemptLowerPriority (also when "") or Never
    scheduling_gates: tuple[str, ...] = ()
    overhead: Mapping[str, str] = field(default_factory=dict)  # resource name -> quantity
    # The PersistentVolumeClaims its volumes use: persistentVolumeClaim.claimName, and for an ephemeral
    # volume the claim the ephemeral volume controller makes for it, named <pod>-<volume>.
    claims: tuple[str, ...] = ()
    # spec.resourceClaims (DRA), with what status.resourceClaimStatuses says of each; and metadata.uid, which
    # the claims made for the pod are owned by and reserved for.
    resource_claims: tuple[PodResourceClaim, ...] = ()
    uid: str = ""
    # metadata.ownerReferences' controller (kind, name): the workload policies spread a service's pods.
    controller: tuple[str, str] = ("", "")
    # What the request carried, as it carried it (the Pod message's bytes, the pod_json text): the same
    # key for the same pod, so that a validated pod can be kept (``PlacementEngine``); "" when unknown.
    source: str | bytes = field(default="", compare=False, repr=False)


@dataclass(frozen=True)
class PendingPod:
    """A validated pod to place: the kubelet-level model the core admits, its NUMA intent, what gang
    scheduling reads (its group labels and annotations, its priority) and what kube-scheduler's plugins
    read (its constraints)."""

    namespace: str
    name: str
    pod: Pod
    intent: PodIntent = field(default_factory=PodIntent)
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0  # spec.priority; 0 when not given
    constraints: PodConstraints = field(default_factory=PodConstraints)
    resource_claims: tuple[PodResourceClaim, ...] = ()  # spec.resourceClaims (DRA)
    uid: str = ""
    preempt_never: bool = False  # spec.preemptionPolicy Never: it waits rather than evict anyone
    controller: tuple[str, str] = ("", "")  # (kind, name) of its controlling ownerReference

    def sorted_labels(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.labels.items()))

    def placed_on(self, node: str) -> PlacedPod:
        """The pod as the constraint plugins see it once reserved on ``node``."""
        return PlacedPod(
            namespace=self.namespace,
            name=self.name,
            node=node,
            labels=self.sorted_labels(),
            host_ports=self.constraints.host_ports,
            pod_affinity=self.constraints.pod_affinity,
            pod_anti_affinity=self.constraints.pod_anti_affinity,
            priority=self.priority,
            group=group_of(self.namespace, self.labels),
            workload=workload_key(*self.controller, self.labels),
            uid=self.uid,
            kueue_admitted=kueue_admitted(self.labels),
        )

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def pod_spec_from_json(text: str) -> PodSpec:
    """A Kubernetes Pod object as JSON (``kubectl get pod -o json``), within the bounds above."""
    if len(text) > MAX_POD_JSON_CHARS:
        raise PodParseError(f"pod_json is {len(text)} characters, more than the {MAX_POD_JSON_CHARS} accepted")
    # Nothing nests deeper than the text has opening brackets: a pod with fewer than the limit in all (most
    # pods) is spared the exact count, which removes the strings first.
    if text.count("{") + text.count("[") > MAX_POD_JSON_DEPTH:
        depth = json_depth(text)
        if depth > MAX_POD_JSON_DEPTH:
            raise PodParseError(
                f"pod_json nests {depth} levels deep, more than the {MAX_POD_JSON_DEPTH} a Kubernetes Pod needs"
            )
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise PodParseError(f"pod_json is not valid JSON: {error}") from None
    return replace(pod_spec_from_object(document), source=text)


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
    name = _string(metadata.get("name", ""), "metadata.name")
    gates = _list(spec.get("schedulingGates"), "spec.schedulingGates")
    return PodSpec(
        namespace=_string(metadata.get("namespace", ""), "metadata.namespace"),
        name=name,
        labels=_string_map(metadata.get("labels"), "metadata.labels"),
        annotations=_string_map(metadata.get("annotations"), "metadata.annotations"),
        containers=_containers(spec.get("containers"), "spec.containers", init=False),
        init_containers=_containers(spec.get("initContainers"), "spec.initContainers", init=True),
        node_name=_string(spec.get("nodeName", ""), "spec.nodeName"),
        node_selector=_string_map(spec.get("nodeSelector"), "spec.nodeSelector"),
        affinity=spec.get("affinity"),
        tolerations=spec.get("tolerations"),
        topology_spread_constraints=spec.get("topologySpreadConstraints"),
        host_network=_boolean(spec.get("hostNetwork", False), "spec.hostNetwork"),
        priority=_priority(spec.get("priority")),
        priority_class_name=_string(spec.get("priorityClassName", ""), "spec.priorityClassName"),
        preemption_policy=_string(spec.get("preemptionPolicy") or "", "spec.preemptionPolicy"),
        scheduling_gates=tuple(
            _string(_object(gate, f"spec.schedulingGates[{i}]").get("name", ""), f"spec.schedulingGates[{i}].name")
            for i, gate in enumerate(gates)
        ),
        overhead=_quantity_map(spec.get("overhead"), "spec.overhead"),
        claims=_claims(spec.get("volumes"), name),
        resource_claims=_resource_claims(spec.get("resourceClaims"), document.get("status")),
        uid=_string(metadata.get("uid", ""), "metadata.uid"),
        controller=_controller(metadata.get("ownerReferences")),
    )


def _controller(value: Any) -> tuple[str, str]:
    """(kind, name) of the ownerReference marked ``controller: true`` (the API server allows one), or ("", "")."""
    for i, entry in enumerate(_list(value, "metadata.ownerReferences")):
        where = f"metadata.ownerReferences[{i}]"
        item = _object(entry, where)
        if item.get("controller") is True:
            return _string(item.get("kind", ""), f"{where}.kind"), _string(item.get("name", ""), f"{where}.name")
    return ("", "")


def _resource_claims(value: Any, status: Any) -> tuple[PodResourceClaim, ...]:
    """``spec.resourceClaims`` with ``status.resourceClaimStatuses`` (the claims made from templates)."""
    generated: dict[str, str | None] = {}
    statuses = _object(status, "status").get("resourceClaimStatuses") if status is not None else None
    for i, entry in enumerate(_list(statuses, "status.resourceClaimStatuses")):
        where = f"status.resourceClaimStatuses[{i}]"
        item = _object(entry, where)
        claim = item.get("resourceClaimName")
        generated[_string(item.get("name", ""), f"{where}.name")] = (
            None if claim is None else _string(claim, f"{where}.resourceClaimName")
        )
    result = []
    for i, entry in enumerate(_list(value, "spec.resourceClaims")):
        where = f"spec.resourceClaims[{i}]"
        item = _object(entry, where)
        name = _string(item.get("name", ""), f"{where}.name")
        result.append(
            PodResourceClaim(
                name=name,
                claim_name=_string(item.get("resourceClaimName") or "", f"{where}.resourceClaimName"),
                template_name=_string(
                    item.get("resourceClaimTemplateName") or "", f"{where}.resourceClaimTemplateName"
                ),
                listed=name in generated,
                generated_name=generated.get(name),
            )
        )
    return tuple(result)


def _containers(value: Any, where: str, *, init: bool) -> tuple[ContainerSpec, ...]:
    result = []
    for position, item in enumerate(_list(value, where)):
        container = _object(item, f"{where}[{position}]")
        resources = _object(container.get("resources"), f"{where}[{position}].resources")
        result.append(
            ContainerSpec(
                name=_string(container.get("name", ""), f"{where}[{position}].name"),
                requests=_quantity_map(resources.get("requests"), f"{where}[{position}].resources.requests"),
                limits=_quantity_map(resources.get("limits"), f"{where}[{position}].resources.limits"),
                restartable=init and container.get("restartPolicy") == "Always",
                ports=container.get("ports"),
            )
        )
    return tuple(result)


def _claims(value: Any, pod_name: str) -> tuple[str, ...]:
    claims = []
    for position, item in enumerate(_list(value, "spec.volumes")):
        where = f"spec.volumes[{position}]"
        volume = _object(item, where)
        if volume.get("persistentVolumeClaim") is not None:
            source = _object(volume["persistentVolumeClaim"], f"{where}.persistentVolumeClaim")
            claims.append(_string(source.get("claimName", ""), f"{where}.persistentVolumeClaim.claimName"))
        elif volume.get("ephemeral") is not None:
            claims.append(f"{pod_name}-{_string(volume.get('name', ''), f'{where}.name')}")
    return tuple(claims)


def _priority(value: Any) -> int | None:
    try:
        return integer(value, "spec.priority")
    except InvalidField as error:
        raise PodParseError(str(error)) from None


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodParseError(f"{where} must be a list")
    return value


def _boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise PodParseError(f"{where} must be true or false")
    return value


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
        gpu = parse_gpu_requirements(spec.annotations)
        stated_class = spec.annotations.get(WORKLOAD_CLASS_KEY, spec.labels.get(WORKLOAD_CLASS_KEY))
        if stated_class is not None:
            parse_workload_class(stated_class)
    except InvalidValue as error:
        raise PodParseError(f"{where}: {error}") from None
    if spec.preemption_policy and spec.preemption_policy not in _PREEMPTION_POLICIES:
        raise PodParseError(
            f"{where}: spec.preemptionPolicy {spec.preemption_policy!r} is not one of {', '.join(_PREEMPTION_POLICIES)}"
        )
    pod = pod_model(spec, where)
    return PendingPod(
        namespace=namespace,
        name=spec.name,
        pod=pod,
        intent=intent,
        labels=dict(spec.labels),
        annotations=dict(spec.annotations),
        priority=0 if spec.priority is None else spec.priority,
        constraints=_with_gpu_requirements(_constraints(spec, where), gpu, pod),
        resource_claims=_checked_resource_claims(spec.resource_claims, where),
        uid=spec.uid,
        preempt_never=spec.preemption_policy == PREEMPT_NEVER,
        controller=spec.controller,
    )


def _checked_resource_claims(entries: tuple[PodResourceClaim, ...], where: str) -> tuple[PodResourceClaim, ...]:
    """As the API server validates ``spec.resourceClaims`` (``validatePodResourceClaims``): at most 32, a
    unique DNS label name each, and exactly one of ``resourceClaimName`` and ``resourceClaimTemplateName``."""
    if len(entries) > MAX_POD_RESOURCE_CLAIMS:
        raise PodParseError(
            f"{where}: spec.resourceClaims: Too many: {len(entries)}: must have at most {MAX_POD_RESOURCE_CLAIMS} items"
        )
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        path = f"{where}: spec.resourceClaims[{index}]"
        if not entry.name:
            raise PodParseError(f"{path}.name: Required value")
        if entry.name in seen:
            raise PodParseError(f"{path}.name: Duplicate value: {entry.name!r}")
        seen.add(entry.name)
        if not _DNS_LABEL.fullmatch(entry.name):
            raise PodParseError(f"{path}.name: Invalid value: {entry.name!r}: must be a DNS label")
        if bool(entry.claim_name) == bool(entry.template_name):
            raise PodParseError(
                f"{path}: Invalid value: exactly one of resourceClaimName and resourceClaimTemplateName must be set"
            )
    return entries


def _with_gpu_requirements(constraints: PodConstraints, gpu: GpuRequirements | None, pod: Pod) -> PodConstraints:
    """The constraints with the GPU requirements added, for a pod that asks for GPUs (whole ones or a share
    of one); a pod without GPUs is placed as if it had not stated them. Added after ``_constraints``, so a
    pod whose only constraint they are is not taken for one without any (``_states_no_constraint``)."""
    if gpu is None or not _asks_for_gpus(pod):
        return constraints
    return replace(constraints, gpu=gpu)


def _asks_for_gpus(pod: Pod) -> bool:
    containers = (*pod.init_containers, *pod.containers)
    return any(name in (GPU_RESOURCE, GPU_SHARE) and count > 0 for c in containers for name, count in c.devices)


def _constraints(spec: PodSpec, where: str) -> PodConstraints:
    """The scheduling fields, validated as the API server validates them (the pod's labels included: the
    selectors of others match them)."""
    try:
        label_map(spec.labels, "metadata.labels")
        if _states_no_constraint(spec):
            return _only_priority(spec)
        node_affinity, pod_affinity, pod_anti_affinity = parse_affinity(spec.affinity, "spec.affinity", spec.labels)
        return PodConstraints(
            node_name=spec.node_name and object_name(spec.node_name, "spec.nodeName"),
            node_selector=label_map(spec.node_selector, "spec.nodeSelector"),
            node_affinity=node_affinity,
            pod_affinity=pod_affinity,
            pod_anti_affinity=pod_anti_affinity,
            tolerations=parse_tolerations(spec.tolerations, "spec.tolerations"),
            topology_spread=parse_topology_spread(
                spec.topology_spread_constraints, "spec.topologySpreadConstraints", spec.labels
            ),
            host_ports=_host_ports(spec),
            scheduling_gates=parse_scheduling_gates(
                spec.scheduling_gates, "spec.schedulingGates", node_name=spec.node_name
            ),
            priority=spec.priority,
            priority_class_name=spec.priority_class_name
            and object_name(spec.priority_class_name, "spec.priorityClassName"),
            claims=tuple(dict.fromkeys(object_name(claim, "spec.volumes") for claim in spec.claims)),
        )
    except InvalidField as error:
        raise PodParseError(f"{where}: {error}") from None


_NO_CONSTRAINTS = PodConstraints()


def _states_no_constraint(spec: PodSpec) -> bool:
    """The pod sets none of the fields the plugins read (what most pods a scheduler is asked about look
    like): nothing to parse but its priority. A field given empty counts as unset."""
    return not (
        spec.node_name
        or spec.node_selector
        or spec.affinity
        or spec.tolerations
        or spec.topology_spread_constraints
        or spec.scheduling_gates
        or spec.claims
        or any(container.ports for container in (*spec.init_containers, *spec.containers))
    )


def _only_priority(spec: PodSpec) -> PodConstraints:
    if spec.priority is None and not spec.priority_class_name:
        return _NO_CONSTRAINTS
    return PodConstraints(
        priority=spec.priority,
        priority_class_name=spec.priority_class_name
        and object_name(spec.priority_class_name, "spec.priorityClassName"),
    )


def _host_ports(spec: PodSpec) -> tuple[HostPort, ...]:
    init = [(f"spec.initContainers[{i}]", c.ports, c.restartable) for i, c in enumerate(spec.init_containers)]
    app = [(f"spec.containers[{i}]", c.ports, True) for i, c in enumerate(spec.containers)]
    return parse_host_ports(init + app, host_network=spec.host_network)


def pod_model(spec: PodSpec, where: str) -> Pod:
    """The kubelet-level pod: each container's effective requests and the pod's QoS class.

    The one conversion of a pod's containers, for pods a client asks about and for pods the watch shows
    bound (``pod_usage``); raises ``PodParseError`` naming the container and field.
    """
    all_containers = (*spec.init_containers, *spec.containers)
    amounts = [_amounts(c, f"{where} container {c.name or '?'}") for c in all_containers]
    overhead = _parse_amounts(spec.overhead, f"{where}: spec.overhead")
    return Pod(
        containers=tuple(
            _model(c, a) for c, a in zip(spec.containers, amounts[len(spec.init_containers) :], strict=True)
        ),
        init_containers=tuple(
            _model(c, a) for c, a in zip(spec.init_containers, amounts[: len(spec.init_containers)], strict=True)
        ),
        qos=_qos(amounts),
        overhead=tuple(
            (name, math.ceil(amount * 1000) if name == "cpu" else int(amount))
            for name, amount in sorted(overhead.items())
            if _counted(name)
        ),
    )


def parse_quantity(text: str | int | float, *, where: str) -> Decimal:
    """A Kubernetes quantity ("500m", "4Gi", "1e3") as a Decimal in base units."""
    value = quantity_value(text)
    if value is None:
        raise PodParseError(f"{where}: {text!r} is not a Kubernetes quantity")
    return value


@dataclass(frozen=True)
class _Amounts:
    requests: dict[str, Decimal]  # the effective requests: a limit without a request sets the request
    limits: dict[str, Decimal]


def _parse_amounts(values: Mapping[str, str], where: str) -> dict[str, Decimal]:
    """A ResourceList: quantities by resource name, each named ``<where>.<name>`` in a refusal."""
    parsed = {}
    for name, text in values.items():
        label = f"{where}.{name}"
        amount = parse_quantity(text, where=label)
        if not amount.is_finite() or amount < 0:
            raise PodParseError(f"{label} must not be negative, got {text!r}")
        if amount > MAX_AMOUNT:
            raise PodParseError(f"{label} is too large: {text!r}")
        if name not in _CPU_MEMORY and amount != amount.to_integral_value():
            raise PodParseError(f"{label} must be a whole number, got {text!r}")
        parsed[name] = amount
    return parsed


def _amounts(container: ContainerSpec, where: str) -> _Amounts:
    limits = _parse_amounts(container.limits, f"{where}: limits")
    requests = {**limits, **_parse_amounts(container.requests, f"{where}: requests")}
    for name, limit in limits.items():
        if requests[name] > limit:
            raise PodParseError(f"{where}: requests.{name} {requests[name]} exceeds limits.{name} {limit}")
    return _Amounts(requests=requests, limits=limits)


def _counted(name: str) -> bool:
    """The resources the model counts: cpu, memory, hugepages, devices (``<domain>/<name>``)."""
    return name in _CPU_MEMORY or name.startswith("hugepages-") or "/" in name


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
    gpu_models: tuple[str, ...] = ()  # the GPU models its rules accept (``accepted_gpu_models``); () any

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def pod_usage(pod: Mapping[str, Any]) -> PodUsage | None:
    """The usage of a bound pod object; None for a pod not bound to a node or already finished."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    node = spec.get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    if not node or phase in _FINISHED:
        return None
    namespace, name = str(metadata.get("namespace", "default")), str(metadata.get("name", ""))
    where = f"pod {namespace}/{name}"
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    spec = pod_spec_from_object(pod)
    model = pod_model(spec, where)
    return PodUsage(
        namespace=namespace,
        name=name,
        node=str(node),
        demand=demand_of(model),
        cells=_ids(annotations, ASSIGNED_CELLS_KEY, where),
        gpus=_ids(annotations, ASSIGNED_GPUS_KEY, where),
        isolated=annotations.get(POLICY_KEY) == NumaIntentPolicy.ISOLATED.value,
        gpu_models=_gpu_models(spec, model, where),
    )


def _gpu_models(spec: PodSpec, pod: Pod, where: str) -> tuple[str, ...]:
    """The GPU models a bound pod's rules accept, for the workload the fragmentation measure learns; ()
    for a pod without GPUs, and for one whose rules do not parse (it is bound: it still counts, as any
    model's)."""
    if not _asks_for_gpus(pod):
        return ()
    try:
        gpu = parse_gpu_requirements(spec.annotations)
        return accepted_gpu_models(_with_gpu_requirements(_constraints(spec, where), gpu, pod))
    except (PodParseError, InvalidValue):
        return ()


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


def placed_pod(obj: Mapping[str, Any]) -> PlacedPod | None:
    """What the constraint plugins read of a pod bound to a node, or reserved on one by the binder
    (``RESERVED_NODE_KEY``, as ``reserved_usage`` reads it); None for any other pod and a finished one."""
    metadata = obj.get("metadata") or {}
    node = (obj.get("spec") or {}).get("nodeName") or (metadata.get("annotations") or {}).get(RESERVED_NODE_KEY)
    if not node or (obj.get("status") or {}).get("phase") in _FINISHED:
        return None
    spec = pod_spec_from_object(obj)
    namespace = spec.namespace or "default"
    try:
        _, pod_affinity, pod_anti_affinity = parse_affinity(spec.affinity, "spec.affinity", spec.labels)
        return PlacedPod(
            namespace=namespace,
            name=spec.name,
            node=str(node),
            labels=label_map(spec.labels, "metadata.labels"),
            host_ports=_host_ports(spec),
            pod_affinity=pod_affinity,
            pod_anti_affinity=pod_anti_affinity,
            priority=spec.priority or 0,
            group=_placed_group(obj, namespace, spec.labels),
            workload=workload_key(*spec.controller, spec.labels),
            uid=spec.uid,
            kueue_admitted=kueue_admitted(spec.labels),
        )
    except InvalidField as error:
        raise PodParseError(f"pod {namespace}/{spec.name}: {error}") from None


def _placed_group(obj: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> str:
    """The group of a placed pod from any of the gang APIs (``gang_sources.group_of``); a pod whose group
    reference is invalid counts by its labels alone (it was placed all the same)."""
    try:
        key = gang_group_of(obj)
    except GangSourceError:
        return group_of(namespace, labels)
    return "" if key is None else str(key.ref)


def group_of(namespace: str, labels: Mapping[str, str]) -> str:
    """``namespace/name`` of the pod group a pod's labels put it in (ours first, then scheduler-plugins'),
    "" for a pod in none: what preemption evicts together."""
    name = labels.get(GROUP_NAME_KEY) or labels.get(SCHEDULER_PLUGINS_KEY)
    return f"{namespace}/{name}" if name else ""


def _ids(annotations: Mapping[str, str], key: str, where: str) -> tuple[int, ...]:
    try:
        return parse_ids(key, annotations.get(key))
    except InvalidValue as error:
        raise PodParseError(f"{where}: {error}") from None
