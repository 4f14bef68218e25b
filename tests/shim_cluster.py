"""A placement replica (cluster feed + engine + gRPC server + leader election + binder) against kmock.

The emulator gets what the shim needs beyond ``tests.kube_emulator``: Pods, Events and Leases, the
resources the feed reads for the scheduling constraints (Namespaces, PriorityClasses,
PersistentVolumeClaims, PersistentVolumes, StorageClasses), and the Binding subresource (kmock does not
know it). A Binding is checked as the API server checks it: the
strict ``v1 Binding`` schema (422), its name against the URL's (400), the pod's existence (404), its
``metadata.uid`` and ``resourceVersion`` preconditions and a pod already bound (409); then the pod gets
``spec.nodeName`` at the next resourceVersion and the pod watch hears of it. Nodes are published by the
agent's own ``Publisher``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kmock
from kubernetes import client, config

from agent.publish import FIELD_MANAGER as AGENT_FIELD_MANAGER
from agent.publish import KubeNodeApi, Publisher
from kubenexus.kube.backoff import Backoff
from kubenexus.kube.client import KubeClient, connect
from kubenexus.kube.leader import LeaderElector, LeaseConfig
from kubenexus.topology.labels import encode_node_metadata
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.nrt import encode_nrt
from placement.api.server import PlacementServer, ServerOptions
from placement.cluster.feed import ClusterFeed
from placement.core.annotations import FIELD_MANAGER
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.shim.binder import Binder
from placement.shim.client import PlacementClient
from placement.state.cluster_index import ClusterIndex
from placement.state.gang_coordinator import GangCoordinator
from placement.state.nominations import Nominations
from placement.state.reservations import Reservations
from tests.conftest import STARTUP_TIMEOUT_S
from tests.kube_emulator import Emulator, merge_patch, refusal

PODS = kmock.resource("", "v1", "pods")
EVENTS = kmock.resource("", "v1", "events")
LEASES = kmock.resource("coordination.k8s.io", "v1", "leases")
NAMESPACES = kmock.resource("", "v1", "namespaces")
PRIORITY_CLASSES = kmock.resource("scheduling.k8s.io", "v1", "priorityclasses")
CLAIMS = kmock.resource("", "v1", "persistentvolumeclaims")
VOLUMES = kmock.resource("", "v1", "persistentvolumes")
STORAGE_CLASSES = kmock.resource("storage.k8s.io", "v1", "storageclasses")
DISRUPTION_BUDGETS = kmock.resource("policy", "v1", "poddisruptionbudgets")
# What the feed reads for the constraints: (resource, kind, singular, namespaced).
_READ_ONLY = (
    (NAMESPACES, "Namespace", "namespace", False),
    (PRIORITY_CLASSES, "PriorityClass", "priorityclass", False),
    (CLAIMS, "PersistentVolumeClaim", "persistentvolumeclaim", True),
    (VOLUMES, "PersistentVolume", "persistentvolume", False),
    (STORAGE_CLASSES, "StorageClass", "storageclass", False),
    (DISRUPTION_BUDGETS, "PodDisruptionBudget", "poddisruptionbudget", True),
)
NAMESPACE = "kubenexus-system"


class ShimEmulator(Emulator):
    """``Emulator`` plus Pods, Events, Leases, what the feed reads for the constraints, and the Binding
    subresource. Tests set the scene with ``put_object`` and ``delete_object`` (checked as writes are)."""

    def __enter__(self) -> ShimEmulator:
        super().__enter__()
        return self

    def __init__(self) -> None:
        super().__init__()
        self.bindings: list[tuple[str, str, str]] = []  # (namespace, pod, node) in arrival order
        # Given the number of bindings so far; True answers 503 (an API server going away mid-gang).
        self.refuse_binding: Callable[[int], bool] | None = None
        for resource, kind, singular in ((PODS, "Pod", "pod"), (EVENTS, "Event", "event"), (LEASES, "Lease", "lease")):
            self.kmock.resources[resource] = kmock.ResourceInfo(
                kind=kind, singular=singular, namespaced=True, verbs={"get", "list", "watch", "create", "patch"}
            )
        for resource, kind, singular, namespaced in _READ_ONLY:
            self.kmock.resources[resource] = kmock.ResourceInfo(
                kind=kind, singular=singular, namespaced=namespaced, verbs={"get", "list", "watch"}
            )
        self.kmock["post", PODS, kmock.subresource("binding")] << self._bind

    async def _bind(self, request: kmock.Request) -> dict[str, Any]:
        emulator, binding, name = self.kmock, request.data, str(request.name)
        if not isinstance(binding, dict):
            raise refusal(400, "BadRequest", "the Binding is not a JSON object")
        emulator.conform(binding, api_version="v1", kind="Binding")
        metadata = binding.get("metadata") or {}
        if metadata.get("name") != name:
            raise refusal(400, "BadRequest", "name in URL does not match name in Binding object")
        if self.refuse_binding is not None and self.refuse_binding(len(self.bindings)):
            raise refusal(503, "ServiceUnavailable", "the API server is going away")
        node, key = binding["target"]["name"], (PODS, request.namespace, name)
        async with emulator._lock:
            pod = emulator.existing(key)
            emulator.check_preconditions(pod, metadata, PODS)
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound:
                raise refusal(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": '
                    f'pod {name} is already assigned to node "{bound}"',
                )
            await emulator.commit(key, merge_patch(pod, {"spec": {"nodeName": node}, "status": {"phase": "Pending"}}))
        self.bindings.append((str(request.namespace), name, node))
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Success", "code": 201}

    def put_object(self, resource: kmock.resource, obj: dict[str, Any]) -> None:
        """Create or replace ``obj`` (its namespace and name from its metadata), as a controller would."""
        metadata = obj["metadata"]
        self.run(self.kmock.put_object((resource, metadata.get("namespace"), metadata["name"]), obj))

    def delete_object(self, resource: kmock.resource, name: str, namespace: str | None = None) -> None:
        async def delete() -> None:
            async with self.kmock._lock:
                self.kmock.existing((resource, namespace, name))
                await self.kmock.commit((resource, namespace, name), None)

        self.run(delete())

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.kmock.objects[PODS, namespace, name].raw)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [
            dict(obj.raw)
            for (resource, _, _), obj in self.kmock.objects.items()
            if resource == EVENTS and not obj.deleted and obj.raw["involvedObject"]["name"] == name
        ]


def publish_nodes(
    api: ShimEmulator,
    kubeconfig: Path,
    machines: dict[str, NodeTopology],
    labels: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """The agent's own publishing path: the Node's labels and annotation, and the NRT object. ``labels``:
    more labels per node, as the cloud provider or an operator puts them on the Node (zone, rack)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    with client.ApiClient(configuration) as api_client:
        for name, topology in machines.items():
            api.add_node(name, {"kubernetes.io/hostname": name, **(labels or {}).get(name, {})})
            nodes = KubeNodeApi(KubeClient(api_client, field_manager=AGENT_FIELD_MANAGER))
            publisher = Publisher(api=nodes, node_name=name)
            metadata, nrt = encode_node_metadata(topology), encode_nrt(topology, node_name=name)
            results = publisher.publish(metadata=metadata, nrt=nrt)
            assert all(r.error is None for r in results), results


