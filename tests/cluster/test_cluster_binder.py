"""The standalone binder (``kubenexus-placement binder``) and the placement service (``serve``) against the real
kube-apiserver v1.37, each as the kubenexus-placement ServiceAccount (a token bound to a placement pod, with the
RBAC and the admission policy of deploy/placement), talking mutual TLS to each other as deployed.

Nodes are Node objects with the machine's capacity (there is no kubelet: a bound pod stays Pending, and a test
plays the kubelet where it must: a pod's Running status); each publishes its topology with the agent's own
``Publisher``, as the agent's ServiceAccount bound to that node. Pods, claims, budgets and pod groups are created
through the API by the administrator, as a user's ``kubectl create`` would. What each test asserts is what the
real server stored and what a user reads back: ``spec.nodeName`` set through the Binding subresource, the
placement annotations, Events (``kubectl get events``), claims' ``status.allocation`` and ``reservedFor``, pod
groups' status, the Eviction API's answers. kube-controller-manager runs the controllers the tests need: the
ResourceClaim controller (claims from templates) and the disruption controller (budgets' ``disruptionsAllowed``).

Every test has its own namespace and its own nodes, labelled and tainted with the scene's name, which every pod
of the scene selects and tolerates: nothing depends on the other tests of the session, and no pod of theirs lands
here. Faults the real server cannot be made to answer on demand (a 503 from the fourth binding on, a 410 on the
first watch) stay on the emulator (tests/placement/shim/test_shim_e2e.py), and so do the 1.36 and 1.35 gang APIs
this server does not serve and the count of status writes (tests/placement/shim/test_gang_sources_e2e.py).
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from kubenexus.kube.client import Json, KubeClient
from kubenexus.topology.model import NodeTopology
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc as pb_grpc
from placement.core.annotations import (
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    FIELD_MANAGER,
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
    POLICY_KEY,
    REQUIRED_TOPOLOGY_KEY,
    RESERVED_NODE_KEY,
    SCHEDULER_PLUGINS_KEY,
)
from placement.core.domains import RACK_KEY, TOPOGRAPH_BLOCK_KEY, TOPOGRAPH_LEAF_KEY
from placement.core.gang_sources import VOLCANO_GROUP_KEY
from placement.shim.client import PlacementClient, TlsFiles
from placement.shim.preemptor import Preemptor
from tests.cluster_scene import (
    BOUND_S,
    NVSWITCH,
    SCENE_LABEL,
    SCHEDULER,
    SLICES_PATH,
    SceneBase,
    cells_and_gpus,
    close_scene,
    create_scene_namespace,
    publish_topology,
    serve_tls_args,
    shim_tls,
)
from tests.conftest import wait_until
from tests.control_plane import ControlPlane, Process, ensure_object, free_port, placement_kubeconfig
from tests.dra_cluster import fixture_slice, gpu_claim, gpu_class, joined_topology
from tests.machines.node_topologies import l40s_node, nvswitch_node, pcie_node
from tests.programs import Program, Service, http_status

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PLACEMENT_POD = "kubenexus-placement-binder-tests"
PLACEMENT_NAMESPACE = "kubenexus-system"
PCIE = "alloc_pcie_bridged_8gpu.yaml"
PLUGIN_GROUPS = "/apis/scheduling.x-k8s.io/v1alpha1"
VOLCANO_GROUPS = "/apis/scheduling.volcano.sh/v1beta1"
NATIVE_GROUPS = "/apis/scheduling.k8s.io/v1beta1"
LOW, HIGH, HIGHEST = 10, 1000, 2000

_scenes = itertools.count()


# -- the placement pod: the service and the binder, as deployed ---------------------------------------------


@dataclass
class Placement:
    """``serve`` and ``binder`` of one placement pod, and the clients a test uses beside them."""

    service: Service
    binder: Program
    kubeconfig: Path  # the placement ServiceAccount's, bound to the placement pod
    client: PlacementClient  # mTLS as the shims' identity (kubenexus-scheduler), for direct calls
    tls: TlsFiles

    def explain(self, pod: Json, node: str) -> pb.ExplainResponse:
        """The service's Explain (read only), as ``grpcurl`` would call it."""
        channel = grpc.secure_channel(self.service.address, self.tls.credentials())
        try:
            request = pb.ExplainRequest(pod_json=json.dumps(pod), node=node)
            answer: pb.ExplainResponse = pb_grpc.PlacementStub(channel).Explain(request, timeout=30)
            return answer
        finally:
            channel.close()


@pytest.fixture(scope="module")
def placement(
    control_plane: ControlPlane, certificates: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Placement]:
    folder = tmp_path_factory.mktemp("placement")
    kubeconfig = placement_kubeconfig(control_plane, PLACEMENT_POD, folder / "kubeconfig", node="binder-tests-system")
    env = {"POD_NAME": PLACEMENT_POD, "POD_NAMESPACE": PLACEMENT_NAMESPACE}
    service = Service(kubeconfig, "--leader-elect", *serve_tls_args(certificates), env=env)
    binder_metrics = free_port()
    binder = Program("binder", [
        "binder", f"--kubeconfig={kubeconfig}", f"--service={service.address}",
        f"--service-ca={certificates / 'ca.crt'}", f"--service-cert={certificates / f'{SCHEDULER}.crt'}",
        f"--service-key={certificates / f'{SCHEDULER}.key'}", f"--metrics-address=127.0.0.1:{binder_metrics}",
        "--interval=0.5",
    ], env=env)  # fmt: skip
    tls = shim_tls(certificates)
    client = PlacementClient.connect(service.address, tls=tls, deadline_s=30)
    try:
        service.wait_ready()
        service.wait_for("became the leader", lease="kubenexus-placement")
        binder.wait_for("became the leader", lease="kubenexus-binder")
        wait_until(lambda: http_status(f"http://127.0.0.1:{binder_metrics}/readyz") == 200, timeout_s=90,
                   what="the binder's pod watch to sync")  # fmt: skip
        yield Placement(service, binder, kubeconfig, client, tls)
    finally:
        client.close()
        binder.stop()
        service.stop()
    for program in (binder, service):
        assert "Traceback" not in program.text(), program.text()[-3000:]


@pytest.fixture(scope="module")
def controllers(control_plane: ControlPlane) -> Iterator[Process]:
    """kube-controller-manager with the two controllers these tests need: the ResourceClaim controller (claims
    made from a pod's templates, named in its status) and the disruption controller (budgets' status)."""
    process = control_plane.start_controller_manager(controllers="resourceclaim-controller,disruption-controller")
    try:
        yield process
        assert process.running(), f"kube-controller-manager exited:\n{process.tail()}"
    finally:
        process.stop()


# -- one test's cluster: a namespace, its nodes, its pods ---------------------------------------------------


