"""``kubenexus-placement serve``, unchanged, against the real kube-apiserver v1.37, as the kubenexus-placement
ServiceAccount (a token bound to a placement pod, with the RBAC and the admission policy of deploy/placement):
its cluster feed's first lists and its watches, its connections dropped (a TCP relay standing for a load
balancer), an API server restart, watches resumed from a compacted resourceVersion (410 Gone), leader election
over a real Lease, and what its identity may not do.

What the service knows is read through its real gRPC socket (Filter, Score, Reserve, GetNodeTopology,
ListNodes and the standard health service) and its ``/readyz``. Nodes are Node objects published with the
agent's own ``Publisher`` as the agent's ServiceAccount bound to that node; everything else is written by the
administrator, as ``kubectl`` would. A fault the real server cannot be made to answer on demand (a 410 inside
one watch's stream, as a watch served by etcd directly reports it) stays on the emulator:
tests/placement/shim/test_shim_e2e.py.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import ApiError
from kubenexus.kube.paths import (
    NAMESPACES_PATH,
    NODES_PATH,
    NRTS_PATH,
    PERSISTENT_VOLUME_CLAIMS_PATH,
    PERSISTENT_VOLUMES_PATH,
    POD_DISRUPTION_BUDGETS_PATH,
    PODS_PATH,
    PRIORITY_CLASSES_PATH,
    STORAGE_CLASSES_PATH,
)
from kubenexus.topology.model import NodeTopology
from placement.api.interceptor import SERVICE_NAME
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc as pb_grpc
from placement.core.annotations import LEADER_LABEL, RESERVED_NODE_KEY
from placement.core.quantity import exact_quantity
from placement.shim.client import PlacementClient, ServiceError
from tests.cluster_scene import publish_topology
from tests.conftest import wait_until
from tests.control_plane import (
    REPO,
    ControlPlane,
    ensure_object,
    placement_kubeconfig,
    template_pod,
)
from tests.machines.node_topologies import cpu_node, nvswitch_node
from tests.programs import Service

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NAMESPACE = "service-tests"
SYSTEM = "kubenexus-system"
SERVICE_POD = "kubenexus-placement-service-tests"
# The node the placement pods are bound to: none of the nodes the tests place on, so that their requests are
# charged nowhere that matters.
SYSTEM_NODE = "service-tests-system"
PLACEMENT_DEPLOYMENT = REPO / "deploy" / "placement" / "02-deployment.yaml"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases/kubenexus-placement"
RELIST = "watch history expired (410 Gone); relisting"
FEASIBLE = "feasible"
# Deadlines, not waits: a loaded 2-core machine runs several control planes at once.
CHANGE_S = 60.0
READY_S = 90.0
RESUMED_S = 30.0

_names = itertools.count()
T = TypeVar("T")


# -- the cluster: nodes published as the agent publishes them, pods as kubectl creates them ------------------


@dataclass
class Cluster:
    plane: ControlPlane
    folder: Path
    nodes: list[str] = field(default_factory=list)
    placement_pods: list[str] = field(default_factory=list)

    @property
    def admin(self) -> KubeClient:
        return self.plane.admin

    def add_node(self, key: str, machine: NodeTopology) -> str:
        """A Node with the machine's capacity, its topology published by the agent's Publisher as the agent."""
        name = f"service-tests-{key}"
        capacity = {
            "cpu": str(len(machine.machine.online_cpus)),
            "memory": str(sum(cell.memory_bytes or 0 for cell in machine.numa_cells)),
            "nvidia.com/gpu": str(len(machine.gpus)),
        }
        self.plane.create_node(name, capacity=capacity)
        self.nodes.append(name)
        publish_topology(self.plane, name, machine, self.folder)
        return name

    def remove_node(self, name: str) -> None:
        for path in (f"/api/v1/nodes/{name}", f"{NRTS_PATH}/{name}"):
            self.plane.delete(path)
        self.force_delete(f"kubenexus-agent-{name}", "kubenexus-agent")

    def placement_kubeconfig(self, pod_name: str) -> Path:
        """The placement ServiceAccount's token bound to a placement pod ``pod_name`` (made if need be)."""
        self.placement_pods.append(pod_name)
        return placement_kubeconfig(self.plane, pod_name, self.folder / f"{pod_name}.kubeconfig", node=SYSTEM_NODE)

    def create_pod(self, pod: Json) -> Json:
        return self.admin.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)

    def force_delete(self, name: str, namespace: str = NAMESPACE) -> None:
        # No kubelet confirms a graceful deletion of a bound pod: forced, as `kubectl delete --force` does.
        self.plane.kubectl("delete", "pod", name, "-n", namespace, "--grace-period=0", "--force", "--wait=false",
                           "--ignore-not-found")  # fmt: skip


