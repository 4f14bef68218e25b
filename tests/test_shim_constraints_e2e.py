"""The standalone scheduler keeps kube-scheduler's constraints, end to end against kmock's Kubernetes emulator.

Nodes are published by the agent's own code and then labelled, tainted or cordoned through the API as an
admin would; pods are created through the API; a replica (feed, engine, gRPC server, binder) binds them.
What each test asserts is what a user sees: the Bindings the API server received and the pods' Events,
whose messages are kube-scheduler's (``FitError.Error()``: a count per reason, sorted, joined with ", ").
Verified against the emulator only: no real kube-apiserver or kube-scheduler runs here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from placement.core.constraints.model import NodeFacts
from tests.conftest import wait_until
from tests.kube_emulator import NODES
from tests.machines.node_topologies import nvswitch_node
from tests.shim_cluster import PODS, Replica, ShimEmulator, pod_object, publish_nodes, replica
from tests.test_shim_e2e import create_pods

pytestmark = pytest.mark.slow

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATES_GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


@dataclass
class Cluster:
    emulator: ShimEmulator
    kubeconfig: Path
    leader: Replica | None = None

    def create(self, pods: list[dict[str, Any]]) -> None:
        """``kubectl create`` of ``pods``, with the test's own credentials."""
        create_pods(self.kubeconfig, pods)

    def start(self) -> Replica:
        """One placement replica, leading; it has seen every node's zone when this returns."""
        self.leader = replica(self.emulator, self.kubeconfig, "placement-0").start()
        seen(self.leader, "c", lambda facts: (ZONE, "zone-2") in facts.labels)
        return self.leader