@dataclass
class Scene(SceneBase):
    plane: ControlPlane
    placement: Placement
    namespace: str
    folder: Path
    nodes: list[str] = field(default_factory=list)

    @property
    def admin(self) -> KubeClient:
        return self.plane.admin

    # nodes

    def add_nodes(
        self,
        machines: Mapping[str, NodeTopology | None],
        *,
        slices: str = "",
        labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[str]:
        """One Node per machine (named ``<namespace>-<key>``, with ``labels[key]`` besides the scene's), with the
        machine's capacity and its topology published as the agent publishes it (None: no agent runs there).
        With ``slices`` (a file of tests/dra_fixtures) its GPUs are DRA devices: a ResourceSlice of NVIDIA's
        driver, no ``nvidia.com/gpu`` capacity. Returns once the service can place a pod on every one."""
        names = []
        for key, machine in machines.items():
            name = f"{self.namespace}-{key}"
            resource_slice = fixture_slice(slices, name) if slices else None
            capacity = {"cpu": "190", "memory": "1900Gi", "pods": "110"}
            if machine is not None:
                capacity["cpu"] = str(len(machine.machine.online_cpus))
                capacity["memory"] = str(sum(cell.memory_bytes or 0 for cell in machine.numa_cells))
                if resource_slice is None:
                    capacity["nvidia.com/gpu"] = str(len(machine.gpus))
            self.create_node(name, capacity, (labels or {}).get(key, {}))
            if machine is not None:
                topology = machine if resource_slice is None else joined_topology(machine, resource_slice)
                publish_topology(self.plane, name, topology, self.folder)
            if resource_slice is not None:
                self.add_slice(resource_slice)
            names.append(name)
        self.wait_feasible(self.pod("probe", cpus=1, memory="1Gi"), names, names)
        return names

    def create_node(self, name: str, capacity: Mapping[str, str], labels: Mapping[str, str]) -> None:
        """A Node of this scene: its label, which every pod of the scene selects, and its taint, which every pod
        of the scene tolerates (no pod of another test lands here, whoever schedules it)."""
        taint = {"key": SCENE_LABEL, "value": self.namespace, "effect": "NoSchedule"}
        self.plane.create_node(name, labels={SCENE_LABEL: self.namespace, **labels}, capacity=capacity, taints=[taint])
        self.nodes.append(name)

    def add_slice(self, resource_slice: Json) -> None:
        """As the DRA driver's kubelet plugin publishes it (here the administrator)."""
        self.admin.create(SLICES_PATH, resource_slice)

    def wait_feasible(self, probe: Json, nodes: Sequence[str], feasible: Sequence[str]) -> None:
        """Until the service's Filter of ``probe`` over ``nodes`` passes ``feasible`` exactly: it has seen a
        change made through the API."""
        answers = []

        def seen() -> bool:
            answers.append(self.placement.client.filter(probe, nodes))
            return set(answers[-1].feasible_nodes) == set(feasible)

        try:
            wait_until(seen, timeout_s=90, what=f"the service to pass {list(feasible)} of {list(nodes)}")
        except AssertionError as error:
            raise AssertionError(f"{error}; its last answer: {answers[-1]}") from None

    # pods

    def placing(self, spec: dict[str, Any]) -> Json:
        """The pods of this scene select its label and tolerate its taint, besides ``spec``'s own."""
        node_selector = {SCENE_LABEL: self.namespace, **spec.pop("nodeSelector", {})}
        scene = {"key": SCENE_LABEL, "operator": "Equal", "value": self.namespace, "effect": "NoSchedule"}
        return {"nodeSelector": node_selector, "tolerations": [scene, *spec.pop("tolerations", [])]}

    def claiming_pod(self, name: str, claim: str, *, cpus: int = 8, **changes: Any) -> Json:
        """A Guaranteed pod whose GPUs come from the ResourceClaim ``claim``."""
        obj = self.pod(name, cpus=cpus, memory="32Gi", **changes)
        obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
        obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
        return obj

    def wait_bound(self, names: Sequence[str], timeout_s: float = BOUND_S) -> dict[str, str]:
        try:
            wait_until(lambda: set(names) <= set(self.bound()), timeout_s=timeout_s, what=f"pods {list(names)} bound")
        except AssertionError as error:
            told = {name: self.messages(name) for name in set(names) - set(self.bound())}
            raise AssertionError(f"{error}; the unbound pods' events: {told}") from None
        return self.bound()

    def set_status(self, name: str, status: Json) -> None:
        """What the kubelet reports, written as the administrator (there is no kubelet)."""
        self.admin.merge_patch(self.path("pods", name) + "/status", {"status": status})

    # events

    def events(self, name: str, reason: str | None = None) -> list[Json]:
        selector = f"involvedObject.name={name}" + (f",reason={reason}" if reason else "")
        items: list[Json] = self.admin.list(self.path("events"), {"fieldSelector": selector})["items"]
        return items

    def messages(self, name: str, reason: str | None = None) -> list[str]:
        return [event["message"] for event in self.events(name, reason)]

    # DRA

    def allocated(self, name: str) -> list[str]:
        allocation = (self.claim(name).get("status") or {}).get("allocation") or {}
        return [result["device"] for result in (allocation.get("devices") or {}).get("results", [])]

    # cleaning up

    def close(self) -> None:
        """Pods force-deleted (no kubelet confirms a graceful deletion) and this scene's nodes removed: a later
        module's scheduler of the same name finds nothing of ours."""
        close_scene(self.plane, self.namespace, self.nodes)


@pytest.fixture
def scene(control_plane: ControlPlane, placement: Placement, tmp_path: Path) -> Iterator[Scene]:
    namespace = f"binder-{next(_scenes)}"
    create_scene_namespace(control_plane, namespace)
    made = Scene(control_plane, placement, namespace, tmp_path)
    try:
        yield made
    finally:
        made.close()


# name -> (value, preemptionPolicy); pods name a class: the Priority admission plugin sets spec.priority from it
# and refuses a pod that sets one of its own.
PRIORITY_CLASSES = {
    "binder-tests-low": (LOW, "PreemptLowerPriority"),
    "binder-tests-low-plus": (LOW + 1, "PreemptLowerPriority"),
    "binder-tests-high": (HIGH, "PreemptLowerPriority"),
    "binder-tests-highest": (HIGHEST, "PreemptLowerPriority"),
    "binder-tests-never": (HIGH, "Never"),
}


@pytest.fixture(scope="module")
def priorities(control_plane: ControlPlane) -> None:
    for name, (value, policy) in PRIORITY_CLASSES.items():
        ensure_object(control_plane, "/apis/scheduling.k8s.io/v1/priorityclasses",
                      {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                       "value": value, "preemptionPolicy": policy})  # fmt: skip


def class_of(priority: int, *, never: bool = False) -> str:
    return next(n for n, (v, p) in PRIORITY_CLASSES.items() if v == priority and (p == "Never") == never)


def assert_numa_aligned_and_not_double_booked(pods: Sequence[Json]) -> None:
    taken: Counter[tuple[str, int]] = Counter()
    for pod in pods:
        node = pod["spec"]["nodeName"]
        cells, gpus = cells_and_gpus(pod)
        assert pod["metadata"]["annotations"][RESERVED_NODE_KEY] == node
        assert len(cells) == 1, f"{pod['metadata']['name']} spans NUMA cells {cells}"
        assert {gpu // 4 for gpu in gpus} <= set(cells), f"{pod['metadata']['name']}: GPUs {gpus} off cell {cells}"
        taken.update((node, gpu) for gpu in gpus)
    assert not taken or max(taken.values()) == 1, f"a GPU handed out twice: {taken}"


# -- 1. the Binding subresource, the placement annotations, the Events ---------------------------------------


def test_a_numa_pod_and_a_gpu_pod_are_bound_with_their_placement_and_a_scheduled_event(scene: Scene) -> None:
    nodes = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    created = {pod["metadata"]["name"]: pod for pod in scene.create([scene.pod("numa", cpus=8),
                                                                     scene.pod("gpu", cpus=8, gpus=2)])}  # fmt: skip
    scene.wait_bound(["numa", "gpu"])
    numa, gpu = scene.get("numa"), scene.get("gpu")
    assert {numa["spec"]["nodeName"], gpu["spec"]["nodeName"]} <= set(nodes)
    assert_numa_aligned_and_not_double_booked([numa, gpu])
    assert cells_and_gpus(numa)[1] == []
    assert len(cells_and_gpus(gpu)[1]) == 2
    # The annotations were written by the placement service's ServiceAccount (its field manager), the
    # binding by the Binding subresource: the pod's spec is otherwise the one created.
    managers = {entry["manager"] for entry in gpu["metadata"]["managedFields"]}
    assert FIELD_MANAGER in managers
    assert gpu["spec"]["containers"] == created["gpu"]["spec"]["containers"]

    def scheduled(name: str) -> list[Json]:
        return scene.events(name, "Scheduled")

    wait_until(lambda: scheduled("numa") and scheduled("gpu"), timeout_s=60, what="the Scheduled events")
    for pod in (numa, gpu):
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        (event,) = scheduled(name)
        cells, gpus = cells_and_gpus(pod)
        where = f"NUMA cells {cells[0]}" + (f", GPUs {','.join(map(str, gpus))}" if gpus else "")
        assert event["message"] == f"Successfully assigned {scene.namespace}/{name} to {node} ({where})"
        assert event["type"] == "Normal"
        assert event["source"]["component"] == SCHEDULER
        assert event["reportingInstance"] == PLACEMENT_POD
        assert (event["involvedObject"]["kind"], event["involvedObject"]["uid"]) == ("Pod", pod["metadata"]["uid"])
    # What a user sees: kubectl v1.37's table of the namespace's events.
    table = scene.plane.kubectl("get", "events", "-n", scene.namespace, "--field-selector", "reason=Scheduled").stdout
    rows = {line.split()[3]: line for line in table.splitlines()[1:]}
    assert set(rows) == {"pod/numa", "pod/gpu"}, table
    assert f"Successfully assigned {scene.namespace}/gpu to {gpu['spec']['nodeName']}" in rows["pod/gpu"]
    assert rows["pod/gpu"].split()[1:3] == ["Normal", "Scheduled"]


def test_a_pod_with_an_invalid_policy_gets_a_failed_scheduling_event_and_stays_pending(scene: Scene) -> None:
    (node,) = scene.add_nodes({"a": nvswitch_node()})
    bad = scene.pod("bad", gpus=1, annotations={POLICY_KEY: "tightest"})
    created = scene.create([bad, scene.pod("good", gpus=1), scene.pod("huge", gpus=16)])
    wait_until(
        lambda: scene.events("bad", "FailedScheduling") and scene.events("huge", "FailedScheduling"),
        timeout_s=BOUND_S,
        what="the FailedScheduling events",
    )
    assert scene.wait_bound(["good"])["good"] == node
    (event,) = scene.events("bad")
    assert (event["type"], event["reason"]) == ("Warning", "FailedScheduling")
    assert event["message"].startswith("invalid placement request: ")
    assert "'tightest'" in event["message"]
    assert POLICY_KEY in event["message"]
    uid = created[0]["metadata"]["uid"]
    assert {key: event["involvedObject"][key] for key in ("kind", "namespace", "name", "uid")} == {
        "kind": "Pod", "namespace": scene.namespace, "name": "bad", "uid": uid,
    }  # fmt: skip
    # kube-scheduler's FitError shape: this scene's one node holds 8 GPUs; the others the cluster has are
    # counted under their own reasons. Then why no preemption helps.
    (huge,) = scene.messages("huge")
    assert re.match(r"0/\d+ nodes are available: ", huge), huge
    assert "1 Insufficient nvidia.com/gpu" in huge
    assert " preemption: " in huge
    stays = scene.get("bad")
    assert "nodeName" not in stays["spec"]
    assert RESERVED_NODE_KEY not in stays["metadata"].get("annotations", {})
    assert "nodeName" not in scene.get("huge")["spec"]


def test_a_reservation_that_cannot_be_read_is_cleared_and_planned_anew(scene: Scene) -> None:
    """A pod arrives carrying a reservation whose GPU list is garbled (an earlier leader's, damaged): the binder
    does not bind it blind to that node; it clears the reservation and places the pod afresh."""
    (node,) = scene.add_nodes({"a": nvswitch_node()})
    garbled = {RESERVED_NODE_KEY: node, ASSIGNED_CELLS_KEY: "0", ASSIGNED_GPUS_KEY: "zero,one"}
    scene.create([scene.pod("restored", gpus=2, annotations=garbled)])
    scene.wait_bound(["restored"])
    pod = scene.get("restored")
    assert_numa_aligned_and_not_double_booked([pod])
    assert len(cells_and_gpus(pod)[1]) == 2


# -- kube-scheduler's constraints, set with kubectl on the real Node objects ----------------------------------

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
GPU_TAINT = "node(s) had untolerated taint(s)"
TOLERATES_GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NO_GPU = "Insufficient nvidia.com/gpu"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"


def zoned(scene: Scene) -> list[str]:
    """Three 8-GPU nodes: a and b in zone-1, c in zone-2."""
    zones = {"a": "zone-1", "b": "zone-1", "c": "zone-2"}
    return scene.add_nodes({key: nvswitch_node() for key in zones}, labels={k: {ZONE: z} for k, z in zones.items()})


def reasons(message: str) -> Counter[str]:
    """kube-scheduler's FitError message (``0/N nodes are available: 1 reason, 2 other reason.``, the preemption's
    note after it left out) as reason -> node count. The session's other nodes fail this scene's node selector."""
    head = message.partition(" preemption: ")[0]
    match = re.fullmatch(r"0/(\d+) nodes are available: (.*)\.", head)
    assert match, message
    counts: Counter[str] = Counter()
    for part in match.group(2).split(", "):
        count, _, reason = part.partition(" ")
        counts[reason] += int(count)
    assert counts.total() == int(match.group(1)), message
    return counts


def refusals(scene: Scene, names: Sequence[str]) -> list[str]:
    return [message for name in names for message in scene.messages(name, "FailedScheduling")]


def test_a_tainted_gpu_node_receives_only_tolerating_pods(scene: Scene) -> None:
    a, b, c = zoned(scene)
    for node in (a, b):
        scene.plane.kubectl("taint", "nodes", node, "nvidia.com/gpu=present:NoSchedule")
    scene.wait_feasible(scene.pod("probe", gpus=1), [a, b, c], [c])
    plain = [f"plain-{i}" for i in range(4)]
    scene.create([scene.pod(name, gpus=2) for name in plain])
    assert set(scene.wait_bound(plain).values()) == {c}, "a pod without the toleration went to a tainted node"

    scene.create([scene.pod("one-more", gpus=1)])
    wait_until(lambda: refusals(scene, ["one-more"]), timeout_s=BOUND_S, what="the FailedScheduling event")
    counts = reasons(refusals(scene, ["one-more"])[0])
    assert (counts[NO_GPU], counts[GPU_TAINT]) == (1, 2)

    tolerating = [f"tolerating-{i}" for i in range(4)]
    scene.create([scene.pod(name, gpus=4, tolerations=[TOLERATES_GPU_TAINT]) for name in tolerating])
    bound = scene.wait_bound(tolerating)
    assert sorted(bound[name] for name in tolerating) == [a, a, b, b]
    assert "one-more" not in scene.bound()


def test_a_cordoned_node_receives_nothing_until_uncordoned(scene: Scene) -> None:
    a, b, c = zoned(scene)
    for node in (a, b):
        scene.plane.kubectl("cordon", node)
    scene.wait_feasible(scene.pod("probe", gpus=1), [a, b, c], [c])
    names = [f"p-{i}" for i in range(3)]
    scene.create([scene.pod(name, gpus=4) for name in names])
    wait_until(lambda: len(scene.bound()) == 2 and refusals(scene, names), timeout_s=BOUND_S, what="the outcome")
    assert set(scene.bound().values()) == {c}
    (message,) = refusals(scene, names)
    counts = reasons(message)
    assert (counts[NO_GPU], counts["node(s) were unschedulable"]) == (1, 2)

    scene.plane.kubectl("uncordon", a)  # the waiting pod goes there
    assert sorted(scene.wait_bound(names).values()) == [a, c, c]


def test_a_gang_whose_members_select_one_zone_lands_only_there_or_waits(scene: Scene) -> None:
    _, _, c = zoned(scene)
    group = {GROUP_NAME_KEY: "train", MIN_AVAILABLE_KEY: "4"}
    first = [f"z2-{i}" for i in range(4)]
    scene.create([scene.pod(name, gpus=2, labels=group, nodeSelector={ZONE: "zone-2"}) for name in first])
    assert set(scene.wait_bound(first).values()) == {c}

    # zone-2 is full now; zone-1 has 16 free GPUs the gang may not use: it waits, nothing is bound.
    more = {**group, GROUP_NAME_KEY: "more"}
    scene.create([scene.pod(f"more-{i}", gpus=2, labels=more, nodeSelector={ZONE: "zone-2"}) for i in range(4)])

    def planned() -> list[str]:  # the service's reason, once all four members are there
        return [m for m in scene.messages("more-0", "WaitingForPodGroup") if not m.endswith("/4 members")]

    wait_until(planned, timeout_s=BOUND_S, what="the service's waiting reason")
    assert set(scene.bound()) == set(first)
    assert "node affinity/selector" in planned()[-1], planned()


APART = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "apart"}}, "topologyKey": HOSTNAME}
        ]
    }
}


