"""Scheduling throughput on a real control plane, scheduler_perf style: the same nodes and pods under four
schedulers, one after another, in one run (issue #29 item 6).

    python -m benchmarks.scheduler_throughput [--nodes 1000,5000] [--pods 3000]
        [--variants stock,plugin,extender,binder] [--timeout 900] [--json PATH]

Variants:

* **stock**: kube-scheduler v1.37.2 (the control plane's build), the default profile (``default-scheduler``),
  as ``system:kube-scheduler`` with the control plane's client certificate;
* **plugin**: kubenexus-scheduler (``tools/kubenexus_scheduler.py``) with the shipped
  deploy/scheduler/kubenexus-scheduler-config.yaml, changed only where this machine differs from a cluster
  (``tests/plugin_cluster.py``'s ``for_this_machine``), as the ServiceAccount the chart's plugin
  mode makes;
* **extender**: the stock kube-scheduler with the shipped deploy/scheduler/kube-scheduler-config.yaml
  (``tests/cluster/test_cluster_extender.py``'s ``for_this_machine``) calling ``kubenexus-placement extender``;
* **binder**: ``kubenexus-placement binder``, as tests/cluster/test_cluster_binder.py runs it, but at its default
  ``--interval`` (a deployment's) rather than the tests' shorter one.

The shims' flags are the deployment's (deploy/placement/02-deployment.yaml: the extender's ``--gang-timeout=10``),
without the tests' debug logging. The processes' client settings are left at their defaults for every variant
alike (kube-scheduler's 50 QPS / 100 burst among them), as a cluster runs them: a ratio measures the product as
shipped, not a tuned scheduler.

One control plane (etcd, kube-apiserver v1.37.2, ``tests.control_plane``) and one node set per ``--nodes``
size, shared by the variants. Nodes are Node objects with the machine's capacity and a Ready condition, as
scheduler_perf makes them; four in five are the 8x H100 NVSwitch machine (``nvswitch_node``, 2 NUMA cells of 4
GPUs), one in five the 2-socket CPU node (``cpu_node``). Their labels, annotations and NodeResourceTopology are
written by the agent's own ``Publisher`` and codecs, but through one administrator client shared by a thread
pool rather than each node's agent identity: the per-node identity (tests/cluster_scene.py ``publish_topology``)
costs a DaemonSet pod, a TokenRequest and a TLS connection per node, minutes at 5,000 nodes, and changes nothing
the schedulers or the service read.

Pods (``--pods``, deterministic): 40% single-NUMA GPU pods (1, 2 or 4 GPUs, the ``single-numa`` policy
annotation), 30% members of gangs alternately of 4 (4 GPUs each) and 8 (2 GPUs each), single-NUMA too, labelled
with ``pod-group.scheduling.kubenexus.io/name`` and ``.../min-available``, and the rest plain CPU pods; all
Guaranteed. The stock variant gets the same pods with ``schedulerName: default-scheduler`` (it ignores the
annotations and labels). Each variant has its own namespace.

Order: the variants always run in the order above, whichever are asked for: the stock kube-scheduler runs before
the placement service starts, so that the service's own work on the pod events does not slow the baseline
down on a shared machine. The service (``serve --leader-elect``, as deployed) then starts once per size and
serves the plugin, the extender and the binder in turn. Between variants the previous scheduler process (and
shim) is stopped, its Lease deleted (the next one must win its own before it schedules), its pods
force-deleted, and, while the service runs, the next variant waits until ``ListNodes`` shows no pod on any
node: the service has forgotten them.

Measurements, per variant: the pods are created concurrently (a thread pool), each pod's creation time taken
on the client just before its POST; a watch on the namespace (started before the first POST) records, per pod,
the client time at which an event first shows ``spec.nodeName``. pods/s = bound pods / (last binding - first
creation); p50 and p99 of (binding - creation) in ms. A variant ends when every pod is bound or after
``--timeout`` seconds, or as soon as one of its processes (or the service) exits; the pods not bound are then
counted and named, never waited for, and a process that exited or logged a Python traceback is reported.

NUMA-aligned: the share of bound single-NUMA pods whose placement annotations
(``numa.scheduling.kubenexus.io/assigned-numa-nodes``, ``.../assigned-gpus``) name one cell and as many GPUs
as the pod asked for, every one on that cell (the node's topology says where each GPU is). The stock variant
prints "n/a": kube-scheduler chooses a node, never cells or GPUs (the kubelet would, after binding, and there
is no kubelet here), so there is nothing to judge.

Output: a table per size, then ``ratio plugin/stock N nodes: X`` and ``ratio plugin/extender N nodes: Y``
(ratios of pods/s), each followed by its target (X >= 0.8, Y >= 3; set at 5,000 nodes) and met / MISSED, and
whether every plugin placement was NUMA-aligned.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc

from agent.publish import FIELD_MANAGER as AGENT_FIELD_MANAGER
from agent.publish import KubeNodeApi, Publisher
from kubenexus.kube.client import Json, KubeClient
from kubenexus.kube.errors import API_ERRORS
from kubenexus.topology.labels import encode_node_metadata
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.nrt import encode_nrt
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc as pb_grpc
from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
    POLICY_KEY,
    parse_ids,
)
from placement.shim.client import TlsFiles
from tests import plugin_cluster as plugin_mode
from tests.cluster import test_cluster_extender as extender_mode
from tests.cluster_kube_scheduler import (
    KUBE_SCHEDULER_ACCOUNT,
    LEASES_PATH,
    SYSTEM,
    kube_scheduler_identity,
    sign_client_certificate,
    start_scheduler,
)
from tests.cluster_scene import SCHEDULER, create_scene_namespace
from tests.conftest import wait_until
from tests.control_plane import PLACEMENT_MANIFESTS, ControlPlane, free_port, install, placement_kubeconfig
from tests.machines.node_topologies import cpu_node, nvswitch_node
from tests.programs import Program, Service, http_status
from tools.kubenexus_scheduler import PROGRAMS, BuildError
from tools.throwaway_certificates import make_certificates

VARIANTS = ("stock", "plugin", "extender", "binder")
STOCK_SCHEDULER = "default-scheduler"
GPU = "nvidia.com/gpu"
TARGET_STOCK_RATIO = 0.8
TARGET_EXTENDER_RATIO = 3.0
TARGET_NODES = 5_000
PLACEMENT_POD = "kubenexus-placement-benchmark"
PLACEMENT_NAMESPACE = "kubenexus-system"
NODE_WORKERS = 8
CREATE_WORKERS = 16
WATCH_S = 30.0
# Deadlines, not waits, for the steps around a measurement: a cold service lists every node and NRT before it
# serves, and forgets 3,000 deleted pods one watch event at a time; both grow with the cluster.
SETUP_S = 300.0
SETUP_S_PER_NODE = 0.1
UNBOUND_SHOWN = 10


# -- the nodes --------------------------------------------------------------------------------------------


def node_kinds(count: int) -> dict[str, NodeTopology]:
    """Node name -> its machine: four NVSwitch GPU nodes in five, then a CPU node."""
    gpu, cpu = nvswitch_node(), cpu_node()
    return {f"bench-{n:05d}": cpu if n % 5 == 4 else gpu for n in range(count)}


def capacity(machine: NodeTopology) -> dict[str, str]:
    """What the kubelet would report for the machine (as tests/cluster_kube_scheduler.py ``add_nodes``)."""
    resources = {
        "cpu": str(len(machine.machine.online_cpus)),
        "memory": str(sum(cell.memory_bytes or 0 for cell in machine.numa_cells)),
        "pods": "110",
    }
    if machine.gpus:
        resources[GPU] = str(len(machine.gpus))
    return resources


def create_nodes(plane: ControlPlane, machines: Mapping[str, NodeTopology]) -> None:
    """Every Node, then its topology as the agent's ``Publisher`` writes it, from a thread pool (see the
    module docstring for why one administrator client and not each node's agent)."""
    publishing = plane.client(plane.admin_kubeconfig, field_manager=AGENT_FIELD_MANAGER)

    def one(name: str, machine: NodeTopology) -> None:
        plane.create_node(name, capacity=capacity(machine))
        publisher = Publisher(api=KubeNodeApi(publishing), node_name=name)
        results = publisher.publish(metadata=encode_node_metadata(machine), nrt=encode_nrt(machine, node_name=name))
        failed = [result for result in results if result.error is not None]
        if failed:
            raise RuntimeError(f"publishing node {name}'s topology failed: {failed}")

    try:
        with ThreadPoolExecutor(NODE_WORKERS) as pool:
            for done in [pool.submit(one, name, machine) for name, machine in machines.items()]:
                done.result()
    finally:
        publishing.close()