def pod(
    name: str, *, gpus: int = 0, cpus: int = 1, memory: str = "1Gi", namespace: str = NAMESPACE, **spec: Any
) -> Json:
    """A Guaranteed pod, as ``kubectl create`` sends it."""
    resources = {"cpu": str(cpus), "memory": memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {}},
        "spec": {
            "schedulerName": "kubenexus-scheduler",
            "containers": [{"name": "main", "image": "registry.example/trainer:1",
                            "resources": {"requests": resources, "limits": dict(resources)}}],
            **spec,
        },
    }  # fmt: skip


def make_namespace(plane: ControlPlane, name: str) -> None:
    ensure_object(plane, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # The ServiceAccount admission plugin refuses a pod whose ServiceAccount does not exist; kube-controller-
    # manager's serviceaccount controller would make "default", done here by hand.
    ensure_object(plane, f"/api/v1/namespaces/{name}/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})  # fmt: skip


# -- a load balancer in front of the API server --------------------------------------------------------------


class Relay:
    """A TCP relay to the API server, as a load balancer in front of it: ``cut`` closes every connection
    through it (a load balancer restarting, or a network partition healing), the API server untouched."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self._target, timeout=10)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((downstream, upstream))
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
            with self._lock:
                for end in (source, sink):
                    if end in self._sockets:
                        self._sockets.discard(end)
                        end.close()

    def cut(self) -> None:
        with self._lock:
            open_now = list(self._sockets)
        for end in open_now:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        self.cut()


def relayed(kubeconfig: Path, relay: Relay) -> Path:
    """``kubeconfig`` with its server reached through ``relay`` (same address: the certificate still matches)."""
    document = yaml.safe_load(kubeconfig.read_text())
    for cluster in document["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"
    path = kubeconfig.with_suffix(".relayed")
    path.write_text(yaml.safe_dump(document))
    return path


# -- what the service answers -------------------------------------------------------------------------------


@dataclass
class Running:
    """One ``serve`` process and the clients that ask it."""

    service: Service
    kubeconfig: Path
    client: PlacementClient
    channel: grpc.Channel

    def verdicts(self, probe: Json, nodes: list[str]) -> dict[str, str]:
        """Each node's Filter verdict: ``FEASIBLE`` or the rejection's kind."""
        answer = self.client.filter(probe, nodes)
        verdicts = dict.fromkeys(answer.feasible_nodes, FEASIBLE)
        for group in answer.rejected:
            verdicts.update(dict.fromkeys(group.nodes, pb.RejectionKind.Name(group.kind)))
        return verdicts

    def reasons(self, probe: Json, nodes: list[str]) -> dict[str, str]:
        """Each rejected node's Filter reason."""
        return {node: group.reason for group in self.client.filter(probe, nodes).rejected for node in group.nodes}

    def topology(self, node: str) -> pb.NodeTopology:
        answer: pb.NodeTopology = pb_grpc.PlacementStub(self.channel).GetNodeTopology(
            pb.GetNodeTopologyRequest(node=node), timeout=30
        )
        return answer

    def summary(self, node: str) -> pb.NodeSummary | None:
        answer = pb_grpc.PlacementStub(self.channel).ListNodes(pb.ListNodesRequest(), timeout=30)
        return next((summary for summary in answer.nodes if summary.name == node), None)

    def health(self) -> str:
        stub: Any = health_pb2_grpc.HealthStub(self.channel)  # the stubs omit its methods
        answer = stub.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=10)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))

    def close(self) -> None:
        self.client.close()
        self.channel.close()
        self.service.stop()


def start(kubeconfig: Path, *extra: str, env: dict[str, str] | None = None) -> Running:
    service = Service(kubeconfig, *extra, env=env)
    return Running(
        service,
        kubeconfig,
        PlacementClient.connect(service.address, deadline_s=30),
        grpc.insecure_channel(service.address),
    )


def eventually(read: Callable[[], T], holds: Callable[[T], bool], what: str, timeout_s: float = CHANGE_S) -> T:
    """Poll ``read`` until its value ``holds``; the failure names the last value read."""
    seen: list[T] = []

    def check() -> bool:
        seen.append(read())
        return holds(seen[-1])

    try:
        wait_until(check, timeout_s=timeout_s, what=what)
    except AssertionError as error:
        raise AssertionError(f"{error}; last seen: {seen[-1] if seen else None}") from None
    return seen[-1]