def test_replicas_with_hostname_anti_affinity_land_on_distinct_nodes(scene: Scene) -> None:
    nodes = zoned(scene)
    names = [f"web-{i}" for i in range(4)]
    scene.create([scene.pod(name, gpus=1, labels={"app": "apart"}, affinity=APART) for name in names])
    wait_until(lambda: len(scene.bound()) == 3 and refusals(scene, names), timeout_s=BOUND_S,
               what="three bindings and one refusal")  # fmt: skip
    assert sorted(scene.bound().values()) == sorted(nodes)
    (unplaced,) = set(names) - set(scene.bound())
    assert reasons(refusals(scene, [unplaced])[-1])["node(s) didn't match pod anti-affinity rules"] == 3


def test_gang_members_with_hostname_anti_affinity_land_on_distinct_nodes(scene: Scene) -> None:
    nodes = zoned(scene)
    labels = {"app": "apart", GROUP_NAME_KEY: "ps", MIN_AVAILABLE_KEY: "3"}
    names = [f"ps-{i}" for i in range(3)]
    scene.create([scene.pod(name, gpus=1, labels=labels, affinity=APART) for name in names])
    assert sorted(scene.wait_bound(names).values()) == sorted(nodes)


def test_a_pod_whose_node_selector_matches_nothing_pends_with_kube_schedulers_message(scene: Scene) -> None:
    nodes = zoned(scene)
    lost = scene.pod("lost", gpus=1, nodeSelector={ZONE: "zone-9"})
    scene.create([lost, scene.pod("found", gpus=1)])
    wait_until(lambda: refusals(scene, ["lost"]) and "found" in scene.bound(), timeout_s=BOUND_S, what="the outcome")
    counts = reasons(refusals(scene, ["lost"])[0])
    assert set(counts) == {SELECTOR}  # every node of the cluster, this scene's three among them
    assert counts[SELECTOR] >= 3
    rejected = scene.placement.client.filter(lost, nodes).rejected
    assert [(group.reason, sorted(group.nodes)) for group in rejected] == [(SELECTOR, sorted(nodes))]
    assert set(scene.bound()) == {"found"}