@contextlib.contextmanager
def synced_feed(kubeconfig: Path) -> Iterator[tuple[ClusterFeed, ClusterIndex]]:
    """A cluster feed over the emulated API at ``kubeconfig``, into a fresh index, synced; stopped after."""
    api = connect(str(kubeconfig), field_manager=FIELD_MANAGER)
    index = ClusterIndex()
    feed = ClusterFeed(api, index, Reservations(index), watch_timeout_s=1, backoff=Backoff(0.05, 0.1))
    feed.start()
    try:
        assert feed.wait_synced(10)
        yield feed, index
    finally:
        feed.stop()
        api.close()


def pod_object(
    name: str,
    *,
    gpus: int = 0,
    cpus: int = 4,
    memory: str = "16Gi",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A Guaranteed pending pod for the kubenexus scheduler, as ``kubectl create`` would send it."""
    resources: dict[str, Any] = {"cpu": str(cpus), "memory": memory}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "schedulerName": "kubenexus-scheduler",
            "containers": [
                {"name": "main", "image": "trainer", "resources": {"requests": resources, "limits": resources}}
            ],
        },
        "status": {"phase": "Pending"},
    }


@dataclass
class Replica:
    """One placement pod: feed, engine, gRPC server, and a leader-elected binder using that server."""

    api: KubeClient
    binder_api: KubeClient  # its own connection, as in its own container: stopping it closes only its watch
    identity: str
    lease: LeaseConfig
    index: ClusterIndex = field(default_factory=ClusterIndex)

    def __post_init__(self) -> None:
        self.reservations = Reservations(self.index)
        nominations = Nominations()
        gangs = CoordinatedGangs(GangCoordinator(self.index, self.reservations, nominations=nominations))
        self.elector = LeaderElector(self.api, self.lease)
        # One Lease for the service and its binder here; deployed, each has its own (docs/scheduler.md).
        self.engine = PlacementEngine(
            index=self.index,
            reservations=self.reservations,
            gangs=gangs,
            synced=lambda: self.feed.synced,
            leadership=self.elector,
            nominations=nominations,
        )
        self.feed = ClusterFeed(
            self.api,
            self.index,
            self.reservations,
            watch_timeout_s=5,
            backoff=Backoff(0.05, 0.2),
            on_pod=self.engine.observe_pod,  # a bound or deleted preemptor's hold ends, then the gangs' view
            on_nominated=self.engine.observe_nomination,  # every replica holds what status.nominatedNodeName says
            # As placement.main wires it: the coordinator learns each node's topology domains.
            on_node=gangs.coordinator.observe_node,
            on_node_removed=gangs.coordinator.forget_node,
        )
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),), daemon=True)
        self.port = 0

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        server = PlacementServer(self.engine, ServerOptions(listen="127.0.0.1:0"))
        self.port = await server.start()
        self._started.set()
        await self._stopping.wait()
        await server.stop(0)

    def start(self, *, binder: bool = True) -> Replica:
        self.feed.start()
        self._thread.start()
        assert self._started.wait(STARTUP_TIMEOUT_S), "the gRPC server did not start"
        self.client = PlacementClient.connect(f"127.0.0.1:{self.port}")
        self.binder: Binder | None = None
        if binder:
            self.binder = Binder(
                self.binder_api,
                self.client,
                is_leader=self.elector.is_leader,
                identity=self.identity,
                interval_s=0.1,
                watch_timeout_s=5,
            )
            self.binder.start()
        self.elector.start()
        return self

    def kill(self) -> None:
        """What a crash looks like to the others: nothing released, the Lease left to expire."""
        self.elector.stop(release=False)
        if self.binder is not None:
            self.binder.stop()
        self.feed.stop()
        self.client.close()
        self.api.close()
        self.binder_api.close()
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


def replica(emulator: ShimEmulator, kubeconfig: Path, identity: str) -> Replica:
    lease = LeaseConfig(
        namespace=NAMESPACE,
        name="kubenexus-binder",
        identity=identity,
        lease_duration_s=1.5,
        renew_deadline_s=1.0,
        retry_period_s=0.2,
    )
    return Replica(
        api=connect(str(kubeconfig), field_manager=FIELD_MANAGER),
        binder_api=connect(str(kubeconfig), field_manager=FIELD_MANAGER),
        identity=identity,
        lease=lease,
    )