# -- the pods ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """One pod of the workload, before it is given a scheduler and a namespace."""

    name: str
    gpus: int
    cpus: int
    memory_gib: int
    single_numa: bool
    gang: str = ""
    gang_size: int = 0


def workload(count: int, seed: int = 0) -> list[Shape]:
    """``count`` pods (module docstring): gangs alternately of 4 and 8 while 30% of ``count`` allows (an 8 that
    would not fit becomes a 4), 40% single GPU pods, CPU pods for the rest; gangs kept together, the units
    (a pod, or a gang) in a seeded random order."""
    gang_budget, gpu_pods = count * 3 // 10, count * 4 // 10
    units: list[list[Shape]] = []
    while gang_budget >= 4:
        size, gpus = (8, 2) if len(units) % 2 and gang_budget >= 8 else (4, 4)
        name = f"gang-{len(units)}"
        units.append([Shape(f"{name}-{i}", gpus, 4 * gpus, 16 * gpus, True, name, size) for i in range(size)])
        gang_budget -= size
    members = sum(len(unit) for unit in units)
    rng = random.Random(seed)
    for number in range(gpu_pods):
        gpus = rng.choice((1, 2, 4))
        units.append([Shape(f"gpu-{number}", gpus, 4 * gpus, 16 * gpus, True)])
    units += [[Shape(f"cpu-{number}", 0, 4, 16, False)] for number in range(count - members - gpu_pods)]
    rng.shuffle(units)
    return [shape for unit in units for shape in unit]


