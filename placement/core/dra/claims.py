"""DeviceClasses, ResourceClaims and ResourceClaimTemplates (``resource.k8s.io``) read into frozen values.

``v1`` and ``v1beta2`` nest a plain request's fields under ``exactly`` (or list ``firstAvailable``
alternatives); ``v1beta1`` carries them directly on the request. Everything the allocator needs is kept:
per request the DeviceClass, CEL selectors, allocation mode and count, ``adminAccess``, tolerations and
consumable-capacity requests (kept so that the allocator can refuse them by name); the claim's
``constraints`` and ``config``; and the status (``allocation.devices.results`` and ``reservedFor``).
Opaque driver parameters are kept as decoded JSON, untouched. Anything malformed raises one
``ClaimError`` naming the object and the field path.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from placement.core.constraints.constraint_types import NodeSelectorTerm
from placement.core.dra.device_types import DeviceTaint, QualifiedName, SliceError
from placement.core.dra.pools import DeviceRef
from placement.core.dra.slices import node_selector_terms

API_VERSIONS = frozenset({"resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"})
# What the claim controller writes on a claim it makes from a template: the pod's claim entry it serves
# (kubernetes pkg/controller/resourceclaim: podResourceClaimAnnotation).
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_NESTED_VERSIONS = frozenset({"resource.k8s.io/v1", "resource.k8s.io/v1beta2"})  # requests use ``exactly``
_EFFECTS_NEEDING_TOLERATION = frozenset({"NoSchedule", "NoExecute"})


class ClaimError(ValueError):
    """A DeviceClass, claim or template that cannot be read; names the object and the field path."""

    def __init__(self, kind: str, object_name: str, path: str, problem: str) -> None:
        super().__init__(f"{kind} {object_name!r}: {path}: {problem}")
        self.kind = kind
        self.object_name = object_name
        self.path = path
        self.problem = problem


class AllocationMode(enum.StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True)
class OpaqueConfig:
    """``opaque: {driver, parameters}``: passed to the driver, never looked at by the allocator."""

    driver: str
    parameters: Any  # decoded JSON, as published


@dataclass(frozen=True)
class ClaimConfig:
    """One ``spec.devices.config[]`` entry; ``requests`` empty means every request of the claim."""

    requests: tuple[str, ...]
    opaque: OpaqueConfig


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]  # CEL expressions, in order
    config: tuple[OpaqueConfig, ...] = ()


@dataclass(frozen=True)
class Toleration:
    """A request's ``tolerations[]`` entry (DeviceToleration)."""

    key: str = ""
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: str = ""  # empty: every effect
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        """``DeviceToleration.ToleratesTaint``: key and effect match where set, then the operator decides."""
        if self.key and self.key != taint.key:
            return False
        if self.effect and self.effect != taint.effect:
            return False
        return True if self.operator == "Exists" else self.value == taint.value

    def as_api(self) -> dict[str, Any]:
        """The toleration as the API writes it (what an allocation result copies)."""
        out: dict[str, Any] = {"operator": self.operator}
        out |= {k: v for k, v in (("key", self.key), ("value", self.value), ("effect", self.effect)) if v}
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


def taint_tolerated(taint: DeviceTaint, tolerations: Iterable[Toleration]) -> bool:
    """Whether a device taint allows allocation: only NoSchedule and NoExecute taints need a toleration."""
    return taint.effect not in _EFFECTS_NEEDING_TOLERATION or any(t.tolerates(taint) for t in tolerations)


@dataclass(frozen=True)
class ExactRequest:
    """What one request (``exactly``) or one ``firstAvailable`` alternative asks for."""

    device_class_name: str
    selectors: tuple[str, ...] = ()
    allocation_mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1  # ExactCount only
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity_requests: tuple[tuple[str, str], ...] = ()  # consumable capacity (not supported by the allocator)


@dataclass(frozen=True)
class SubRequest:
    name: str
    spec: ExactRequest


