"""A NodeResourceTopology that KubeNexus did not write (Node Feature Discovery's nfd-topology-updater, or any
writer that follows the NRT API's conventions), read into the agent's model with what it tells; pure.

What such an object carries (kubernetes-sigs/node-feature-discovery, pkg/resourcemonitor/
noderesourcesaggregator.go ``Aggregate`` and pkg/nfd-topology-updater ``updateNodeResourceTopology``), and
so what the service learns of the node:

* one zone of type ``Node`` per NUMA cell, named ``node-<id>``; its ``costs`` (entries ``node-<id>``) are
  the SLIT distances; its ``resources`` each give ``capacity``, ``allocatable`` and ``available`` (what
  the pods' exclusive allocations leave: the kubelet's PodResources view, as the agent reads it);
* the attributes ``topologyManagerPolicy`` and ``topologyManagerScope`` (when absent: the deprecated
  ``topologyPolicies``, whose single-numa-node values are read back; else the kubelet's defaults), and the
  pods fingerprint, with which the index knows whether ``available`` already accounts for the bound pods.

What it does not carry, and the service then does without: GPU identities, NVLink and PCIe paths (GPUs
are a count per cell, placed by count: no GPU index is predicted), HMAT bandwidth, the CPU ids and core
layout, and the CPU and memory managers' policies. The managers are taken as ``static`` and ``Static``
wherever the Topology Manager aligns anything (its policy is not ``none``), which is what the NRT
scheduler plugin assumes too (scheduler-plugins' NodeResourceTopologyMatch aligns a Guaranteed pod's CPUs
and memory); with policy ``none`` nothing is aligned. Zones of other types (``GPU``, ``NIC``, a writer's
own) are left out.

``decode_foreign_nrt`` returns the model with a warning (``SOURCE``) that says all this in one sentence,
which every placement on the node repeats (``ClusterIndex.node_notes``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kubenexus.topology.json_codec import TopologyDecodeError
from kubenexus.topology.model import (
    DiscoveryWarning,
    Distances,
    KubeletSettings,
    Machine,
    NodeTopology,
    NumaCell,
    ResourceAmount,
    ZoneResources,
)
from kubenexus.topology.nrt import (
    FINGERPRINT_ATTRIBUTE,
    FINGERPRINT_METHOD_ATTRIBUTE,
    KIND,
    POLICY_ATTRIBUTE,
    SCOPE_ATTRIBUTE,
    ZONE_NODE,
    attribute_map,
    nrt_name,
    nrt_writers,
)
from placement.core.quantity import QuantityError, exact_quantity
from placement.core.topology_manager import TopologyPolicy
from placement.core.vocabulary import CPU, MEMORY

SOURCE = "nrt"

_ZONE_NAME = re.compile(r"node-(0|[1-9][0-9]{0,3})")
_SCOPES = ("container", "pod")
# The deprecated ``topologyPolicies`` values (noderesourcetopology-api v1alpha2 TopologyManagerPolicy).
_DEPRECATED_POLICIES = {
    "SingleNUMANodeContainerLevel": ("single-numa-node", "container"),
    "SingleNUMANodePodLevel": ("single-numa-node", "pod"),
    "Restricted": ("restricted", "container"),
    "RestrictedContainerLevel": ("restricted", "container"),
    "RestrictedPodLevel": ("restricted", "pod"),
    "BestEffort": ("best-effort", "container"),
    "BestEffortContainerLevel": ("best-effort", "container"),
    "BestEffortPodLevel": ("best-effort", "pod"),
    "None": ("none", "container"),
}
_MAX_ZONES = 1024  # NUMA cells; the agent's own limit on a host is far below


def decode_foreign_nrt(obj: Mapping[str, Any]) -> NodeTopology:
    """The NUMA cells, their amounts and distances and the kubelet's alignment policy an NRT written by
    another tells; ``TopologyDecodeError`` saying what is wrong with a malformed one."""
    name = nrt_name(obj)
    where = f"{KIND} {name}"
    zones = obj.get("zones")
    if not isinstance(zones, list):
        raise TopologyDecodeError(f"{where}: zones must be a list")
    if len(zones) > _MAX_ZONES:
        raise TopologyDecodeError(f"{where}: {len(zones)} zones, more than the {_MAX_ZONES} accepted")
    cells: dict[int, tuple[ZoneResources, dict[int, int]]] = {}
    for position, zone in enumerate(zones):
        if not isinstance(zone, Mapping):
            raise TopologyDecodeError(f"{where}: zones[{position}] must be an object")
        if zone.get("type") != ZONE_NODE:
            continue  # a GPU, NIC or writer-specific zone: not a NUMA cell
        cell = _cell_id(zone.get("name"), f"{where}: zones[{position}].name")
        if cell in cells:
            raise TopologyDecodeError(f"{where}: zone node-{cell} appears twice")
        zone_where = f"{where}: zone node-{cell}"
        cells[cell] = (ZoneResources(cell, _resources(zone.get("resources"), zone_where)), _costs(zone, zone_where))
    if not cells:
        raise TopologyDecodeError(f"{where}: no zone of type {ZONE_NODE} named node-<id>: no NUMA cell to read")
    ids = tuple(sorted(cells))
    attributes = attribute_map(obj.get("attributes"), f"{where}: attributes")
    kubelet = _kubelet(attributes, obj.get("topologyPolicies"), where)
    threads = sum(_amount(zone, CPU, "capacity") for zone, _ in cells.values())
    writers = nrt_writers(obj)
    return NodeTopology(
        machine=Machine(None, None, None, None, threads, (), ()),
        numa_cells=tuple(NumaCell(i, (), _amount(cells[i][0], MEMORY, "capacity") or None) for i in ids),
        distances=_distances(ids, {i: cells[i][1] for i in ids}),
        kubelet=kubelet,
        zone_resources=tuple(cells[i][0] for i in ids),
        pods_fingerprint=attributes.get(FINGERPRINT_ATTRIBUTE),
        pods_fingerprint_method=attributes.get(FINGERPRINT_METHOD_ATTRIBUTE),
        warnings=(DiscoveryWarning(SOURCE, _note(name, writers)),),
    )


def _note(name: str, writers: tuple[str, ...]) -> str:
    by = f"written by {', '.join(writers)}" if writers else "not written by KubeNexus"
    return (
        f"node {name}: topology from its NodeResourceTopology ({by}, no KubeNexus agent report): NUMA cells, "
        "their amounts and distances only; GPUs placed by count per cell (no NVLink, PCIe or GPU index), "
        "no memory bandwidth, CPU and memory managers taken as static"
    )


def _cell_id(name: Any, where: str) -> int:
    match = _ZONE_NAME.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise TopologyDecodeError(f"{where}: {name!r} is not a NUMA zone name; accepted: node-<id>")
    return int(match.group(1))


def _resources(resources: Any, where: str) -> tuple[ResourceAmount, ...]:
    if resources is None:
        return ()
    if not isinstance(resources, list):
        raise TopologyDecodeError(f"{where}: resources must be a list")
    amounts: dict[str, ResourceAmount] = {}
    for position, resource in enumerate(resources):
        resource_where = f"{where}: resources[{position}]"
        name = resource.get("name") if isinstance(resource, Mapping) else None
        if not isinstance(name, str) or not name:
            raise TopologyDecodeError(f"{resource_where}: expected an object with a name")
        if name in amounts:
            raise TopologyDecodeError(f"{where}: resource {name} appears twice")
        assert isinstance(resource, Mapping)
        capacity, allocatable, available = (
            _quantity(resource.get(key), f"{resource_where} ({name}).{key}")
            for key in ("capacity", "allocatable", "available")
        )
        # As the kubelet's view is kept by the agent: nothing above what is allocatable, nor above capacity.
        allocatable = min(allocatable, capacity)
        amounts[name] = ResourceAmount(name, capacity, allocatable, min(available, allocatable))
    return tuple(amounts[name] for name in sorted(amounts))


def _quantity(value: Any, where: str) -> int:
    """A whole, non-negative amount (CPUs, bytes, devices): what the NRT API's IntOrString quantities hold."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TopologyDecodeError(f"{where}: expected a quantity, found {value!r}")
    try:
        amount = exact_quantity(str(value).strip())
    except QuantityError as error:
        raise TopologyDecodeError(f"{where}: {error}") from None
    if amount < 0:
        raise TopologyDecodeError(f"{where}: {value!r} is negative")
    return int(amount)  # a fraction of a unit (a writer's "1500m" devices) rounds down