def answer(call: Callable[[], T]) -> T | str:
    """``call``'s answer, or the status code the service refused it with."""
    try:
        return call()
    except ServiceError as error:
        return error.code


def refusal(call: Callable[[], object]) -> ServiceError:
    with pytest.raises(ServiceError) as refused:
        call()
    return refused.value


# -- fixtures: the nodes published first, then one service for the read-only and event tests ----------------


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(control_plane, tmp_path_factory.mktemp("service-tests"))
    make_namespace(control_plane, NAMESPACE)
    made.add_node("gpu", nvswitch_node())
    made.add_node("cpu", cpu_node())
    try:
        yield made
    finally:
        control_plane.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--grace-period=0", "--force",
                              "--wait=false", check=False)  # fmt: skip
        for node in made.nodes:
            made.remove_node(node)
        for name in made.placement_pods:
            made.force_delete(name, SYSTEM)


@pytest.fixture(scope="module")
def relay(cluster: Cluster) -> Iterator[Relay]:
    made = Relay(("127.0.0.1", cluster.plane.port))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def running(cluster: Cluster, relay: Relay) -> Iterator[Running]:
    """``serve`` started after the first nodes were published, as its own ServiceAccount, one replica, reaching
    the API server through ``relay``."""
    made = start(relayed(cluster.placement_kubeconfig(SERVICE_POD), relay))
    try:
        made.service.wait_ready(timeout_s=READY_S)
        yield made
    finally:
        made.close()
    assert "Traceback" not in made.service.text(), made.service.text()[-3000:]


GPU, CPU = "service-tests-gpu", "service-tests-cpu"


# -- 1. the first lists ---------------------------------------------------------------------------------------