@dataclass(frozen=True)
class DeviceRequest:
    """A claim's request: either ``exactly`` one spec, or ``first_available`` alternatives tried in order."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[SubRequest, ...] = ()


@dataclass(frozen=True)
class DeviceConstraint:
    """``constraints[]``: ``requests`` empty means all requests; exactly one attribute rule is set."""

    requests: tuple[str, ...]
    match_attribute: QualifiedName | None = None
    distinct_attribute: QualifiedName | None = None


@dataclass(frozen=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[DeviceConstraint, ...] = ()
    config: tuple[ClaimConfig, ...] = ()


@dataclass(frozen=True)
class AllocatedDevice:
    """One ``status.allocation.devices.results[]`` entry."""

    request: str
    driver: str
    pool: str
    device: str

    @property
    def ref(self) -> DeviceRef:
        return DeviceRef(self.driver, self.pool, self.device)


@dataclass(frozen=True)
class Consumer:
    """One ``status.reservedFor[]`` entry."""

    resource: str
    name: str
    uid: str = ""
    api_group: str = ""


@dataclass(frozen=True)
class ResourceClaim:
    name: str
    namespace: str
    uid: str
    api_version: str
    spec: ClaimSpec
    allocation: tuple[AllocatedDevice, ...] | None = None  # None: not allocated
    reserved_for: tuple[Consumer, ...] = ()
    # status.allocation.nodeSelector: the nodes the allocated devices can be used on; () when every node.
    allocation_nodes: tuple[NodeSelectorTerm, ...] = ()
    # Who made it for which pod: the controlling owner's uid, and the pod's spec.resourceClaims entry it
    # serves (the resource.kubernetes.io/pod-claim-name annotation the claim controller writes).
    controller_uid: str = ""
    pod_claim_name: str = ""
    deleting: bool = False  # metadata.deletionTimestamp is set


@dataclass(frozen=True)
class ResourceClaimTemplate:
    name: str
    namespace: str
    api_version: str
    spec: ClaimSpec


def allocated_devices(claims: Iterable[ResourceClaim]) -> frozenset[DeviceRef]:
    """Every device some claim's ``status.allocation`` holds: what no other claim may get."""
    return frozenset(d.ref for c in claims if c.allocation for d in c.allocation)


# --- Reading ----------------------------------------------------------------------------------------------