def pod_object(shape: Shape, *, namespace: str, scheduler: str) -> Json:
    """A Guaranteed pod (requests = limits), as tests/cluster_scene.py ``SceneBase.pod`` builds them."""
    resources = {"cpu": str(shape.cpus), "memory": f"{shape.memory_gib}Gi"}
    if shape.gpus:
        resources[GPU] = str(shape.gpus)
    labels = {GROUP_NAME_KEY: shape.gang, MIN_AVAILABLE_KEY: str(shape.gang_size)} if shape.gang else {}
    annotations = {POLICY_KEY: "single-numa"} if shape.single_numa else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": shape.name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.example/trainer:1",
                            "resources": {"requests": resources, "limits": dict(resources)}}],
        },
    }  # fmt: skip


def describe_workload(shapes: Sequence[Shape]) -> str:
    gangs: dict[str, int] = {shape.gang: shape.gang_size for shape in shapes if shape.gang}
    members = sum(gangs.values())
    gpu = sum(1 for shape in shapes if shape.gpus and not shape.gang)
    by_size = ", ".join(f"{list(gangs.values()).count(size)} of {size}" for size in sorted(set(gangs.values())))
    return (
        f"{len(shapes)} pods: {gpu} single-NUMA GPU pods, {len(shapes) - gpu - members} CPU pods, "
        f"{members} gang members (gangs: {by_size or 'none'})"
    )


# -- watching the bindings --------------------------------------------------------------------------------


class Bindings:
    """The client time at which a watch event first shows each pod of ``path`` with ``spec.nodeName``; sets
    ``complete`` once every name of ``expected`` is bound. A watch that ends is resumed from its last
    resourceVersion; one refused (410 Gone) is replaced by a list, its bound pods stamped when seen there."""

    def __init__(self, client: KubeClient, path: str) -> None:
        self._client = client
        self._path = path
        self.bound_at: dict[str, float] = {}
        self.expected: set[str] = set()
        self.complete = threading.Event()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._version = self._list()
        self._thread = threading.Thread(target=self._run, name="bindings", daemon=True)
        self._thread.start()

    def expect(self, names: Sequence[str]) -> None:
        with self._lock:
            self.expected = set(names)
            self._check()

    def close(self) -> None:
        self._stopping.set()
        self._client.close_streams()
        self._thread.join(timeout=WATCH_S + 10)

    def _seen(self, pod: Json) -> None:
        if (pod.get("spec") or {}).get("nodeName"):
            now = time.perf_counter()
            with self._lock:
                self.bound_at.setdefault(pod["metadata"]["name"], now)
                self._check()

    def _check(self) -> None:
        if self.expected and self.expected <= self.bound_at.keys():
            self.complete.set()

    def _list(self) -> str:
        listed = self._client.list(self._path)
        for pod in listed["items"]:
            self._seen(pod)
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._watch()
            except API_ERRORS:
                # Dropped or refused: list again after a pause (an Event's, which ``close`` cuts short).
                if not self._stopping.wait(1.0):
                    with contextlib.suppress(*API_ERRORS):
                        self._version = self._list()

    def _watch(self) -> None:
        for event in self._client.watch(self._path, resource_version=self._version, timeout_s=WATCH_S):
            if event.get("type") == "ERROR":
                self._version = self._list()
                return
            pod = event.get("object") or {}
            self._version = str((pod.get("metadata") or {}).get("resourceVersion") or self._version)
            if event.get("type") in ("ADDED", "MODIFIED"):
                self._seen(pod)
            if self._stopping.is_set():
                return


