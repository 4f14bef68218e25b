"""The demo cluster's DRA nodes: HGX H100 machines whose GPUs NVIDIA's DRA driver publishes as ResourceSlices.

Each DRA node publishes one ResourceSlice in the driver's ``resource.k8s.io/v1`` format, written here from
the machine's own facts (the agent's topology of it: UUID, product name, PCI bus id, compute capability,
memory): devices ``gpu-<index>`` with the attributes and capacity the driver publishes. The DeviceClass is
the one the driver's Helm chart installs. GPU pods of the demo reach these nodes only through claims: the
nodes carry the taint ``DRA_TAINT`` instead of the device plugin's, and only DRA pods tolerate it.
"""

from __future__ import annotations

from typing import Any

from kubenexus.topology.model import Gpu, NodeTopology
from placement.core.constraints.constraint_types import Taint, TaintEffect

DRIVER = "gpu.nvidia.com"
DRA_FLEET = (("hgx-h100", 2),)  # nodes hgx-h100-dra-<n>
DRA_SUFFIX = "-dra"
DRA_TAINT = Taint("gpu.nvidia.com/dra", TaintEffect.NO_SCHEDULE, "present")
DRA_TOLERATION = {"key": DRA_TAINT.key, "operator": "Exists", "effect": "NoSchedule"}
# The claims the demo's pods use: one for the sample mix, one left unallocated for grpcurl's Explain.
TRAIN_CLAIM = ("train-gpus", 4)
EXPLAIN_CLAIM = ("try-gpus", 2)


def dra_node_names() -> list[tuple[str, str]]:
    """(node name, machine type) of every DRA node."""
    return [(f"{stem}{DRA_SUFFIX}-{n}", stem) for stem, count in DRA_FLEET for n in range(count)]


def gpu_slice(node: str, topology: NodeTopology) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's DRA driver publishes for ``node``'s GPUs."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [_device(gpu) for gpu in topology.gpus],
        },
    }


def _device(gpu: Gpu) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "index": {"int": gpu.index},
        "productName": {"string": gpu.name},
    }
    if gpu.uuid:
        attributes["uuid"] = {"string": gpu.uuid}
    if gpu.pci_bus_id:
        attributes["resource.kubernetes.io/pciBusID"] = {"string": gpu.pci_bus_id.lower()}
    if gpu.compute_capability:
        major, _, minor = gpu.compute_capability.partition(".")
        attributes["cudaComputeCapability"] = {"version": f"{major}.{minor or 0}.0"}
    device: dict[str, Any] = {"name": f"gpu-{gpu.index}", "attributes": attributes}
    if gpu.memory_bytes:
        device["capacity"] = {"memory": {"value": f"{gpu.memory_bytes // 2**20}Mi"}}
    return device


def gpu_device_class() -> dict[str, Any]:
    """The DeviceClass ``gpu.nvidia.com`` as the driver installs it: its full GPUs, no MIG devices."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {
            "selectors": [
                {"cel": {"expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}
            ]
        },
    }


def gpu_claim(namespace: str, name: str, count: int) -> dict[str, Any]:
    exactly = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"demo-claim-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}},
    }