def test_nodes_published_before_the_service_started_are_in_its_cache(running: Running) -> None:
    # Ready means every first list has landed: no waiting for the nodes.
    unknown = "service-tests-never-published"
    assert running.verdicts(pod("probe"), [GPU, CPU, unknown]) == {
        GPU: FEASIBLE, CPU: FEASIBLE, unknown: "REJECTION_KIND_UNKNOWN_NODE"}  # fmt: skip
    topology = running.topology(GPU)
    assert [cell.id for cell in topology.cells] == [0, 1]
    assert [gpu.numa_cell for gpu in topology.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    scored = running.client.score(pod("trainer", gpus=2, cpus=8), [CPU, GPU])
    assert list(scored.nodes) == [GPU]
    assert [(group.kind, list(group.nodes)) for group in scored.rejected] == [
        (pb.REJECTION_KIND_INSUFFICIENT_RESOURCES, [CPU])]  # fmt: skip


# -- 2. events --------------------------------------------------------------------------------------------------


def test_a_node_published_later_arrives_and_a_deleted_one_leaves(cluster: Cluster, running: Running) -> None:
    node = cluster.add_node(f"late-{next(_names)}", cpu_node())
    eventually(lambda: running.verdicts(pod("probe"), [node]), lambda v: v == {node: FEASIBLE}, "the new node")
    assert running.summary(node) is not None
    cluster.plane.delete(f"/api/v1/nodes/{node}")
    eventually(lambda: running.verdicts(pod("probe"), [node]), lambda v: v == {node: "REJECTION_KIND_UNKNOWN_NODE"},
               "the deleted node gone")  # fmt: skip
    assert running.summary(node) is None
    cluster.remove_node(node)


def test_labels_cordon_taints_and_readiness_reach_the_answers(cluster: Cluster, running: Running) -> None:
    node = cluster.add_node(f"changing-{next(_names)}", cpu_node())
    path = f"/api/v1/nodes/{node}"
    selecting = pod("selecting", nodeSelector={"example.com/pool": "training"})

    def verdict(probe: Json) -> Callable[[], str]:
        return lambda: running.verdicts(probe, [node])[node]

    def becomes(probe: Json, expected: str, what: str) -> None:
        eventually(verdict(probe), lambda v: v == expected, what)

    becomes(pod("probe"), FEASIBLE, "the new node")
    assert verdict(selecting)() == "REJECTION_KIND_NODE_CONSTRAINT"
    cluster.admin.merge_patch(path, {"metadata": {"labels": {"example.com/pool": "training"}}})
    becomes(selecting, FEASIBLE, "the label")

    cluster.plane.kubectl("cordon", node)
    becomes(pod("probe"), "REJECTION_KIND_NODE_CONSTRAINT", "the cordon")
    cluster.plane.kubectl("uncordon", node)
    becomes(pod("probe"), FEASIBLE, "the uncordon")

    cluster.plane.kubectl("taint", "node", node, "example.com/maintenance=soon:NoSchedule")
    becomes(pod("probe"), "REJECTION_KIND_NODE_CONSTRAINT", "the taint")
    tolerating = pod("tolerating", tolerations=[{"key": "example.com/maintenance", "operator": "Exists"}])
    assert verdict(tolerating)() == FEASIBLE
    cluster.plane.kubectl("taint", "node", node, "example.com/maintenance-")
    becomes(pod("probe"), FEASIBLE, "the taint removed")

    # Not Ready: refused by the taint the node lifecycle controller adds (kube-scheduler has no readiness
    # filter, issue #28), which a pod may tolerate; the condition alone refuses nothing.
    condition = {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "test"}
    cluster.admin.merge_patch(f"{path}/status", {"status": {"conditions": [condition]}})
    cluster.plane.kubectl("taint", "node", node, "node.kubernetes.io/not-ready:NoSchedule")
    becomes(pod("probe"), "REJECTION_KIND_NODE_CONSTRAINT", "the node not ready")
    tolerates_not_ready = [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]
    assert verdict(pod("tolerating-not-ready", tolerations=tolerates_not_ready))() == FEASIBLE


def test_a_bound_pod_is_counted_as_used_until_it_is_deleted(cluster: Cluster, running: Running) -> None:
    node = cluster.add_node(f"busy-{next(_names)}", nvswitch_node())
    # The node's agent pod is bound to it (a DaemonSet pod, with its small requests), and nothing else.
    before = eventually(
        lambda: running.summary(node), lambda s: s is not None and (s.free_gpus, s.pods) == (8, 1), "the new node"
    )
    assert before is not None
    name = f"bound-{next(_names)}"
    cluster.create_pod(pod(name, gpus=8, cpus=16, memory="64Gi", nodeName=node))
    summary = eventually(lambda: running.summary(node), lambda s: s is not None and s.free_gpus == 0, "the pod counted")
    assert summary is not None
    assert summary.pods == before.pods + 1
    assert exact_quantity(before.free_cpus) - exact_quantity(summary.free_cpus) == 16
    assert exact_quantity(before.free_memory) - exact_quantity(summary.free_memory) == 64 * 2**30
    assert running.verdicts(pod("probe", gpus=1), [node]) == {node: "REJECTION_KIND_INSUFFICIENT_RESOURCES"}
    cluster.force_delete(name)
    eventually(
        lambda: running.summary(node),
        lambda s: s is not None and (s.free_gpus, s.free_cpus, s.pods) == (8, before.free_cpus, before.pods),
        "the pod's room back",
    )
    assert running.verdicts(pod("probe", gpus=1), [node]) == {node: FEASIBLE}


def test_namespaces_priority_classes_and_volumes_reach_the_answers(cluster: Cluster, running: Running) -> None:
    number = next(_names)
    admin = cluster.admin

    # A PriorityClass: a pod naming one the cluster does not have is refused, as the Priority admission does.
    priority_class = f"service-tests-training-{number}"
    urgent = pod("urgent", priorityClassName=priority_class)
    assert refusal(lambda: running.client.filter(urgent, [CPU])).code == "INVALID_ARGUMENT"
    admin.create("/apis/scheduling.k8s.io/v1/priorityclasses", {"apiVersion": "scheduling.k8s.io/v1",
                 "kind": "PriorityClass", "metadata": {"name": priority_class}, "value": 1000})  # fmt: skip
    eventually(lambda: answer(lambda: running.verdicts(urgent, [CPU])), lambda v: v == {CPU: FEASIBLE},
               "the priority class")  # fmt: skip

    # A claim bound to a local volume on the GPU node: the pod fits there only.
    volume, claim = f"service-tests-nvme-{number}", f"checkpoints-{number}"
    admin.create("/api/v1/persistentvolumes", {"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/nvme0"},
                 "storageClassName": "local-nvme", "persistentVolumeReclaimPolicy": "Retain",
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In", "values": [GPU]}]}]}}}})  # fmt: skip
    admin.create(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims", {"apiVersion": "v1",
        "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}},
                 "storageClassName": "local-nvme", "volumeName": volume}})  # fmt: skip
    writer = pod("writer", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
    eventually(
        lambda: running.verdicts(writer, [GPU, CPU]),
        lambda v: v == {GPU: FEASIBLE, CPU: "REJECTION_KIND_NODE_CONSTRAINT"},
        "the claim and its volume",
    )
    # The StorageObjectInUseProtection admission plugin put kubernetes.io/pv-protection on it; the pv-protection
    # controller lifts it once no claim uses the volume: lifted here as it would be.
    cluster.plane.delete(f"/api/v1/persistentvolumes/{volume}")
    admin.merge_patch(f"/api/v1/persistentvolumes/{volume}", {"metadata": {"finalizers": None}})
    eventually(lambda: running.verdicts(writer, [GPU, CPU]), lambda v: FEASIBLE not in v.values(), "the volume gone")

    # An unbound claim: refused as Immediate while its class is unknown, and, once its class waits for the first
    # consumer, refused for what it is (this scheduler binds no volumes: placement/core/constraints/verdicts.py).
    storage_class, scratch = f"service-tests-local-{number}", f"scratch-{number}"
    admin.create(f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims", {"apiVersion": "v1",
        "kind": "PersistentVolumeClaim", "metadata": {"name": scratch},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                 "storageClassName": storage_class}})  # fmt: skip
    scratcher = pod("scratcher", volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": scratch}}])
    eventually(lambda: running.reasons(scratcher, [CPU]),
               lambda r: r == {CPU: "pod has unbound immediate PersistentVolumeClaims"}, "the claim")  # fmt: skip
    admin.create("/apis/storage.k8s.io/v1/storageclasses", {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": storage_class}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"})  # fmt: skip
    eventually(lambda: running.reasons(scratcher, [CPU]), lambda r: "wait for their first consumer" in r[CPU],
               "the storage class")  # fmt: skip

    # A namespace's labels, read by pod affinity's namespace selector.
    other = f"service-tests-web-{number}"
    make_namespace(cluster.plane, other)
    cluster.create_pod({**pod("web", namespace=other, nodeName=CPU),
                        "metadata": {"name": "web", "namespace": other, "labels": {"app": "web"}}})  # fmt: skip
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname",
            "namespaceSelector": {"matchLabels": {"team": "research"}}}  # fmt: skip
    near_web = pod("near-web", affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    assert FEASIBLE not in running.verdicts(near_web, [GPU, CPU]).values()
    admin.merge_patch(f"/api/v1/namespaces/{other}", {"metadata": {"labels": {"team": "research"}}})
    eventually(
        lambda: running.verdicts(near_web, [GPU, CPU]),
        # Upstream's InterPodAffinity: required affinity unmet is UnschedulableAndUnresolvable.
        lambda v: v == {CPU: FEASIBLE, GPU: "REJECTION_KIND_NODE_CONSTRAINT"},
        "the namespace's label",
    )
    cluster.force_delete("web", other)


# -- 3. an API server restart -----------------------------------------------------------------------------------


def test_while_the_api_server_is_down_the_service_refuses_decisions_then_catches_up(
    cluster: Cluster, running: Running
) -> None:
    node = cluster.add_node(f"restart-{next(_names)}", cpu_node())
    eventually(lambda: running.verdicts(pod("probe"), [node]), lambda v: v == {node: FEASIBLE}, "the new node")
    assert running.service.readyz() == 200
    # The health service follows the cache's state once a second (placement/api/server.py).
    eventually(running.health, lambda status: status == "SERVING", "SERVING")
    down: dict[str, object] = {}

    def while_down() -> None:
        wait_until(lambda: running.service.readyz() == 503, timeout_s=CHANGE_S, what="/readyz to answer 503")
        down["health"] = eventually(running.health, lambda status: status == "NOT_SERVING", "NOT_SERVING")
        down["reserve"] = refusal(lambda: running.client.reserve(pod("decided-blind"), [node]))

    cluster.plane.restart_apiserver(before_start=while_down)
    assert down["health"] == "NOT_SERVING"
    refused = down["reserve"]
    assert isinstance(refused, ServiceError)
    assert refused.code == "FAILED_PRECONDITION"
    assert "not synced" in refused.message

    # Back: ready again, and what changes from now on reaches the answers.
    wait_until(lambda: running.service.readyz() == 200, timeout_s=READY_S, what="/readyz 200 after the restart")
    eventually(running.health, lambda status: status == "SERVING", "SERVING after the restart")
    cluster.admin.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"example.com/after": "restart"}}})
    selecting = pod("selecting", nodeSelector={"example.com/after": "restart"})
    eventually(lambda: running.verdicts(selecting, [node]), lambda v: v == {node: FEASIBLE}, "a change after it")
    reserved = running.client.reserve(pod(f"decided-{next(_names)}"), [node])
    assert reserved.reserved
    assert reserved.placement.node == node