# -- one run's figures ------------------------------------------------------------------------------------


@dataclass
class Figures:
    variant: str
    created: int
    bound: int
    pods_per_s: float
    p50_ms: float | None  # None: no pod bound
    p99_ms: float | None
    single_numa: int  # bound single-NUMA pods
    aligned: int | None  # of them NUMA-aligned; None where the scheduler chooses no cells (stock)
    seconds: float
    unbound: list[str] = field(default_factory=list)  # the first few names
    problems: list[str] = field(default_factory=list)  # a process that exited or logged a traceback

    def numa_text(self) -> str:
        if self.aligned is None:
            return "n/a"
        share = 100.0 * self.aligned / self.single_numa if self.single_numa else 0.0
        return f"{self.aligned}/{self.single_numa} ({share:.0f}%)"


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest rank: the smallest value with at least ``fraction`` of them at or below it; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def gpu_cells(machines: Mapping[str, NodeTopology]) -> dict[str, dict[int, int | None]]:
    return {name: {gpu.index: gpu.numa_node for gpu in machine.gpus} for name, machine in machines.items()}


def requested_gpus(pod: Json) -> int:
    return sum(int(c["resources"]["requests"].get(GPU, 0)) for c in pod["spec"]["containers"])


def numa_aligned(pods: Sequence[Json], cells_of: Mapping[str, Mapping[int, int | None]]) -> tuple[int, int]:
    """(bound single-NUMA pods, those whose annotations name one cell and as many GPUs as the pod asked for,
    every one on that cell). A pod without the annotations is not aligned: nothing says where it sits."""
    total = aligned = 0
    for pod in pods:
        annotations = pod["metadata"].get("annotations") or {}
        node = pod["spec"].get("nodeName")
        if annotations.get(POLICY_KEY) != "single-numa" or not node:
            continue
        total += 1
        cells = parse_ids(ASSIGNED_CELLS_KEY, annotations.get(ASSIGNED_CELLS_KEY))
        gpus = parse_ids(ASSIGNED_GPUS_KEY, annotations.get(ASSIGNED_GPUS_KEY))
        on_cell = len(cells) == 1 and all(cells_of.get(node, {}).get(gpu) == cells[0] for gpu in gpus)
        if on_cell and len(gpus) == requested_gpus(pod):
            aligned += 1
    return total, aligned


# -- the cluster of one size ------------------------------------------------------------------------------


