"""Plugin mode against the real control plane: kubenexus-scheduler (kube-scheduler v1.37.2 with the KubeNexus
framework plugin, built from scheduler/ by tools/kubenexus_scheduler.py) runs the shipped
deploy/scheduler/kubenexus-scheduler-config.yaml, changed only where a test machine differs from a cluster (its
kubeconfig, the service's address, the TLS files), as the ServiceAccount and RBAC the chart gives
kubenexus-scheduler in plugin mode (deploy/kubenexus-scheduler/01-rbac.yaml). The plugin calls
``serve`` over mutual-TLS gRPC as the writer identity; the service runs as the kubenexus-placement
ServiceAccount with deploy/placement's RBAC.

What each test asserts is what the real components did: where the server bound the pod (``spec.nodeName``, set
by kube-scheduler's DefaultBinder), the placement annotations the plugin's PreBind wrote, the service's own
answers, and what a user reads (``kubectl get events``). Nodes are Node objects with the machine's capacity,
their topology published by the agent's own ``Publisher``; there is no kubelet, so a bound pod stays Pending.
"""

from __future__ import annotations

import copy
import itertools
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kubenexus.kube.client import Json
from placement.core.annotations import (
    AFFINITY_KEY,
    ASSIGNED_CELLS_KEY,
    ASSIGNED_GPUS_KEY,
    GROUP_NAME_KEY,
    MIN_AVAILABLE_KEY,
    POLICY_KEY,
    PREFERRED_TOPOLOGY_KEY,
    RESERVED_NODE_KEY,
)
from placement.core.domains import RACK_KEY
from tests.cluster_kube_scheduler import (
    SYSTEM,
    SchedulerScene,
    differences,
    lease_access,
    lease_holder,
    start_scheduler,
)
from tests.cluster_scene import BOUND_S, SCENE_LABEL, SCHEDULER, cells_and_gpus, create_scene_namespace
from tests.conftest import wait_until
from tests.control_plane import (
    ControlPlane,
    Process,
    ensure_object,
    free_port,
)
from tests.dra_cluster import gpu_claim, gpu_class
from tests.machines.node_topologies import cpu_node, nvswitch_node
from tests.plugin_cluster import Plugged, for_this_machine, plugged_scheduler, plugin_args, shipped_config
from tools.kubenexus_scheduler import BuildError

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PLACEMENT_POD = "kubenexus-placement-plugin-tests"
# A second kubenexus-scheduler whose service never answers: one profile per failure policy.
FAIL_CLOSED, IGNORE = "kubenexus-fail-closed", "kubenexus-ignore"
LOW, HIGH = "plugin-tests-low", "plugin-tests-high"
STOCK = "stock-scheduler-tests"  # kube-scheduler v1.37.2 itself, default plugins, beside kubenexus-scheduler

_scenes = itertools.count()


@pytest.fixture(scope="module")
def plugged(
    control_plane: ControlPlane, certificates: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Plugged]:
    try:
        with plugged_scheduler(control_plane, certificates, tmp_path_factory.mktemp("plugin"),
                               placement_pod=PLACEMENT_POD) as plugged:  # fmt: skip
            yield plugged
    except BuildError as error:
        pytest.fail(f"kubenexus-scheduler could not be built: {error}")


@pytest.fixture
def scene(control_plane: ControlPlane, plugged: Plugged, tmp_path: Path) -> Iterator[SchedulerScene]:
    namespace = f"plugin-{next(_scenes)}"
    create_scene_namespace(control_plane, namespace)

    def logs() -> str:
        return f"{plugged.scheduler.tail()}\n{plugged.service.text()[-3000:]}"

    made = SchedulerScene(plane=control_plane, client=plugged.client, namespace=namespace, folder=tmp_path,
                          logs=logs)  # fmt: skip
    try:
        yield made
    finally:
        made.close()


# -- the configuration ------------------------------------------------------------------------------------