def test_while_the_api_server_is_silent_the_service_refuses_decisions_then_serves_again(
    cluster: Cluster, running: Running
) -> None:
    """kube-apiserver paused (SIGSTOP): its connections stay open and nothing arrives, as from a hung server.
    The watches cannot tell (their read timeout is minutes), the liveness probe can: within its bound the
    service is NOT_SERVING and refuses Reserve; once the server answers again it serves, nothing relisted."""
    node = cluster.add_node(f"silent-{next(_names)}", cpu_node())
    eventually(lambda: running.verdicts(pod("probe"), [node]), lambda v: v == {node: FEASIBLE}, "the new node")
    eventually(running.health, lambda status: status == "SERVING", "SERVING")
    since = len(running.service.logs())
    cluster.plane.apiserver.pause()
    try:
        eventually(running.health, lambda status: status == "NOT_SERVING", "NOT_SERVING while silent")
        refused = refusal(lambda: running.client.reserve(pod("decided-on-silence"), [node]))
        assert refused.code == "FAILED_PRECONDITION"
        silent = "the API server has not answered; the cache may be stale"
        eventually(lambda: log_count(running, silent, since=since), lambda count: count == 1, "the silence logged")
    finally:
        cluster.plane.apiserver.resume()
    eventually(running.health, lambda status: status == "SERVING", "SERVING once it answers", timeout_s=RESUMED_S)
    assert log_count(running, "the API server answers again", since=since) == 1
    assert log_count(running, RELIST, since=since) == 0
    reserved = running.client.reserve(pod(f"decided-{next(_names)}"), [node])
    assert reserved.reserved