def test_a_gated_pod_waits_until_its_gates_are_removed(scene: Scene) -> None:
    scene.add_nodes({"a": nvswitch_node()})
    scene.create([scene.pod("gated", gpus=1, schedulingGates=[{"name": "example.com/quota"}]), scene.pod("free")])
    scene.wait_bound(["free"])
    assert "gated" not in scene.bound()
    # The API server's own mark (kube-scheduler's SchedulingGates plugin leaves the pod alone), no Event of ours.
    (condition,) = [c for c in scene.get("gated")["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert (condition["status"], condition["reason"]) == ("False", "SchedulingGated")
    assert scene.events("gated") == [], "a gated pod is left alone: no event"

    scene.admin.merge_patch(scene.path("pods", "gated"), {"spec": {"schedulingGates": None}})  # its controller
    scene.wait_bound(["gated"])


def test_the_higher_priority_pods_are_placed_first(scene: Scene, certificates: Path, priorities: None) -> None:
    """kube-scheduler's queue order (PrioritySort): priority, then age. The node holds two of the three pods,
    all pending when a scheduler starts; the one created first has the lowest priority and is left out. The
    pods are another scheduler name's, and that scheduler a second binder started after them (one replica run
    by hand: no Lease), as the same ServiceAccount."""
    (node,) = scene.add_nodes({"a": nvswitch_node()})
    late = "kubenexus-late"
    pods = [("batch", LOW), ("urgent-0", HIGH), ("urgent-1", HIGH)]
    scene.create([scene.pod(name, gpus=4, priorityClassName=class_of(priority), schedulerName=late)
                  for name, priority in pods])  # fmt: skip
    assert [scene.get(name)["spec"]["priority"] for name, _ in pods] == [LOW, HIGH, HIGH]  # Priority admission
    binder = Program("binder", [
        "binder", f"--kubeconfig={scene.placement.kubeconfig}", f"--service={scene.placement.service.address}",
        f"--service-ca={certificates / 'ca.crt'}", f"--service-cert={certificates / f'{SCHEDULER}.crt'}",
        f"--service-key={certificates / f'{SCHEDULER}.key'}", f"--scheduler-name={late}", "--no-leader-elect",
    ])  # fmt: skip
    try:
        wait_until(lambda: refusals(scene, ["batch"]), timeout_s=BOUND_S, what="the low-priority pod's refusal")
    finally:
        binder.stop()
    assert "Traceback" not in binder.text()
    assert scene.bound() == {"urgent-0": node, "urgent-1": node}


def test_a_gang_requiring_one_rack_is_bound_inside_one_or_waits_with_the_reason(scene: Scene) -> None:
    """Racks (NVIDIA Topograph's leaf label): r1 and r2 hold one H100 node each (room for four 2-GPU members),
    r3 four L40S nodes (two each). The packed planner alone would take the two H100 nodes, in two racks; a gang
    that requires one rack goes to r3. A gang of 10 no rack can hold waits, told why."""
    racks = {"h100-a": "r1", "h100-b": "r2", "l40s-1": "r3", "l40s-2": "r3", "l40s-3": "r3", "l40s-4": "r3"}
    machines = {key: nvswitch_node() if key.startswith("h100") else l40s_node() for key in racks}
    scene.add_nodes(machines, labels={key: {TOPOGRAPH_LEAF_KEY: rack} for key, rack in racks.items()})

    def gang(group: str, size: int) -> list[Json]:
        labels = {GROUP_NAME_KEY: group, MIN_AVAILABLE_KEY: str(size), REQUIRED_TOPOLOGY_KEY: "rack"}
        return [scene.pod(f"{group}-{i}", gpus=2, labels=labels) for i in range(size)]

    scene.create(gang("wide", 10))  # the cluster has room for 16; the largest rack for 8
    reason = (
        "can never fit the cluster as it is: requires every member in one rack "
        f"({RACK_KEY}, {TOPOGRAPH_LEAF_KEY}, {TOPOGRAPH_BLOCK_KEY}): no rack has room for 10 member(s) of "
        "4 CPUs, 16 GiB memory, 2 nvidia.com/gpu; the largest holds 8"
    )
    wait_until(lambda: any(reason in m for m in scene.messages("wide-9")), timeout_s=BOUND_S,
               what="the waiting event naming the rack")  # fmt: skip
    assert {event["reason"] for event in scene.events("wide-9")} == {"WaitingForPodGroup"}
    assert scene.bound() == {}

    names = [f"train-{i}" for i in range(8)]
    scene.create(gang("train", 8))
    bound = scene.wait_bound(names)
    assert_numa_aligned_and_not_double_booked([scene.get(name) for name in names])
    assert {bound[name] for name in names} == {f"{scene.namespace}-l40s-{i}" for i in range(1, 5)}
    assert not any(name.startswith("wide-") for name in scene.bound())


# -- 2. gangs: our labels, scheduler-plugins' PodGroup, Volcano's PodGroup (the native one at the end) ------

MEMBERS = 4  # of 4 GPUs each: both cells of two 8-GPU nodes


@dataclass(frozen=True)
class Way:
    """One way to define the gang: what each pod carries, and the group's object (None: our labels)."""

    name: str
    member: Callable[[Json], None]
    collection: str = ""  # the object's collection under /apis/<group>/<version>/namespaces/<ns>/
    group_object: Json | None = None
    source: str = ""  # the API group members name while waiting for the object


def _group_object(api_version: str, spec: Json) -> Json:
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": "train"}, "spec": spec}


WAYS = {
    way.name: way
    for way in (
        Way("labels", lambda pod: pod["metadata"]["labels"].update({GROUP_NAME_KEY: "train",
                                                                    MIN_AVAILABLE_KEY: str(MEMBERS)})),
        Way("scheduler-plugins", lambda pod: pod["metadata"]["labels"].update({SCHEDULER_PLUGINS_KEY: "train"}),
            PLUGIN_GROUPS, _group_object("scheduling.x-k8s.io/v1alpha1",
                                         {"minMember": MEMBERS, "scheduleTimeoutSeconds": 60}),
            "scheduling.x-k8s.io"),
        Way("volcano", lambda pod: pod["metadata"]["annotations"].update({VOLCANO_GROUP_KEY: "train"}),
            VOLCANO_GROUPS, _group_object("scheduling.volcano.sh/v1beta1", {"minMember": MEMBERS, "queue": "default"}),
            "scheduling.volcano.sh"),
        Way("native", lambda pod: pod["spec"].update({"schedulingGroup": {"podGroupName": "train"}}),
            NATIVE_GROUPS, _group_object("scheduling.k8s.io/v1beta1",
                                         {"schedulingPolicy": {"gang": {"minCount": MEMBERS}}}),
            "scheduling.k8s.io"),
    )
}  # fmt: skip


def group_path(scene: Scene, way: Way) -> str:
    return f"{way.collection}/namespaces/{scene.namespace}/podgroups/train"


def group_status(scene: Scene, way: Way) -> Json:
    stored = scene.admin.get(group_path(scene, way))
    assert stored is not None
    return dict(stored.get("status") or {})


def written_through(scene: Scene, path: str) -> list[str]:
    """The subresources ("" for the object itself) through which the placement service wrote the object at
    ``path``, from the server's managed fields."""
    stored = scene.admin.get(path)
    assert stored is not None
    return [entry.get("subresource", "") for entry in stored["metadata"]["managedFields"]
            if entry["manager"] == FIELD_MANAGER]  # fmt: skip


def land_gang(scene: Scene, way: Way) -> list[Json]:
    """The gang's members wait (for their last member, or for their object), nothing bound; then the gang
    lands whole, NUMA-aligned, over both nodes. The members as stored."""
    nodes = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    members = []
    for index in range(MEMBERS):
        pod = scene.pod(f"worker-{index}", gpus=4, cpus=16, memory="64Gi")
        way.member(pod)
        members.append(pod)
    names = [pod["metadata"]["name"] for pod in members]
    if way.group_object is None:
        scene.create(members[:-1])
        waiting = f"waiting for pod group {scene.namespace}/train: {MEMBERS - 1}/{MEMBERS} members"
        wait_until(lambda: waiting in scene.messages("worker-0", "WaitingForPodGroup"), timeout_s=BOUND_S,
                   what="the members to wait for the last one")  # fmt: skip
        assert scene.bound() == {}, "a partial gang was bound"
        scene.create(members[-1:])
    else:
        scene.create(members)
        waiting = f"waiting for the PodGroup object {scene.namespace}/train ({way.source})"
        wait_until(lambda: waiting in scene.messages("worker-0"), timeout_s=BOUND_S,
                   what="the members to wait for their PodGroup")  # fmt: skip
        assert scene.bound() == {}, "members were bound before their group's object existed"
        scene.admin.create(group_path(scene, way).rpartition("/")[0], way.group_object)
    bound = scene.wait_bound(names)
    stored = [scene.get(name) for name in names]
    assert_numa_aligned_and_not_double_booked(stored)
    assert Counter(bound[name] for name in names) == {nodes[0]: 2, nodes[1]: 2}
    wait_until(lambda: all(scene.events(name, "Scheduled") for name in names), timeout_s=60,
               what="every member's Scheduled event")  # fmt: skip
    return stored


@pytest.mark.parametrize("name", ["labels", "scheduler-plugins", "volcano"])
def test_a_gang_is_bound_all_at_once_and_its_pod_group_status_is_accepted(scene: Scene, name: str) -> None:
    way = WAYS[name]
    members = land_gang(scene, way)
    if name == "scheduler-plugins":
        # Through the status subresource: bound members not yet running are "Scheduling".
        wait_until(lambda: group_status(scene, way).get("phase") == "Scheduling", timeout_s=60,
                   what="phase Scheduling")  # fmt: skip
        status = group_status(scene, way)
        assert status["scheduleStartTime"]
        assert (status["running"], status["succeeded"], status["failed"]) == (0, 0, 0)
        for pod in members:  # what the kubelet reports once the members run
            scene.set_status(pod["metadata"]["name"], {"phase": "Running"})
        wait_until(lambda: group_status(scene, way).get("phase") == "Running", timeout_s=60, what="phase Running")
        assert group_status(scene, way)["running"] == MEMBERS
        assert written_through(scene, group_path(scene, way)) == ["status"]
        phase = scene.plane.kubectl("get", "podgroups.scheduling.x-k8s.io", "train", "-n", scene.namespace,
                                    "-o", "jsonpath={.status.phase}").stdout  # fmt: skip
        assert phase == "Running"
    elif name == "volcano":
        # Through the object (Volcano's CRD has no status subresource): Running once the members are bound.
        wait_until(lambda: group_status(scene, way).get("phase") == "Running", timeout_s=60, what="phase Running")
        conditions = {c["type"]: c for c in group_status(scene, way)["conditions"]}
        assert conditions["Scheduled"]["status"] == "True"
        assert conditions["Scheduled"]["reason"] == "tasks in gang are ready to be scheduled"
        assert conditions["Scheduled"]["lastTransitionTime"]
        assert written_through(scene, group_path(scene, way)) == [""]


# -- 3. DRA: the binder writes the claims, the real validation and authorization accept them ----------------


@pytest.fixture
def device_class(control_plane: ControlPlane) -> str:
    ensure_object(control_plane, "/apis/resource.k8s.io/v1/deviceclasses", gpu_class())
    return str(gpu_class()["metadata"]["name"])


def create_claim(scene: Scene, claim: Json) -> Json:
    claim["metadata"].pop("uid", None)
    return scene.admin.create(f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaims", claim)


def test_a_claims_gpus_come_from_the_numa_cell_the_pods_cpus_get(scene: Scene, device_class: str) -> None:
    """A pod holding 80 of cell 0's 96 CPUs makes the kubelet pin the next Guaranteed pod (32 CPUs) to cell 1:
    its claim's 4 devices are GPUs 4-7. The binder writes the claim as kube-scheduler's DynamicResources plugin
    does: the delete-protection finalizer, then status.allocation and status.reservedFor through /status, which
    Kubernetes 1.36+ authorizes separately (``resourceclaims/binding``)."""
    (node,) = scene.add_nodes({"a": nvswitch_node()}, slices=NVSWITCH)
    create_claim(scene, gpu_claim("four", 4, namespace=scene.namespace))
    scene.create([scene.pod("filler", cpus=80)])
    scene.wait_bound(["filler"])
    (trainer,) = scene.create([scene.claiming_pod("trainer", "four", cpus=32)])
    assert scene.wait_bound(["trainer"])["trainer"] == node

    assert scene.get("trainer")["metadata"]["annotations"][ASSIGNED_CELLS_KEY] == "1"
    assert sorted(scene.allocated("four")) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    claim = scene.claim("four")
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer",
                                               "uid": trainer["metadata"]["uid"]}]  # fmt: skip
    (term,) = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [node]}]
    assert {(r["driver"], r["pool"], r["request"]) for r in claim["status"]["allocation"]["devices"]["results"]} == {
        ("gpu.nvidia.com", node, "gpus")
    }
    assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    # the finalizer through the object, the allocation through /status
    assert sorted(
        written_through(scene, f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaims/four")
    ) == ["", "status"]
    wait_until(lambda: scene.events("trainer", "Scheduled"), timeout_s=60, what="the Scheduled event")
    (scheduled,) = scene.messages("trainer", "Scheduled")
    assert "claim four: devices gpu-4,gpu-5,gpu-6,gpu-7" in scheduled


def test_a_shared_claim_is_allocated_once_and_reserved_for_each_pod(scene: Scene, device_class: str) -> None:
    scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()}, slices=NVSWITCH)
    create_claim(scene, gpu_claim("shared", 2, namespace=scene.namespace))
    (first,) = scene.create([scene.claiming_pod("first", "shared")])
    scene.wait_bound(["first"])
    allocation = scene.claim("shared")["status"]["allocation"]
    (second,) = scene.create([scene.claiming_pod("second", "shared")])
    bound = scene.wait_bound(["second"])

    claim = scene.claim("shared")
    assert claim["status"]["allocation"] == allocation  # allocated once, kept
    assert [(c["name"], c["uid"]) for c in claim["status"]["reservedFor"]] == [
        ("first", first["metadata"]["uid"]), ("second", second["metadata"]["uid"])
    ]  # fmt: skip
    assert bound["second"] == bound["first"]  # where its devices are


