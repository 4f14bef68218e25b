"""Tying DRA GPU devices to the agent's ``NodeTopology``, or inferring what the driver's attributes imply.

The agent knows NVLink, PCIe paths, NUMA distances and CPU affinity; the DRA driver names the devices an
allocation hands out. The join is by PCI bus id (both normalised) and else by UUID; a MIG device joins
its parent GPU. Where a node publishes slices but the agent has not reported, ``infer_topology`` groups
the devices by PCIe root complex and NUMA node, which is all the driver tells.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubenexus.topology.model import Gpu, NodeTopology
from placement.core.dra.gpu_devices import DraGpu, GpuKind, normalize_pci_bus_id


class MatchedBy(enum.StrEnum):
    PCI_BUS_ID = "pciBusID"
    UUID = "uuid"
    PARENT_UUID = "parentUUID"  # a MIG device, joined to the GPU it is carved from


@dataclass(frozen=True)
class GpuMatch:
    device: DraGpu
    gpu: Gpu  # the agent's GPU (the parent GPU for a MIG device)
    matched_by: MatchedBy


@dataclass(frozen=True)
class TopologyJoin:
    matches: tuple[GpuMatch, ...]
    unmatched_devices: tuple[DraGpu, ...]  # published by the driver, unknown to the agent
    unmatched_gpus: tuple[Gpu, ...]  # reported by the agent, behind no DRA device

    def gpu_for(self, device: str) -> Gpu | None:
        """The agent's GPU behind the DRA device named ``device`` (its pool's device name)."""
        return next((m.gpu for m in self.matches if m.device.ref.device == device), None)


def join_topology(devices: Sequence[DraGpu], topology: NodeTopology) -> TopologyJoin:
    """Map each DRA GPU device of one node to the agent's GPU: by PCI bus id, else UUID (MIG: parent UUID)."""
    by_bus = {b: g for g in topology.gpus if (b := normalize_pci_bus_id(g.pci_bus_id)) is not None}
    by_uuid = {g.uuid: g for g in topology.gpus if g.uuid}
    matches: list[GpuMatch] = []
    unmatched: list[DraGpu] = []
    for device in devices:
        match = _match(device, by_bus, by_uuid)
        if match is None:
            unmatched.append(device)
        else:
            matches.append(match)
    used = {id(m.gpu) for m in matches}
    return TopologyJoin(
        matches=tuple(matches),
        unmatched_devices=tuple(unmatched),
        unmatched_gpus=tuple(g for g in topology.gpus if id(g) not in used),
    )


def _match(device: DraGpu, by_bus: dict[str, Gpu], by_uuid: dict[str, Gpu]) -> GpuMatch | None:
    if device.pci_bus_id is not None and device.pci_bus_id in by_bus:
        return GpuMatch(device, by_bus[device.pci_bus_id], MatchedBy.PCI_BUS_ID)
    if device.kind is GpuKind.MIG:
        parent = by_uuid.get(device.parent_uuid) if device.parent_uuid else None
        return GpuMatch(device, parent, MatchedBy.PARENT_UUID) if parent else None
    found = by_uuid.get(device.uuid) if device.uuid else None
    return GpuMatch(device, found, MatchedBy.UUID) if found else None


@dataclass(frozen=True)
class PcieGroup:
    """Devices under one PCIe root complex; ``numa_node`` when every one of them publishes the same."""

    pcie_root: str | None  # None: the devices that did not publish one
    devices: tuple[str, ...]  # device names, in publication order
    numa_node: int | None


@dataclass(frozen=True)
class InferredTopology:
    """What a node's DRA attributes imply about its GPUs when the agent has not reported the node."""

    node_name: str
    groups: tuple[PcieGroup, ...]  # by PCIe root, in order of first appearance
    numa_nodes: tuple[tuple[int, tuple[str, ...]], ...]  # NUMA node -> device names, where published
    note: str

    def same_pcie_root(self, a: str, b: str) -> bool:
        """Both devices sit under one published PCIe root (False when either root is unknown)."""
        return any(g.pcie_root is not None and a in g.devices and b in g.devices for g in self.groups)


def infer_topology(node_name: str, devices: Iterable[DraGpu]) -> InferredTopology:
    """Group one node's DRA GPU devices by ``pcieRoot`` and by ``numaNode``, with a note saying so."""
    listed = tuple(devices)
    roots: dict[str | None, list[DraGpu]] = {}
    numa: dict[int, list[str]] = {}
    for device in listed:
        roots.setdefault(device.pcie_root, []).append(device)
        if device.numa_node is not None:
            numa.setdefault(device.numa_node, []).append(device.ref.device)
    groups = tuple(
        PcieGroup(pcie_root=root, devices=tuple(d.ref.device for d in members), numa_node=_common_numa(members))
        for root, members in roots.items()
    )
    published = ["resource.kubernetes.io/pcieRoot"] if any(d.pcie_root for d in listed) else []
    published += ["resource.kubernetes.io/numaNode"] if numa else []
    drivers = sorted({d.ref.driver for d in listed})
    note = (
        f"node {node_name}: no KubeNexus agent report; GPU topology inferred from the "
        f"{', '.join(drivers) or 'DRA'} driver's attributes ({', '.join(published) or 'none published'}):"
        f" {len(listed)} devices under {sum(1 for r in roots if r is not None)} PCIe roots"
        f"{'' if numa else ', NUMA nodes not published'}; no NVLink, distance or CPU affinity data"
    )
    return InferredTopology(
        node_name=node_name,
        groups=groups,
        numa_nodes=tuple(sorted((n, tuple(names)) for n, names in numa.items())),
        note=note,
    )


def _common_numa(members: Sequence[DraGpu]) -> int | None:
    nodes = {d.numa_node for d in members}
    return nodes.pop() if len(nodes) == 1 else None