def log_count(running: Running, message: str, *, since: int = 0, **fields: Any) -> int:
    """How many of the service's log lines from the ``since``-th on say ``message`` with ``fields``."""
    return sum(
        1
        for line in running.service.logs()[since:]
        if line.get("message") == message and all(line.get(k) == v for k, v in fields.items())
    )


# The feed's own watches (placement/cluster/feed.py), the quiet collections among them.
FEED_WATCHES = (NODES_PATH, NRTS_PATH, PODS_PATH, NAMESPACES_PATH, PRIORITY_CLASSES_PATH, PERSISTENT_VOLUMES_PATH,
                PERSISTENT_VOLUME_CLAIMS_PATH, STORAGE_CLASSES_PATH, POD_DISRUPTION_BUDGETS_PATH)  # fmt: skip


def test_when_its_connections_drop_the_service_resumes_its_watches_and_is_ready_at_once(
    cluster: Cluster, running: Running, relay: Relay
) -> None:
    """The load balancer in front of the API server drops every connection (it restarted, or a partition
    healed), the API server untouched: each watch resumes from the last version it saw, which the API server
    still holds (no relist), and the service is ready again as soon as the server has accepted the watches,
    not when each quiet collection (priority classes, storage classes, volumes) next sends an event."""
    wait_until(lambda: running.service.readyz() == 200, timeout_s=READY_S, what="/readyz 200")
    since = len(running.service.logs())
    relay.cut()
    wait_until(
        lambda: all(log_count(running, "watch failed; retrying", since=since, resource=path) for path in FEED_WATCHES),
        timeout_s=CHANGE_S,
        what="every watch of the feed to break",
    )
    # Shorter than the API server's bookmark period (one a minute per watch, cacher.go's bookmarkFrequency):
    # ready within it is ready without waiting for a quiet collection's bookmark or event.
    wait_until(lambda: running.service.readyz() == 200, timeout_s=RESUMED_S, what="/readyz 200 after the drop")
    assert log_count(running, RELIST, since=since) == 0, "the API server kept the history: a resume, not a relist"
    priority_class = f"service-tests-resumed-{next(_names)}"
    cluster.admin.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": priority_class},
         "value": 10},
    )  # fmt: skip
    resumed = pod("resumed", priorityClassName=priority_class)
    eventually(lambda: answer(lambda: running.verdicts(resumed, [CPU])), lambda v: v == {CPU: FEASIBLE},
               "a change after the drop")  # fmt: skip


# -- 4. watches resumed from a compacted resourceVersion ----------------------------------------------------------