def test_a_claim_whose_selector_matches_nothing_pends_with_a_clear_reason(scene: Scene, device_class: str) -> None:
    scene.add_nodes({"a": nvswitch_node()}, slices=NVSWITCH)
    b200 = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA B200')"
    create_claim(scene, gpu_claim("b200", 1, namespace=scene.namespace, selector=b200))
    scene.create([scene.claiming_pod("trainer", "b200")])
    wanted = f"claim {scene.namespace}/b200, request gpus: no device of the node matches the selectors"
    wait_until(lambda: any(wanted in m for m in scene.messages("trainer", "FailedScheduling")), timeout_s=BOUND_S,
               what="the FailedScheduling event naming the claim")  # fmt: skip
    assert scene.allocated("b200") == []
    assert "nodeName" not in scene.get("trainer")["spec"]


def test_a_pcie_node_gives_two_nvlink_bridged_pairs(scene: Scene, device_class: str) -> None:
    """8x A100 PCIe with NVLink bridges on pairs 0-2, 1-3, 4-5, 6-7, published out of order: first fit would
    take gpu-0, gpu-4, gpu-1, gpu-6 (no two bridged); ours takes two bridged pairs on one cell."""
    scene.add_nodes({"p": pcie_node()}, slices=PCIE)
    create_claim(scene, gpu_claim("four", 4, namespace=scene.namespace))
    scene.create([scene.claiming_pod("trainer", "four")])
    scene.wait_bound(["trainer"])
    devices = {int(name.removeprefix("gpu-")) for name in scene.allocated("four")}
    assert len(devices) == 4
    assert sum(1 for pair in ({0, 2}, {1, 3}, {4, 5}, {6, 7}) if pair <= devices) == 2


