"""DRA end to end: the standalone scheduler allocates ResourceClaims itself, against kmock's Kubernetes emulator.

Nodes are published by the agent's own code; their GPUs by ResourceSlices in NVIDIA's ``resource.k8s.io/v1``
format (tests/dra_fixtures, authored from the driver's published shape); claims and pods are created
through the API; a replica (feed, engine, gRPC server, binder) schedules. What each test asserts is what a
user sees: the claims' ``status.allocation`` and ``reservedFor``, the Bindings, the pods' Events. Every
object written is checked against the official schemas of Kubernetes 1.34 and later. Verified against the
emulator only: no real kube-apiserver, kube-scheduler or kubelet runs here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubenexus.topology.model import NodeTopology
from placement.core.annotations import ASSIGNED_CELLS_KEY, GROUP_NAME_KEY, MIN_AVAILABLE_KEY
from placement.core.pods import pod_spec_from_object
from tests.conftest import wait_until
from tests.dra_cluster import (
    CLAIMS,
    DEVICE_CLASSES,
    SLICES,
    TEMPLATES,
    DraEmulator,
    claiming_pod,
    fixture_slice,
    gpu_claim,
    gpu_class,
    joined_topology,
)
from tests.kube_emulator import NODES
from tests.machines.node_topologies import nvswitch_node, pcie_node
from tests.shim_cluster import PODS, Replica, pod_object, publish_nodes, replica
from tests.test_shim_e2e import create_pods

pytestmark = pytest.mark.slow

NVSWITCH = "alloc_nvswitch_8gpu.yaml"
PCIE = "alloc_pcie_bridged_8gpu.yaml"


@dataclass
class Scene:
    emulator: DraEmulator
    kubeconfig: Path
    leader: Replica | None = None

    def nodes(self, machines: dict[str, tuple[str, NodeTopology]]) -> None:
        """Publish each node's topology (the agent) and its GPUs' ResourceSlice (the DRA driver)."""
        slices = {name: fixture_slice(file, name) for name, (file, _) in machines.items()}
        publish_nodes(
            self.emulator,
            self.kubeconfig,
            {name: joined_topology(agent, slices[name]) for name, (_, agent) in machines.items()},
        )
        for resource_slice in slices.values():
            self.emulator.put_object(SLICES, resource_slice)

    def start(self) -> Replica:
        self.leader = replica(self.emulator, self.kubeconfig, "placement-0").start()
        return self.leader

    def allocated(self, claim: str) -> list[str]:
        """The devices the claim's ``status.allocation`` names (empty while unallocated)."""
        status = self.emulator.claim("default", claim).get("status") or {}
        return [r["device"] for r in ((status.get("allocation") or {}).get("devices") or {}).get("results", [])]


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    with DraEmulator() as emulator:
        made = Scene(emulator, emulator.write_kubeconfig(tmp_path / "kubeconfig"))
        emulator.put_object(DEVICE_CLASSES, gpu_class())
        try:
            yield made
        finally:
            if made.leader is not None:
                made.leader.kill()


def bound(emulator: DraEmulator) -> dict[str, str]:
    return {name: node for _, name, node in emulator.bindings}


def test_four_gpus_come_from_the_numa_cell_the_kubelet_pins_the_pods_cpus_to(scene: Scene) -> None:
    """8x H100 NVSwitch node, GPUs 0-3 on cell 0 and 4-7 on cell 1. A pod holding 80 of cell 0's 96 CPUs
    makes the kubelet pin the next Guaranteed pod (32 CPUs) to cell 1: its 4 devices are GPUs 4-7, where
    the stable allocator's first fit takes gpu-0..3 (cell 0, published first)."""
    scene.nodes({"a": (NVSWITCH, nvswitch_node())})
    scene.emulator.put_object(CLAIMS, gpu_claim("four", 4))
    scene.start()
    create_pods(scene.kubeconfig, [pod_object("filler", cpus=80)])
    wait_until(lambda: "filler" in bound(scene.emulator), what="the filler to bind")
    create_pods(scene.kubeconfig, [claiming_pod("trainer", "four", cpus=32)])
    wait_until(lambda: "trainer" in bound(scene.emulator), what="the trainer to bind")

    assert scene.emulator.pod("default", "trainer")["metadata"]["annotations"][ASSIGNED_CELLS_KEY] == "1"
    assert sorted(scene.allocated("four")) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    claim = scene.emulator.claim("default", "four")
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": "uid-trainer"}]
    assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["a"]
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    wait_until(
        lambda: any(e["reason"] == "Scheduled" for e in scene.emulator.events("trainer")), what="the Scheduled event"
    )
    (scheduled,) = [e["message"] for e in scene.emulator.events("trainer") if e["reason"] == "Scheduled"]
    assert "claim four: devices gpu-4,gpu-5,gpu-6,gpu-7" in scheduled


