"""What the cluster tests against the real control plane share (tests/cluster/test_cluster_binder.py,
tests/cluster/test_cluster_extender.py, tests/cluster/test_cluster_service.py): a node's topology published as the agent
publishes it, a scene's namespace, its Guaranteed pods and its cleanup, and the placement a bound pod carries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.publish import FIELD_MANAGER as AGENT_FIELD_MANAGER
from agent.publish import KubeNodeApi, Publisher
from kubenexus.kube.client import Json, KubeClient
from kubenexus.topology.labels import encode_node_metadata
from kubenexus.topology.model import NodeTopology
from kubenexus.topology.nrt import encode_nrt
from placement.core.annotations import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY
from placement.shim.client import TlsFiles
from tests.control_plane import ControlPlane, agent_kubeconfig, ensure_object

SCHEDULER = "kubenexus-scheduler"
SCENE_LABEL = "test.kubenexus.io/scene"
NVSWITCH = "alloc_nvswitch_8gpu.yaml"
NRT_PATH = "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
# Deadlines, not waits: a loaded 2-core machine runs several control planes at once.
BOUND_S = 120.0


def serve_tls_args(certificates: Path) -> list[str]:
    """``serve``'s mutual-TLS flags with the test CA's files (the ``certificates`` fixture), the shims' identity
    (``SCHEDULER``) the one that may write."""
    return [
        f"--tls-cert={certificates / 'server.crt'}",
        f"--tls-key={certificates / 'server.key'}",
        f"--tls-client-ca={certificates / 'ca.crt'}",
        f"--writer-identity={SCHEDULER}",
    ]


def shim_tls(certificates: Path) -> TlsFiles:
    """The client side: the shims' certificate (CN ``SCHEDULER``) and the test CA."""
    return TlsFiles(ca=certificates / "ca.crt", cert=certificates / f"{SCHEDULER}.crt",
                    key=certificates / f"{SCHEDULER}.key")  # fmt: skip


def publish_topology(plane: ControlPlane, node: str, topology: NodeTopology, folder: Path) -> None:
    """``topology`` published with the agent's own ``Publisher``, as the agent's ServiceAccount bound to
    ``node`` (its kubeconfig written in ``folder``)."""
    kubeconfig = agent_kubeconfig(plane, node, folder / f"agent-{node}.kubeconfig")
    client = plane.client(kubeconfig, field_manager=AGENT_FIELD_MANAGER)
    try:
        publisher = Publisher(api=KubeNodeApi(client), node_name=node)
        results = publisher.publish(metadata=encode_node_metadata(topology), nrt=encode_nrt(topology, node_name=node))
    finally:
        client.close()
    assert all(result.error is None for result in results), results


class SceneBase:
    """A test's namespace and its pods, as the administrator reads and writes them: ``pod`` builds a Guaranteed
    pod for the kubenexus scheduler on the scene's nodes (selected by the scene's label, and whatever else
    ``placing`` adds), as ``kubectl create`` sends it."""

    namespace: str

    @property
    def admin(self) -> KubeClient:
        raise NotImplementedError

    def path(self, resource: str, name: str = "") -> str:
        base = f"/api/v1/namespaces/{self.namespace}/{resource}"
        return f"{base}/{name}" if name else base

    def placing(self, spec: dict[str, Any]) -> Json:
        """The pod spec's nodeSelector (and tolerations, where a scene has them), taken out of ``spec``."""
        return {"nodeSelector": {SCENE_LABEL: self.namespace}}

    def pod(
        self,
        name: str,
        *,
        gpus: int = 0,
        cpus: int = 4,
        memory: str = "16Gi",
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        **spec: Any,
    ) -> Json:
        resources: dict[str, str] = {"cpu": str(cpus), "memory": memory}
        if gpus:
            resources["nvidia.com/gpu"] = str(gpus)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": dict(labels or {}),
                         "annotations": dict(annotations or {})},
            "spec": {
                "schedulerName": SCHEDULER,
                **self.placing(spec),
                "containers": [{"name": "main", "image": "registry.example/trainer:1",
                                "resources": {"requests": resources, "limits": dict(resources)}}],
                **spec,
            },
        }  # fmt: skip

    def create(self, pods: Sequence[Json]) -> list[Json]:
        return [self.admin.create(self.path("pods"), pod) for pod in pods]

    def get(self, name: str) -> Json:
        stored = self.admin.get(self.path("pods", name))
        assert stored is not None, f"pod {self.namespace}/{name} is gone"
        return stored

    def exists(self, name: str) -> bool:
        return self.admin.get(self.path("pods", name)) is not None

    def pods(self) -> dict[str, Json]:
        return {pod["metadata"]["name"]: pod for pod in self.admin.list(self.path("pods"))["items"]}

    def bound(self) -> dict[str, str]:
        """Pod name -> the node the server stored in its spec.nodeName."""
        return {name: node for name, pod in self.pods().items() if (node := pod["spec"].get("nodeName"))}

    def claim(self, name: str) -> Json:
        stored = self.admin.get(f"/apis/resource.k8s.io/v1/namespaces/{self.namespace}/resourceclaims/{name}")
        assert stored is not None, f"claim {name} is gone"
        return stored


def cells_and_gpus(pod: Json) -> tuple[list[int], list[int]]:
    """The NUMA cells and the GPUs the placement annotations of a bound pod name."""
    annotations = pod["metadata"]["annotations"]
    cells = [int(cell) for cell in annotations[ASSIGNED_CELLS_KEY].split(",")]
    gpus = [int(gpu) for gpu in annotations[ASSIGNED_GPUS_KEY].split(",")] if ASSIGNED_GPUS_KEY in annotations else []
    return cells, gpus


def create_scene_namespace(plane: ControlPlane, namespace: str) -> None:
    """A new namespace with its "default" ServiceAccount."""
    plane.admin.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # The ServiceAccount admission plugin refuses a pod whose ServiceAccount does not exist; kube-controller-
    # manager's serviceaccount controller would make "default", done here by hand.
    ensure_object(plane, f"/api/v1/namespaces/{namespace}/serviceaccounts",
                  {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})  # fmt: skip


def close_scene(plane: ControlPlane, namespace: str, nodes: Sequence[str]) -> None:
    """The namespace's pods force-deleted (no kubelet confirms a graceful deletion) and ``nodes`` removed, with
    their NodeResourceTopology and ResourceSlice."""
    plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force", "--wait=false",
                  check=False)  # fmt: skip
    for node in nodes:
        for path in (f"/api/v1/nodes/{node}", f"{NRT_PATH}/{node}", f"{SLICES_PATH}/{node}-gpu.nvidia.com"):
            plane.delete(path)
