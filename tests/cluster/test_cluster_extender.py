"""Extender mode against the real kube-scheduler v1.37: the second kube-scheduler runs with the shipped
deploy/scheduler/kube-scheduler-config.yaml, changed only where a test machine differs from a cluster (its
kubeconfig, the extender's host and port, the TLS files), as the ServiceAccount and RBAC the Helm chart's extender
mode gives it; it calls ``kubenexus-placement extender`` over HTTPS with mutual TLS (its client certificate named
as the chart names it), which decides through ``serve`` over mutual-TLS gRPC, both as the kubenexus-placement
ServiceAccount with deploy/placement's RBAC and admission policy.

What each test asserts is what the real components did: which verbs kube-scheduler called for a pod (the
extender's debug log lines, one per verb and pod), what the server stored (``spec.nodeName``, the placement
annotations only the service writes, claims' ``status.allocation`` and who wrote it), and what a user reads
(``kubectl get events``). Every test has its own namespace and nodes (labelled with the scene's name, which its
pods select). Nodes are Node objects with the machine's capacity, their topology published by the agent's own
``Publisher`` as the agent's ServiceAccount; there is no kubelet, so a bound pod stays Pending.

The extender's verbs fed by hand and faults kube-scheduler cannot be made to send (a malformed body, a refused
verb) stay in tests/placement/shim/test_extender_preempt.py, tests/placement/shim/test_extender_gang_sources.py
and tests/placement/shim/test_shim_access.py.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from kubenexus.kube.client import Json
from placement.core.annotations import (
    AFFINITY_KEY,
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    FIELD_MANAGER,
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
    POLICY_KEY,
    RESERVED_NODE_KEY,
)
from placement.shim.client import PlacementClient
from tests import REPO
from tests.cluster_kube_scheduler import (
    KUBE_SCHEDULER_ACCOUNT,
    SYSTEM,
    SchedulerScene,
    differences,
    kube_scheduler_identity,
    lease_access,
    lease_holder,
    sign_client_certificate,
    start_scheduler,
)
from tests.cluster_scene import (
    BOUND_S,
    SCENE_LABEL,
    SCHEDULER,
    cells_and_gpus,
    create_scene_namespace,
    serve_tls_args,
    shim_tls,
)
from tests.conftest import wait_until
from tests.control_plane import (
    PLACEMENT_MANIFESTS,
    ControlPlane,
    Process,
    ensure_object,
    free_port,
    install,
    placement_kubeconfig,
)
from tests.dra_cluster import gpu_claim, gpu_class
from tests.machines.node_topologies import cpu_node, nvswitch_node
from tests.programs import Program, Service

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SHIPPED_CONFIG = REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml"
# The old configuration (before bc5b2ee): the same extender, consulted only for pods requesting nvidia.com/gpu.
OLD_SCHEDULER = "kubenexus-scheduler-old-config"
OLD_MANAGED_RESOURCES = [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
PLACEMENT_POD = "kubenexus-placement-extender-tests"
LOW, MIDDLE, HIGH, HIGHEST = 10, 100, 1000, 2000

_scenes = itertools.count()


# -- kube-scheduler's configuration: the shipped file, where a test machine differs ---------------------------


def shipped_config() -> Json:
    document: Json = yaml.safe_load(SHIPPED_CONFIG.read_text())
    return document


def for_this_machine(shipped: Json, *, kubeconfig: Path, extender_port: int, tls: Mapping[str, Path]) -> Json:
    """``shipped`` with the kubeconfig of kube-scheduler's ServiceAccount (in a cluster: its in-cluster
    credentials), the extender on 127.0.0.1 (in a cluster: the leader Service's name) and the TLS files here (in
    a cluster: the mounted Secret's)."""
    config = copy.deepcopy(shipped)
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    (extender,) = config["extenders"]
    extender["urlPrefix"] = urlsplit(extender["urlPrefix"])._replace(netloc=f"127.0.0.1:{extender_port}").geturl()
    extender["tlsConfig"].update({key: str(path) for key, path in tls.items()})
    return config


# -- the module's system: serve, extender, kube-scheduler ---------------------------------------------------


@dataclass
class Extended:
    plane: ControlPlane
    service: Service
    extender: Program
    scheduler: Process
    config: Path  # the configuration kube-scheduler runs with
    extender_port: int
    client: PlacementClient  # mTLS as the shims' identity, to ask the service what it sees
    folder: Path

    def calls(self, verb: str, pod: str) -> list[dict[str, Any]]:
        """The extender's log lines for ``verb`` (filter, prioritize, preempt) called for ``pod`` (ns/name)."""
        return [record for record in self.extender.logs() if record.get("message") == verb and record["pod"] == pod]


@pytest.fixture(scope="module")
def extended(
    control_plane: ControlPlane, certificates: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Extended]:
    folder = tmp_path_factory.mktemp("extender")
    install(control_plane, PLACEMENT_MANIFESTS)
    control_plane.apply_objects(kube_scheduler_identity())
    # Made before the service starts, as in a cluster with DRA: the service lists it (a list's items carry no
    # apiVersion or kind, unlike a watch event's object), where the slices and claims below arrive by watch.
    ensure_object(control_plane, "/apis/resource.k8s.io/v1/deviceclasses", gpu_class())
    placement = placement_kubeconfig(control_plane, PLACEMENT_POD, folder / "placement.kubeconfig",
                                     node="extender-tests-system")  # fmt: skip
    service_tls = [f"--service-ca={certificates / 'ca.crt'}", f"--service-cert={certificates / f'{SCHEDULER}.crt'}",
                   f"--service-key={certificates / f'{SCHEDULER}.key'}"]  # fmt: skip
    service = Service(placement, *serve_tls_args(certificates))
    port = free_port()
    extender = Program("extender", [
        "extender", f"--kubeconfig={placement}", f"--listen=127.0.0.1:{port}", f"--service={service.address}",
        f"--tls-cert={certificates / 'server.crt'}", f"--tls-key={certificates / 'server.key'}",
        f"--tls-client-ca={certificates / 'ca.crt'}", *service_tls, "--gang-timeout=10", "--log-level=debug",
    ])  # fmt: skip
    client = PlacementClient.connect(service.address, deadline_s=30, tls=shim_tls(certificates))
    scheduler: Process | None = None
    try:
        service.wait_ready()
        extender.wait_for("extender listening")
        cert, key = sign_client_certificate(certificates, folder, KUBE_SCHEDULER_ACCOUNT)
        kubeconfig = control_plane.service_account_kubeconfig(folder / "kube-scheduler.kubeconfig", SYSTEM,
                                                              KUBE_SCHEDULER_ACCOUNT)  # fmt: skip
        tls = {"caFile": certificates / "ca.crt", "certFile": cert, "keyFile": key}
        config = for_this_machine(shipped_config(), kubeconfig=kubeconfig, extender_port=port, tls=tls)
        path = folder / "kube-scheduler.yaml"
        scheduler = start_scheduler(control_plane, config, path)
        yield Extended(control_plane, service, extender, scheduler, path, port, client, folder)
    finally:
        if scheduler is not None:
            scheduler.stop()
        client.close()
        extender.stop()
        service.stop()
    for program in (extender, service):
        assert "Traceback" not in program.text(), program.text()[-3000:]


# -- one test's cluster: a namespace, its nodes, its pods ---------------------------------------------------


@dataclass(kw_only=True)
class Scene(SchedulerScene):
    system: Extended

    def placed(self, name: str, node: str, cell: int, gpus: Sequence[int], *, cpus: int, priority: int = LOW) -> Json:
        """A pod placed on ``node`` earlier (its cells and GPUs recorded as our bind records them). Grace period
        0: with no kubelet to confirm a graceful deletion, a preempted pod would stay Terminating."""
        annotations = {ASSIGNED_CELLS_KEY: str(cell), RESERVED_NODE_KEY: node}
        if gpus:
            annotations[ASSIGNED_GPUS_KEY] = ",".join(map(str, gpus))
        (stored,) = self.create([self.pod(name, gpus=len(gpus), cpus=cpus, annotations=annotations, nodeName=node,
                                          priorityClassName=priority_class(priority),
                                          terminationGracePeriodSeconds=0)])  # fmt: skip
        return stored

    def assert_reached_the_service(self, name: str, node: str, *, scored: bool = True) -> None:
        """kube-scheduler called the extender's filter, prioritize (unless ``scored`` is False: with one
        feasible node kube-scheduler scores nothing) and bind for the pod, and the service's placement is on
        it: the annotations written by the placement ServiceAccount, which only bind writes."""
        key = self.key(name)
        assert self.system.calls("filter", key), f"filter was never called for {key}"
        assert not scored or self.system.calls("prioritize", key), f"prioritize was never called for {key}"
        assert self.system.extender.find("bound", pod=key, node=node) is not None, f"the extender did not bind {key}"
        stored = self.get(name)
        annotations = stored["metadata"]["annotations"]
        assert annotations[RESERVED_NODE_KEY] == node
        assert annotations[ASSIGNED_CELLS_KEY]
        writers = {entry["manager"] for entry in stored["metadata"]["managedFields"]
                   if "f:annotations" in entry.get("fieldsV1", {}).get("f:metadata", {})}  # fmt: skip
        assert FIELD_MANAGER in writers


@pytest.fixture
def scene(control_plane: ControlPlane, extended: Extended, tmp_path: Path) -> Iterator[Scene]:
    namespace = f"extender-{next(_scenes)}"
    create_scene_namespace(control_plane, namespace)
    priority_classes(control_plane)

    def logs() -> str:
        return f"{extended.scheduler.tail()}\n{extended.extender.text()[-3000:]}"

    made = Scene(plane=control_plane, client=extended.client, namespace=namespace, folder=tmp_path, logs=logs,
                 system=extended)  # fmt: skip
    try:
        yield made
    finally:
        made.close()


def priority_class(priority: int) -> str:
    return f"extender-tests-{priority}"


def priority_classes(plane: ControlPlane) -> None:
    for value in (LOW, MIDDLE, HIGH, HIGHEST):
        ensure_object(plane, "/apis/scheduling.k8s.io/v1/priorityclasses",
                      {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": priority_class(value)}, "value": value})  # fmt: skip


# -- the configuration ------------------------------------------------------------------------------------


def test_kube_scheduler_runs_the_shipped_configuration_changed_only_for_this_machine(extended: Extended) -> None:
    running = yaml.safe_load(extended.config.read_text())
    assert differences(shipped_config(), running) == {
        "clientConnection",
        "extenders.0.urlPrefix",
        "extenders.0.tlsConfig.caFile",
        "extenders.0.tlsConfig.certFile",
        "extenders.0.tlsConfig.keyFile",
    }
    shipped = urlsplit(shipped_config()["extenders"][0]["urlPrefix"])
    url = urlsplit(running["extenders"][0]["urlPrefix"])
    assert (url.scheme, url.hostname, url.port, url.path) == (shipped.scheme, "127.0.0.1", extended.extender_port,
                                                              shipped.path)  # fmt: skip
    assert running["clientConnection"] == {"kubeconfig": str(extended.folder / "kube-scheduler.kubeconfig")}
    assert "managedResources" not in running["extenders"][0]
    assert extended.scheduler.running()
    assert lease_holder(extended.plane, running["leaderElection"]["resourceName"])
    # Its identity is the chart's, picked from the render and applied as rendered.
    assert sorted((doc["kind"], doc["metadata"]["name"]) for doc in kube_scheduler_identity()) == [
        ("ClusterRoleBinding", "kubenexus-kube-scheduler-as-kube-scheduler"),
        ("ClusterRoleBinding", "kubenexus-kube-scheduler-as-volume-scheduler"),
        ("Role", "kubenexus-kube-scheduler-lease"),
        ("RoleBinding", "kubenexus-kube-scheduler-extension-apiserver-authentication-reader"),
        ("RoleBinding", "kubenexus-kube-scheduler-lease"),
        ("ServiceAccount", KUBE_SCHEDULER_ACCOUNT),
    ]


# -- 1. the pods the old managedResources list skipped reach the service ---------------------------------------


def numa_pod(scene: Scene, name: str, *, scheduler: str = SCHEDULER) -> Json:
    """A CPU-only pod with a NUMA intent: one NUMA cell, and that cell must be 1."""
    return scene.pod(name, cpus=4, annotations={POLICY_KEY: "single-numa", AFFINITY_KEY: "1"}, schedulerName=scheduler)


def test_a_cpu_only_numa_pod_is_filtered_scored_and_bound_by_the_service(scene: Scene) -> None:
    """The pod must be in NUMA cell 1, and its kubelet (single-numa-node) pins it to the first cell that fits:
    cell 0 of an empty node, cell 1 of the two CPU nodes whose cell 0 is nearly full. Filter keeps only those
    two (on the empty node Reserve's exact plan would refuse it, which kube-scheduler would only learn at
    bind, at every retry), kube-scheduler scores them through prioritize, and the extender's bind places the
    pod in cell 1."""
    empty, *nodes = scene.add_nodes({"gpu": nvswitch_node(), "cpu-a": cpu_node(), "cpu-b": cpu_node()})
    for index, node in enumerate(nodes):
        scene.placed(f"filler-{index}", node, 0, (), cpus=30)  # 2 of cell 0's 32 CPUs left
    probe = numa_pod(scene, "probe")
    wait_until(lambda: list(scene.system.client.filter(probe, [empty, *nodes]).feasible_nodes) == nodes, timeout_s=60,
               what="the service to charge the fillers")  # fmt: skip
    (refused,) = scene.system.client.filter(probe, [empty, *nodes]).rejected
    assert list(refused.nodes) == [empty]
    assert refused.reason == "the kubelet would use NUMA cells [0], outside the allowed [1]"
    scene.create([numa_pod(scene, "numa")])
    node = scene.wait_bound(["numa"])["numa"]
    assert node in nodes
    scene.assert_reached_the_service("numa", node)
    assert cells_and_gpus(scene.get("numa")) == ([1], [])  # the intent's cell, chosen by the service
    assert {(r["nodes"], r["feasible"]) for r in scene.system.calls("filter", scene.key("numa"))} == {(3, 2)}


def test_a_cpu_only_gang_is_held_at_bind_until_complete_then_bound_by_the_service(scene: Scene) -> None:
    nodes = scene.add_nodes({"a": cpu_node(), "b": cpu_node()})
    group = {GROUP_NAME_KEY: "cpu-gang", MIN_AVAILABLE_KEY: "3"}
    scene.create([scene.pod(f"member-{i}", cpus=8, labels=group) for i in range(2)])

    def held() -> bool:  # bind reserved both (their annotations) and holds them for the third
        pods = [scene.get(f"member-{i}") for i in range(2)]
        return all(RESERVED_NODE_KEY in (pod["metadata"].get("annotations") or {}) for pod in pods)

    wait_until(held, timeout_s=BOUND_S, what="bind to hold the first two members")
    assert scene.bound() == {}, "a member was bound before its group was complete"
    scene.create([scene.pod("member-2", cpus=8, labels=group)])
    names = [f"member-{i}" for i in range(3)]
    bound = scene.wait_bound(names)
    for name in names:
        assert bound[name] in nodes
        scene.assert_reached_the_service(name, bound[name])
        assert len(cells_and_gpus(scene.get(name))[0]) == 1


def test_a_dra_only_pod_reaches_the_service_and_kube_scheduler_allocates_its_claim(scene: Scene) -> None:
    """The pod's GPUs come from a ResourceClaim, not a container resource. Both nodes hold an earlier pod on 80
    of cell 0's 96 CPUs, so the kubelet will pin the pod's 32 CPUs to cell 1, where the service would take
    GPUs 4-7 (the binder does: tests/cluster/test_cluster_binder.py). The pod reaches the service, which places it in
    cell 1 and binds it; its claim is allocated by kube-scheduler's DynamicResources plugin, which runs in the
    profile: its first fit (GPUs 0-3), written by kube-scheduler at PreBind, before the extender's bind. The
    extender writes no claim (docs/scheduler.md, "DRA in extender mode")."""
    nodes = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()}, dra=True)
    for index, node in enumerate(nodes):
        scene.placed(f"filler-{index}", node, 0, (), cpus=80)
    pinned_to_cell_0 = scene.pod("probe", cpus=20, annotations={AFFINITY_KEY: "0", POLICY_KEY: "single-numa"})
    wait_until(lambda: not scene.system.client.filter(pinned_to_cell_0, nodes).feasible_nodes, timeout_s=60,
               what="the service to charge the fillers")  # fmt: skip
    claim = gpu_claim("four", 4, namespace=scene.namespace)
    claim["metadata"].pop("uid")
    scene.admin.create(f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaims", claim)
    (created,) = scene.create([claiming(scene, "trainer", "four", cpus=32)])

    node = scene.wait_bound(["trainer"])["trainer"]
    assert node in nodes
    scene.assert_reached_the_service("trainer", node)
    assert cells_and_gpus(scene.get("trainer")) == ([1], [])  # no device-plugin GPUs to predict

    stored = scene.claim("four")
    results = stored["status"]["allocation"]["devices"]["results"]
    assert {(r["driver"], r["pool"]) for r in results} == {("gpu.nvidia.com", node)}
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]  # first fit, cell 0
    assert stored["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer",
                                                "uid": created["metadata"]["uid"]}]  # fmt: skip
    status_writers = {e["manager"] for e in stored["metadata"]["managedFields"] if e.get("subresource") == "status"}
    assert status_writers == {"kube-scheduler"}
    assert FIELD_MANAGER not in {entry["manager"] for entry in stored["metadata"]["managedFields"]}
    # The service counts the devices kube-scheduler allocated and holds none of its own choice any longer:
    # GPUs 4-7 of that node are free to it, four and no more.
    for count in (4, 5):
        probe = gpu_claim(f"probe-{count}", count, namespace=scene.namespace)
        probe["metadata"].pop("uid")
        scene.admin.create(f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaims", probe)
    assert_free_devices(scene, node, fits=4, refused=5)


def claiming(scene: Scene, name: str, claim: str, *, cpus: int) -> Json:
    """A Guaranteed pod whose GPUs come from the ResourceClaim ``claim`` (no container asks for a GPU)."""
    pod = scene.pod(name, cpus=cpus, memory="32Gi")
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return pod


def assert_free_devices(scene: Scene, node: str, *, fits: int, refused: int) -> None:
    """The service's Filter passes ``node`` for a claim of ``fits`` devices and refuses it for ``refused``."""
    client = scene.system.client
    wait_until(lambda: list(client.filter(claiming(scene, "probe", f"probe-{fits}", cpus=1), [node]).feasible_nodes)
               == [node], timeout_s=60, what=f"the service to see {fits} free devices on {node}")  # fmt: skip
    assert list(client.filter(claiming(scene, "probe", f"probe-{refused}", cpus=1), [node]).feasible_nodes) == []


def test_the_old_managed_resources_list_let_a_cpu_only_pod_bypass_the_service(scene: Scene) -> None:
    """A second kube-scheduler with the configuration as shipped before bc5b2ee (managedResources
    nvidia.com/gpu), its own profile and Lease, the same extender: HTTPExtender.IsInterested is false for a pod
    requesting no nvidia.com/gpu, so kube-scheduler binds it alone (DefaultBinder), with no NUMA placement."""
    system = scene.system
    old = copy.deepcopy(yaml.safe_load(system.config.read_text()))
    old["profiles"][0]["schedulerName"] = OLD_SCHEDULER
    old["leaderElection"]["resourceName"] = OLD_SCHEDULER
    old["extenders"][0]["managedResources"] = OLD_MANAGED_RESOURCES
    assert differences(yaml.safe_load(system.config.read_text()), old) == {
        "profiles.0.schedulerName", "leaderElection.resourceName", "extenders.0.managedResources"
    }  # fmt: skip
    # The chart's Role lets the ServiceAccount hold only its own Lease; this scheduler's needs the same.
    system.plane.apply_objects(lease_access(OLD_SCHEDULER))
    nodes = scene.add_nodes({"gpu": nvswitch_node(), "cpu": cpu_node()})
    process = start_scheduler(system.plane, old, system.folder / f"{OLD_SCHEDULER}.yaml")
    try:
        scene.create([numa_pod(scene, "numa", scheduler=OLD_SCHEDULER)])
        node = scene.wait_bound(["numa"])["numa"]
    finally:
        process.stop()
    assert node in nodes
    annotations = scene.get("numa")["metadata"].get("annotations") or {}
    assert not {RESERVED_NODE_KEY, ASSIGNED_CELLS_KEY} & set(annotations)
    key = scene.key("numa")
    assert system.calls("filter", key) == []
    assert system.extender.find("bound", pod=key) is None


# -- 2. GPU pods: NUMA-aligned, or pending with the extender's reason ------------------------------------------


def test_a_gpu_pod_lands_numa_aligned_and_one_that_fits_nowhere_pends_with_the_extenders_reason(
    scene: Scene,
) -> None:
    a, b, cpu = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node(), "cpu": cpu_node()})
    bare = f"{scene.namespace}-bare"  # a GPU node whose agent has published nothing yet
    scene.system.plane.create_node(bare, labels={SCENE_LABEL: scene.namespace}, capacity={"nvidia.com/gpu": "8"})
    scene.nodes.append(bare)
    # Five GPUs: free on both GPU nodes, but no NUMA cell has more than four (single-numa-node kubelets).
    wide = scene.pod("wide", gpus=5, cpus=20)
    groups = scene.system.client.filter(wide, [a, b, bare]).rejected
    rejected = {tuple(sorted(group.nodes)): group.reason for group in groups}
    assert set(rejected) == {(bare,), tuple(sorted([a, b]))}
    scene.create([wide])

    def told() -> list[str]:
        return scene.events("wide", "FailedScheduling")

    wait_until(told, timeout_s=BOUND_S, what="the FailedScheduling event")
    message = told()[-1]
    for nodes, reason in rejected.items():  # the extender's reasons, counted by kube-scheduler
        assert f"{len(nodes)} {reason}" in message, message
    assert "1 Insufficient nvidia.com/gpu" in message, message  # the CPU node: kube-scheduler's own filter
    assert scene.system.calls("filter", scene.key("wide"))

    scene.create([scene.pod("gpu", gpus=2, cpus=8)])
    node = scene.wait_bound(["gpu"])["gpu"]
    assert node in (a, b)
    scene.assert_reached_the_service("gpu", node)
    (cell,), gpus = cells_and_gpus(scene.get("gpu"))
    assert len(gpus) == 2
    assert {gpu // 4 for gpu in gpus} == {cell}, f"GPUs {gpus} off NUMA cell {cell}"  # p5: GPUs 0-3 on cell 0
    assert "nodeName" not in scene.get("wide")["spec"]
    assert not {cpu, bare} & set(scene.bound().values())


# -- 3. kube-scheduler's preemption asks the extender ------------------------------------------------------


def test_kube_schedulers_preemption_keeps_only_the_nodes_the_extender_approves(scene: Scene) -> None:
    """A 4-GPU pod finds both GPU nodes full. On node a two low-priority 2-GPU pods sit in different NUMA cells;
    on node b one middle-priority 4-GPU pod fills cell 0. kube-scheduler's own choice is node a (its victims'
    highest priority is lower), but freeing GPUs 0,1 and 4,5 leaves no cell with four: the extender's preempt
    drops node a (the kubelet would refuse the pod there) and kube-scheduler preempts on node b."""
    a, b = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    scene.placed("low-0", a, 0, (0, 1), cpus=8, priority=LOW)
    scene.placed("high-0", a, 0, (2, 3), cpus=8, priority=HIGHEST)
    scene.placed("low-1", a, 1, (4, 5), cpus=8, priority=LOW)
    scene.placed("high-1", a, 1, (6, 7), cpus=8, priority=HIGHEST)
    scene.placed("middle", b, 0, (0, 1, 2, 3), cpus=16, priority=MIDDLE)
    scene.placed("high-2", b, 1, (4, 5, 6, 7), cpus=16, priority=HIGHEST)
    probe = scene.pod("probe", gpus=1, cpus=1)
    wait_until(lambda: not scene.system.client.filter(probe, [a, b]).feasible_nodes, timeout_s=60,
               what="the service to charge the placed pods")  # fmt: skip

    (urgent,) = scene.create([scene.pod("urgent", gpus=4, cpus=16, priorityClassName=priority_class(HIGH))])
    assert scene.wait_bound(["urgent"])["urgent"] == b
    key = scene.key("urgent")
    asked = scene.system.calls("preempt", key)
    assert asked, "kube-scheduler never called the extender's preempt"
    assert (sorted([a, b]), [b]) in [(record["candidates"], record["kept"]) for record in asked]
    assert not any(a in record["kept"] for record in asked)
    dropped = scene.system.extender.find("preemption candidate dropped", pod=key, node=a)
    assert dropped is not None
    assert "single-numa-node" in dropped["reason"]
    assert not scene.exists("middle")
    assert all(scene.exists(name) for name in ("low-0", "low-1", "high-0", "high-1", "high-2"))
    (preempted,) = scene.events("middle", "Preempted")
    assert preempted == f"Preempted by pod {urgent['metadata']['uid']} on node {b}"
    scene.assert_reached_the_service("urgent", b, scored=False)  # node a stays full: b alone is feasible
    assert cells_and_gpus(scene.get("urgent")) == ([0], [0, 1, 2, 3])