def test_kubenexus_scheduler_runs_the_shipped_configuration_changed_only_for_this_machine(plugged: Plugged) -> None:
    running = yaml.safe_load(plugged.config.read_text())
    assert differences(shipped_config(), running) == {
        "clientConnection",
        "profiles.0.pluginConfig.0.args.address",
        "profiles.0.pluginConfig.0.args.caFile",
        "profiles.0.pluginConfig.0.args.certFile",
        "profiles.0.pluginConfig.0.args.keyFile",
    }
    assert plugged.scheduler.running()
    assert lease_holder(plugged.plane, running["leaderElection"]["resourceName"])
    version = plugged.plane.kubectl("version", "-o", "json").stdout  # the server; the binary says its own below
    assert "v1.37.2" in version
    shown = subprocess.run([str(plugged.binary), "--version"], capture_output=True, text=True, check=True, timeout=60)
    assert shown.stdout.strip() == "Kubernetes v1.37.2"


# -- placements the service decides, bound by kube-scheduler --------------------------------------------------


def numa_pod(scene: SchedulerScene, name: str, *, scheduler: str = SCHEDULER) -> Json:
    """A CPU-only pod with a NUMA intent: one NUMA cell, and that cell must be 1."""
    return scene.pod(name, cpus=4, annotations={POLICY_KEY: "single-numa", AFFINITY_KEY: "1"}, schedulerName=scheduler)


def test_a_numa_pod_goes_only_where_the_service_admits_it_and_carries_its_cells(scene: SchedulerScene) -> None:
    """The pod must be in NUMA cell 1, and its kubelet (single-numa-node) pins it to the first cell that fits:
    cell 0 of an empty node, cell 1 of a CPU node whose cell 0 is nearly full. kube-scheduler's own plugins
    admit both nodes; the plugin's PreFilter narrows the cycle to the one the service admits, and its PreBind
    writes the service's placement (cell 1) on the pod before DefaultBinder binds it."""
    empty, full = scene.add_nodes({"gpu": nvswitch_node(), "cpu": cpu_node()})
    scene.create([scene.pod("filler", cpus=30, nodeName=full, terminationGracePeriodSeconds=0,
                            annotations={ASSIGNED_CELLS_KEY: "0", RESERVED_NODE_KEY: full})])  # fmt: skip
    probe = numa_pod(scene, "probe")
    wait_until(lambda: list(scene.client.filter(probe, [empty, full]).feasible_nodes) == [full], timeout_s=60,
               what="the service to charge the filler")  # fmt: skip
    scene.create([numa_pod(scene, "numa")])
    assert scene.wait_bound(["numa"])["numa"] == full
    annotations = scene.get("numa")["metadata"]["annotations"]
    assert annotations[RESERVED_NODE_KEY] == full
    assert cells_and_gpus(scene.get("numa")) == ([1], [])


def test_a_gpu_pod_gets_the_gpu_set_the_service_chose(scene: SchedulerScene) -> None:
    """A 4-GPU pod on an 8-GPU NVSwitch machine: the service reserves a GPU set in one NUMA cell; PreBind writes
    the cells and GPUs, and the service counts them as taken (5 more GPUs no longer fit the node)."""
    (node,) = scene.add_nodes({"gpu": nvswitch_node()})
    scene.create([scene.pod("train", gpus=4, cpus=8, annotations={POLICY_KEY: "single-numa"})])
    assert scene.wait_bound(["train"])["train"] == node
    cells, gpus = cells_and_gpus(scene.get("train"))
    assert len(cells) == 1
    assert len(gpus) == 4
    assert not scene.client.filter(scene.pod("more", gpus=5, cpus=8), [node]).feasible_nodes


def test_a_pod_that_fits_no_node_waits_with_the_services_reasons(scene: SchedulerScene) -> None:
    scene.add_nodes({"cpu": cpu_node()})
    scene.create([scene.pod("huge", gpus=2, cpus=8)])
    wait_until(lambda: any("placement service" in m for m in scene.events("huge", "FailedScheduling")),
               timeout_s=BOUND_S, what="a FailedScheduling event with the service's reasons")  # fmt: skip
    (message, *_) = [m for m in scene.events("huge", "FailedScheduling") if "placement service" in m]
    assert "Insufficient nvidia.com/gpu" in message
    assert "huge" not in scene.bound()


