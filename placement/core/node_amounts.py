"""What a node has, as the views show it (GetNodeTopology, ListNodes): its amounts per resource, per NUMA cell, and
its kubelet's resource managers. The cluster index fills them; the service and the API read them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Amount:
    """One resource of a cell or node: cpu in CPUs, memory and hugepages in bytes, devices in counts."""

    name: str
    total: float
    free: float


@dataclass(frozen=True)
class CellState:
    """One NUMA cell as the index holds it (``ClusterIndex.cells``)."""

    id: int
    resources: tuple[Amount, ...]  # those the cell has
    local_read_bandwidth_mbps: float
    local_distance: float  # SLIT distance to itself; 0 where unknown
    claimed: bool  # a pod placed by us uses it
    isolated: bool  # an isolated pod placed by us holds it


@dataclass(frozen=True)
class KubeletPolicy:
    """The node's resource managers as it reported them."""

    topology_manager_policy: str
    topology_manager_scope: str
    cpu_manager_static: bool
    memory_manager_static: bool