@dataclass
class Cluster:
    """One size's control plane, nodes and (once started) placement service."""

    plane: ControlPlane
    certificates: Path
    folder: Path
    machines: dict[str, NodeTopology]
    shapes: list[Shape]
    timeout_s: float
    stack: contextlib.ExitStack
    binary: Path | None  # kubenexus-scheduler, where the plugin variant runs
    service: Service | None = None
    placement: Path | None = None  # the placement ServiceAccount's kubeconfig
    channel: grpc.Channel | None = None  # to the service, as the shims' identity

    @property
    def setup_s(self) -> float:
        return SETUP_S + SETUP_S_PER_NODE * len(self.machines)

    def tls(self) -> TlsFiles:
        folder = self.certificates
        return TlsFiles(ca=folder / "ca.crt", cert=folder / f"{SCHEDULER}.crt", key=folder / f"{SCHEDULER}.key")

    def start_service(self) -> Service:
        """``serve`` as deployed (``--leader-elect``, mutual TLS, the kubenexus-placement ServiceAccount),
        once it leads and its cache holds every node."""
        if self.service is not None:
            return self.service
        self.placement = placement_kubeconfig(self.plane, PLACEMENT_POD, self.folder / "placement.kubeconfig",
                                              node="bench-system")  # fmt: skip
        certificates = self.certificates
        service = Service(
            self.placement,
            "--leader-elect",
            f"--tls-cert={certificates / 'server.crt'}",
            f"--tls-key={certificates / 'server.key'}",
            f"--tls-client-ca={certificates / 'ca.crt'}",
            f"--writer-identity={SCHEDULER}",
            env={"POD_NAME": PLACEMENT_POD, "POD_NAMESPACE": PLACEMENT_NAMESPACE},
        )
        self.stack.callback(service.stop)
        self.service = service
        self.channel = grpc.secure_channel(service.address, self.tls().credentials())
        self.stack.callback(self.channel.close)
        service.wait_ready(timeout_s=self.setup_s)
        service.wait_for("became the leader", timeout_s=self.setup_s, lease="kubenexus-placement")
        wait_until(lambda: len(self.summaries()) == len(self.machines), timeout_s=self.setup_s,
                   what=f"the service to know all {len(self.machines)} nodes")  # fmt: skip
        return service

    def summaries(self) -> list[pb.NodeSummary]:
        """The service's ListNodes, as ``grpcurl`` would call it."""
        assert self.channel is not None
        answer: pb.ListNodesResponse = pb_grpc.PlacementStub(self.channel).ListNodes(pb.ListNodesRequest(), timeout=60)
        return list(answer.nodes)

    def forget(self, namespace: str, lease: str) -> None:
        """The last variant's pods force-deleted (no kubelet confirms a graceful deletion) and its Lease
        deleted; returns once the API has no pod left there and the service (if running) none on any node."""
        self.plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force",
                           "--wait=false", check=False)  # fmt: skip
        self.plane.delete(f"{LEASES_PATH}/{lease}")
        path = f"/api/v1/namespaces/{namespace}/pods"
        wait_until(lambda: not self.plane.admin.list(path)["items"], timeout_s=self.setup_s,
                   what=f"the pods of {namespace} to be gone")  # fmt: skip
        if self.service is not None:
            wait_until(lambda: sum(node.pods for node in self.summaries()) == 0, timeout_s=self.setup_s,
                       what="the service to forget the deleted pods")  # fmt: skip


# -- the variants: each starts its processes and returns its Lease and them, to stop in that order ----------


class Component(Protocol):
    """A process a variant runs: kube-scheduler (``tests.control_plane.Process``) or a shim or the service
    (``tests.programs.Program``)."""

    name: str

    def running(self) -> bool: ...

    def stop(self) -> object: ...


Started = tuple[str, list[Component]]


def start_stock(cluster: Cluster) -> Started:
    """kube-scheduler's default profile as ``system:kube-scheduler`` (the control plane's own certificate)."""
    plane, lease = cluster.plane, "kube-scheduler"
    kubeconfig = plane.write_cert_kubeconfig(cluster.folder / "stock.kubeconfig", "kube-scheduler")
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        # The Lease in kubenexus-system beside the others' (system:kube-scheduler may hold "kube-scheduler" in
        # any namespace), so that one wait serves every variant.
        "leaderElection": {"leaderElect": True, "resourceNamespace": SYSTEM, "resourceName": lease},
    }
    process = start_scheduler(plane, config, cluster.folder / "stock.yaml")
    return lease, [process]


def scheduler_kubeconfig(cluster: Cluster, mode: str) -> Path:
    cluster.plane.apply_objects(kube_scheduler_identity(mode=mode))
    return cluster.plane.service_account_kubeconfig(cluster.folder / f"{mode}-scheduler.kubeconfig", SYSTEM,
                                                    KUBE_SCHEDULER_ACCOUNT)  # fmt: skip


def start_plugin(cluster: Cluster) -> Started:
    """As tests/plugin_cluster.py's ``plugged_scheduler``."""
    service = cluster.start_service()
    assert cluster.binary is not None
    kubeconfig = scheduler_kubeconfig(cluster, "plugin")
    config = plugin_mode.for_this_machine(plugin_mode.shipped_config(), kubeconfig=kubeconfig,
                                          address=service.address, certificates=cluster.certificates)  # fmt: skip
    process = start_scheduler(cluster.plane, config, cluster.folder / "kubenexus-scheduler.yaml",
                              binary=cluster.binary)  # fmt: skip
    return str(config["leaderElection"]["resourceName"]), [process]


