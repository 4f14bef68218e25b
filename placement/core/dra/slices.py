"""Reading ResourceSlice objects (decoded JSON or YAML) into ``placement.core.dra.device_types``.

``resource.k8s.io/v1`` and ``v1beta2`` carry a device's fields directly; ``v1beta1`` and ``v1alpha3`` nest
them under ``basic:`` (and ``v1alpha3`` writes capacities as bare quantities instead of ``{value: ...}``).
Anything the reader cannot trust raises ``SliceError`` naming the object and the field path; fields this
model does not use (binding conditions, request policies, managed fields) are ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement.core.constraints.constraint_types import NodeSelectorTerm, Operator, Requirement
from placement.core.dra.device_types import (
    Attribute,
    AttributeKind,
    CounterConsumption,
    CounterSet,
    Device,
    DeviceTaint,
    NodeSelection,
    PoolRef,
    QualifiedName,
    Quantity,
    ResourceSlice,
    Scalar,
    SliceError,
    Version,
)
from placement.core.quantity import quantity_value

GROUP = "resource.k8s.io"
FLAT_VERSIONS = frozenset({f"{GROUP}/v1", f"{GROUP}/v1beta2"})
BASIC_VERSIONS = frozenset({f"{GROUP}/v1beta1", f"{GROUP}/v1alpha3"})
_BARE_CAPACITY_VERSIONS = frozenset({f"{GROUP}/v1alpha3"})
# semver.org 2.0.0, as blang/semver's Parse (which the API server validates version attributes with) accepts.
_NUMBER = r"(0|[1-9][0-9]*)"
_IDENTIFIER = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
_SEMVER = re.compile(
    rf"{_NUMBER}\.{_NUMBER}\.{_NUMBER}(?:-({_IDENTIFIER}(?:\.{_IDENTIFIER})*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
_SCALAR_TYPES: dict[AttributeKind, type] = {
    AttributeKind.INT: int,
    AttributeKind.BOOL: bool,
    AttributeKind.STRING: str,
    AttributeKind.VERSION: str,
}
_ELEMENT_KIND = {
    AttributeKind.INTS: AttributeKind.INT,
    AttributeKind.BOOLS: AttributeKind.BOOL,
    AttributeKind.STRINGS: AttributeKind.STRING,
    AttributeKind.VERSIONS: AttributeKind.VERSION,
}


@dataclass(frozen=True)
class Where:
    """The object being read and the path of the field in it, for ``SliceError``."""

    object_name: str
    path: str = ""

    def __truediv__(self, field: str | int) -> Where:
        """A field (``.name``) or a list position (``[3]``)."""
        if isinstance(field, int):
            return Where(self.object_name, f"{self.path}[{field}]")
        return Where(self.object_name, f"{self.path}.{field}" if self.path else field)

    def key(self, name: str) -> Where:
        """An entry of a map (``['resource.kubernetes.io/pciBusID']``)."""
        return Where(self.object_name, f"{self.path}[{name!r}]")

    def error(self, problem: str) -> SliceError:
        return SliceError(self.object_name, self.path or "(object)", problem)


def parse_resource_slice(obj: Any) -> ResourceSlice:
    """One ResourceSlice object of ``resource.k8s.io/v1``, ``v1beta2``, ``v1beta1`` or ``v1alpha3``."""
    top = Where("<unnamed>")
    if not isinstance(obj, Mapping):
        raise top.error(f"expected an object, got {type(obj).__name__}")
    metadata = _mapping(obj.get("metadata", {}), top / "metadata")
    name = metadata.get("name") or metadata.get("generateName") or "<unnamed>"
    where = Where(str(name))
    api_version = _string(obj.get("apiVersion"), where / "apiVersion")
    if api_version not in FLAT_VERSIONS | BASIC_VERSIONS:
        raise (where / "apiVersion").error(
            f"{api_version!r} is not a ResourceSlice version this reader knows"
            f" (accepted: {', '.join(sorted(FLAT_VERSIONS | BASIC_VERSIONS))})"
        )
    if obj.get("kind", "ResourceSlice") != "ResourceSlice":
        raise (where / "kind").error(f"expected ResourceSlice, got {obj.get('kind')!r}")
    spec = _mapping(obj.get("spec"), where / "spec")
    driver = _string(spec.get("driver"), where / "spec" / "driver")
    per_device = _bool(spec.get("perDeviceNodeSelection", False), where / "spec" / "perDeviceNodeSelection")
    selection = _node_selection(spec, where / "spec")
    if per_device and selection.is_set:
        raise (where / "spec").error("perDeviceNodeSelection excludes nodeName, allNodes and nodeSelector")
    devices = _list(spec.get("devices", []), where / "spec" / "devices")
    parsed = tuple(
        parse_device(d, driver=driver, api_version=api_version, where=where / "spec" / "devices" / i)
        for i, d in enumerate(devices)
    )
    if not per_device and any(d.node_selection.is_set for d in parsed):
        raise (where / "spec" / "devices").error("a device names its own nodes only with perDeviceNodeSelection")
    counters = _list(spec.get("sharedCounters", []), where / "spec" / "sharedCounters")
    return ResourceSlice(
        name=str(name),
        api_version=api_version,
        driver=driver,
        pool=_pool(spec.get("pool"), where / "spec" / "pool"),
        node_selection=selection,
        per_device_node_selection=per_device,
        shared_counters=tuple(
            _counter_set(c, where / "spec" / "sharedCounters" / i, api_version) for i, c in enumerate(counters)
        ),
        devices=parsed,
    )


def parse_device(obj: Any, *, driver: str, api_version: str, where: Where) -> Device:
    """One entry of ``spec.devices``; also for device entries quoted on their own (documentation, issues)."""
    entry = _mapping(obj, where)
    name = _string(entry.get("name"), where / "name")
    if api_version in BASIC_VERSIONS:
        if "basic" not in entry:
            raise (where / "basic").error(f"{api_version} devices carry their fields under `basic`")
        where = where / "basic"
        body = _mapping(entry["basic"], where)
    else:
        if "basic" in entry:
            raise (where / "basic").error(f"{api_version} devices carry their fields directly, not under `basic`")
        body = entry
    capacities = _mapping(body.get("capacity", {}), where / "capacity")
    consumes = _list(body.get("consumesCounters", []), where / "consumesCounters")
    taints = _list(body.get("taints", []), where / "taints")
    return Device(
        name=name,
        attributes=parse_attributes(body.get("attributes", {}), driver=driver, where=where / "attributes"),
        capacity=tuple(
            sorted(
                (
                    _qualified(key, driver, where / "capacity"),
                    _capacity(value, (where / "capacity").key(str(key)), api_version),
                )
                for key, value in capacities.items()
            )
        ),
        consumes_counters=tuple(
            _consumption(c, where / "consumesCounters" / i, api_version) for i, c in enumerate(consumes)
        ),
        taints=tuple(_taint(t, where / "taints" / i) for i, t in enumerate(taints)),
        allow_multiple_allocations=_bool(
            body.get("allowMultipleAllocations", False), where / "allowMultipleAllocations"
        ),
        node_selection=_node_selection(body, where),
    )


def parse_attributes(obj: Any, *, driver: str, where: Where) -> tuple[tuple[QualifiedName, Attribute], ...]:
    """A device's ``attributes`` map: each name qualified (bare names under ``driver``), each value typed."""
    attributes = _mapping(obj, where)
    return tuple(
        sorted(
            (_qualified(key, driver, where), _attribute(value, where.key(str(key))))
            for key, value in attributes.items()
        )
    )