def test_a_node_with_slices_but_no_agent_report_schedules_on_what_its_driver_publishes(
    scene: Scene, device_class: str
) -> None:
    """No agent on the node: it is scheduled on the Node's allocatable CPUs and memory and its DRA devices,
    their PCIe roots read from the driver's attributes (GPUs 0-4, 1-5, 2-6, 3-7 share a root here, so a pair on
    one root is not the first two published); Explain says the topology was inferred."""
    name = f"{scene.namespace}-bare"
    scene.create_node(name, {"cpu": "190", "memory": "1900Gi"}, {})
    resource_slice = fixture_slice(NVSWITCH, name)
    for device in resource_slice["spec"]["devices"]:
        index = int(device["name"].removeprefix("gpu-"))
        device["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": f"pci0000:{index % 4:02x}"}
    scene.add_slice(resource_slice)
    scene.wait_feasible(scene.pod("probe", cpus=1, memory="1Gi"), [name], [name])
    create_claim(scene, gpu_claim("pair", 2, namespace=scene.namespace))
    scene.create([scene.claiming_pod("trainer", "pair")])
    assert scene.wait_bound(["trainer"])["trainer"] == name
    devices = sorted(int(device.removeprefix("gpu-")) for device in scene.allocated("pair"))
    assert devices[1] - devices[0] == 4  # under one PCIe root

    create_claim(scene, gpu_claim("other", 2, namespace=scene.namespace))
    other = scene.claiming_pod("other-pod", "other")

    def explained() -> pb.ExplainResponse | None:
        answer = scene.placement.explain(other, name)
        return answer if answer.placement.claims else None

    wait_until(explained, timeout_s=60, what="the service to read the second claim")
    answer = explained()
    assert answer is not None
    (claim,) = answer.placement.claims
    inferred = f"node {name}: no KubeNexus agent report; GPU topology inferred from the gpu.nvidia.com driver's"
    assert any(line.startswith(inferred) for line in claim.why), list(claim.why)


def test_a_claim_made_from_a_template_by_the_controller_is_allocated(
    scene: Scene, device_class: str, controllers: Process
) -> None:
    """The pod names a ResourceClaimTemplate; kube-controller-manager's ResourceClaim controller makes the
    claim (owned by the pod) and names it in the pod's status; the binder allocates that claim and binds."""
    (node,) = scene.add_nodes({"a": nvswitch_node()}, slices=NVSWITCH)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus"},
        "spec": {"spec": gpu_claim("unused", 2)["spec"]},
    }
    scene.admin.create(f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaimtemplates", template)
    pod = scene.claiming_pod("trainer", "unused")
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]
    (trainer,) = scene.create([pod])
    assert scene.wait_bound(["trainer"])["trainer"] == node

    (entry,) = scene.get("trainer")["status"]["resourceClaimStatuses"]
    assert entry["name"] == "gpus"
    claim = scene.claim(entry["resourceClaimName"])
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", "trainer", trainer["metadata"]["uid"])
    assert len(scene.allocated(entry["resourceClaimName"])) == 2
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer",
                                               "uid": trainer["metadata"]["uid"]}]  # fmt: skip


# -- 4. preemption through the Eviction API, budgets honoured ----------------------------------------------


def placed(
    scene: Scene, name: str, node: str, cell: int, gpus: Sequence[int], *, priority: int, labels: Json | None = None
) -> Json:
    """A pod our binder placed earlier, now running and Ready (the kubelet's report written by hand). Its
    grace period is 0: with no kubelet to confirm a graceful deletion, an evicted pod would stay Terminating."""
    annotations = {ASSIGNED_CELLS_KEY: str(cell)}
    if gpus:
        annotations[ASSIGNED_GPUS_KEY] = ",".join(map(str, gpus))
    pod = scene.pod(name, gpus=len(gpus), cpus=max(2, 4 * len(gpus)), labels=labels, annotations=annotations,
                    nodeName=node, priorityClassName=class_of(priority), terminationGracePeriodSeconds=0)  # fmt: skip
    (stored,) = scene.create([pod])
    scene.set_status(name, {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    return stored


def budget(scene: Scene, name: str, labels: Json, *, min_available: int) -> None:
    scene.admin.create(f"/apis/policy/v1/namespaces/{scene.namespace}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": dict(labels)}},
    })  # fmt: skip


def budget_status(scene: Scene, name: str) -> Json:
    stored = scene.admin.get(f"/apis/policy/v1/namespaces/{scene.namespace}/poddisruptionbudgets/{name}")
    assert stored is not None
    status: Json = stored.get("status") or {}
    return status if status.get("observedGeneration") == stored["metadata"]["generation"] else {}


def wait_budget(scene: Scene, name: str, *, healthy: int, allowed: int) -> None:
    """Until the disruption controller has counted the budget's pods."""
    wait_until(
        lambda: (
            (budget_status(scene, name).get("currentHealthy"), budget_status(scene, name).get("disruptionsAllowed"))
            == (healthy, allowed)
        ),
        timeout_s=BOUND_S,
        what=f"the disruption controller to compute budget {name}: {healthy} healthy, {allowed} allowed",
    )


def wait_charged(scene: Scene, nodes: Sequence[str]) -> None:
    """Until the service charges every running pod: no GPU is left on ``nodes``."""
    probe = scene.pod("probe", gpus=1)
    scene.wait_feasible(probe, nodes, [])