def service_client(service: Service, certificates: Path) -> list[str]:
    """A shim's flags to reach the service as the writer identity, over mutual TLS."""
    identity = certificates / SCHEDULER
    return [
        f"--service={service.address}",
        f"--service-ca={certificates / 'ca.crt'}",
        f"--service-cert={identity}.crt",
        f"--service-key={identity}.key",
    ]


def start_extender(cluster: Cluster) -> Started:
    """As tests/cluster/test_cluster_extender.py's ``extended`` fixture, at the deployment's log level."""
    service = cluster.start_service()
    assert cluster.placement is not None
    certificates, port = cluster.certificates, free_port()
    extender = Program("extender", [
        "extender", f"--kubeconfig={cluster.placement}", f"--listen=127.0.0.1:{port}",
        f"--tls-cert={certificates / 'server.crt'}", f"--tls-key={certificates / 'server.key'}",
        f"--tls-client-ca={certificates / 'ca.crt'}", *service_client(service, certificates), "--gang-timeout=10",
    ])  # fmt: skip
    try:
        extender.wait_for("extender listening", timeout_s=cluster.setup_s)
        cert, key = sign_client_certificate(certificates, cluster.folder, KUBE_SCHEDULER_ACCOUNT)
        tls = {"caFile": certificates / "ca.crt", "certFile": cert, "keyFile": key}
        config = extender_mode.for_this_machine(extender_mode.shipped_config(),
                                                kubeconfig=scheduler_kubeconfig(cluster, "extender"),
                                                extender_port=port, tls=tls)  # fmt: skip
        process = start_scheduler(cluster.plane, config, cluster.folder / "kube-scheduler-extender.yaml")
    except BaseException:
        extender.stop()
        raise
    return str(config["leaderElection"]["resourceName"]), [process, extender]


def start_binder(cluster: Cluster) -> Started:
    """As tests/cluster/test_cluster_binder.py's ``placement`` fixture, at the binder's default ``--interval``."""
    service = cluster.start_service()
    assert cluster.placement is not None
    certificates, metrics = cluster.certificates, free_port()
    binder = Program("binder", [
        "binder", f"--kubeconfig={cluster.placement}", *service_client(service, certificates),
        f"--metrics-address=127.0.0.1:{metrics}",
    ], env={"POD_NAME": PLACEMENT_POD, "POD_NAMESPACE": PLACEMENT_NAMESPACE})  # fmt: skip
    try:
        binder.wait_for("became the leader", timeout_s=cluster.setup_s, lease="kubenexus-binder")
        wait_until(lambda: http_status(f"http://127.0.0.1:{metrics}/readyz") == 200, timeout_s=cluster.setup_s,
                   what="the binder's pod watch to sync")  # fmt: skip
    except BaseException:
        binder.stop()
        raise
    return "kubenexus-binder", [binder]


STARTS: dict[str, Callable[[Cluster], Started]] = {
    "stock": start_stock,
    "plugin": start_plugin,
    "extender": start_extender,
    "binder": start_binder,
}


# -- measuring one variant --------------------------------------------------------------------------------


def create_pods(client: KubeClient, path: str, pods: Sequence[Json]) -> dict[str, float]:
    """Each pod POSTed from a thread pool; its name -> the client time just before its POST. A refused POST
    is reported on stderr and leaves the pod out."""

    def one(pod: Json) -> tuple[str, float] | None:
        started = time.perf_counter()
        try:
            client.create(path, pod)
        except API_ERRORS as error:
            print(f"creating pod {pod['metadata']['name']} failed: {error}", file=sys.stderr)
            return None
        return pod["metadata"]["name"], started

    with ThreadPoolExecutor(CREATE_WORKERS) as pool:
        return dict(done for done in pool.map(one, pods) if done is not None)