class _Reader:
    """Typed field access that reports the object and the path of whatever is wrong."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name

    def fail(self, path: str, problem: str) -> ClaimError:
        return ClaimError(self.kind, self.name, path, problem)

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"must be an object, not {type(value).__name__}")
        return value

    def items(self, parent: Mapping[str, Any], key: str, path: str) -> list[Any]:
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(f"{path}.{key}", f"must be a list, not {type(value).__name__}")
        return value

    def string(self, parent: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str:
        value = parent.get(key)
        if value is None or value == "":
            if required:
                raise self.fail(f"{path}.{key}", "is required")
            return ""
        if not isinstance(value, str):
            raise self.fail(f"{path}.{key}", f"must be a string, not {type(value).__name__}")
        return value

    def strings(self, parent: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
        values = self.items(parent, key, path)
        for index, value in enumerate(values):
            if not isinstance(value, str) or not value:
                raise self.fail(f"{path}.{key}[{index}]", "must be a non-empty string")
        return tuple(values)

    def integer(self, parent: Mapping[str, Any], key: str, path: str) -> int | None:
        value = parent.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(f"{path}.{key}", f"must be an integer, not {type(value).__name__}")
        return value

    def boolean(self, parent: Mapping[str, Any], key: str, path: str) -> bool:
        value = parent.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(f"{path}.{key}", f"must be true or false, not {value!r}")
        return value


def _start(obj: Any, kind: str) -> tuple[_Reader, Mapping[str, Any], str]:
    if not isinstance(obj, Mapping):
        raise ClaimError(kind, "?", "(object)", f"must be an object, not {type(obj).__name__}")
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    reader = _Reader(kind, name if isinstance(name, str) and name else "?")
    if not isinstance(metadata, Mapping):
        raise reader.fail("metadata", "is required")
    reader.string(metadata, "name", "metadata")
    if obj.get("kind") != kind:
        raise reader.fail("kind", f"must be {kind}, not {obj.get('kind')!r}")
    api_version = obj.get("apiVersion")
    if api_version not in API_VERSIONS:
        raise reader.fail("apiVersion", f"{api_version!r} is not one of {', '.join(sorted(API_VERSIONS))}")
    return reader, metadata, str(api_version)


def parse_device_class(obj: Any) -> DeviceClass:
    """A decoded DeviceClass: its CEL selectors (in order) and opaque configs."""
    reader, metadata, _ = _start(obj, "DeviceClass")
    spec = reader.mapping(obj.get("spec", {}), "spec")
    selectors = _selectors(reader, spec, "spec")
    config = tuple(
        _opaque(reader, reader.mapping(entry, f"spec.config[{i}]"), f"spec.config[{i}]")
        for i, entry in enumerate(reader.items(spec, "config", "spec"))
    )
    return DeviceClass(name=str(metadata["name"]), selectors=selectors, config=config)


def parse_resource_claim(obj: Any) -> ResourceClaim:
    """A decoded ResourceClaim: spec and, where present, ``status.allocation`` and ``status.reservedFor``."""
    reader, metadata, api_version = _start(obj, "ResourceClaim")
    spec = _claim_spec(reader, obj.get("spec"), "spec", api_version)
    status = reader.mapping(obj.get("status") or {}, "status")
    allocation = None
    allocation_nodes: tuple[NodeSelectorTerm, ...] = ()
    if status.get("allocation") is not None:
        allocated = reader.mapping(status["allocation"], "status.allocation")
        allocation = _allocation(reader, allocated)
        if allocated.get("nodeSelector") is not None:
            allocation_nodes = _allocation_nodes(reader, allocated["nodeSelector"])
    reserved = tuple(
        _consumer(reader, reader.mapping(entry, f"status.reservedFor[{i}]"), f"status.reservedFor[{i}]")
        for i, entry in enumerate(reader.items(status, "reservedFor", "status"))
    )
    return ResourceClaim(
        name=str(metadata["name"]),
        namespace=reader.string(metadata, "namespace", "metadata", required=False),
        uid=reader.string(metadata, "uid", "metadata", required=False),
        api_version=api_version,
        spec=spec,
        allocation=allocation,
        reserved_for=reserved,
        allocation_nodes=allocation_nodes,
        controller_uid=_controller_uid(reader, metadata),
        pod_claim_name=str((metadata.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION, "")),
        deleting=metadata.get("deletionTimestamp") is not None,
    )


def parse_resource_claim_template(obj: Any) -> ResourceClaimTemplate:
    """A decoded ResourceClaimTemplate: the claim spec under ``spec.spec``."""
    reader, metadata, api_version = _start(obj, "ResourceClaimTemplate")
    outer = reader.mapping(obj.get("spec"), "spec")
    return ResourceClaimTemplate(
        name=str(metadata["name"]),
        namespace=reader.string(metadata, "namespace", "metadata", required=False),
        api_version=api_version,
        spec=_claim_spec(reader, outer.get("spec"), "spec.spec", api_version),
    )


def claim_from_template(template: ResourceClaimTemplate, *, name: str, uid: str = "") -> ResourceClaim:
    """The claim the ResourceClaim controller would create from ``template`` (unallocated)."""
    return ResourceClaim(name, template.namespace, uid, template.api_version, template.spec)


def _claim_spec(reader: _Reader, value: Any, path: str, api_version: str) -> ClaimSpec:
    spec = reader.mapping(value, path)
    devices = reader.mapping(spec.get("devices") or {}, f"{path}.devices")
    where = f"{path}.devices"
    requests = tuple(
        _request(reader, reader.mapping(entry, f"{where}.requests[{i}]"), f"{where}.requests[{i}]", api_version)
        for i, entry in enumerate(reader.items(devices, "requests", where))
    )
    names = [r.name for r in requests]
    for index, request_name in enumerate(names):
        if request_name in names[:index]:
            raise reader.fail(f"{where}.requests[{index}].name", f"{request_name!r} is used twice")
    constraints = tuple(
        _constraint(reader, reader.mapping(entry, f"{where}.constraints[{i}]"), f"{where}.constraints[{i}]")
        for i, entry in enumerate(reader.items(devices, "constraints", where))
    )
    config = tuple(
        ClaimConfig(
            requests=reader.strings(reader.mapping(entry, f"{where}.config[{i}]"), "requests", f"{where}.config[{i}]"),
            opaque=_opaque(reader, entry, f"{where}.config[{i}]"),
        )
        for i, entry in enumerate(reader.items(devices, "config", where))
    )
    return ClaimSpec(requests=requests, constraints=constraints, config=config)


def _request(reader: _Reader, entry: Mapping[str, Any], path: str, api_version: str) -> DeviceRequest:
    name = reader.string(entry, "name", path)
    alternatives = reader.items(entry, "firstAvailable", path)
    if api_version in _NESTED_VERSIONS:
        exactly = entry.get("exactly")
        if (exactly is None) == (not alternatives):
            raise reader.fail(path, "must set exactly one of exactly, firstAvailable")
        if exactly is not None:
            where = f"{path}.exactly"
            return DeviceRequest(name, exactly=_exact(reader, reader.mapping(exactly, where), where))
    elif not alternatives:
        return DeviceRequest(name, exactly=_exact(reader, entry, path))
    elif entry.get("deviceClassName"):
        raise reader.fail(path, "must not set deviceClassName together with firstAvailable")
    subrequests = []
    for index, alternative in enumerate(alternatives):
        where = f"{path}.firstAvailable[{index}]"
        sub = reader.mapping(alternative, where)
        subrequests.append(SubRequest(reader.string(sub, "name", where), _exact(reader, sub, where)))
    return DeviceRequest(name, first_available=tuple(subrequests))


def _exact(reader: _Reader, entry: Mapping[str, Any], path: str) -> ExactRequest:
    mode_text = entry.get("allocationMode") or AllocationMode.EXACT_COUNT.value
    if mode_text not in {m.value for m in AllocationMode}:
        raise reader.fail(f"{path}.allocationMode", f"{mode_text!r} is not ExactCount or All")
    mode = AllocationMode(mode_text)
    count = reader.integer(entry, "count", path)
    if mode is AllocationMode.ALL and count is not None:
        raise reader.fail(f"{path}.count", "must not be set with allocationMode All")
    if count is not None and count < 1:
        raise reader.fail(f"{path}.count", f"must be at least 1, not {count}")
    capacity = reader.mapping((entry.get("capacity") or {}), f"{path}.capacity")
    wanted = reader.mapping(capacity.get("requests") or {}, f"{path}.capacity.requests")
    return ExactRequest(
        device_class_name=reader.string(entry, "deviceClassName", path),
        selectors=_selectors(reader, entry, path),
        allocation_mode=mode,
        count=1 if count is None else count,
        admin_access=reader.boolean(entry, "adminAccess", path),
        tolerations=tuple(
            _toleration(reader, reader.mapping(t, f"{path}.tolerations[{i}]"), f"{path}.tolerations[{i}]")
            for i, t in enumerate(reader.items(entry, "tolerations", path))
        ),
        capacity_requests=tuple(sorted((str(k), str(v)) for k, v in wanted.items())),
    )


def _selectors(reader: _Reader, parent: Mapping[str, Any], path: str) -> tuple[str, ...]:
    expressions = []
    for index, entry in enumerate(reader.items(parent, "selectors", path)):
        where = f"{path}.selectors[{index}]"
        cel = reader.mapping(reader.mapping(entry, where).get("cel"), f"{where}.cel")
        expressions.append(reader.string(cel, "expression", f"{where}.cel"))
    return tuple(expressions)


def _toleration(reader: _Reader, entry: Mapping[str, Any], path: str) -> Toleration:
    operator = reader.string(entry, "operator", path, required=False) or "Equal"
    if operator not in {"Equal", "Exists"}:
        raise reader.fail(f"{path}.operator", f"{operator!r} is not Equal or Exists")
    value = reader.string(entry, "value", path, required=False)
    if operator == "Exists" and value:
        raise reader.fail(f"{path}.value", "must be empty with operator Exists")
    return Toleration(
        key=reader.string(entry, "key", path, required=False),
        operator=operator,
        value=value,
        effect=reader.string(entry, "effect", path, required=False),
        toleration_seconds=reader.integer(entry, "tolerationSeconds", path),
    )


def _constraint(reader: _Reader, entry: Mapping[str, Any], path: str) -> DeviceConstraint:
    requests = reader.strings(entry, "requests", path)
    match = reader.string(entry, "matchAttribute", path, required=False)
    distinct = reader.string(entry, "distinctAttribute", path, required=False)
    if bool(match) == bool(distinct):
        raise reader.fail(path, "must set exactly one of matchAttribute, distinctAttribute")
    key = "matchAttribute" if match else "distinctAttribute"
    name = _qualified(reader, match or distinct, f"{path}.{key}")
    return DeviceConstraint(
        requests=requests,
        match_attribute=name if match else None,
        distinct_attribute=None if match else name,
    )


def _qualified(reader: _Reader, text: str, path: str) -> QualifiedName:
    domain, slash, id = text.partition("/")
    if not slash or not domain or not id or "/" in id:
        raise reader.fail(path, f"{text!r} is not a fully qualified name <domain>/<id>")
    return QualifiedName(domain, id)


def _opaque(reader: _Reader, entry: Any, path: str) -> OpaqueConfig:
    opaque = reader.mapping(reader.mapping(entry, path).get("opaque"), f"{path}.opaque")
    if "parameters" not in opaque:
        raise reader.fail(f"{path}.opaque.parameters", "is required")
    return OpaqueConfig(driver=reader.string(opaque, "driver", f"{path}.opaque"), parameters=opaque["parameters"])


def _allocation(reader: _Reader, allocation: Mapping[str, Any]) -> tuple[AllocatedDevice, ...]:
    devices = reader.mapping(allocation.get("devices") or {}, "status.allocation.devices")
    results = []
    for index, entry in enumerate(reader.items(devices, "results", "status.allocation.devices")):
        where = f"status.allocation.devices.results[{index}]"
        result = reader.mapping(entry, where)
        results.append(
            AllocatedDevice(
                request=reader.string(result, "request", where),
                driver=reader.string(result, "driver", where),
                pool=reader.string(result, "pool", where),
                device=reader.string(result, "device", where),
            )
        )
    return tuple(results)


def _allocation_nodes(reader: _Reader, value: Any) -> tuple[NodeSelectorTerm, ...]:
    try:
        return node_selector_terms(value, "status.allocation.nodeSelector")
    except SliceError as error:
        raise reader.fail("status.allocation.nodeSelector", error.problem) from None


def _controller_uid(reader: _Reader, metadata: Mapping[str, Any]) -> str:
    for index, owner in enumerate(reader.items(metadata, "ownerReferences", "metadata")):
        entry = reader.mapping(owner, f"metadata.ownerReferences[{index}]")
        if entry.get("controller") is True:
            return reader.string(entry, "uid", f"metadata.ownerReferences[{index}]", required=False)
    return ""


def _consumer(reader: _Reader, entry: Mapping[str, Any], path: str) -> Consumer:
    return Consumer(
        resource=reader.string(entry, "resource", path),
        name=reader.string(entry, "name", path),
        uid=reader.string(entry, "uid", path, required=False),
        api_group=reader.string(entry, "apiGroup", path, required=False),
    )
