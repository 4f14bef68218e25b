"""Nodes whose GPUs are DRA devices and pods holding them through allocated claims: the scenes in which
preemption and CheckEviction free a victim's devices (tests/placement/state/test_preemption.py,
tests/placement/service/plugins/preemption/test_eviction_check.py).

Each node is an 8-GPU NVSwitch machine publishing ``tests/dra_fixtures/alloc_nvswitch_8gpu.yaml`` (devices
``gpu-0`` .. ``gpu-7``, pool named after the node), the agent's topology joined to it by GPU UUID.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from placement.core.constraints.constraint_types import NodeFacts, PlacedPod
from placement.core.dra.claims import parse_device_class, parse_resource_claim
from placement.core.dra.slices import parse_resource_slice
from placement.core.pods import PodUsage
from placement.core.vocabulary import demand_of
from placement.state.cluster_index import ClusterIndex
from tests.dra_cluster import NVIDIA, fixture_slice, gpu_claim, gpu_class, joined_topology
from tests.gang_fixtures import pod
from tests.machines.node_topologies import nvswitch_node

NVSWITCH = "alloc_nvswitch_8gpu.yaml"


def dra_index(*nodes: str) -> ClusterIndex:
    """An index of NVSwitch nodes whose GPUs are published as DRA devices, with the GPU DeviceClass."""
    index = ClusterIndex()
    for node in nodes:
        resource_slice = fixture_slice(NVSWITCH, node)
        index.upsert_topology(node, joined_topology(nvswitch_node(), resource_slice))
        index.facts.set_node(NodeFacts(node, labels=(("kubernetes.io/hostname", node),)))
        index.dra.set_slice(node, parse_resource_slice(resource_slice))
    index.dra.set_class(NVIDIA, parse_device_class(gpu_class()))
    return index


def allocated_claim(
    name: str, node: str, gpus: Sequence[int], *, namespace: str, reserved_for: Sequence[str]
) -> dict[str, Any]:
    """A claim for ``len(gpus)`` GPUs, allocated those GPUs of ``node`` and reserved for the pods named."""
    claim = gpu_claim(name, len(gpus), namespace=namespace)
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": NVIDIA, "pool": node, "device": f"gpu-{gpu}"} for gpu in gpus]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        },
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": f"uid-{pod_name}"} for pod_name in reserved_for],
    }
    return claim


def place_claiming(
    index: ClusterIndex,
    name: str,
    node: str,
    *,
    priority: int,
    namespace: str,
    gpus: Sequence[int] = (),
) -> None:
    """A running pod (uid ``uid-<name>``) on ``node``; with ``gpus``, its own claim ``<name>-gpus`` holds
    them (a claim it shares is set with ``allocated_claim``, naming it among ``reserved_for``)."""
    demand = demand_of(pod(cpus=8, memory_gib=32))
    index.upsert_pod(PodUsage(namespace, name, node, demand))
    index.facts.put_pod(PlacedPod(namespace, name, node, priority=priority, uid=f"uid-{name}"))
    if gpus:
        own = allocated_claim(f"{name}-gpus", node, gpus, namespace=namespace, reserved_for=[name])
        index.dra.set_claim(parse_resource_claim(own))