def measure(cluster: Cluster, variant: str) -> Figures:
    """One variant, start to stop (module docstring); the figures, whether or not every pod was bound."""
    namespace = f"bench-{variant}"
    create_scene_namespace(cluster.plane, namespace)
    scheduler = STOCK_SCHEDULER if variant == "stock" else SCHEDULER
    pods = [pod_object(shape, namespace=namespace, scheduler=scheduler) for shape in cluster.shapes]
    path = f"/api/v1/namespaces/{namespace}/pods"
    lease, components = STARTS[variant](cluster)
    watched = [*components, *([cluster.service] if cluster.service is not None else [])]
    client = cluster.plane.client(cluster.plane.admin_kubeconfig, field_manager="kubenexus-benchmark")
    watcher = cluster.plane.client(cluster.plane.admin_kubeconfig, field_manager="kubenexus-benchmark")
    bindings = Bindings(watcher, path)
    try:
        started = time.perf_counter()
        created = create_pods(client, path, pods)
        bindings.expect(list(created))
        exited = wait_bound(bindings, watched, deadline=started + cluster.timeout_s)
        seconds = time.perf_counter() - started
        stored = client.list(path)["items"]
    finally:
        bindings.close()
        for component in components:
            component.stop()
        client.close()
        watcher.close()
    figures = figures_of(variant, created=created, bound_at=dict(bindings.bound_at), stored=stored,
                         machines=cluster.machines, seconds=seconds)  # fmt: skip
    figures.problems = [f"{name} exited while its pods waited" for name in exited]
    figures.problems += [f"{name} logged a traceback" for name in tracebacks(components)]
    cluster.forget(namespace, lease)
    return figures


def tracebacks(components: Sequence[Component]) -> list[str]:
    """The names of the product's programs (not kube-scheduler, whose log is Go's) that logged a traceback."""
    return [c.name for c in components if isinstance(c, Program) and "Traceback" in c.text()]


def wait_bound(bindings: Bindings, components: Sequence[Component], *, deadline: float) -> list[str]:
    """Until every pod is bound, the deadline passes, or a process the variant needs exits (its pods would
    wait in vain); the names of those that exited."""
    while not bindings.complete.wait(timeout=max(0.0, min(1.0, deadline - time.perf_counter()))):
        exited = [component.name for component in components if not component.running()]
        if exited or time.perf_counter() >= deadline:
            return exited
    return []


def figures_of(
    variant: str,
    *,
    created: Mapping[str, float],
    bound_at: Mapping[str, float],
    stored: Sequence[Json],
    machines: Mapping[str, NodeTopology],
    seconds: float,
) -> Figures:
    bound = {name: at for name, at in bound_at.items() if name in created}
    latencies_ms = [1000.0 * (at - created[name]) for name, at in bound.items()]
    span = max(bound.values(), default=0.0) - min(created.values(), default=0.0)
    single_numa, aligned = numa_aligned(stored, gpu_cells(machines))
    return Figures(
        variant=variant,
        created=len(created),
        bound=len(bound),
        pods_per_s=len(bound) / span if bound and span > 0 else 0.0,
        p50_ms=percentile(latencies_ms, 0.50),
        p99_ms=percentile(latencies_ms, 0.99),
        single_numa=single_numa,
        aligned=None if variant == "stock" else aligned,
        seconds=seconds,
        unbound=sorted(set(created) - set(bound))[:UNBOUND_SHOWN],
    )


# -- one size, and the report -----------------------------------------------------------------------------


def run_size(
    nodes: int, shapes: list[Shape], variants: Sequence[str], *, timeout_s: float, folder: Path, binary: Path | None
) -> list[Figures]:
    """One control plane and node set, every variant asked for in the canonical order (module docstring)."""
    folder.mkdir(parents=True)
    certificates = folder / "tls"
    certificates.mkdir()
    make_certificates(certificates, [SCHEDULER])
    with contextlib.ExitStack() as stack:
        plane = stack.enter_context(ControlPlane(folder / "control-plane"))
        install(plane, PLACEMENT_MANIFESTS)
        machines = node_kinds(nodes)
        began = time.perf_counter()
        create_nodes(plane, machines)
        print(f"{nodes} nodes created and published in {time.perf_counter() - began:.0f} s", flush=True)
        cluster = Cluster(plane, certificates, folder, machines, shapes, timeout_s, stack, binary)
        results = []
        for variant in [v for v in VARIANTS if v in variants]:
            figures = measure(cluster, variant)
            print(f"  {variant}: {figures.bound}/{figures.created} bound in {figures.seconds:.0f} s", flush=True)
            results.append(figures)
        if cluster.service is not None and tracebacks([cluster.service]):
            print(f"the placement service logged a traceback:\n{cluster.service.text()[-3000:]}", flush=True)
        return results


def milliseconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def ratio(results: Sequence[Figures], numerator: str, denominator: str) -> float | None:
    by_variant = {figures.variant: figures.pods_per_s for figures in results}
    if numerator not in by_variant or not by_variant.get(denominator):
        return None
    return by_variant[numerator] / by_variant[denominator]


def report(nodes: int, results: Sequence[Figures]) -> list[str]:
    """The table, the two ratio lines (each with its target) and the plugin's alignment, for one size."""
    lines = [
        f"| {nodes} nodes | pods/s | p50 ms | p99 ms | bound | NUMA-aligned |",
        "|---|---|---|---|---|---|",
    ]
    for figures in results:
        latencies = f"{milliseconds(figures.p50_ms)} | {milliseconds(figures.p99_ms)}"
        bound = f"{figures.bound}/{figures.created}"
        numa = figures.numa_text()
        lines.append(f"| {figures.variant} | {figures.pods_per_s:.1f} | {latencies} | {bound} | {numa} |")
    for figures in results:
        if figures.unbound:
            more = " ..." if figures.created - figures.bound > len(figures.unbound) else ""
            lines.append(f"{figures.variant}: {figures.created - figures.bound} pods not bound: "
                         f"{', '.join(figures.unbound)}{more}")  # fmt: skip
        lines += [f"{figures.variant}: {problem}" for problem in figures.problems]
    for other, target in (("stock", TARGET_STOCK_RATIO), ("extender", TARGET_EXTENDER_RATIO)):
        value = ratio(results, "plugin", other)
        lines.append(f"ratio plugin/{other} {nodes} nodes: {'n/a' if value is None else f'{value:.2f}'}")
        verdict = "not measured" if value is None else ("met" if value >= target else "MISSED")
        lines.append(f"  target >= {target:g} (set at {TARGET_NODES:,} nodes): {verdict}")
    plugin = next((figures for figures in results if figures.variant == "plugin"), None)
    if plugin is not None:
        every = plugin.bound == plugin.created and plugin.aligned == plugin.single_numa
        lines.append(f"plugin placements NUMA-aligned {nodes} nodes: {plugin.numa_text()}; "
                     f"target every one: {'met' if every else 'MISSED'}")  # fmt: skip
    return lines


def numbers(text: str) -> list[int]:
    try:
        values = [int(item.replace("_", "")) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated whole numbers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one or more positive numbers")
    return values


def variant_names(text: str) -> list[str]:
    names = [item.strip() for item in text.split(",") if item.strip()]
    unknown = sorted(set(names) - set(VARIANTS))
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: choose among {','.join(VARIANTS)}")
    return names


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=numbers, default=[1000, 5000], help="node counts (default 1000,5000)")
    parser.add_argument("--pods", type=int, default=3000, help="pods per variant (default 3000)")
    parser.add_argument("--variants", type=variant_names, default=list(VARIANTS),
                        help=f"which to run (default {','.join(VARIANTS)}; always run in that order)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per variant (default 900)")
    parser.add_argument("--json", type=Path, help="write the raw figures to this file")
    parser.add_argument("--seed", type=int, default=0, help="the workload's random seed (default 0)")
    args = parser.parse_args(argv)
    if args.pods < 1:
        parser.error("--pods must be positive")
    shapes = workload(args.pods, args.seed)
    binary = None
    if "plugin" in args.variants:
        try:
            binary = PROGRAMS.build() / "kubenexus-scheduler"
        except BuildError as error:
            parser.exit(2, f"kubenexus-scheduler could not be built: {error}\n")
    print(describe_workload(shapes), flush=True)
    raw: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="scheduler-throughput-") as scratch:
        for nodes in args.nodes:
            folder = Path(scratch) / f"{nodes}-nodes"
            results = run_size(nodes, shapes, args.variants, timeout_s=args.timeout, folder=folder, binary=binary)
            print("\n".join(report(nodes, results)), flush=True)
            raw.append({"nodes": nodes, "pods": args.pods, "variants": [asdict(figures) for figures in results],
                        "ratios": {"plugin/stock": ratio(results, "plugin", "stock"),
                                   "plugin/extender": ratio(results, "plugin", "extender")}})  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(raw, indent=2) + "\n")


if __name__ == "__main__":
    main()
