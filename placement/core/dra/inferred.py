"""A node that publishes DRA devices but has no KubeNexus agent report: what the service schedules it with.

* ``scheduling_topology``: what the index needs, from the Node object alone: its allocatable CPUs and
  memory in one cell whose NUMA layout is unknown, no kubelet policy (so no pinning is predicted) and no
  GPUs (they are DRA devices, not the device plugin's ``nvidia.com/gpu``). A warning says where it came from.
* ``gpu_topology``: what best fit scores such a node's GPUs with (``join.infer_topology``'s reading of the
  driver's attributes turned into the agent's model): one ``Gpu`` per full GPU device, in publication
  order, with the published PCI bus id, UUID and NUMA node; each pair linked ``PHB`` when both sit under
  one published PCIe root (one host bridge), ``NODE`` when both publish the same NUMA node, else ``SYS``.
  No NVLink: the driver does not publish it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from kubenexus.topology.model import DeviceLink, DiscoveryWarning, Gpu, Machine, NodeTopology, NumaCell, PathKind
from placement.core.dra.gpu_devices import DraGpu, GpuKind
from placement.core.dra.join import InferredTopology

SOURCE = "dra"


def scheduling_topology(node_name: str, cpus: int, memory_bytes: int) -> NodeTopology:
    """The Node's allocatable ``cpus`` (whole CPUs) and ``memory_bytes`` in one cell of unknown layout."""
    online = tuple(range(max(cpus, 0)))
    return NodeTopology(
        machine=Machine(None, None, None, None, len(online), online, ()),
        numa_cells=(NumaCell(0, online, memory_bytes),),
        warnings=(
            DiscoveryWarning(
                SOURCE,
                f"node {node_name}: no KubeNexus agent report; scheduled on the Node's allocatable CPUs and "
                "memory (NUMA layout unknown) and its DRA devices",
            ),
        ),
    )


def gpu_topology(inferred: InferredTopology, devices: Sequence[DraGpu]) -> NodeTopology:
    """The node's full GPUs as the agent's model, from what their driver publishes (module docstring)."""
    gpus = [d for d in devices if d.kind is GpuKind.GPU]
    model = tuple(
        Gpu(
            index=position,
            pci_bus_id=device.pci_bus_id or "",
            uuid=device.uuid,
            name=device.product_name,
            memory_bytes=device.memory_bytes,
            numa_node=device.numa_node,
        )
        for position, device in enumerate(gpus)
    )
    links = tuple(
        DeviceLink(f"GPU{a}", f"GPU{b}", _path(inferred, gpus[a], gpus[b]))
        for a, b in combinations(range(len(gpus)), 2)
    )
    return NodeTopology(
        machine=Machine(None, None, None, None, 0, (), ()),
        numa_cells=(),
        gpus=model,
        links=links,
        gpu_source=SOURCE,
        warnings=(DiscoveryWarning(SOURCE, inferred.note),),
    )


def _path(inferred: InferredTopology, a: DraGpu, b: DraGpu) -> PathKind:
    if inferred.same_pcie_root(a.ref.device, b.ref.device):
        return PathKind.PHB
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return PathKind.NODE
    return PathKind.SYS