def parse_version(text: str, where: Where) -> Version:
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise where.error(f"{text!r} is not a semantic version (semver.org 2.0.0, e.g. 580.105.8)")
    major, minor, patch, prerelease, build = match.groups()
    return Version(int(major), int(minor), int(patch), prerelease or "", build or "", text)


def quantity(value: Any, where: Where) -> Quantity:
    """A non-negative Kubernetes quantity (``81559Mi``, ``"14"``, ``1e3``) in base units."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise where.error(f"expected a quantity, got {value!r}")
    amount = quantity_value(value)
    if amount is None:
        raise where.error(f"{value!r} is not a Kubernetes quantity")
    if amount < 0:
        raise where.error(f"{value!r} must not be negative")
    return Quantity(value=math.ceil(amount), text=str(value))


# --- parts -----------------------------------------------------------------------------------------------


def _attribute(value: Any, where: Where) -> Attribute:
    """``DeviceAttribute``: exactly one of int, bool, string, version or their list forms."""
    members = _mapping(value, where)
    known = [k for k in members if k in AttributeKind.__members__.values()]
    unknown = sorted(set(members) - set(known))
    if unknown or len(known) != 1:
        accepted = ", ".join(AttributeKind)
        raise where.error(f"must set exactly one of {accepted}; got {', '.join(sorted(members)) or 'nothing'}")
    kind = AttributeKind(known[0])
    if kind in _ELEMENT_KIND:
        items = _list(members[kind], where / kind.value)
        element = _ELEMENT_KIND[kind]
        return Attribute(kind, tuple(_scalar(item, element, where / kind.value / i) for i, item in enumerate(items)))
    return Attribute(kind, _scalar(members[kind], kind, where / kind.value))


def _scalar(value: Any, kind: AttributeKind, where: Where) -> Scalar:
    expected = _SCALAR_TYPES[kind]
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise where.error(f"expected {kind.value}, got {value!r}")
    if kind is AttributeKind.VERSION:
        return parse_version(str(value), where)
    if isinstance(value, int | str):  # bool is an int
        return value
    raise where.error(f"expected {kind.value}, got {value!r}")


def _capacity(value: Any, where: Where, api_version: str) -> Quantity:
    """``DeviceCapacity`` (``{value: <quantity>, requestPolicy: ...}``); a bare quantity in v1alpha3."""
    if api_version in _BARE_CAPACITY_VERSIONS:
        return quantity(value, where)
    if not isinstance(value, Mapping):
        raise where.error(f"expected {{value: <quantity>}} in {api_version}, got {value!r}")
    if "value" not in value:
        raise (where / "value").error("is required")
    return quantity(value["value"], where / "value")


def _counters(value: Any, where: Where, api_version: str) -> tuple[tuple[str, Quantity], ...]:
    counters = _mapping(value, where)
    return tuple(sorted((str(k), _capacity(v, where.key(str(k)), api_version)) for k, v in counters.items()))


def _counter_set(value: Any, where: Where, api_version: str) -> CounterSet:
    item = _mapping(value, where)
    return CounterSet(
        name=_string(item.get("name"), where / "name"),
        counters=_counters(item.get("counters"), where / "counters", api_version),
    )


def _consumption(value: Any, where: Where, api_version: str) -> CounterConsumption:
    item = _mapping(value, where)
    return CounterConsumption(
        counter_set=_string(item.get("counterSet"), where / "counterSet"),
        counters=_counters(item.get("counters"), where / "counters", api_version),
    )


def _taint(value: Any, where: Where) -> DeviceTaint:
    item = _mapping(value, where)
    return DeviceTaint(
        key=_string(item.get("key"), where / "key"),
        effect=_string(item.get("effect"), where / "effect"),
        value=_string(item.get("value", ""), where / "value", empty_ok=True),
    )


def _pool(value: Any, where: Where) -> PoolRef:
    pool = _mapping(value, where)
    generation = _int(pool.get("generation", 0), where / "generation")
    count = _int(pool.get("resourceSliceCount"), where / "resourceSliceCount")
    if generation < 0:
        raise (where / "generation").error(f"must not be negative, got {generation}")
    if count < 1:
        raise (where / "resourceSliceCount").error(f"must be at least 1, got {count}")
    return PoolRef(name=_string(pool.get("name"), where / "name"), generation=generation, resource_slice_count=count)


def _node_selection(body: Mapping[str, Any], where: Where) -> NodeSelection:
    """At most one of ``nodeName``, ``allNodes``, ``nodeSelector`` (a slice with none serves no node)."""
    node_name = body.get("nodeName")
    all_nodes = _bool(body.get("allNodes", False), where / "allNodes")
    selector = body.get("nodeSelector")
    given = [n for n, v in (("nodeName", node_name), ("allNodes", all_nodes), ("nodeSelector", selector)) if v]
    if len(given) > 1:
        raise where.error(f"at most one of nodeName, allNodes, nodeSelector may be set; got {', '.join(given)}")
    return NodeSelection(
        node_name=_string(node_name, where / "nodeName") if node_name else None,
        all_nodes=all_nodes,
        node_selector=_node_selector(selector, where / "nodeSelector") if selector else None,
    )


def node_selector_terms(value: Any, path: str) -> tuple[NodeSelectorTerm, ...]:
    """A decoded ``NodeSelector``'s terms, as a slice or a claim's ``status.allocation`` carries it."""
    return _node_selector(value, Where("", path))


def _node_selector(value: Any, where: Where) -> tuple[NodeSelectorTerm, ...]:
    selector = _mapping(value, where)
    terms = _list(selector.get("nodeSelectorTerms"), where / "nodeSelectorTerms")
    if not terms:
        raise (where / "nodeSelectorTerms").error("must have at least one term")
    return tuple(_term(t, where / "nodeSelectorTerms" / i) for i, t in enumerate(terms))


def _term(value: Any, where: Where) -> NodeSelectorTerm:
    term = _mapping(value, where)
    expressions = _list(term.get("matchExpressions", []), where / "matchExpressions")
    fields = _list(term.get("matchFields", []), where / "matchFields")
    return NodeSelectorTerm(
        match_expressions=tuple(_requirement(r, where / "matchExpressions" / i) for i, r in enumerate(expressions)),
        match_fields=tuple(_requirement(r, where / "matchFields" / i) for i, r in enumerate(fields)),
    )


def _requirement(value: Any, where: Where) -> Requirement:
    item = _mapping(value, where)
    operator = _string(item.get("operator"), where / "operator")
    if operator not in Operator.__members__.values():
        raise (where / "operator").error(f"{operator!r} is not one of {', '.join(Operator)}")
    values = _list(item.get("values", []), where / "values")
    return Requirement(
        key=_string(item.get("key"), where / "key"),
        operator=Operator(operator),
        values=tuple(_string(v, where / "values" / i, empty_ok=True) for i, v in enumerate(values)),
    )


def _qualified(key: Any, driver: str, where: Where) -> QualifiedName:
    """``QualifiedName``: ``<id>`` (the driver's domain) or ``<domain>/<id>``."""
    text = _string(key, where)
    domain, slash, id = text.rpartition("/")
    if slash and (not domain or not id or "/" in domain):
        raise where.key(text).error("a qualified name is <id> or <domain>/<id>")
    return QualifiedName(domain if slash else driver, id)


# --- JSON shapes -----------------------------------------------------------------------------------------


def _mapping(value: Any, where: Where) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise where.error(f"expected an object, got {'nothing' if value is None else repr(value)}")
    return value


def _list(value: Any, where: Where) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(f"expected a list, got {value!r}")
    return value


def _string(value: Any, where: Where, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty_ok):
        raise where.error("is required" if value is None else f"expected a non-empty string, got {value!r}")
    return value


def _int(value: Any, where: Where) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.error("is required" if value is None else f"expected an integer, got {value!r}")
    return value


def _bool(value: Any, where: Where) -> bool:
    if not isinstance(value, bool):
        raise where.error(f"expected true or false, got {value!r}")
    return value