def test_a_pcie_node_gives_two_nvlink_bridged_pairs(scene: Scene) -> None:
    """8x A100 PCIe with NVLink bridges on pairs 0-2, 1-3, 4-5, 6-7, published out of order: first fit
    would take gpu-0, gpu-4, gpu-1, gpu-6 (no two bridged); ours takes two bridged pairs on one cell."""
    scene.nodes({"p": (PCIE, pcie_node())})
    scene.emulator.put_object(CLAIMS, gpu_claim("four", 4))
    scene.start()
    create_pods(scene.kubeconfig, [claiming_pod("trainer", "four", cpus=8)])
    wait_until(lambda: "trainer" in bound(scene.emulator), what="the trainer to bind")

    devices = {int(name.removeprefix("gpu-")) for name in scene.allocated("four")}
    bridged = ({0, 2}, {1, 3}, {4, 5}, {6, 7})
    assert len(devices) == 4
    assert sum(1 for pair in bridged if pair <= devices) == 2


def test_a_shared_claim_is_allocated_once_and_reserved_for_each_pod(scene: Scene) -> None:
    scene.nodes({"a": (NVSWITCH, nvswitch_node()), "b": (NVSWITCH, nvswitch_node())})
    scene.emulator.put_object(CLAIMS, gpu_claim("shared", 2))
    scene.start()
    create_pods(scene.kubeconfig, [claiming_pod("first", "shared")])
    wait_until(lambda: "first" in bound(scene.emulator), what="the first pod to bind")
    allocation = scene.emulator.claim("default", "shared")["status"]["allocation"]
    create_pods(scene.kubeconfig, [claiming_pod("second", "shared")])
    wait_until(lambda: "second" in bound(scene.emulator), what="the second pod to bind")

    claim = scene.emulator.claim("default", "shared")
    assert claim["status"]["allocation"] == allocation  # allocated once, kept
    assert [c["name"] for c in claim["status"]["reservedFor"]] == ["first", "second"]
    assert bound(scene.emulator)["second"] == bound(scene.emulator)["first"]  # where its devices are


def test_a_claim_whose_selector_matches_nothing_pends_with_a_clear_reason(scene: Scene) -> None:
    scene.nodes({"a": (NVSWITCH, nvswitch_node())})
    b200 = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA B200')"
    scene.emulator.put_object(CLAIMS, gpu_claim("b200", 1, selector=b200))
    scene.start()
    create_pods(scene.kubeconfig, [claiming_pod("trainer", "b200")])

    def told() -> list[str]:
        return [e["message"] for e in scene.emulator.events("trainer") if e["reason"] == "FailedScheduling"]

    wait_until(lambda: bool(told()), what="a FailedScheduling event")
    (message,) = told()
    assert message.startswith("0/1 nodes are available: 1 cannot allocate all claims: ")
    assert "claim default/b200, request gpus: no device of the node matches the selectors" in message
    assert scene.allocated("b200") == []
    assert "trainer" not in bound(scene.emulator)


def test_a_gang_of_eight_four_gpu_claims_is_allocated_all_or_nothing(scene: Scene) -> None:
    """Four 8-GPU nodes hold 8 members of 4 GPUs exactly. While another claim holds 4 GPUs of one node,
    7 members fit: none is bound and no member's claim is allocated. Once that claim goes, all 8 are."""
    scene.nodes({name: (NVSWITCH, nvswitch_node()) for name in ("a", "b", "c", "d")})
    held = gpu_claim("held", 4)
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "d", "device": f"gpu-{i}"} for i in range(4)
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["d"]}]}]
            },
        }
    }
    scene.emulator.put_object(CLAIMS, held)
    members: list[dict[str, Any]] = []
    for index in range(8):
        scene.emulator.put_object(CLAIMS, gpu_claim(f"member-{index}", 4))
        pod = claiming_pod(f"worker-{index}", f"member-{index}", cpus=8)
        pod["metadata"]["labels"] = {GROUP_NAME_KEY: "job", MIN_AVAILABLE_KEY: "8"}
        members.append(pod)
    leader = scene.start()
    create_pods(scene.kubeconfig, members)

    wait_until(
        lambda: any(e["reason"] == "WaitingForPodGroup" for e in scene.emulator.events("worker-0")),
        what="the group to wait",
    )
    wait_until(lambda: leader.engine.gangs_waiting() == 1, what="the coordinator to hold the group waiting")
    assert bound(scene.emulator) == {}
    assert all(scene.allocated(f"member-{index}") == [] for index in range(8))

    scene.emulator.delete_object(CLAIMS, "held", "default")
    wait_until(lambda: len(bound(scene.emulator)) == 8, what="the whole group to bind")
    devices = [(bound(scene.emulator)[f"worker-{i}"], d) for i in range(8) for d in scene.allocated(f"member-{i}")]
    assert len(devices) == len(set(devices)) == 32  # every GPU of the four nodes, none twice
    for index in range(8):
        gpus = {int(d.removeprefix("gpu-")) for d in scene.allocated(f"member-{index}")}
        assert gpus in ({0, 1, 2, 3}, {4, 5, 6, 7})  # one NUMA cell each