def test_a_watch_resumed_from_compacted_history_relists_and_misses_nothing(cluster: Cluster, running: Running) -> None:
    """The service is paused (a stopped process: a long GC pause, a frozen VM) while the API server restarts,
    a node changes and etcd compacts its history: on waking, its watches resume from versions etcd no longer
    keeps, are answered 410 Gone, and it lists again."""
    node = cluster.add_node(f"away-{next(_names)}", cpu_node())
    gone = cluster.add_node(f"gone-{next(_names)}", cpu_node())
    eventually(lambda: running.verdicts(pod("probe"), [node, gone]), lambda v: set(v.values()) == {FEASIBLE},
               "the new nodes")  # fmt: skip
    since = len(running.service.logs())
    os.kill(running.service.process.pid, signal.SIGSTOP)
    try:
        cluster.plane.restart_apiserver()  # the paused service's watch streams are closed under it
        cluster.admin.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {"example.com/while": "away"}}})
        cluster.plane.delete(f"/api/v1/nodes/{gone}")
        cluster.plane.compact_etcd()
    finally:
        os.kill(running.service.process.pid, signal.SIGCONT)
    wait_until(
        lambda: log_count(running, RELIST, since=since, resource=NODES_PATH),
        timeout_s=READY_S,
        what="the nodes relisted",
    )
    wait_until(lambda: running.service.readyz() == 200, timeout_s=READY_S, what="/readyz 200 after the relist")
    selecting = pod("selecting", nodeSelector={"example.com/while": "away"})
    # No waiting: ready after the relist began means every list has landed, with what changed while it was away.
    assert running.verdicts(selecting, [node, gone]) == {
        node: FEASIBLE, gone: "REJECTION_KIND_UNKNOWN_NODE"}  # fmt: skip
    cluster.remove_node(gone)


# -- 5. leader election over a real Lease -----------------------------------------------------------------------


def lease_holder(plane: ControlPlane) -> str:
    lease = plane.admin.get(LEASE_PATH)
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def leader_label(plane: ControlPlane, pod_name: str) -> str | None:
    stored = plane.admin.get(f"/api/v1/namespaces/{SYSTEM}/pods/{pod_name}")
    assert stored is not None
    labels: dict[str, str] = stored["metadata"].get("labels") or {}
    return labels.get(LEADER_LABEL)


def follows(replica: Running, leader: str) -> None:
    """``replica`` refuses decisions, naming ``leader`` (once it has read the Lease: every retry period)."""
    eventually(
        lambda: refusal(lambda: replica.client.reserve(pod("at-follower"), [CPU])),
        lambda refused: refused.code == "UNAVAILABLE" and f"the leader is {leader!r}" in refused.message,
        f"a follower naming {leader}",
    )


def test_one_replica_leads_and_the_other_takes_over_when_it_dies_or_steps_down(cluster: Cluster) -> None:
    plane = cluster.plane
    names = [f"kubenexus-placement-election-{next(_names)}" for _ in range(2)]
    timings = ("--lease-duration=5", "--renew-deadline=4", "--retry-period=0.5")

    def replica(name: str) -> Running:
        return start(cluster.placement_kubeconfig(name), "--leader-elect", f"--identity={name}", *timings,
                     env={"POD_NAME": name, "POD_NAMESPACE": SYSTEM})  # fmt: skip

    replicas = {name: replica(name) for name in names}
    restarted: Running | None = None
    try:
        for made in replicas.values():
            made.service.wait_ready(timeout_s=READY_S)
        leader = eventually(lambda: lease_holder(plane), lambda holder: holder in names, "a leader", timeout_s=READY_S)
        (follower,) = set(names) - {leader}
        replicas[leader].service.wait_for("became the leader", lease="kubenexus-placement")
        eventually(lambda: leader_label(plane, leader), lambda label: label == "true", "the leader's label")
        assert leader_label(plane, follower) is None
        transitions = int(plane.admin.get(LEASE_PATH)["spec"]["leaseTransitions"])  # type: ignore[index]

        # Decisions only at the leader; the follower names it.
        follows(replicas[follower], leader)
        assert replicas[leader].client.reserve(pod("at-leader"), [CPU]).reserved

        replicas[leader].service.kill()  # a crash: the Lease is not released, it expires
        eventually(lambda: lease_holder(plane), lambda holder: holder == follower, "the takeover", timeout_s=READY_S)
        eventually(lambda: leader_label(plane, follower), lambda label: label == "true", "the new leader's label")
        assert int(plane.admin.get(LEASE_PATH)["spec"]["leaseTransitions"]) == transitions + 1  # type: ignore[index]
        assert replicas[follower].client.reserve(pod("after-takeover"), [CPU]).reserved

        # The dead leader's pod still says it leads, until its container restarts: then it takes the label off
        # and follows.
        assert leader_label(plane, leader) == "true"
        restarted = replica(leader)
        restarted.service.wait_ready(timeout_s=READY_S)
        eventually(lambda: leader_label(plane, leader), lambda label: label is None, "the stale label removed")
        follows(restarted, follower)
        assert lease_holder(plane) == follower

        # A clean stop (a rolling update's SIGTERM) hands the Lease back and takes the label off: the other
        # replica takes over without waiting for the Lease to expire.
        assert replicas[follower].service.stop() == 0
        assert lease_holder(plane) in ("", leader), "released, not left to expire"
        assert leader_label(plane, follower) is None
        eventually(lambda: lease_holder(plane), lambda holder: holder == leader, "the handover")
        eventually(lambda: leader_label(plane, leader), lambda label: label == "true", "the label back")
        assert restarted.client.reserve(pod("after-handover"), [CPU]).reserved
        assert int(plane.admin.get(LEASE_PATH)["spec"]["leaseTransitions"]) == transitions + 2  # type: ignore[index]
    finally:
        for made in (*replicas.values(), *([restarted] if restarted else [])):
            made.close()
    for made in (replicas[follower], *([restarted] if restarted else [])):
        assert "Traceback" not in made.service.text(), made.service.text()[-3000:]


