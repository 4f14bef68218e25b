"""The frozen vocabulary of a DRA ResourceSlice (``resource.k8s.io``), whichever API version carried it.

Names follow the API (``k8s.io/api/resource/v1/types.go``). Attribute and capacity names are kept as
qualified names: a bare name a driver publishes (``productName``) is filed under the driver's own domain,
as the scheduler's CEL environment and ``matchAttribute`` see it; a qualified name
(``resource.kubernetes.io/pciBusID``) under its own domain. Maps are tuples of pairs, sorted by name, so
that every value here is hashable and compares by content.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from placement.core.constraints.constraint_types import NodeSelectorTerm

STANDARD_DOMAIN = "resource.kubernetes.io"  # the standard attributes' prefix (DRA-lib deviceattribute)


class SliceError(ValueError):
    """A ResourceSlice (or a part of one) that cannot be read; names the object and the field path."""

    def __init__(self, object_name: str, path: str, problem: str) -> None:
        super().__init__(f"ResourceSlice {object_name!r}: {path}: {problem}")
        self.object_name = object_name
        self.path = path
        self.problem = problem


@dataclass(frozen=True, order=True)
class QualifiedName:
    """``<domain>/<id>``; the domain of a bare name is the publishing driver's."""

    domain: str
    id: str

    def __str__(self) -> str:
        return f"{self.domain}/{self.id}"


@dataclass(frozen=True)
class Version:
    """A semantic version attribute: the parsed triple for comparisons, the published text for display."""

    major: int
    minor: int
    patch: int
    prerelease: str = ""
    build: str = ""
    text: str = ""

    @property
    def triple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)


class AttributeKind(enum.StrEnum):
    """The member of ``DeviceAttribute`` that was set; the list kinds need DRAListTypeAttributes (1.36)."""

    INT = "int"
    BOOL = "bool"
    STRING = "string"
    VERSION = "version"
    INTS = "ints"
    BOOLS = "bools"
    STRINGS = "strings"
    VERSIONS = "versions"


LIST_KINDS = frozenset({AttributeKind.INTS, AttributeKind.BOOLS, AttributeKind.STRINGS, AttributeKind.VERSIONS})

Scalar = int | bool | str | Version


@dataclass(frozen=True)
class Attribute:
    """One typed attribute value; ``kind`` keeps ``bool`` apart from ``int`` (Python would not)."""

    kind: AttributeKind
    value: Scalar | tuple[Scalar, ...]

    @property
    def elements(self) -> tuple[Scalar, ...]:
        """The value as a set would see it: a scalar is a one-element list (KEP-6072's matching rule)."""
        return self.value if isinstance(self.value, tuple) else (self.value,)


@dataclass(frozen=True)
class Quantity:
    """A Kubernetes quantity in base units (bytes, counts), with the text it was published as.

    ``value`` is exact for whole amounts; a fractional amount is rounded up, as ``Quantity.Value()`` does.
    """

    value: int
    text: str


@dataclass(frozen=True)
class CounterSet:
    """``sharedCounters[]``: amounts that partitionable devices of the pool draw from."""

    name: str
    counters: tuple[tuple[str, Quantity], ...]


@dataclass(frozen=True)
class CounterConsumption:
    """``consumesCounters[]``: what one device draws from one counter set of its pool."""

    counter_set: str
    counters: tuple[tuple[str, Quantity], ...]


@dataclass(frozen=True)
class DeviceTaint:
    key: str
    effect: str  # NoSchedule, NoExecute (None in newer API versions); kept as published
    value: str = ""


@dataclass(frozen=True)
class NodeSelection:
    """Where a slice's (or a device's) devices can be used: one of a node name, all nodes or a selector."""

    node_name: str | None = None
    all_nodes: bool = False
    node_selector: tuple[NodeSelectorTerm, ...] | None = None  # ORed terms

    @property
    def is_set(self) -> bool:
        return self.node_name is not None or self.all_nodes or self.node_selector is not None


@dataclass(frozen=True)
class Device:
    name: str
    attributes: tuple[tuple[QualifiedName, Attribute], ...] = ()
    capacity: tuple[tuple[QualifiedName, Quantity], ...] = ()
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()
    allow_multiple_allocations: bool = False
    node_selection: NodeSelection = NodeSelection()  # only with the slice's perDeviceNodeSelection

    def attribute(self, domain: str, id: str) -> Attribute | None:
        return next((a for name, a in self.attributes if name.domain == domain and name.id == id), None)

    def capacity_of(self, domain: str, id: str) -> Quantity | None:
        return next((q for name, q in self.capacity if name.domain == domain and name.id == id), None)


@dataclass(frozen=True)
class PoolRef:
    name: str
    generation: int
    resource_slice_count: int


@dataclass(frozen=True)
class ResourceSlice:
    name: str  # metadata.name
    api_version: str
    driver: str
    pool: PoolRef
    node_selection: NodeSelection
    per_device_node_selection: bool = False
    shared_counters: tuple[CounterSet, ...] = ()
    devices: tuple[Device, ...] = ()  # in spec order: the scheduler's first fit walks them in this order
