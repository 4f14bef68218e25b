"""Kueue admits, KubeNexus places, on the real control plane (docs/kueue.md).

Kueue v0.19.2 (built from the Go module proxy, installed from its own chart: tests/kueue_cluster.py) decides which
workloads run, by quota, and for a topology-aware flavor which domain each pod set gets; kubenexus-scheduler (the
KubeNexus framework plugin, asking the placement service: tests/plugin_cluster.py) places every pod inside what
Kueue assigned, on NUMA-aligned, NVLink-best GPUs. kube-controller-manager's Job controller makes the Jobs' pods
and its ResourceClaim controller the claims of their templates. The Topology and the topology-aware
ResourceFlavor are the chart's (``kueue.enabled``, deploy/kueue/topology.yaml); the queues are the example's
shape (deploy/kueue/queues.yaml), one ClusterQueue and LocalQueue per test.

What each test asserts is what the real components did: Kueue's Workload status and the Job's ``suspend``, the
nodeSelector Kueue's topology ungater wrote, where the server bound each pod, the cells and GPUs the plugin's
PreBind wrote, a claim's allocation, and the events a user reads. Nodes are Node objects (no kubelet: a bound
pod stays Pending).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from helm_python.chart import Chart

from kubenexus.kube.client import Json
from placement.core.annotations import POLICY_KEY
from placement.core.domains import BLOCK_KEY, RACK_KEY
from placement.core.kueue import KUEUE_GROUP_NAME_KEY, KUEUE_GROUP_TOTAL_COUNT_KEY
from tests import REPO
from tests.cluster_kube_scheduler import SchedulerScene
from tests.cluster_scene import BOUND_S, cells_and_gpus, create_scene_namespace
from tests.conftest import wait_until
from tests.control_plane import ControlPlane, Process, ensure_object
from tests.dra_cluster import gpu_class
from tests.kueue_cluster import KUEUE_API, Kueue, install, uninstall
from tests.machines.node_topologies import nvswitch_node
from tests.plugin_cluster import Plugged, plugged_scheduler
from tools.kubenexus_scheduler import BuildError
from tools.kueue import BuildError as KueueBuildError

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

PLACEMENT_POD = "kubenexus-placement-kueue-tests"
CHART = REPO / "deploy" / "helm" / "kubenexus"
FLAVOR_NODES = "test.kubenexus.io/kueue"  # the label of the flavors' nodes (the chart's kueue.flavor.nodeLabels)
TAS_FLAVOR = "kubenexus-gpu"  # the chart's, topology-aware
QUOTA_FLAVOR = "kueue-tests-quota-only"  # no topology: quota only (Kueue's TAS cannot count DRA devices)
QUEUE = "training"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
HOSTNAME = "kubernetes.io/hostname"
DRA_GPUS = "whole-gpus"  # Kueue's name for the DRA GPUs in quotas (resources.deviceClassMappings)
LOW, HIGH = "kueue-tests-low", "kueue-tests-high"

_scenes = itertools.count()


@dataclass
class KueueCluster:
    plane: ControlPlane
    plugged: Plugged
    kueue: Kueue
    controllers: Process

    def logs(self) -> str:
        return (
            f"kubenexus-scheduler:\n{self.plugged.scheduler.tail()}\nKueue:\n{self.kueue.tail()}\n"
            f"service:\n{self.plugged.service.text()[-2000:]}"
        )


def chart_kueue_objects() -> list[Json]:
    """The Topology and the ResourceFlavor our chart renders with Kueue on, its flavor over the test nodes."""
    values = {"kueue": {"enabled": True, "flavor": {"nodeLabels": {FLAVOR_NODES: "true"}}}}
    rendered = Chart.load(CHART).render(values, name="kubenexus", namespace="kubenexus-system")
    return [doc for name, text in rendered.items() if name.endswith("/kueue.yaml")
            for doc in yaml.safe_load_all(text) if doc]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(
    control_plane: ControlPlane, certificates: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KueueCluster]:
    folder = tmp_path_factory.mktemp("kueue")
    controllers = control_plane.start_controller_manager(controllers="job-controller,resourceclaim-controller")
    try:
        with plugged_scheduler(control_plane, certificates, folder, placement_pod=PLACEMENT_POD) as plugged:
            dra = {"resources": {"deviceClassMappings": [{"name": DRA_GPUS, "deviceClassNames": ["gpu.nvidia.com"]}]}}
            kueue = install(control_plane, folder, extra_config=dra)
            try:
                control_plane.apply_objects(chart_kueue_objects())
                control_plane.apply_objects([_flavor(QUOTA_FLAVOR, None)])
                for name, value in ((LOW, 10), (HIGH, 1000)):
                    ensure_object(control_plane, "/apis/scheduling.k8s.io/v1/priorityclasses",
                                  {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                   "metadata": {"name": name}, "value": value})  # fmt: skip
                yield KueueCluster(control_plane, plugged, kueue, controllers)
            finally:
                uninstall(control_plane, kueue)
    except (BuildError, KueueBuildError) as error:
        pytest.fail(f"a Go program could not be built: {error}")
    finally:
        controllers.stop()


def _flavor(name: str, topology: str | None) -> Json:
    spec: Json = {"nodeLabels": {FLAVOR_NODES: "true"}}
    if topology is not None:
        spec["topologyName"] = topology
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


class KueueScene(SchedulerScene):
    """A test's namespace, nodes, ClusterQueue (named as the namespace) and LocalQueue, and its Jobs."""

    def queues(self, quota: Mapping[str, str], *, flavor: str = TAS_FLAVOR, preemption: Json | None = None) -> None:
        """A ClusterQueue giving this namespace ``quota`` of ``flavor`` (the queues.yaml shape), and LocalQueue
        "training" pointing at it."""
        spec: Json = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.namespace}},
            "resourceGroups": [{"coveredResources": list(quota), "flavors": [
                {"name": flavor, "resources": [{"name": name, "nominalQuota": value} for name, value in quota.items()]},
            ]}],
        }  # fmt: skip
        if preemption is not None:
            spec["preemption"] = preemption
        self.admin.create(f"{KUEUE_API}/clusterqueues", {"apiVersion": "kueue.x-k8s.io/v1beta2",
                                                         "kind": "ClusterQueue", "metadata": {"name": self.namespace},
                                                         "spec": spec})  # fmt: skip
        self.admin.create(f"{KUEUE_API}/namespaces/{self.namespace}/localqueues",
                          {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": QUEUE},
                           "spec": {"clusterQueue": self.namespace}})  # fmt: skip

    def job(
        self,
        name: str,
        *,
        pods: int,
        gpus: int = 4,
        cpus: int = 16,
        annotations: Mapping[str, str] | None = None,
        priority_class: str | None = None,
        claim_template: str | None = None,
    ) -> Json:
        """An Indexed Job of ``pods`` pods for kubenexus-scheduler in LocalQueue "training", as a user writes it:
        Kueue's webhook suspends it until admitted."""
        template = self.pod(name, gpus=0 if claim_template else gpus, cpus=cpus,
                            annotations={POLICY_KEY: "single-numa", **(annotations or {})},
                            restartPolicy="Never", terminationGracePeriodSeconds=0)  # fmt: skip
        if priority_class is not None:
            template["spec"]["priorityClassName"] = priority_class
        if claim_template is not None:
            template["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim_template}]
            template["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
        del template["metadata"]["name"], template["metadata"]["namespace"]
        job = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": self.namespace, "labels": {QUEUE_LABEL: QUEUE}},
            "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 0,
                     "template": {"metadata": template["metadata"], "spec": template["spec"]}},
        }  # fmt: skip
        created: Json = self.admin.create(f"/apis/batch/v1/namespaces/{self.namespace}/jobs", job)
        return created

    def job_pods(self, job: str) -> dict[str, Json]:
        return {name: pod for name, pod in self.pods().items()
                if pod["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == job
                and not pod["metadata"].get("deletionTimestamp")}  # fmt: skip

    def wait_job_bound(self, job: str, pods: int) -> dict[str, Json]:
        """The Job's pods once ``pods`` of them are bound."""

        def bound() -> bool:
            return sum(1 for pod in self.job_pods(job).values() if pod["spec"].get("nodeName")) >= pods

        try:
            wait_until(bound, timeout_s=BOUND_S, what=f"{pods} pods of Job {job} bound")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.logs()}") from None
        return self.job_pods(job)

    def get_job(self, name: str) -> Json:
        stored = self.admin.get(f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{name}")
        assert stored is not None, f"Job {name} is gone"
        return stored

    def workload_of(self, owner: str) -> Json:
        """Kueue's Workload for the Job (or pod group) named ``owner``, once Kueue made it."""
        found: list[Json] = []

        def made() -> bool:
            found[:] = [w for w in self.admin.list(f"{KUEUE_API}/namespaces/{self.namespace}/workloads")["items"]
                        if any(ref.get("name") == owner for ref in w["metadata"].get("ownerReferences") or ())
                        or w["metadata"]["name"] == owner]  # fmt: skip
            return bool(found)

        wait_until(made, timeout_s=BOUND_S, what=f"Kueue's Workload of {owner}")
        return found[0]

    def condition(self, workload: Json, kind: str) -> Json:
        current = self.admin.get(f"{KUEUE_API}/namespaces/{self.namespace}/workloads/{workload['metadata']['name']}")
        assert current is not None
        return next((c for c in current.get("status", {}).get("conditions") or () if c["type"] == kind), {})

    def wait_held_by_quota(self, job: str) -> None:
        """Kueue holds Job ``job`` for want of quota: its Workload waits with Kueue's reason, the Job stays
        suspended, and no pod of it exists."""
        workload = self.workload_of(job)
        wait_until(lambda: self.condition(workload, "QuotaReserved").get("reason") == "Pending", timeout_s=BOUND_S,
                   what=f"Job {job}'s Workload to wait for quota")  # fmt: skip
        assert "insufficient unused quota" in self.condition(workload, "QuotaReserved")["message"]
        assert self.get_job(job)["spec"]["suspend"] is True
        assert self.job_pods(job) == {}

    def close(self) -> None:
        """The Jobs, the queues and the namespace's pods gone, and the nodes removed."""
        self.plane.kubectl("delete", "jobs", "--all", "-n", self.namespace, "--wait=false", check=False)
        self.plane.delete(f"{KUEUE_API}/namespaces/{self.namespace}/localqueues/{QUEUE}")
        self.plane.delete(f"{KUEUE_API}/clusterqueues/{self.namespace}")
        super().close()


@pytest.fixture
def scene(control_plane: ControlPlane, cluster: KueueCluster, tmp_path: Path) -> Iterator[KueueScene]:
    namespace = f"kueue-{next(_scenes)}"
    create_scene_namespace(control_plane, namespace)
    made = KueueScene(plane=control_plane, client=cluster.plugged.client, namespace=namespace, folder=tmp_path,
                      logs=cluster.logs)  # fmt: skip
    try:
        yield made
    finally:
        made.close()


def racks(scene: KueueScene, layout: Mapping[str, tuple[str, str]], *, dra: bool = False) -> dict[str, str]:
    """8-GPU NVSwitch nodes by key, each in (block, rack), in the flavors; node name -> its rack."""
    labels = {key: {FLAVOR_NODES: "true", BLOCK_KEY: block, RACK_KEY: rack} for key, (block, rack) in layout.items()}
    nodes = scene.add_nodes({key: nvswitch_node() for key in layout}, labels=labels, dra=dra)
    return {node: layout[key][1] for node, key in zip(nodes, layout, strict=True)}


def gpus_of(pod: Json) -> set[int]:
    return set(cells_and_gpus(pod)[1])


# -- a batch Job with a required rack ----------------------------------------------------------------------


def test_a_job_needing_one_rack_is_placed_by_kubenexus_inside_the_rack_kueue_assigned(scene: KueueScene) -> None:
    """Four pods of 4 GPUs (16: one rack of two 8-GPU nodes) require one rack. Rack r0 is half taken by a pod
    Kueue does not manage, so Kueue's topology assignment must choose r1; its ungater pins each pod to a node
    there (nodeSelector), and kubenexus-scheduler places each on one NUMA cell's 4 NVSwitch GPUs, two pods a
    node on disjoint GPU sets."""
    nodes = racks(scene, {"a": ("b0", "r0"), "b": ("b0", "r0"), "c": ("b0", "r1"), "d": ("b0", "r1")})
    scene.queues({"cpu": "256", "memory": "1Ti", "nvidia.com/gpu": "32"})
    taken = next(node for node, rack in nodes.items() if rack == "r0")
    scene.create([scene.pod("other", gpus=8, cpus=8, nodeName=taken, terminationGracePeriodSeconds=0)])
    scene.job("train", pods=4, annotations={REQUIRED_TOPOLOGY: RACK_KEY})
    pods = scene.wait_job_bound("train", 4)
    assert len(pods) == 4
    for pod in pods.values():
        node = pod["spec"]["nodeName"]
        assert nodes[node] == "r1"
        assert pod["spec"]["nodeSelector"][HOSTNAME] == node  # Kueue's assignment, written by its ungater
        cells, gpus = cells_and_gpus(pod)
        assert len(cells) == 1
        assert len(gpus) == 4
        assert gpus == sorted(range(4 * cells[0], 4 * cells[0] + 4))  # the cell's own GPUs
    for node in {pod["spec"]["nodeName"] for pod in pods.values()}:
        sets = [gpus_of(pod) for pod in pods.values() if pod["spec"]["nodeName"] == node]
        assert len(sets) == 2
        assert not sets[0] & sets[1]
    assert scene.condition(scene.workload_of("train"), "Admitted").get("status") == "True"


# -- a PyTorchJob-shaped pod group with a preferred block: a gang at Permit -----------------------------------


def kueue_group(
    scene: KueueScene,
    name: str,
    roles: Mapping[str, int],
    *,
    annotations: Mapping[str, str] | None = None,
    gpus: int = 4,
    cpus: int = 16,
) -> list[str]:
    """A Kueue pod group as a PyTorchJob-shaped workload makes it (a master and workers, plain pods): each pod
    names the group and its size (Kueue's pod integration), the LocalQueue, and kubenexus-scheduler."""
    total = sum(roles.values())
    names = [f"{name}-{role}-{i}" for role, count in roles.items() for i in range(count)]
    scene.create([
        scene.pod(pod, gpus=gpus, cpus=cpus, terminationGracePeriodSeconds=0,
                  labels={QUEUE_LABEL: QUEUE, KUEUE_GROUP_NAME_KEY: name,
                          "training.kubeflow.org/replica-type": pod.split("-")[-2]},
                  annotations={KUEUE_GROUP_TOTAL_COUNT_KEY: str(total), POLICY_KEY: "single-numa",
                               **(annotations or {})})
        for pod in names
    ])  # fmt: skip
    return names


def _waiting_at_permit(cluster: KueueCluster, namespace: str) -> set[str]:
    """The pods kubenexus-scheduler logged as waiting at Permit (klog: ``... pod="<namespace>/<name>" ...``)."""
    marker = f'"Pod group member waits at Permit" pod="{namespace}/'
    lines = cluster.plugged.scheduler.log.read_text().splitlines()
    return {line.split(marker, 1)[1].split('"', 1)[0] for line in lines if marker in line}


def test_a_pytorch_shaped_pod_group_is_one_gang_in_the_block_kueue_prefers(
    scene: KueueScene, cluster: KueueCluster
) -> None:
    """A master and three workers of 4 GPUs (16) prefer one block; block b0 is half taken by a pod Kueue does
    not manage, so Kueue assigns b1 (two 8-GPU nodes). Kueue admits the group whole and ungates it; the plugin
    plans the four as one gang (PlaceGang), the members wait at Permit for each other, and all bind inside b1,
    each on one NUMA cell's 4 GPUs."""
    nodes = racks(scene, {"a": ("b0", "r0"), "b": ("b0", "r1"), "c": ("b1", "r2"), "d": ("b1", "r3")})
    block_of = {node: "b0" if rack in ("r0", "r1") else "b1" for node, rack in nodes.items()}
    scene.queues({"cpu": "256", "memory": "1Ti", "nvidia.com/gpu": "32"})
    taken = next(node for node, block in block_of.items() if block == "b0")
    scene.create([scene.pod("other", gpus=8, cpus=8, nodeName=taken, terminationGracePeriodSeconds=0)])
    names = kueue_group(scene, "bert", {"master": 1, "worker": 3}, annotations={PREFERRED_TOPOLOGY: BLOCK_KEY})
    bound = scene.wait_bound(names)
    assert {block_of[bound[name]] for name in names} == {"b1"}
    for node in set(bound.values()) - {taken}:
        sets = [gpus_of(scene.get(name)) for name in names if bound[name] == node]
        assert [len(gpus) for gpus in sets] == [4, 4]
        assert not sets[0] & sets[1]
    assert _waiting_at_permit(cluster, scene.namespace) & set(names), "no member waited at Permit for the others"
    assert scene.get(names[0])["metadata"]["labels"].get("kueue.x-k8s.io/managed") == "true"


def test_a_kueue_pod_group_that_cannot_fit_whole_binds_no_member(scene: KueueScene) -> None:
    """Quota without topology (Kueue counts GPUs, not where they are) admits three members of 4 GPUs; the only
    node has 8 GPUs. Kueue ungates all three; the plugin plans the group whole, which does not fit, so no member
    binds and each waits with the service's reason, where a pod-by-pod scheduler would bind two."""
    (node,) = scene.add_nodes({"a": nvswitch_node()}, labels={"a": {FLAVOR_NODES: "true"}})
    scene.queues({"cpu": "256", "memory": "1Ti", "nvidia.com/gpu": "24"}, flavor=QUOTA_FLAVOR)
    names = kueue_group(scene, "big", {"worker": 3})

    def refused() -> list[str]:
        events = [m for name in names for m in scene.events(name, "FailedScheduling")]
        return [m for m in events if f"pod group {scene.namespace}/kueue_big" in m]

    # Kueue lifts its gates member by member: the group waits for the gated ones first ("waiting for scheduling
    # gates"), then, all three ungated, finds them too many for the node.
    wait_until(lambda: any("cannot fit 3 member(s)" in m for m in refused()), timeout_s=BOUND_S,
               what="the group's FailedScheduling event once all three are ungated")  # fmt: skip
    assert all(not scene.get(name)["spec"].get("schedulingGates") for name in names)  # Kueue admitted them
    assert scene.bound() == {}
    answer = scene.client.filter(scene.pod("probe", gpus=4, cpus=8), [node])
    assert answer.feasible_nodes, answer.rejected  # nothing held for the group


# -- DRA claims inside the assigned domain ------------------------------------------------------------------


def test_a_job_with_dra_claims_gets_numa_aligned_devices_inside_its_flavors_nodes(scene: KueueScene) -> None:
    """Kueue counts a claim template's 4 GPUs against the quota (``deviceClassMappings``); its flavor puts the
    pods in rack r1 (Kueue's topology assignment cannot count DRA devices, kueue#10548, so the domain is the
    flavor's). The ResourceClaim controller makes each pod's claim; the service allocates devices on a node of
    r1, all four on the NUMA cell the kubelet pins the pod's CPUs to: with two 8-GPU nodes there, one pod on
    each (on one node the second pod's CPUs would go to cell 0 beside the first's and its GPUs to cell 1, since
    DRA devices give the Topology Manager no hints: docs/placement.md, "DRA")."""
    nodes = racks(scene, {"a": ("b0", "r0"), "b": ("b0", "r1"), "c": ("b0", "r1")}, dra=True)
    ensure_object(scene.plane, "/apis/resource.k8s.io/v1/deviceclasses", gpu_class())
    flavor = _flavor(f"{scene.namespace}-r1", None)
    flavor["spec"]["nodeLabels"][RACK_KEY] = "r1"
    scene.admin.create(f"{KUEUE_API}/resourceflavors", flavor)
    try:
        scene.queues({"cpu": "256", "memory": "1Ti", DRA_GPUS: "8"}, flavor=flavor["metadata"]["name"])
        four = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 4}
        template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "four-gpus", "namespace": scene.namespace},
                    "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": four}]}}}}  # fmt: skip
        scene.admin.create(f"/apis/resource.k8s.io/v1/namespaces/{scene.namespace}/resourceclaimtemplates", template)
        pods = scene.wait_job_bound(scene.job("infer", pods=2, claim_template="four-gpus")["metadata"]["name"], 2)
        for pod in pods.values():
            node = pod["spec"]["nodeName"]
            assert nodes[node] == "r1"
            assert pod["spec"]["nodeSelector"][RACK_KEY] == "r1"  # the flavor's, added by Kueue at admission
            (claim_name,) = [s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"]]
            results = scene.claim(claim_name)["status"]["allocation"]["devices"]["results"]
            assert {r["pool"] for r in results} == {node}
            (cell,) = cells_and_gpus(pod)[0]
            assert sorted(int(r["device"].removeprefix("gpu-")) // 4 for r in results) == [cell] * 4
    finally:
        scene.plane.delete(f"{KUEUE_API}/resourceflavors/{flavor['metadata']['name']}")


# -- quota exhaustion ---------------------------------------------------------------------------------------


def test_a_job_beyond_the_quota_stays_suspended_with_no_pod_until_quota_frees(scene: KueueScene) -> None:
    """Eight GPUs of quota; two Jobs of two 4-GPU pods. The first is admitted and both its pods bind; the second
    stays suspended (no pod made, nothing bound, its Workload waiting for quota) while the nodes have room.
    Once the first is deleted, the second is admitted and placed."""
    racks(scene, {"a": ("b0", "r0"), "b": ("b0", "r0")})
    scene.queues({"cpu": "256", "memory": "1Ti", "nvidia.com/gpu": "8"})
    scene.job("first", pods=2)
    first = scene.wait_job_bound("first", 2)
    scene.job("second", pods=2)
    scene.wait_held_by_quota("second")
    assert all(pod["spec"].get("nodeName") for pod in first.values())
    scene.plane.kubectl("delete", "job", "first", "-n", scene.namespace, "--wait=false")
    scene.plane.kubectl("delete", "pods", "-n", scene.namespace, "-l", "batch.kubernetes.io/job-name=first",
                        "--grace-period=0", "--force")  # fmt: skip
    second = scene.wait_job_bound("second", 2)
    assert scene.get_job("second")["spec"]["suspend"] is False
    assert len({frozenset(gpus_of(pod)) for pod in second.values()}) == 2


# -- preemption: Kueue evicts what it admitted, the service never does --------------------------------------


def test_kueue_preempts_a_lower_priority_workload_for_a_higher_one_and_the_service_evicts_nothing(
    scene: KueueScene,
) -> None:
    """Sixteen GPUs of quota, preemption within the ClusterQueue by priority. A low-priority Job of four 4-GPU
    pods holds all of it (both nodes); a high-priority one of four arrives. Kueue evicts the low Workload (its
    Job suspended, its pods deleted by the Job controller) and admits the high one, whose pods bind. The
    service's PostFilter never evicts Kueue's pods: no pod carries kube-scheduler's Preempted event."""
    racks(scene, {"a": ("b0", "r0"), "b": ("b0", "r0")})
    scene.queues({"cpu": "256", "memory": "1Ti", "nvidia.com/gpu": "16"},
                 preemption={"withinClusterQueue": "LowerPriority"})  # fmt: skip
    scene.job("low", pods=4, priority_class=LOW)
    low = scene.wait_job_bound("low", 4)
    scene.job("high", pods=4, priority_class=HIGH)
    scene.wait_job_bound("high", 4)
    evicted = scene.condition(scene.workload_of("low"), "Evicted")
    assert (evicted.get("status"), evicted.get("reason")) == ("True", "Preempted"), evicted
    assert scene.get_job("low")["spec"]["suspend"] is True
    assert all(not scene.events(name, "Preempted") for name in low)


def test_the_service_does_not_evict_a_kueue_admitted_pod_for_a_pod_outside_kueue(scene: KueueScene) -> None:
    """A low-priority Kueue Job holds all 8 GPUs of the only node; a high-priority pod outside Kueue asks for 4.
    kube-scheduler alone would preempt; the service's plan evicts only what Kueue does not manage, so the pod
    waits with the reason and the Job's pods stay bound."""
    (node, _), *_ = racks(scene, {"a": ("b0", "r0")}).items()
    scene.queues({"cpu": "256", "memory": "1Ti", "nvidia.com/gpu": "8"})
    scene.job("low", pods=2, priority_class=LOW)
    low = scene.wait_job_bound("low", 2)
    scene.create([scene.pod("urgent", gpus=4, cpus=8, priorityClassName=HIGH)])

    def reason() -> str:
        return next((m for m in scene.events("urgent", "FailedScheduling") if "Kueue" in m), "")

    wait_until(lambda: bool(reason()), timeout_s=BOUND_S, what="the pod's FailedScheduling event naming Kueue")
    assert "urgent" not in scene.bound()
    assert {name: pod["spec"]["nodeName"] for name, pod in scene.job_pods("low").items()} == dict.fromkeys(low, node)


# -- docs/kueue.md's walk-through, with the files it applies -------------------------------------------------

QUEUES = REPO / "deploy" / "kueue" / "queues.yaml"
TRAINING_JOB = REPO / "deploy" / "kueue" / "training-job.yaml"


def test_the_walkthrough_places_the_example_training_job_and_holds_a_third_to_the_cohorts_quota(
    scene: KueueScene, cluster: KueueCluster
) -> None:
    """docs/kueue.md as a user runs it, after Kueue and the chart with ``kueue.enabled``: label the nodes,
    ``kubectl apply`` the example queues and the example Job. Team A's 16 GPUs admit the Job; Kueue assigns one
    rack; the four pods, one gang, bind there together, each on one NUMA cell's 4 GPUs. Submitted again, the Job
    borrows team B's idle 16 GPUs in the cohort and takes the other rack; a third copy finds no quota left and
    waits, suspended and without a pod."""
    nodes = racks(scene, {"a": ("b0", "r0"), "b": ("b0", "r0"), "c": ("b1", "r1"), "d": ("b1", "r1")})
    plane = scene.plane
    try:
        plane.kubectl("apply", "-f", str(QUEUES))
        for namespace in ("team-a", "team-b"):  # kube-controller-manager's ServiceAccount controller would
            ensure_object(plane, f"/api/v1/namespaces/{namespace}/serviceaccounts",
                          {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})  # fmt: skip
        plane.kubectl("apply", "-f", str(TRAINING_JOB))
        job = yaml.safe_load(TRAINING_JOB.read_text())
        team = KueueScene(plane=plane, client=scene.client, namespace=job["metadata"]["namespace"],
                          folder=scene.folder, logs=cluster.logs)  # fmt: skip
        racks_used = []
        for name in (job["metadata"]["name"], "llm-pretrain-2"):
            if name != job["metadata"]["name"]:
                plane.kubectl("create", "-f", "-", input_text=yaml.safe_dump(_renamed(job, name)))
            pods = team.wait_job_bound(name, 4)
            (rack,) = {nodes[pod["spec"]["nodeName"]] for pod in pods.values()}
            racks_used.append(rack)
            for pod in pods.values():
                cells, gpus = cells_and_gpus(pod)
                assert len(cells) == 1
                assert gpus == sorted(range(4 * cells[0], 4 * cells[0] + 4))
            assert _waiting_at_permit(cluster, team.namespace) & set(pods), f"{name}'s gang did not wait at Permit"
        assert sorted(racks_used) == ["r0", "r1"]
        queue = plane.admin.get(f"{KUEUE_API}/clusterqueues/team-a")
        assert queue is not None
        reserved = queue["status"]["flavorsReservation"]
        assert {r["name"]: r.get("borrowed") for f in reserved for r in f["resources"]}["nvidia.com/gpu"] == "16"
        plane.kubectl("create", "-f", "-", input_text=yaml.safe_dump(_renamed(job, "llm-pretrain-3")))
        team.wait_held_by_quota("llm-pretrain-3")
    finally:
        for namespace in ("team-a", "team-b"):
            plane.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false", check=False)
            plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", check=False)
        plane.kubectl("delete", "-f", str(QUEUES), "--wait=false", check=False)


def _renamed(job: Json, name: str) -> Json:
    return {**job, "metadata": {**job["metadata"], "name": name},
            "spec": {**job["spec"], "template": {**job["spec"]["template"], "metadata": {
                **job["spec"]["template"]["metadata"],
                "labels": {**job["spec"]["template"]["metadata"]["labels"],
                           "pod-group.scheduling.kubenexus.io/name": name}}}}}  # fmt: skip