def test_a_gang_is_planned_whole_by_the_service_and_every_member_binds_where_the_plan_put_it(
    scene: SchedulerScene,
) -> None:
    """Four members of 4 GPUs, all four required, on two 8-GPU nodes: the first member's PreFilter asks the
    service to plan the whole group (PlaceGang), which reserves every member at once; each member's cycle
    is narrowed to its planned node, and PreBind writes its planned GPUs."""
    nodes = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    group = {GROUP_NAME_KEY: "train", MIN_AVAILABLE_KEY: "4"}
    names = [f"train-{i}" for i in range(4)]
    scene.create([scene.pod(name, gpus=4, cpus=8, labels=group) for name in names])
    bound = scene.wait_bound(names)
    assert sorted(bound[name] for name in names) == sorted([*nodes, *nodes])
    for node in nodes:
        sets = [set(cells_and_gpus(scene.get(name))[1]) for name in names if bound[name] == node]
        assert [len(gpus) for gpus in sets] == [4, 4]
        assert not sets[0] & sets[1]  # the service's plan, not two picks of the same GPUs


def test_an_8_member_gang_across_racks_takes_the_fewest_racks_the_service_plans(scene: SchedulerScene) -> None:
    """Eight members of 4 GPUs (32) over three racks of two 8-GPU nodes (16 GPUs a rack), the group preferring
    one rack: it cannot fit one, so the service's plan takes the fewest, two whole racks, and every member
    binds there with its own GPUs; the third rack stays empty."""
    racks = {key: {RACK_KEY: f"rack-{n // 2}"} for n, key in enumerate("abcdef")}
    nodes = scene.add_nodes({key: nvswitch_node() for key in racks}, labels=racks)
    rack_of = {node: racks[key][RACK_KEY] for node, key in zip(nodes, racks, strict=True)}
    group = {GROUP_NAME_KEY: "llm", MIN_AVAILABLE_KEY: "8", PREFERRED_TOPOLOGY_KEY: "rack"}
    names = [f"llm-{i}" for i in range(8)]
    scene.create([scene.pod(name, gpus=4, cpus=8, labels=group) for name in names])
    bound = scene.wait_bound(names)
    used = sorted({bound[name] for name in names})
    assert len(used) == 4
    assert len({rack_of[node] for node in used}) == 2
    for node in used:
        sets = [set(cells_and_gpus(scene.get(name))[1]) for name in names if bound[name] == node]
        assert [len(gpus) for gpus in sets] == [4, 4]
        assert not sets[0] & sets[1]


def test_a_gang_that_cannot_fit_whole_binds_no_member(scene: SchedulerScene) -> None:
    (node,) = scene.add_nodes({"gpu": nvswitch_node()})
    group = {GROUP_NAME_KEY: "big", MIN_AVAILABLE_KEY: "3"}
    scene.create([scene.pod(f"big-{i}", gpus=4, cpus=8, labels=group) for i in range(3)])

    def waiting() -> list[str]:
        events = [m for name in ("big-0", "big-1", "big-2") for m in scene.events(name, "FailedScheduling")]
        return [m for m in events if f"placement service: pod group {scene.namespace}/big" in m]

    wait_until(lambda: bool(waiting()), timeout_s=BOUND_S, what="the group's FailedScheduling event")
    (message, *_) = waiting()
    # Three members of 4 GPUs (one NUMA cell each) and one 8-GPU node: two would fit, the group never.
    assert "cannot fit 3 member(s)" in message, message
    assert scene.bound() == {}
    answer = scene.client.filter(scene.pod("probe", gpus=4, cpus=8), [node])
    assert answer.feasible_nodes, answer.rejected  # nothing held for the group


