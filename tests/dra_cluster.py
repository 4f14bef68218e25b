"""The shim emulator serving ``resource.k8s.io/v1``, and the DRA scene the end-to-end tests set.

ResourceSlices and DeviceClasses are cluster-scoped, ResourceClaims and ResourceClaimTemplates namespaced;
the group's discovery document names v1 only (as a 1.34+ cluster with the beta APIs off). Objects are
checked against the official schemas of the releases that serve them, as every write to the emulator is.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import kmock
import yaml

from kubenexus.topology.model import NodeTopology
from tests.shim_cluster import ShimEmulator, pod_object

FIXTURES = Path(__file__).parent / "dra_fixtures"
SLICES = kmock.resource("resource.k8s.io", "v1", "resourceslices")
DEVICE_CLASSES = kmock.resource("resource.k8s.io", "v1", "deviceclasses")
CLAIMS = kmock.resource("resource.k8s.io", "v1", "resourceclaims")
TEMPLATES = kmock.resource("resource.k8s.io", "v1", "resourceclaimtemplates")
NVIDIA = "gpu.nvidia.com"


class DraEmulator(ShimEmulator):
    """``ShimEmulator`` plus the four resource.k8s.io resources of ``version`` and their group's discovery,
    which names that version only."""

    def __init__(self, *, version: str = "v1") -> None:
        super().__init__()
        self.kmock.oldest_release = "1.34.0"  # resource.k8s.io/v1 went GA in 1.34
        verbs = {"get", "list", "watch", "create", "patch", "delete"}
        for v1, kind, singular, namespaced in (
            (SLICES, "ResourceSlice", "resourceslice", False),
            (DEVICE_CLASSES, "DeviceClass", "deviceclass", False),
            (CLAIMS, "ResourceClaim", "resourceclaim", True),
            (TEMPLATES, "ResourceClaimTemplate", "resourceclaimtemplate", True),
        ):
            resource = kmock.resource(v1.group, version, v1.plural)
            self.kmock.resources[resource] = kmock.ResourceInfo(
                kind=kind, singular=singular, namespaced=namespaced, verbs=verbs
            )
        self.kmock["get /apis/resource.k8s.io"] << {
            "apiVersion": "v1",
            "kind": "APIGroup",
            "name": "resource.k8s.io",
            "versions": [{"groupVersion": f"resource.k8s.io/{version}", "version": version}],
            "preferredVersion": {"groupVersion": f"resource.k8s.io/{version}", "version": version},
        }

    def __enter__(self) -> DraEmulator:
        super().__enter__()
        return self

    def claim(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.kmock.objects[CLAIMS, namespace, name].raw)


def fixture_slice(file: str, node: str) -> dict[str, Any]:
    """An authored slice of tests/dra_fixtures, moved to ``node`` (its pool and name follow the node)."""
    obj: dict[str, Any] = copy.deepcopy(yaml.safe_load((FIXTURES / file).read_text()))
    obj["metadata"]["name"] = f"{node}-{NVIDIA}"
    obj["spec"]["nodeName"] = node
    obj["spec"]["pool"]["name"] = node
    return obj


def joined_topology(agent: NodeTopology, resource_slice: dict[str, Any]) -> NodeTopology:
    """The agent's topology of the machine with the slice's GPU UUIDs (``gpu-N`` is NVML index N): the join key."""
    uuids = {d["name"]: d["attributes"]["uuid"]["string"] for d in resource_slice["spec"]["devices"]}
    return replace(agent, gpus=tuple(replace(g, uuid=uuids[f"gpu-{g.index}"]) for g in agent.gpus))


def gpu_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": NVIDIA},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{NVIDIA}'"}}]},
    }


def gpu_claim(name: str, count: int, *, namespace: str = "default", selector: str = "") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": NVIDIA, "allocationMode": "ExactCount", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-claim-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}},
    }


def claiming_pod(name: str, claim: str, *, cpus: int = 8, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Guaranteed pod (the kubelet pins its CPUs to one NUMA cell) whose GPUs come from ``claim``."""
    obj = pod_object(name, cpus=cpus, memory="32Gi", labels=labels)
    obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return obj