# -- 6. what the service's identity may not do ------------------------------------------------------------------


def test_the_service_account_gets_what_its_rbac_and_admission_policy_grant_and_no_more(
    cluster: Cluster, running: Running
) -> None:
    plane = cluster.plane
    client = plane.client(running.kubeconfig, field_manager="kubenexus-placement")
    name = f"victim-{next(_names)}"
    cluster.create_pod(pod(name))
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"
    own = f"/api/v1/namespaces/{SYSTEM}/pods/{SERVICE_POD}"

    def forbidden(call: Callable[[], object]) -> str:
        with pytest.raises(ApiError) as refused:
            call()
        assert refused.value.status == 403, refused.value
        return refused.value.message

    try:
        # What RBAC grants: reading nodes, the placement annotations on any pod, the leader label on its own.
        assert client.get(f"/api/v1/nodes/{CPU}") is not None
        client.merge_patch(path, {"metadata": {"annotations": {RESERVED_NODE_KEY: CPU}}})
        client.merge_patch(own, {"metadata": {"labels": {LEADER_LABEL: "true"}}})
        client.merge_patch(own, {"metadata": {"labels": {LEADER_LABEL: None}}})

        # What it does not: delete a node, read secrets.
        deleted = plane.kubectl("delete", "node", CPU, "--wait=false", kubeconfig=running.kubeconfig, check=False)
        assert deleted.returncode != 0
        assert 'cannot delete resource "nodes"' in deleted.stderr
        assert plane.admin.get(f"/api/v1/nodes/{CPU}") is not None
        assert 'cannot list resource "secrets"' in forbidden(
            lambda: client.list(f"/api/v1/namespaces/{SYSTEM}/secrets")
        )

        # What the admission policy refuses although RBAC grants the patch.
        assert "may not change a pod's spec" in forbidden(
            lambda: client.merge_patch(path, {"spec": {"activeDeadlineSeconds": 60}}))  # fmt: skip
        assert "may change no label of a pod but placement.kubenexus.io/leader, not: example.com/team" in forbidden(
            lambda: client.merge_patch(path, {"metadata": {"labels": {"example.com/team": "ml"}}}))  # fmt: skip
        assert f"only on its own pod in kubenexus-system, not on {NAMESPACE}/{name}" in forbidden(
            lambda: client.merge_patch(path, {"metadata": {"labels": {LEADER_LABEL: "true"}}}))  # fmt: skip
        # Nor on another placement pod: no one steers the leader Service to a replica of their choosing.
        other = template_pod(PLACEMENT_DEPLOYMENT, f"{SERVICE_POD}-other", SYSTEM_NODE)
        ensure_object(plane, f"/api/v1/namespaces/{SYSTEM}/pods", other)
        cluster.placement_pods.append(other["metadata"]["name"])
        assert f"only on its own pod in kubenexus-system, not on {SYSTEM}/{SERVICE_POD}-other" in forbidden(
            lambda: client.merge_patch(f"/api/v1/namespaces/{SYSTEM}/pods/{SERVICE_POD}-other",
                                       {"metadata": {"labels": {LEADER_LABEL: "true"}}}))  # fmt: skip
        stored = plane.admin.get(path)
        assert stored is not None
        assert not stored["metadata"].get("labels")
        assert "activeDeadlineSeconds" not in stored["spec"]
        assert stored["metadata"]["annotations"] == {RESERVED_NODE_KEY: CPU}
    finally:
        client.close()