def _amount(zone: ZoneResources, resource: str, field: str) -> int:
    found = next((r for r in zone.resources if r.name == resource), None)
    return 0 if found is None else int(getattr(found, field))


def _costs(zone: Mapping[str, Any], where: str) -> dict[int, int]:
    costs = zone.get("costs")
    if costs is None:
        return {}
    if not isinstance(costs, list):
        raise TopologyDecodeError(f"{where}: costs must be a list")
    result: dict[int, int] = {}
    for position, cost in enumerate(costs):
        value = cost.get("value") if isinstance(cost, Mapping) else None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 256:
            raise TopologyDecodeError(f"{where}: costs[{position}].value {value!r} is not a distance (1-255)")
        assert isinstance(cost, Mapping)
        result[_cell_id(cost.get("name"), f"{where}: costs[{position}].name")] = value
    return result


def _distances(ids: tuple[int, ...], costs: Mapping[int, Mapping[int, int]]) -> Distances | None:
    """The SLIT matrix, when every cell gives its cost to every cell; else none (the distances are unknown)."""
    if not all(set(costs[i]) >= set(ids) for i in ids):
        return None
    return Distances(ids, tuple(tuple(costs[a][b] for b in ids) for a in ids))


def _kubelet(attributes: Mapping[str, str], deprecated: Any, where: str) -> KubeletSettings:
    policy, scope = attributes.get(POLICY_ATTRIBUTE), attributes.get(SCOPE_ATTRIBUTE)
    if policy is None and isinstance(deprecated, list) and deprecated:
        policy, implied_scope = _DEPRECATED_POLICIES.get(str(deprecated[0]), (None, None))
        scope = scope or implied_scope
    policy, scope = policy or TopologyPolicy.NONE.value, scope or "container"
    if policy not in {p.value for p in TopologyPolicy}:
        accepted = " | ".join(p.value for p in TopologyPolicy)
        raise TopologyDecodeError(f"{where}: attribute {POLICY_ATTRIBUTE}={policy!r} is unknown; accepted: {accepted}")
    if scope not in _SCOPES:
        accepted = " | ".join(_SCOPES)
        raise TopologyDecodeError(f"{where}: attribute {SCOPE_ATTRIBUTE}={scope!r} is unknown; accepted: {accepted}")
    aligned = policy != TopologyPolicy.NONE.value
    return KubeletSettings(
        topology_manager_policy=policy,
        topology_manager_scope=scope,
        cpu_manager_policy="static" if aligned else "none",
        memory_manager_policy="Static" if aligned else "None",
    )