def test_a_gang_preempts_one_node_whole_gangs_and_no_pod_a_budget_protects(
    scene: Scene, controllers: Process, priorities: None
) -> None:
    """A 2 x 4-GPU gang (each member on one NUMA cell) needs two free cells. The only room that breaks no budget
    is node a: its cell 0 holds half of a 2-member batch gang (the other half runs on node b) and a lone pod,
    its cell 1 another lone pod. Node b's other pods are protected by a budget that allows no disruption (the
    disruption controller's count); evicting half of the batch gang would be cheaper, but a gang goes whole or
    not at all. The binder evicts through the Eviction API (201: the pods are deleted), the budget untouched."""
    a, b = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    batch = {GROUP_NAME_KEY: "batch", MIN_AVAILABLE_KEY: "2"}
    serving = {"app": "serving"}
    victims = {"batch-0", "batch-1", "x-0", "x-1"}
    placed(scene, "batch-0", a, 0, (0, 1), priority=LOW, labels=batch)
    placed(scene, "x-0", a, 0, (2, 3), priority=LOW)
    placed(scene, "x-1", a, 1, (4, 5, 6, 7), priority=LOW)
    placed(scene, "batch-1", b, 0, (0, 1), priority=LOW, labels=batch)
    placed(scene, "y-0", b, 0, (2, 3), priority=LOW, labels=serving)
    placed(scene, "y-1", b, 1, (4, 5, 6, 7), priority=LOW, labels=serving)
    budget(scene, "serving", serving, min_available=2)
    wait_budget(scene, "serving", healthy=2, allowed=0)
    wait_charged(scene, [a, b])

    train = {GROUP_NAME_KEY: "train", MIN_AVAILABLE_KEY: "2"}
    members = scene.create(
        [scene.pod(f"train-{i}", gpus=4, cpus=16, labels=train, priorityClassName=class_of(HIGH)) for i in range(2)]
    )
    bound = scene.wait_bound(["train-0", "train-1"])
    assert (bound["train-0"], bound["train-1"]) == (a, a), "the gang bound where its room was freed"
    assert not any(scene.exists(name) for name in victims)
    assert scene.exists("y-0")
    assert scene.exists("y-1")
    assert budget_status(scene, "serving")["disruptionsAllowed"] == 0
    stored = [scene.get(f"train-{i}") for i in range(2)]
    assert_numa_aligned_and_not_double_booked(stored)
    assert sorted(gpu for pod in stored for gpu in cells_and_gpus(pod)[1]) == list(range(8))
    for pod in stored:
        # Nominated before the evictions (the Preempting Event says where); the Binding cleared the nomination,
        # as the API server does since 1.35 (ClearingNominatedNodeNameAfterBinding, beta and on).
        assert "nominatedNodeName" not in pod["status"]
        assert scene.events(pod["metadata"]["name"], "Scheduled")
    preempting = [m for i in range(2) for m in scene.messages(f"train-{i}", "Preempting")]
    assert len(preempting) == 1
    assert all(f"{scene.namespace}/{name} on " in preempting[0] for name in victims)
    assert f"nominated node(s) {a}," in preempting[0]
    uids = {member["metadata"]["uid"] for member in members}
    for name in victims:  # each victim's Event outlives it
        (message,) = scene.messages(name, "Preempted")
        uid = message.removeprefix("Preempted by pod ").split(" ")[0]
        assert uid in uids
        assert message.startswith(f"Preempted by pod {uid} on node ")
        assert f"{scene.namespace}/train-" in message
        if name.startswith("batch-"):
            assert f"evicted with its pod group {scene.namespace}/batch" in message


def test_room_the_kubelet_would_still_refuse_is_not_taken(scene: Scene, priorities: None) -> None:
    """Evicting the two lower-priority pods would free 4 GPUs on node a, two on each NUMA cell: enough by count,
    refused by the kubelet's single-numa-node admission. Nothing is evicted; the pod says why."""
    a, b = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    placed(scene, "keep-0", a, 0, (0, 1), priority=HIGHEST)
    placed(scene, "low-0", a, 0, (2, 3), priority=LOW)
    placed(scene, "keep-1", a, 1, (4, 5), priority=HIGHEST)
    placed(scene, "low-1", a, 1, (6, 7), priority=LOW)
    placed(scene, "full-b", b, 0, (0, 1, 2, 3), priority=HIGHEST)
    placed(scene, "full-b2", b, 1, (4, 5, 6, 7), priority=HIGHEST)
    wait_charged(scene, [a, b])
    scene.create([scene.pod("needs-a-cell", gpus=4, cpus=16, priorityClassName=class_of(HIGH))])
    wait_until(lambda: any(" preemption: " in m for m in scene.messages("needs-a-cell", "FailedScheduling")),
               timeout_s=BOUND_S, what="the FailedScheduling event with the preemption's answer")  # fmt: skip
    answer = scene.placement.client.preempt(scene.get("needs-a-cell"), [])
    assert not answer.preempted
    assert not answer.victims
    assert not answer.nominations
    assert "NUMA" in answer.reason
    assert a in answer.reason
    assert scene.exists("low-0")
    assert scene.exists("low-1")
    assert "nominatedNodeName" not in scene.get("needs-a-cell")["status"]
    (message,) = [m for m in scene.messages("needs-a-cell", "FailedScheduling") if " preemption: " in m]
    assert answer.reason in message


def test_a_pod_whose_priority_class_never_preempts_evicts_nothing(scene: Scene, priorities: None) -> None:
    a, b = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    for node, cell, name in ((a, 0, "low-a"), (a, 1, "low-a1"), (b, 0, "low-b"), (b, 1, "low-b1")):
        placed(scene, name, node, cell, tuple(range(4 * cell, 4 * cell + 4)), priority=LOW)
    wait_charged(scene, [a, b])
    # preemptionPolicy comes from the class, through the Priority admission plugin
    scene.create([scene.pod("patient", gpus=4, cpus=16, priorityClassName=class_of(HIGH, never=True))])
    assert scene.get("patient")["spec"]["preemptionPolicy"] == "Never"
    wait_until(lambda: scene.events("patient", "FailedScheduling"), timeout_s=BOUND_S, what="the FailedScheduling")
    # The service refuses too, whoever asks: the binder's own check is not the only one.
    answer = scene.placement.client.preempt(scene.get("patient"), [])
    assert not answer.preempted
    assert "preemptionPolicy Never" in answer.reason
    (message,) = scene.messages("patient")
    assert message.endswith(" preemption: not eligible due to preemptionPolicy=Never.")
    assert all(scene.exists(name) for name in ("low-a", "low-a1", "low-b", "low-b1"))
    assert "nominatedNodeName" not in scene.get("patient")["status"]


def manual_pod(scene: Scene, name: str, priority: int) -> Json:
    """A 4-GPU pod of another scheduler: the module's binder leaves it alone, the test makes the calls."""
    return scene.pod(name, gpus=4, cpus=16, priorityClassName=class_of(priority), schedulerName="kubenexus-manual")


def wait_held(scene: Scene, opportunist: Json, node: str) -> None:
    """Until the service refuses ``opportunist`` ``node`` because the room there is held for a preemptor (it may
    first refuse it for want of room, while the victim's deletion reaches it); never a reservation."""

    def refused_for_the_hold() -> bool:
        taken = scene.placement.client.reserve(opportunist, [])
        assert not taken.reserved, "a lower-priority pod took the room held for the preemptor"
        return any("held for a preempting pod" in group.reason for group in taken.rejected if node in group.nodes)

    wait_until(refused_for_the_hold, timeout_s=60, what=f"the service to hold {node} for the preemptor")


def test_a_lower_priority_pod_does_not_take_the_room_held_for_the_preemptor(scene: Scene, priorities: None) -> None:
    """The preemption is written by the binder's own writer (as the placement ServiceAccount); with the victim
    gone, a lower-priority pod of the same shape asks first: the freed node is held for the preemptor, which
    then gets it."""
    a, b = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    placed(scene, "low-a", a, 0, (0, 1, 2, 3), priority=LOW)
    placed(scene, "high-a", a, 1, (4, 5, 6, 7), priority=HIGHEST)
    placed(scene, "high-b", b, 0, (0, 1, 2, 3), priority=HIGHEST)
    placed(scene, "high-b1", b, 1, (4, 5, 6, 7), priority=HIGHEST)
    wait_charged(scene, [a, b])
    urgent, opportunist = scene.create([manual_pod(scene, "urgent", HIGH), manual_pod(scene, "opportunist", LOW + 1)])
    client = scene.placement.client
    answer = client.preempt(urgent, [])
    assert answer.preempted
    assert [(victim.pod.name, victim.node) for victim in answer.victims] == [("low-a", a)]
    assert [(nomination.pod.name, nomination.node) for nomination in answer.nominations] == [("urgent", a)]
    assert answer.hold_seconds > 0
    told: list[str] = []
    writer = scene.plane.client(scene.placement.kubeconfig, field_manager=FIELD_MANAGER)
    try:
        carried = Preemptor(writer, tell=lambda pod, kind, reason, message: told.append(reason)).carry_out(
            answer, {(scene.namespace, "urgent"): urgent}
        )
    finally:
        writer.close()
    assert carried.evicted == ((scene.namespace, "low-a"),)
    assert not carried.blocked
    assert not scene.exists("low-a")  # a grace period of 0: the eviction deleted it
    assert scene.get("urgent")["status"]["nominatedNodeName"] == a
    assert told == ["Preempted", "Preempting"]
    try:
        wait_held(scene, opportunist, a)
        given = client.reserve(urgent, [])
        assert given.reserved
        assert given.placement.node == a
    finally:
        client.unreserve(scene.namespace, "urgent")