@pytest.fixture
def idle_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three 8-GPU nodes: ``a`` and ``b`` in zone-1, ``c`` in zone-2; no scheduler yet."""
    with ShimEmulator() as emulator:
        kubeconfig = emulator.write_kubeconfig(tmp_path / "kubeconfig")
        publish_nodes(emulator, kubeconfig, {name: nvswitch_node() for name in ("a", "b", "c")})
        for name, zone in (("a", "zone-1"), ("b", "zone-1"), ("c", "zone-2")):
            edit_node(emulator, name, labels={ZONE: zone})
        scene = Cluster(emulator, kubeconfig)
        try:
            yield scene
        finally:
            if scene.leader is not None:
                scene.leader.kill()


@pytest.fixture
def cluster(idle_cluster: Cluster) -> Cluster:
    """``idle_cluster`` with its replica leading."""
    idle_cluster.start()
    return idle_cluster


def edit_node(
    emulator: ShimEmulator,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool | None = None,
) -> None:
    """What ``kubectl label``, ``kubectl taint`` and ``kubectl cordon`` write on the Node."""
    node: dict[str, Any] = emulator.node(name)
    node["metadata"]["labels"] = {**node["metadata"].get("labels", {}), **(labels or {})}
    spec = dict(node.get("spec") or {})
    if taints is not None:
        spec["taints"] = taints
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    node["spec"] = spec
    emulator.put_object(NODES, node)


def seen(leader: Replica, name: str, check: Any) -> None:
    """Wait until the replica's feed holds the Node's new facts."""

    def holds() -> bool:
        facts: NodeFacts | None = leader.index.facts.node(name)
        return facts is not None and bool(check(facts))

    wait_until(holds, what=f"the feed to see node {name}'s change")


def pod(name: str, *, gpus: int = 1, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    obj = pod_object(name, gpus=gpus, labels=labels)
    obj["spec"].update(spec)
    return obj


def bound_nodes(emulator: ShimEmulator) -> dict[str, str]:
    return {name: node for _, name, node in emulator.bindings}


def failed_scheduling(emulator: ShimEmulator, name: str) -> list[str]:
    """The FailedScheduling messages, each as kube-scheduler's FitError reads: without the " preemption: ..."
    the binder appends, as kube-scheduler does, once it asked for victims (tests/test_preemption_e2e.py)."""
    return [
        e["message"].partition(" preemption: ")[0] for e in emulator.events(name) if e["reason"] == "FailedScheduling"
    ]


def test_a_tainted_gpu_node_receives_only_tolerating_pods(cluster: Cluster) -> None:
    emulator, leader = cluster.emulator, cluster.leader
    assert leader is not None
    edit_node(emulator, "a", taints=[GPU_TAINT])
    edit_node(emulator, "b", taints=[GPU_TAINT])
    seen(leader, "b", lambda facts: facts.taints)
    plain = [pod(f"plain-{i}", gpus=2) for i in range(4)]
    cluster.create(plain)
    wait_until(lambda: len(emulator.bindings) == 4, what="four bindings")
    assert set(bound_nodes(emulator).values()) == {"c"}, "a pod without the toleration went to a tainted node"

    cluster.create([pod("one-more", gpus=1)])
    wait_until(lambda: failed_scheduling(emulator, "one-more"), what="the FailedScheduling event")
    taint = "node(s) had untolerated taint {nvidia.com/gpu: present}"
    assert failed_scheduling(emulator, "one-more") == [
        f"0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 {taint}."
    ]

    tolerating = [pod(f"tolerating-{i}", gpus=4, tolerations=[TOLERATES_GPU_TAINT]) for i in range(4)]
    cluster.create(tolerating)
    wait_until(lambda: len(emulator.bindings) == 8, what="the tolerating pods' bindings")
    nodes = bound_nodes(emulator)
    assert sorted(nodes[f"tolerating-{i}"] for i in range(4)) == ["a", "a", "b", "b"]
    assert "one-more" not in nodes


def test_a_cordoned_node_receives_nothing(cluster: Cluster) -> None:
    emulator, leader = cluster.emulator, cluster.leader
    assert leader is not None
    edit_node(emulator, "a", unschedulable=True)
    edit_node(emulator, "b", unschedulable=True)
    seen(leader, "b", lambda facts: facts.unschedulable)
    cluster.create([pod(f"p-{i}", gpus=4) for i in range(3)])
    wait_until(lambda: len(emulator.bindings) == 2 and failed_scheduling(emulator, "p-2") != [], what="the outcome")
    assert set(bound_nodes(emulator).values()) == {"c"}
    (message,) = {m for i in range(3) for m in failed_scheduling(emulator, f"p-{i}")}
    assert message == "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) were unschedulable."

    edit_node(emulator, "a", unschedulable=False)  # kubectl uncordon: the waiting pod goes there
    wait_until(lambda: len(emulator.bindings) == 3, what="the binding after uncordon")
    assert sorted(bound_nodes(emulator).values()) == ["a", "c", "c"]


def test_a_gang_whose_members_select_one_zone_lands_only_there_or_waits(
    cluster: Cluster,
) -> None:
    emulator = cluster.emulator
    group = {"pod-group.scheduling.kubenexus.io/name": "train", "pod-group.scheduling.kubenexus.io/min-available": "4"}
    members = [pod(f"z2-{i}", gpus=2, labels=group, nodeSelector={ZONE: "zone-2"}) for i in range(4)]
    cluster.create(members)
    wait_until(lambda: len(emulator.bindings) == 4, what="the zone-2 gang's bindings")
    assert set(bound_nodes(emulator).values()) == {"c"}

    # zone-2 is full now; zone-1 has 16 free GPUs the gang may not use: it waits, nothing is bound.
    group = {**group, "pod-group.scheduling.kubenexus.io/name": "more"}
    more = [pod(f"more-{i}", gpus=2, labels=group, nodeSelector={ZONE: "zone-2"}) for i in range(4)]
    cluster.create(more)

    def planned() -> list[str]:  # the service's reason, once all four members are there
        waiting = [e["message"] for e in emulator.events("more-0") if e["reason"] == "WaitingForPodGroup"]
        return [message for message in waiting if not message.endswith("/4 members")]

    wait_until(planned, what="the service's waiting reason")
    assert len(emulator.bindings) == 4
    assert "node affinity/selector" in planned()[-1], planned()


def test_replicas_with_hostname_anti_affinity_land_on_distinct_nodes(cluster: Cluster) -> None:
    emulator = cluster.emulator
    app = {"app": "web"}
    apart = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": app}, "topologyKey": HOSTNAME}
            ]
        }
    }
    cluster.create([pod(f"web-{i}", labels=app, affinity=apart) for i in range(4)])
    wait_until(
        lambda: len(emulator.bindings) == 3 and any(failed_scheduling(emulator, f"web-{i}") for i in range(4)),
        what="three bindings and one refusal",
    )
    assert sorted(bound_nodes(emulator).values()) == ["a", "b", "c"]
    (unplaced,) = {f"web-{i}" for i in range(4)} - set(bound_nodes(emulator))
    assert failed_scheduling(emulator, unplaced)[-1] == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )


def test_gang_members_with_hostname_anti_affinity_land_on_distinct_nodes(
    cluster: Cluster,
) -> None:
    emulator = cluster.emulator
    labels = {
        "app": "ps",
        "pod-group.scheduling.kubenexus.io/name": "ps",
        "pod-group.scheduling.kubenexus.io/min-available": "3",
    }
    apart = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "ps"}}, "topologyKey": HOSTNAME}
            ]
        }
    }
    cluster.create([pod(f"ps-{i}", labels=labels, affinity=apart) for i in range(3)])
    wait_until(lambda: len(emulator.bindings) == 3, what="the gang's bindings")
    assert sorted(bound_nodes(emulator).values()) == ["a", "b", "c"]


def test_a_pod_whose_node_selector_matches_nothing_pends_with_kube_schedulers_message(
    cluster: Cluster,
) -> None:
    emulator = cluster.emulator
    cluster.create([pod("lost", nodeSelector={ZONE: "zone-9"}), pod("found")])
    wait_until(lambda: failed_scheduling(emulator, "lost") and len(emulator.bindings) == 1, what="the outcome")
    assert failed_scheduling(emulator, "lost") == [
        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    ]
    assert list(bound_nodes(emulator)) == ["found"]


def test_a_gated_pod_waits_until_its_gates_are_removed(cluster: Cluster) -> None:
    emulator = cluster.emulator
    gated = pod("gated", schedulingGates=[{"name": "example.com/quota"}])
    cluster.create([gated, pod("free")])
    wait_until(lambda: len(emulator.bindings) == 1, what="the ungated pod's binding")
    assert list(bound_nodes(emulator)) == ["free"]
    assert emulator.events("gated") == [], "a gated pod is left alone: no event"

    ungated = emulator.pod("default", "gated")
    ungated["spec"] = {k: v for k, v in ungated["spec"].items() if k != "schedulingGates"}
    emulator.put_object(PODS, ungated)  # the quota controller removes its gate
    wait_until(lambda: "gated" in bound_nodes(emulator), what="the binding once ungated")


def test_the_higher_priority_pods_are_placed_first(idle_cluster: Cluster) -> None:
    """kube-scheduler's queue order (PrioritySort): priority, then age. The open node holds two of the three
    pods; the one created first has the lowest priority and is left out."""
    emulator = idle_cluster.emulator
    edit_node(emulator, "a", unschedulable=True)
    edit_node(emulator, "b", unschedulable=True)
    # spec.priority as the API server's Priority admission sets it from the pod's PriorityClass
    pods = [
        pod("batch", gpus=4, priority=0),
        pod("urgent-0", gpus=4, priority=1000),
        pod("urgent-1", gpus=4, priority=1000),
    ]
    idle_cluster.create(pods)
    idle_cluster.start()
    wait_until(lambda: failed_scheduling(emulator, "batch"), what="the low-priority pod's refusal")
    assert bound_nodes(emulator) == {"urgent-0": "c", "urgent-1": "c"}

