"""The cluster feed into the scheduling facts: Node objects (labels, taints, cordon, readiness), placed pods,
namespaces, priority classes and claims, through the feed's handlers without a watch. The same objects through
the real API server's lists and watches into the service's answers: tests/cluster/test_cluster_service.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubenexus.topology.labels import encode_node_metadata
from kubenexus.topology.nrt import encode_nrt
from placement.cluster.feed import ClusterFeed
from placement.cluster.objects import (
    BETA_STORAGE_CLASS_KEY,
    SELECTED_NODE_KEY,
    ObjectError,
    claim_source,
    node_facts,
    volume_node_affinity,
)
from placement.core.annotations import RESERVED_NODE_KEY
from placement.core.constraints.constraint_types import (
    ClaimFacts,
    NodeFacts,
    NodeSelectorTerm,
    Operator,
    Requirement,
    Taint,
    TaintEffect,
)
from placement.state.cluster_index import ClusterIndex
from placement.state.reservations import Reservations
from placement.state.scheduling_facts import ABSENT, ClaimSource, SchedulingFacts
from tests.deploy.test_shim_deploy import one
from tests.machines.node_topologies import cpu_node, kubelet
from tests.shim_cluster import pod_object

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
HOSTNAME_IS_A = NodeSelectorTerm(match_expressions=(Requirement("kubernetes.io/hostname", Operator.IN, ("h100-a",)),))


def _feed(index: ClusterIndex) -> ClusterFeed:
    return ClusterFeed(api=None, index=index, reservations=Reservations(index))  # type: ignore[arg-type]  # no watch here


def _node(name: str, *, agent: bool = True, heartbeat: str = "2024-05-01T10:00:00Z", **spec: Any) -> dict[str, Any]:
    metadata = encode_node_metadata(cpu_node(settings=kubelet()))
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "z1"}
    return {
        "metadata": {
            "name": name,
            "labels": (metadata.labels if agent else {}) | labels,
            "annotations": dict(metadata.annotations) if agent else {},
        },
        "spec": spec,
        "status": {"conditions": [_ready("True", heartbeat)]},
    }


def _ready(status: str, heartbeat: str = "2024-05-01T10:00:00Z") -> dict[str, str]:
    return {
        "type": "Ready",
        "status": status,
        "lastHeartbeatTime": heartbeat,
        "lastTransitionTime": "2024-05-01T09:00:00Z",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }


def _label(facts: SchedulingFacts, key: str, node: str) -> str | None:
    slot = facts.node_names().index(node)
    codes, values = facts.label_column(key)
    return None if codes[slot] == ABSENT else values[int(codes[slot])]


def _taints(facts: SchedulingFacts, node: str) -> set[Taint]:
    slot = facts.node_names().index(node)
    taints, matrix = facts.taint_columns()
    return {taint for taint, carried in zip(taints, matrix[slot], strict=True) if carried}


def _placed(facts: SchedulingFacts) -> dict[str, str | None]:
    pods, slots = facts.placed_pods()
    names = facts.node_names()
    return {pod.name: names[int(slot)] for pod, slot in zip(pods, slots, strict=True)}


def _pod(name: str, *, node: str = "", reserved: str = "", phase: str = "Running") -> dict[str, Any]:
    pod = pod_object(name, cpus=1, memory="1Gi", labels={"app": "web"}, namespace="ml")
    if node:
        pod["spec"]["nodeName"] = node
    if reserved:
        pod["metadata"]["annotations"][RESERVED_NODE_KEY] = reserved
    pod["status"]["phase"] = phase
    return pod


# --- the handlers, without a watch ---------------------------------------------------------------------


def test_node_objects_give_labels_taints_and_cordon() -> None:
    index = ClusterIndex()
    facts = index.facts
    nodes = _feed(index)._topology.nodes
    nodes.apply("ADDED", _node("a", taints=[GPU_TAINT]))
    assert index.slot_of("a") is not None
    assert _label(facts, "topology.kubernetes.io/zone", "a") == "z1"
    assert _taints(facts, "a") == {Taint("nvidia.com/gpu", TaintEffect.NO_SCHEDULE, "present")}
    nodes.apply("MODIFIED", _node("a", unschedulable=True))  # cordoned, untainted
    slot = facts.node_names().index("a")
    assert facts.unschedulable[slot]
    assert _taints(facts, "a") == set()
    nodes.apply("MODIFIED", _node("a"))  # uncordoned
    assert not facts.unschedulable[slot]
    relabelled = _node("a")
    relabelled["metadata"]["labels"]["topology.kubernetes.io/zone"] = "z2"
    nodes.apply("MODIFIED", relabelled)
    assert _label(facts, "topology.kubernetes.io/zone", "a") == "z2"
    nodes.apply("DELETED", relabelled)
    assert index.slot_of("a") is None
    assert facts.node_names()[slot] is None
    assert facts.label_column("topology.kubernetes.io/zone")[1] == ()


def test_a_status_heartbeat_bumps_no_version() -> None:
    index = ClusterIndex()
    facts = index.facts
    nodes = _feed(index)._topology.nodes
    nodes.apply("ADDED", _node("a", taints=[GPU_TAINT]))
    versions = (facts.labels_version, facts.pods_version, index.changes)
    for second in range(10, 20):
        nodes.apply("MODIFIED", _node("a", taints=[GPU_TAINT], heartbeat=f"2024-05-01T10:00:{second}Z"))
    assert (facts.labels_version, facts.pods_version, index.changes) == versions


def test_a_node_without_an_agent_is_known_by_name_until_it_has_a_slot() -> None:
    index = ClusterIndex()
    facts = index.facts
    feed = _feed(index)
    feed._topology.nodes.apply("ADDED", _node("plain", agent=False, unschedulable=True))
    assert index.slot_of("plain") is None
    assert "plain" not in facts.node_names()
    index.upsert_topology("plain", cpu_node())  # its report arrives (an NRT, say)
    assert facts.unschedulable[facts.node_names().index("plain")]
    assert _label(facts, "kubernetes.io/hostname", "plain") == "plain"


def test_a_node_is_in_the_index_only_while_its_node_object_exists() -> None:
    """An NRT outlives its Node (nothing deletes it): whether the Node's deletion was watched or a relist finds
    the NRT alone, the node is gone; and the NRT is read when its Node arrives, whichever list lands first."""
    index = ClusterIndex()
    topology = _feed(index)._topology
    nrt = encode_nrt(cpu_node(cells=4), node_name="a")
    topology.nrts.replace([nrt])  # the NRTs' list lands first
    assert index.slot_of("a") is None
    topology.nodes.replace([_node("a", agent=False)])
    slot = index.slot_of("a")
    assert slot is not None
    assert index.numa_cells(slot) == 4, "read from its NRT"
    topology.nodes.apply("DELETED", _node("a", agent=False))
    assert index.slot_of("a") is None
    topology.nrts.replace([nrt])  # a relist: the NRT alone
    topology.nodes.replace([])
    assert index.slot_of("a") is None
    topology.nodes.apply("ADDED", _node("a"))  # the Node is back, with the agent's annotation: the NRT wins
    slot = index.slot_of("a")
    assert slot is not None
    assert index.numa_cells(slot) == 4
    topology.nrts.apply("DELETED", nrt)
    slot = index.slot_of("a")
    assert slot is not None
    assert index.numa_cells(slot) == 2, "read from its annotation"


def test_a_node_the_feed_cannot_read_keeps_its_last_facts(caplog: pytest.LogCaptureFixture) -> None:
    index = ClusterIndex()
    nodes = _feed(index)._topology.nodes
    nodes.apply("ADDED", _node("a", taints=[GPU_TAINT]))
    nodes.apply("MODIFIED", _node("a", taints=[{"key": "k", "effect": "NoTomorrow"}]))
    assert "cannot read an object" in caplog.text
    assert _taints(index.facts, "a") == {Taint("nvidia.com/gpu", TaintEffect.NO_SCHEDULE, "present")}


def test_placed_pods_follow_pod_events() -> None:
    index = ClusterIndex()
    facts = index.facts
    feed = _feed(index)
    for name in ("a", "b"):
        feed._topology.nodes.apply("ADDED", _node(name))
    pods = feed._pods
    pods.apply("ADDED", _pod("pending"))
    pods.apply("ADDED", _pod("bound", node="a"))
    pods.apply("ADDED", _pod("reserved", reserved="a", phase="Pending"))
    pods.apply("ADDED", _pod("elsewhere", node="no-slot-yet"))
    assert _placed(facts) == {"bound": "a", "reserved": "a"}
    pod = facts.pod("ml", "bound")
    assert pod is not None
    assert (pod.node, pod.labels) == ("a", (("app", "web"),))

    version = facts.pods_version
    status_only = _pod("bound", node="a")
    status_only["status"]["podIP"] = "10.0.0.7"
    pods.apply("MODIFIED", status_only)
    assert facts.pods_version == version, "a status update changes nothing the plugins read"

    pods.apply("MODIFIED", _pod("reserved", node="b"))  # bound elsewhere than reserved
    assert _placed(facts) == {"bound": "a", "reserved": "b"}
    pods.apply("MODIFIED", _pod("reserved", phase="Pending"))  # the binder gave its reservation up
    assert _placed(facts) == {"bound": "a"}
    pods.apply("MODIFIED", _pod("bound", node="a", phase="Succeeded"))
    assert _placed(facts) == {}
    pods.apply("ADDED", _pod("again", node="b"))
    pods.apply("DELETED", _pod("again", node="b"))
    assert _placed(facts) == {}

    feed._topology.nodes.apply("ADDED", _node("no-slot-yet"))
    assert _placed(facts) == {"elsewhere": "no-slot-yet"}
    pods.replace([_pod("listed", node="a")])  # a relist: whatever it does not name is gone
    assert _placed(facts) == {"listed": "a"}
    assert facts.pod("ml", "elsewhere") is None


def test_namespaces_priority_classes_and_claims_follow_their_events() -> None:
    index = ClusterIndex()
    facts = index.facts
    handlers = _feed(index)._facts
    handlers.namespaces.apply("ADDED", _namespace("ml", team="research"))
    assert facts.namespace_labels("ml") == (("kubernetes.io/metadata.name", "ml"), ("team", "research"))
    handlers.namespaces.apply("DELETED", _namespace("ml"))
    assert facts.namespace_labels("ml") is None

    handlers.priority_classes.replace([_priority_class("training", 1000), _priority_class("batch", 10, default=True)])
    assert (facts.priority("training"), facts.priority("")) == (1000, 10)
    handlers.priority_classes.replace([_priority_class("training", 1000)])  # relisted without the default
    assert facts.priority("") == 0

    handlers.storage_classes.apply("ADDED", _storage_class("local-nvme", "WaitForFirstConsumer"))
    handlers.volumes.apply("ADDED", _volume("nvme-a", "h100-a"))
    handlers.claims.apply("ADDED", _claim("checkpoints", volume="nvme-a"))
    handlers.claims.apply("ADDED", _claim("scratch"))
    assert facts.claim("ml", "checkpoints") == ClaimFacts(bound=True, node_affinity=(HOSTNAME_IS_A,))
    assert facts.claim("ml", "scratch") == ClaimFacts(bound=False, wait_for_first_consumer=True)
    handlers.storage_classes.apply("MODIFIED", _storage_class("local-nvme", "Immediate"))
    assert facts.claim("ml", "scratch") == ClaimFacts(bound=False)
    handlers.volumes.apply("DELETED", _volume("nvme-a", "h100-a"))
    assert facts.claim("ml", "checkpoints") is None
    handlers.claims.apply("DELETED", _claim("scratch"))
    assert facts.claim("ml", "scratch") is None


def test_objects_are_read_as_kube_scheduler_reads_them() -> None:
    assert node_facts({"metadata": {"name": "fresh"}}) == NodeFacts("fresh")  # no kubelet report yet: ready
    assert volume_node_affinity({"metadata": {"name": "nfs"}, "spec": {"nfs": {}}}) is None  # fits every node
    not_x = {"key": "metadata.name", "operator": "NotIn", "values": ["x"]}
    volume = _volume("v", "h100-a")
    volume["spec"]["nodeAffinity"]["required"] = {"nodeSelectorTerms": [{"matchFields": [not_x]}]}
    assert volume_node_affinity(volume) == (
        NodeSelectorTerm(match_fields=(Requirement("metadata.name", Operator.NOT_IN, ("x",)),)),
    )
    beta = _claim("old")
    beta["metadata"]["annotations"] = {BETA_STORAGE_CLASS_KEY: "legacy", SELECTED_NODE_KEY: "n1"}
    assert claim_source(beta) == ClaimSource(storage_class="legacy", selected_node="n1")
    bad = copy.deepcopy(volume)
    bad["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchFields"][0]["operator"] = "Near"
    with pytest.raises(ObjectError, match=r"matchFields\[0\]\.operator 'Near'"):
        volume_node_affinity(bad)


def test_rbac_grants_reading_every_collection_the_feed_watches() -> None:
    granted = {
        (group, resource): set(rule["verbs"])
        for rule in one("ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    for reflector in _feed(ClusterIndex())._reflectors:
        parts = reflector.path.strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        assert {"get", "list", "watch"} <= granted.get((group, parts[-1]), set()), reflector.path


def _namespace(name: str, **labels: str) -> dict[str, Any]:
    metadata = {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def _priority_class(name: str, value: int, *, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


def _storage_class(name: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": mode,
    }


def _volume(name: str, node: str) -> dict[str, Any]:
    required = {"nodeSelectorTerms": [{"matchExpressions": [_in("kubernetes.io/hostname", node)]}]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local-nvme",
            "local": {"path": "/mnt/nvme0"},
            "nodeAffinity": {"required": required},
        },
    }


def _in(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": [value]}


def _claim(name: str, *, volume: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "100Gi"}},
        "storageClassName": "local-nvme",
    }
    if volume:
        spec["volumeName"] = volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": spec,
        "status": {"phase": "Bound" if volume else "Pending"},
    }