def test_a_node_with_slices_but_no_agent_report_schedules_on_what_its_driver_publishes(scene: Scene) -> None:
    """No agent on the node: it is scheduled on the Node's allocatable CPUs and memory and its DRA devices,
    their PCIe roots read from the driver's attributes (here GPUs 0-4, 1-5, 2-6, 3-7 share a root, so a
    pair on one root is not the first two published); Explain says the topology was inferred."""
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "bare", "labels": {"kubernetes.io/hostname": "bare"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "190", "memory": "1900Gi", "pods": "110"}},
    }
    scene.emulator.put_object(NODES, node)
    resource_slice = fixture_slice(NVSWITCH, "bare")
    for device in resource_slice["spec"]["devices"]:
        index = int(device["name"].removeprefix("gpu-"))
        device["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": f"pci0000:{index % 4:02x}"}
    scene.emulator.put_object(SLICES, resource_slice)
    scene.emulator.put_object(CLAIMS, gpu_claim("pair", 2))
    leader = scene.start()
    wait_until(lambda: "bare" in leader.index.node_names(), what="the node to be scheduled on its devices")
    create_pods(scene.kubeconfig, [claiming_pod("trainer", "pair", cpus=8)])
    wait_until(lambda: "trainer" in bound(scene.emulator), what="the trainer to bind")

    assert bound(scene.emulator)["trainer"] == "bare"
    devices = sorted(int(name.removeprefix("gpu-")) for name in scene.allocated("pair"))
    assert devices[1] - devices[0] == 4  # under one PCIe root
    scene.emulator.put_object(CLAIMS, gpu_claim("other", 2))
    wait_until(lambda: leader.index.dra.claim("default", "other") is not None, what="the second claim")
    other = leader.engine.explain(pod_spec_from_object(claiming_pod("other-pod", "other")), "bare")
    assert other.placement is not None
    (claim,) = other.placement.claims
    inferred = "node bare: no KubeNexus agent report; GPU topology inferred from the gpu.nvidia.com driver's"
    assert any(line.startswith(inferred) for line in claim.why)


def test_a_claim_made_from_a_template_is_found_and_allocated(scene: Scene) -> None:
    """The pod names a ResourceClaimTemplate; what the claim controller does is done here by hand: a claim
    owned by the pod, annotated with the pod's claim entry, and named in the pod's status. The binder then
    allocates that claim and binds the pod."""
    scene.nodes({"a": (NVSWITCH, nvswitch_node())})
    template: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus", "namespace": "default"},
        "spec": {"spec": gpu_claim("unused", 2)["spec"]},
    }
    scene.emulator.put_object(TEMPLATES, template)
    scene.start()
    pod = claiming_pod("trainer", "unused", cpus=8)
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    create_pods(scene.kubeconfig, [pod])
    claim = gpu_claim("trainer-gpus-x7k2p", 2)
    claim["metadata"] |= {
        "annotations": {"resource.kubernetes.io/pod-claim-name": "gpus"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "trainer", "uid": "uid-trainer", "controller": True}
        ],
    }
    scene.emulator.put_object(CLAIMS, claim)
    made = scene.emulator.pod("default", "trainer")
    made["status"] = {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": claim["metadata"]["name"]}],
    }
    scene.emulator.put_object(PODS, made)
    wait_until(lambda: "trainer" in bound(scene.emulator), what="the trainer to bind")

    assert len(scene.allocated("trainer-gpus-x7k2p")) == 2
    reserved = scene.emulator.claim("default", "trainer-gpus-x7k2p")["status"]["reservedFor"]
    assert reserved == [{"resource": "pods", "name": "trainer", "uid": "uid-trainer"}]