def _waiting_at_permit(plugged: Plugged, namespace: str) -> list[str]:
    """The pods kubenexus-scheduler logged as waiting at Permit (klog: ``... pod="<namespace>/<name>" ...``)."""
    marker = f'"Pod group member waits at Permit" pod="{namespace}/'
    return [line.split(marker, 1)[1].split('"', 1)[0]
            for line in plugged.scheduler.log.read_text().splitlines() if marker in line]  # fmt: skip


def test_a_gang_member_waiting_at_permit_outlives_a_restart_of_the_service(
    scene: SchedulerScene, plugged: Plugged
) -> None:
    """Two members of 4 GPUs, both required, on one 8-GPU node that takes three pods and holds two already
    (the agent's DaemonSet pod and another). The service plans the group whole (it does not count a node's
    pods: docs/constraints.md), so the first
    member passes Reserve and waits at Permit, kube-scheduler's own barrier, while kube-scheduler itself
    refuses the second ("Too many pods"). The service restarts (SIGTERM, the same address) while the member
    waits, and knows nothing of the group's plan any more. Once the other pod goes, the second member's
    PreFilter has the restarted service plan the group again, and its Permit checks the waiting member's
    placement against that plan: the same, both are allowed; another (the service may pick the members' GPUs
    the other way round), the group goes round once more under the new plan. Either way both bind, on GPUs
    the service counts as theirs, none twice."""
    (node,) = scene.add_nodes({"gpu": nvswitch_node()})
    scene.admin.merge_patch(f"/api/v1/nodes/{node}/status", {"status": {"capacity": {"pods": "3"},
                                                                       "allocatable": {"pods": "3"}}})  # fmt: skip
    scene.create([scene.pod("other", cpus=1, nodeName=node, terminationGracePeriodSeconds=0)])
    group = {GROUP_NAME_KEY: "held", MIN_AVAILABLE_KEY: "2"}
    members = ["held-0", "held-1"]
    scene.create([scene.pod(name, gpus=4, cpus=8, labels=group) for name in members])
    wait_until(lambda: bool(_waiting_at_permit(plugged, scene.namespace)), timeout_s=BOUND_S,
               what="a member to wait at Permit")  # fmt: skip
    (first,) = _waiting_at_permit(plugged, scene.namespace)
    (second,) = set(members) - {first}
    wait_until(lambda: any("Too many pods" in m for m in scene.events(second, "FailedScheduling")),
               timeout_s=BOUND_S, what=f"kube-scheduler to refuse {second}: Too many pods")  # fmt: skip
    plugged.service.restart()
    plugged.service.wait_ready()
    assert scene.bound() == {"other": node}, "a member bound before its group was complete"
    scene.plane.kubectl("delete", "pod", "other", "-n", scene.namespace, "--grace-period=0", "--force")
    assert scene.wait_bound(members) == dict.fromkeys(members, node)
    held = [set(cells_and_gpus(scene.get(name))[1]) for name in members]
    assert [len(gpus) for gpus in held] == [4, 4]
    assert not held[0] & held[1]
    probe = scene.pod("probe", gpus=1, cpus=1)
    wait_until(lambda: not scene.client.filter(probe, [node]).feasible_nodes, timeout_s=60,
               what="the restarted service to count all 8 GPUs as held")  # fmt: skip