def test_a_nomination_the_service_did_not_decide_holds_the_room_it_names(scene: Scene, priorities: None) -> None:
    """After a failover the new leader never saw the Preempt call: it reads the preemptor's
    status.nominatedNodeName (written by the old leader's binder) from its pod watch and keeps the room for it."""
    a, b = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    placed(scene, "high-a", a, 1, (4, 5, 6, 7), priority=HIGHEST)
    placed(scene, "high-b", b, 0, (0, 1, 2, 3), priority=HIGHEST)
    placed(scene, "high-b1", b, 1, (4, 5, 6, 7), priority=HIGHEST)
    _, opportunist = scene.create([manual_pod(scene, "urgent", HIGH), manual_pod(scene, "opportunist", LOW + 1)])
    writer = scene.plane.client(scene.placement.kubeconfig, field_manager=FIELD_MANAGER)
    try:  # what the old leader's binder wrote before it died
        writer.merge_patch(scene.path("pods", "urgent") + "/status", {"status": {"nominatedNodeName": a}})
    finally:
        writer.close()
    try:
        wait_held(scene, opportunist, a)
        given = scene.placement.client.reserve(scene.get("urgent"), [])
        assert given.reserved
        assert given.placement.node == a
    finally:
        scene.placement.client.unreserve(scene.namespace, "urgent")


def test_an_eviction_a_budget_refuses_is_the_api_servers_429_and_stops_the_plan(
    scene: Scene, controllers: Process, priorities: None
) -> None:
    """The service chooses a victim whose budget allows one disruption; before the binder's writer evicts it,
    another pod of that budget goes unready and the disruption controller allows none. The Eviction API refuses
    with 429: the writer (as the placement ServiceAccount) evicts nothing more and warns the preemptor."""
    a, b = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    serving = {"app": "serving"}
    placed(scene, "low-a", a, 0, (0, 1, 2, 3), priority=LOW, labels=serving)
    placed(scene, "high-a", a, 1, (4, 5, 6, 7), priority=HIGHEST)
    placed(scene, "high-b", b, 0, (0, 1, 2, 3), priority=HIGHEST)
    placed(scene, "high-b1", b, 1, (4, 5, 6, 7), priority=HIGHEST)
    placed(scene, "replica", b, 0, (), priority=HIGHEST, labels=serving)  # a CPU-only replica of the service
    budget(scene, "serving", serving, min_available=1)
    wait_budget(scene, "serving", healthy=2, allowed=1)
    wait_charged(scene, [a, b])
    (urgent,) = scene.create([manual_pod(scene, "urgent", HIGH)])
    answer = scene.placement.client.preempt(urgent, [])
    assert answer.preempted, answer.reason
    assert [(victim.pod.name, victim.node) for victim in answer.victims] == [("low-a", a)]

    scene.set_status("replica", {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]})
    wait_budget(scene, "serving", healthy=1, allowed=0)
    told: list[tuple[str, str, str]] = []
    writer = scene.plane.client(scene.placement.kubeconfig, field_manager=FIELD_MANAGER)
    try:
        carried = Preemptor(writer, tell=lambda pod, kind, reason, message: told.append((kind, reason, message))) \
            .carry_out(answer, {(scene.namespace, "urgent"): urgent})  # fmt: skip
    finally:
        writer.close()
        scene.placement.client.unreserve(scene.namespace, "urgent")
    assert carried.evicted == ()
    assert carried.blocked.startswith(
        f"preemption stopped: a disruption budget refused evicting {scene.namespace}/low-a"
    )
    assert "Cannot evict pod as it would violate the pod's disruption budget." in carried.blocked
    assert told == [("Warning", "PreemptionBlocked", carried.blocked)]
    assert scene.exists("low-a")
    assert scene.get("urgent")["status"]["nominatedNodeName"] == a  # nominated before the evictions


# -- 5. a claim, a gang and a plain pod together: nothing half-bound ----------------------------------------


def test_a_gang_of_claims_one_member_short_of_room_leaves_nothing_half_bound(scene: Scene, device_class: str) -> None:
    """Two 8-GPU DRA nodes hold four members of 4 GPUs exactly. While another claim holds 4 GPUs of node b,
    three members fit: none is bound, no member's claim is allocated or reserved, no reservation is written;
    a plain pod beside them is bound meanwhile. Once that claim goes, the four are bound, every GPU once."""
    a, b = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()}, slices=NVSWITCH)
    held = create_claim(scene, gpu_claim("held", 4, namespace=scene.namespace))
    scene.admin.merge_patch(  # allocated by another scheduler, for a pod not made yet
        f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaims/held/status",
        {"metadata": {"resourceVersion": held["metadata"]["resourceVersion"]}, "status": {"allocation": {
            "devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": b, "device": f"gpu-{i}"}
                                    for i in range(4)]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                     "values": [b]}]}]},
        }}},
    )  # fmt: skip
    group = {GROUP_NAME_KEY: "job", MIN_AVAILABLE_KEY: str(MEMBERS)}
    members = []
    for index in range(MEMBERS):
        create_claim(scene, gpu_claim(f"member-{index}", 4, namespace=scene.namespace))
        members.append(scene.claiming_pod(f"worker-{index}", f"member-{index}", labels=group))
    scene.create([*members, scene.pod("plain", cpus=4)])
    names = [f"worker-{index}" for index in range(MEMBERS)]

    def told_why() -> list[str]:  # the service's reason, once every member is there
        return [m for m in scene.messages("worker-0", "WaitingForPodGroup") if not m.endswith(" members")]

    wait_until(told_why, timeout_s=BOUND_S, what="the group to wait for room")
    assert scene.wait_bound(["plain"])["plain"] in (a, b)
    assert set(scene.bound()) == {"plain"}
    for index, name in enumerate(names):
        claim = scene.claim(f"member-{index}")
        assert "status" not in claim or claim["status"] == {}, claim.get("status")
        assert RESERVED_NODE_KEY not in scene.get(name)["metadata"].get("annotations", {})

    scene.plane.delete(f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaims/held")
    bound = scene.wait_bound(names)
    devices = [
        (bound[name], device) for index, name in enumerate(names) for device in scene.allocated(f"member-{index}")
    ]
    assert len(devices) == len(set(devices)) == 16  # every GPU of the two nodes, none twice
    for index in range(MEMBERS):
        gpus = {int(device.removeprefix("gpu-")) for device in scene.allocated(f"member-{index}")}
        assert gpus in ({0, 1, 2, 3}, {4, 5, 6, 7})  # one NUMA cell each


# -- 2, last: the native PodGroup (scheduling.k8s.io/v1beta1) -----------------------------------------------


def test_a_native_pod_group_is_bound_all_at_once_and_its_condition_is_accepted(scene: Scene) -> None:
    way = WAYS["native"]
    land_gang(scene, way)

    def scheduled() -> Json:
        conditions = group_status(scene, way).get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodGroupInitiallyScheduled"), {})

    wait_until(lambda: scheduled().get("status") == "True", timeout_s=60, what="PodGroupInitiallyScheduled True")
    assert scheduled()["reason"] == "Scheduled"
    stored = scene.admin.get(group_path(scene, way))
    assert stored is not None
    # The API server keeps no generation for a PodGroup in 1.37 (its strategy sets none): nor does the condition.
    assert scheduled().get("observedGeneration") == stored["metadata"].get("generation")
    assert written_through(scene, group_path(scene, way)) == ["status"]


def test_a_native_pod_group_of_the_basic_policy_places_its_pods_one_by_one(scene: Scene) -> None:
    """A native PodGroup whose policy is basic is no gang: each member is placed as it comes."""
    scene.add_nodes({"a": nvswitch_node()})
    way = WAYS["native"]
    group = _group_object("scheduling.k8s.io/v1beta1", {"schedulingPolicy": {"basic": {}}})
    scene.admin.create(group_path(scene, way).rpartition("/")[0], group)
    members = []
    for index in range(3):  # 3 pods: a gang of any minimum above would wait
        pod = scene.pod(f"worker-{index}", gpus=2)
        way.member(pod)
        members.append(pod)
    scene.create(members)
    scene.wait_bound([pod["metadata"]["name"] for pod in members])
