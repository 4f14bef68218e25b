"""kube-scheduler processes on the real control plane, as the chart's modes run them
(tests/cluster/test_cluster_extender.py: the stock kube-scheduler with the extender;
tests/cluster/test_cluster_plugin.py: kubenexus-scheduler with the plugin):
their ServiceAccount and RBAC as the chart renders them, a client certificate from the test CA, the start that
waits for the Lease, and the comparison of a running configuration with the shipped one."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from helm_python.chart import Chart

from kubenexus.kube.client import Json, KubeClient
from kubenexus.topology.model import NodeTopology
from placement.shim.client import PlacementClient
from tests.cluster_scene import (
    BOUND_S,
    NVSWITCH,
    SCENE_LABEL,
    SLICES_PATH,
    SceneBase,
    close_scene,
    publish_topology,
)
from tests.conftest import wait_until
from tests.control_plane import ControlPlane, Process
from tests.dra_cluster import fixture_slice, joined_topology

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "helm" / "kubenexus"
SYSTEM = "kubenexus-system"
KUBE_SCHEDULER_ACCOUNT = "kubenexus-kube-scheduler"  # its ServiceAccount, and its client certificate's CN
LEASES_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM}/leases"


def differences(a: Any, b: Any, path: str = "") -> set[str]:
    """The paths (``extenders.0.urlPrefix``) where two decoded YAML documents differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {found for key in a.keys() | b.keys() for found in differences(a.get(key), b.get(key), f"{path}.{key}")}
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return {found for i, (x, y) in enumerate(zip(a, b, strict=True)) for found in differences(x, y, f"{path}.{i}")}
    return set() if a == b else {path.lstrip(".")}


def kube_scheduler_identity(mode: str = "extender") -> list[Json]:
    """The second kube-scheduler's ServiceAccount and RBAC as the chart's ``mode`` (extender, plugin) renders
    them (Helm's own Go code, as tests/deploy/test_helm_chart.py renders the chart)."""
    rendered = Chart.load(CHART).render({"scheduler": {"mode": mode}}, name="kubenexus", namespace=SYSTEM)
    documents = [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    return [
        doc for doc in documents
        if doc["kind"] in kinds and doc["metadata"]["labels"].get("app.kubernetes.io/name") == KUBE_SCHEDULER_ACCOUNT
    ]  # fmt: skip


def lease_access(name: str) -> list[Json]:
    """A Role and RoleBinding letting kube-scheduler's ServiceAccount hold Lease ``name`` too: the chart's Role
    lets it hold only its own (a second scheduler in a test needs the same for its Lease)."""
    labels = {"app.kubernetes.io/name": "kube-scheduler-tests"}
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": SYSTEM, "labels": labels},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [name],
                    "verbs": ["get", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": SYSTEM, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": KUBE_SCHEDULER_ACCOUNT, "namespace": SYSTEM}]},
    ]  # fmt: skip


def sign_client_certificate(authority: Path, folder: Path, name: str) -> tuple[Path, Path]:
    """A client certificate with CN ``name`` from the test CA in ``authority`` (the ``certificates`` fixture)."""
    key, request, cert, extensions = (folder / f"{name}.{ext}" for ext in ("key", "csr", "crt", "ext"))
    extensions.write_text("extendedKeyUsage=clientAuth\n")
    for args in (
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(request)],
        ["x509", "-req", "-in", str(request), "-CA", str(authority / "ca.crt"), "-CAkey", str(authority / "ca.key"),
         "-CAcreateserial", "-days", "1", "-extfile", str(extensions), "-out", str(cert)],
    ):  # fmt: skip
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)
    return cert, key


def lease_holder(plane: ControlPlane, name: str) -> str:
    lease = plane.admin.get(f"{LEASES_PATH}/{name}")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def start_scheduler(plane: ControlPlane, config: Json, path: Path, binary: Path | None = None) -> Process:
    """kube-scheduler (or ``binary``, kubenexus-scheduler) with ``config`` (written to ``path``), once it holds its
    Lease: it schedules from then on."""
    path.write_text(yaml.safe_dump(config))
    process = plane.start_scheduler(path, name=path.stem, binary=binary)
    lease = config["leaderElection"]["resourceName"]
    wait_until(lambda: bool(lease_holder(plane, lease)) or not process.running(), timeout_s=BOUND_S,
               what=f"kube-scheduler to hold its Lease {lease}")  # fmt: skip
    assert process.running(), process.tail()
    return process


@dataclass(kw_only=True)
class SchedulerScene(SceneBase):
    """One test's namespace and nodes under a kube-scheduler that asks the service (extender or plugin mode):
    nodes made and published as the agent publishes them, pods created as a user creates them, and what the
    server then holds. ``logs`` gives the scheduler's (and the shim's) recent output for a failure message."""

    plane: ControlPlane
    client: PlacementClient  # as the shims' identity, to ask the service what it sees
    namespace: str
    folder: Path
    logs: Callable[[], str]
    nodes: list[str] = field(default_factory=list)

    @property
    def admin(self) -> KubeClient:
        return self.plane.admin

    def key(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def add_nodes(
        self,
        machines: Mapping[str, NodeTopology],
        *,
        dra: bool = False,
        labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> list[str]:
        """One Node per machine (``<namespace>-<key>``, with ``labels[key]`` besides the scene's) with the
        machine's capacity, its topology published as the agent publishes it; with ``dra`` its GPUs are DRA
        devices (a ResourceSlice of NVIDIA's driver, no ``nvidia.com/gpu`` capacity). Returns when the service
        knows every one of them."""
        names = []
        for key, machine in machines.items():
            name = f"{self.namespace}-{key}"
            topology, resource_slice = machine, None
            capacity = {"cpu": str(len(machine.machine.online_cpus)), "pods": "110",
                        "memory": str(sum(cell.memory_bytes or 0 for cell in machine.numa_cells))}  # fmt: skip
            if dra:
                resource_slice = fixture_slice(NVSWITCH, name)
                topology = joined_topology(machine, resource_slice)
            elif machine.gpus:
                capacity["nvidia.com/gpu"] = str(len(machine.gpus))
            node_labels = {SCENE_LABEL: self.namespace, **(labels or {}).get(key, {})}
            self.plane.create_node(name, labels=node_labels, capacity=capacity)
            self.nodes.append(name)
            publish_topology(self.plane, name, topology, self.folder)
            if resource_slice is not None:
                self.admin.create(SLICES_PATH, resource_slice)  # as the driver's kubelet plugin publishes it
            names.append(name)
        probe = self.pod("probe", cpus=1, memory="1Gi")
        wait_until(lambda: set(self.client.filter(probe, names).feasible_nodes) == set(names),
                   timeout_s=90, what=f"the service to know nodes {names}")  # fmt: skip
        return names

    def wait_bound(self, names: Sequence[str]) -> dict[str, str]:
        def done() -> bool:
            return set(names) <= set(self.bound())

        try:
            wait_until(done, timeout_s=BOUND_S, what=f"pods {list(names)} bound")
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.logs()}") from None
        return self.bound()

    def events(self, name: str, reason: str) -> list[str]:
        """The messages ``kubectl get events`` shows for the pod, with that reason."""
        shown = self.plane.kubectl(
            "get", "events", "-n", self.namespace, "-o", "json",
            "--field-selector", f"involvedObject.name={name},reason={reason}",
        )  # fmt: skip
        return [str(event["message"]) for event in json.loads(shown.stdout)["items"]]

    def close(self) -> None:
        """Pods force-deleted (no kubelet confirms a graceful deletion) and this scene's nodes removed."""
        close_scene(self.plane, self.namespace, self.nodes)