def test_a_claims_devices_are_the_services_choice_written_by_the_plugin(scene: SchedulerScene) -> None:
    """A pod holding 80 of cell 0's 96 CPUs makes the kubelet pin the next Guaranteed pod (32 CPUs) to cell 1:
    the service gives its claim GPUs 4-7, on that cell, where kube-scheduler's DynamicResources would take its
    first fit (GPUs 0-3: tests/cluster/test_cluster_extender.py). DynamicResources is disabled in the profile; the
    plugin's PreBind writes the claim as it does: the delete-protection finalizer, then status.allocation and
    status.reservedFor."""
    ensure_object(scene.plane, "/apis/resource.k8s.io/v1/deviceclasses", gpu_class())
    (node,) = scene.add_nodes({"a": nvswitch_node()}, dra=True)
    scene.create([scene.pod("filler", cpus=80)])
    scene.wait_bound(["filler"])
    claim = gpu_claim("four", 4, namespace=scene.namespace)
    claim["metadata"].pop("uid")
    scene.admin.create(f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaims", claim)
    trainer = scene.pod("trainer", cpus=32, memory="32Gi")
    trainer["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "four"}]
    trainer["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    (created,) = scene.create([trainer])
    assert scene.wait_bound(["trainer"])["trainer"] == node

    assert cells_and_gpus(scene.get("trainer"))[0] == [1]
    stored = scene.claim("four")
    results = stored["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert {(r["driver"], r["pool"]) for r in results} == {("gpu.nvidia.com", node)}
    assert stored["status"]["reservedFor"] == [{"resource": "pods", "name": "trainer",
                                                "uid": created["metadata"]["uid"]}]  # fmt: skip
    assert "resource.kubernetes.io/delete-protection" in stored["metadata"]["finalizers"]
    status_writers = {e["manager"] for e in stored["metadata"]["managedFields"] if e.get("subresource") == "status"}
    assert status_writers == {"kubenexus-scheduler"}


def priority_classes(plane: ControlPlane) -> None:
    for name, value in ((LOW, 10), (HIGH, 1000)):
        ensure_object(plane, "/apis/scheduling.k8s.io/v1/priorityclasses",
                      {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                       "value": value})  # fmt: skip


def test_a_pod_that_fits_only_by_preemption_gets_the_node_the_services_plan_frees(scene: SchedulerScene) -> None:
    """A low-priority pod holds all 8 GPUs of the only node; a high-priority pod asks for 4. The plugin's
    PostFilter asks the service for a plan, evicts the victim through the Eviction API and nominates the node;
    once the victim is gone the pod binds there, and the victim carries kube-scheduler's Preempted event."""
    priority_classes(scene.plane)
    (node,) = scene.add_nodes({"gpu": nvswitch_node()})
    placed = {ASSIGNED_CELLS_KEY: "0,1", ASSIGNED_GPUS_KEY: "0,1,2,3,4,5,6,7", RESERVED_NODE_KEY: node}
    scene.create([scene.pod("low", gpus=8, cpus=8, nodeName=node, priorityClassName=LOW, annotations=placed,
                            terminationGracePeriodSeconds=0)])  # fmt: skip
    high = scene.pod("high", gpus=4, cpus=8, priorityClassName=HIGH)
    wait_until(lambda: not scene.client.filter(high, [node]).feasible_nodes, timeout_s=60,
               what="the service to charge the low-priority pod")  # fmt: skip
    scene.create([high])
    assert scene.wait_bound(["high"])["high"] == node
    assert not scene.exists("low")
    (event, *_) = scene.events("low", "Preempted")
    assert event.startswith(f"Preempted by pod {scene.get('high')['metadata']['uid']} on node {node}")


def test_a_gang_preempts_a_lower_priority_gang_whole(scene: SchedulerScene) -> None:
    """Both 8-GPU nodes are held by a low-priority gang of four members of 4 GPUs (one per NUMA cell); a
    high-priority gang of four such members arrives. Its plan finds no room, and its PostFilter asks the
    service to make room for the whole group: the low gang is evicted whole through the Eviction API (each
    victim with kube-scheduler's Preempted event), and the high gang binds in its place."""
    priority_classes(scene.plane)
    nodes = scene.add_nodes({"a": nvswitch_node(), "b": nvswitch_node()})
    low = {GROUP_NAME_KEY: "low", MIN_AVAILABLE_KEY: "4"}
    slots = [(node, cell) for node in nodes for cell in (0, 1)]
    scene.create([scene.pod(f"low-{i}", gpus=4, cpus=8, nodeName=node, priorityClassName=LOW, labels=low,
                            annotations={ASSIGNED_CELLS_KEY: str(cell), RESERVED_NODE_KEY: node,
                                         ASSIGNED_GPUS_KEY: ",".join(str(4 * cell + g) for g in range(4))},
                            terminationGracePeriodSeconds=0)
                  for i, (node, cell) in enumerate(slots)])  # fmt: skip
    probe = scene.pod("probe", gpus=4, cpus=8, priorityClassName=HIGH)
    wait_until(lambda: not scene.client.filter(probe, nodes).feasible_nodes, timeout_s=60,
               what="the service to charge the low-priority gang")  # fmt: skip
    high = {GROUP_NAME_KEY: "high", MIN_AVAILABLE_KEY: "4"}
    names = [f"high-{i}" for i in range(4)]
    scene.create([scene.pod(name, gpus=4, cpus=8, priorityClassName=HIGH, labels=high) for name in names])
    bound = scene.wait_bound(names)
    assert sorted(bound[name] for name in names) == sorted([*nodes, *nodes])
    preemptors = {scene.get(name)["metadata"]["uid"] for name in names}
    for victim in (f"low-{i}" for i in range(4)):
        assert not scene.exists(victim)
        (event, *_) = scene.events(victim, "Preempted")
        assert event.split(" on node ")[0].removeprefix("Preempted by pod ") in preemptors, event


# -- constraints both check: kube-scheduler's own plugins and the service agree ------------------------------


@pytest.fixture(scope="module")
def stock(plugged: Plugged, control_plane: ControlPlane) -> Iterator[Process]:
    """The control plane's own kube-scheduler v1.37.2, its default plugins in a profile named ``STOCK``, as
    kube-scheduler's identity (its own Lease)."""
    config: Json = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(plugged.kubeconfig)},
        "leaderElection": {"leaderElect": True, "resourceNamespace": SYSTEM, "resourceName": STOCK},
        "profiles": [{"schedulerName": STOCK}],
    }
    control_plane.apply_objects(lease_access(STOCK))
    process = start_scheduler(control_plane, config, plugged.folder / f"{STOCK}.yaml")
    yield process
    process.stop()


def _available(message: str) -> tuple[int, Counter[str]]:
    """kube-scheduler's "0/N nodes are available: 2 Insufficient cpu, 1 node(s) ...." as N and the counts."""
    head, _, reasons = message.partition(" nodes are available: ")
    reasons = reasons.split(". preemption:")[0].rstrip(".")
    counts: Counter[str] = Counter()
    for part in reasons.split(", "):
        count, _, reason = part.partition(" ")
        counts[reason] += int(count)
    return int(head.split("/")[1]), counts


def _failed_scheduling(scene: SchedulerScene, name: str) -> str:
    """The pod's latest FailedScheduling message, once there is one."""
    wait_until(lambda: bool(scene.events(name, "FailedScheduling")), timeout_s=BOUND_S,
               what=f"kube-scheduler's FailedScheduling event for {name}")  # fmt: skip
    return scene.events(name, "FailedScheduling")[-1]


def test_kube_scheduler_and_the_service_agree_on_the_constraints_both_check(
    scene: SchedulerScene, stock: Process
) -> None:
    """Taints, node selectors and affinity, and resource fit are checked twice in plugin mode: by kube-scheduler's
    own plugins and by the service (its constraint plugins are ports of those, judged case by case by
    tests/upstream/test_oracle_scheduler.py). Here the live kube-scheduler decides each pod alone (the default profile,
    no KubeNexus) and the service is asked the same pod: a pod that fits nowhere gets the same reasons for the
    same number of nodes in kube-scheduler's FailedScheduling event as in the service's Filter answer (nodes
    outside the scene fail the pod's node selector for both), and a pod that fits binds on the one node the
    service finds feasible."""
    plain, tainted, pool = scene.add_nodes({"plain": cpu_node(), "tainted": cpu_node(), "pool": cpu_node()})
    dedicated = {"key": "example.com/dedicated", "value": "inference", "effect": "NoSchedule"}
    scene.admin.merge_patch(f"/api/v1/nodes/{tainted}", {"spec": {"taints": [dedicated]}})
    scene.admin.merge_patch(f"/api/v1/nodes/{pool}", {"metadata": {"labels": {"example.com/pool": "b"}}})
    tolerate = [{"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    in_pool = {"nodeSelector": {SCENE_LABEL: scene.namespace, "example.com/pool": "b"}}
    hostname = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [tainted]}]}
    required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [hostname]}}
    on_tainted = {"affinity": {"nodeAffinity": required}}
    pods: dict[str, tuple[Json, str | None]] = {  # name -> (its spec fields, the node it binds to, or None)
        "too-big": ({}, None),
        "too-big-in-pool": (in_pool, None),
        "too-big-tolerating": ({"tolerations": tolerate}, None),
        "in-pool": (in_pool, pool),
        "on-tainted-tolerating": ({**on_tainted, "tolerations": tolerate}, tainted),
    }  # fmt: skip
    wait_until(lambda: not scene.client.filter(scene.pod("probe", cpus=1), [tainted]).feasible_nodes,
               timeout_s=60, what="the service to see the taint")  # fmt: skip
    made = {name: scene.pod(name, cpus=500 if name.startswith("too-big") else 2, schedulerName=STOCK, **spec)
            for name, (spec, _) in pods.items()}  # fmt: skip
    scene.create(list(made.values()))
    scene.wait_bound([name for name, (_, node) in pods.items() if node is not None])
    for name, (_, node) in pods.items():
        answer = scene.client.filter(made[name], [plain, tainted, pool])
        if node is not None:
            assert scene.bound()[name] == node
            assert list(answer.feasible_nodes) == [node], answer
            continue
        total, counts = _available(_failed_scheduling(scene, name))
        expected = Counter({r.reason: len(r.nodes) for r in answer.rejected})
        expected["node(s) didn't match Pod's node affinity/selector"] += total - 3  # the other scenes' nodes
        assert +counts == +expected, f"{name}: kube-scheduler {dict(counts)}, the service {dict(expected)}"


