"""NodeResourceTopology objects as Node Feature Discovery's nfd-topology-updater writes them.

The shape follows kubernetes-sigs/node-feature-discovery: pkg/resourcemonitor/noderesourcesaggregator.go
(``Aggregate``: a ``Node`` zone ``node-<id>`` per NUMA cell with ``costs`` to every cell and, per resource,
``capacity`` / ``allocatable`` / ``available`` as DecimalSI quantities; CPU capacity counts the reserved CPUs
too) and pkg/nfd-topology-updater/nfd-topology-updater.go (``updateNodeResourceTopology``: the attributes
``topologyManagerPolicy``, ``topologyManagerScope`` and the pods fingerprint, the deprecated
``topologyPolicies``, an owner reference to its Namespace, applied server-side by the field manager
``node-feature-discovery-topology-updater`` with ``Force``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NFD_FIELD_MANAGER = "node-feature-discovery-topology-updater"
NFD_NAMESPACE = "node-feature-discovery"
GIB = 1 << 30
_DEPRECATED = {
    ("single-numa-node", "container"): "SingleNUMANodeContainerLevel",
    ("single-numa-node", "pod"): "SingleNUMANodePodLevel",
}


def nfd_nrt(
    node: str,
    *,
    cells: int = 2,
    cpus: int = 32,
    reserved_cpus: Sequence[int] = (2, 0),
    memory_gib: int = 256,
    gpus: int = 4,
    used: Mapping[int, Mapping[str, int]] | None = None,
    policy: str = "single-numa-node",
    scope: str = "container",
    fingerprint: str | None = None,
    namespace_uid: str = "00000000-0000-0000-0000-000000000001",
) -> dict[str, Any]:
    """The NRT NFD applies for ``node``: per cell ``cpus`` CPUs (``reserved_cpus[cell]`` of them reserved),
    ``memory_gib`` of memory, 4 1Gi hugepages and ``gpus`` nvidia.com/gpu; ``used[cell]`` is what pods hold
    exclusively there (taken off ``available``)."""
    zones = []
    for cell in range(cells):
        reserved = reserved_cpus[cell] if cell < len(reserved_cpus) else 0
        taken = dict((used or {}).get(cell, {}))
        amounts = {
            "cpu": (cpus, cpus - reserved),
            "memory": (memory_gib * GIB, (memory_gib - 4) * GIB),
            "hugepages-1Gi": (4 * GIB, 4 * GIB),
            "nvidia.com/gpu": (gpus, gpus),
        }
        zones.append(
            {
                "name": f"node-{cell}",
                "type": "Node",
                "costs": [{"name": f"node-{other}", "value": 10 if other == cell else 21} for other in range(cells)],
                "resources": [
                    {
                        "name": name,
                        "capacity": str(capacity),
                        "allocatable": str(allocatable),
                        "available": str(allocatable - taken.get(name, 0)),
                    }
                    for name, (capacity, allocatable) in amounts.items()
                    if capacity
                ],
            }
        )
    attributes = [{"name": "topologyManagerPolicy", "value": policy}, {"name": "topologyManagerScope", "value": scope}]
    if fingerprint is not None:
        attributes.append({"name": "nodeTopologyPodsFingerprint", "value": fingerprint})
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {
            "name": node,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": NFD_NAMESPACE, "uid": namespace_uid}],
        },
        "zones": zones,
        "attributes": attributes,
        "topologyPolicies": [_DEPRECATED.get((policy, scope), "None")],
    }


def as_applied(nrt: Mapping[str, Any]) -> dict[str, Any]:
    """What the API server returns for it: NFD's field manager in ``managedFields``, and its bookkeeping."""
    metadata = {
        **nrt["metadata"],
        "uid": "7c1d",
        "resourceVersion": "42",
        "managedFields": [{"manager": NFD_FIELD_MANAGER, "operation": "Apply", "apiVersion": nrt["apiVersion"]}],
    }
    return {**nrt, "metadata": metadata}