# -- the failure policy: a kubenexus-scheduler whose service never answers ------------------------------------


@pytest.fixture(scope="module")
def unreachable(plugged: Plugged, control_plane: ControlPlane) -> Iterator[Process]:
    """kubenexus-scheduler with two profiles whose service address has nothing listening: Fail and Ignore."""
    config = for_this_machine(shipped_config(), kubeconfig=plugged.kubeconfig, address=f"127.0.0.1:{free_port()}",
                              certificates=plugged.certificates)  # fmt: skip
    config["leaderElection"]["resourceName"] = "kubenexus-scheduler-unreachable"
    fail_closed = config["profiles"][0]
    ignore = copy.deepcopy(fail_closed)
    fail_closed["schedulerName"], ignore["schedulerName"] = FAIL_CLOSED, IGNORE
    plugin_args({"profiles": [ignore]})["failurePolicy"] = "Ignore"
    plugin_args({"profiles": [fail_closed]})["timeout"] = "1s"
    plugin_args({"profiles": [ignore]})["timeout"] = "1s"
    config["profiles"] = [fail_closed, ignore]
    control_plane.apply_objects(lease_access(config["leaderElection"]["resourceName"]))
    process = start_scheduler(control_plane, config, plugged.folder / "unreachable.yaml", binary=plugged.binary)
    yield process
    process.stop()


def test_while_the_service_cannot_answer_fail_keeps_pods_pending_and_ignore_lets_the_others_place_them(
    scene: SchedulerScene, unreachable: Process
) -> None:
    (node,) = scene.add_nodes({"cpu": cpu_node()})
    scene.create([scene.pod("closed", cpus=2, schedulerName=FAIL_CLOSED),
                  scene.pod("open", cpus=2, schedulerName=IGNORE)])  # fmt: skip
    assert scene.wait_bound(["open"])["open"] == node
    wait_until(lambda: any("placement service Score" in m for m in scene.events("closed", "FailedScheduling")),
               timeout_s=BOUND_S, what="the fail-closed pod's FailedScheduling event")  # fmt: skip
    assert "closed" not in scene.bound()
    assert unreachable.running()
    assert RESERVED_NODE_KEY not in (scene.get("open")["metadata"].get("annotations") or {})
