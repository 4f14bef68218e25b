"""The test control plane itself: the version, the APIs the product reads, and real authentication and
authorization (what every other ``cluster`` test relies on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubenexus.kube.errors import ApiError
from tests.control_plane import ControlPlane, agent_kubeconfig, server_version

pytestmark = pytest.mark.cluster


def test_the_api_server_is_kubernetes_1_37(control_plane: ControlPlane) -> None:
    assert server_version(control_plane).startswith("v1.37.")
    client = control_plane.kubectl("version", "-o", "json").stdout
    assert '"gitVersion": "v1.37.' in client


@pytest.mark.parametrize(
    ("group_version", "resource"),
    [
        ("resource.k8s.io/v1", "resourceslices"),
        ("resource.k8s.io/v1", "resourceclaims"),
        ("resource.k8s.io/v1", "deviceclasses"),
        ("resource.k8s.io/v1", "resourceclaimtemplates"),
        ("scheduling.k8s.io/v1beta1", "workloads"),
        ("scheduling.k8s.io/v1beta1", "podgroups"),
        ("topology.node.k8s.io/v1alpha2", "noderesourcetopologies"),
        ("scheduling.x-k8s.io/v1alpha1", "podgroups"),
        ("scheduling.volcano.sh/v1beta1", "podgroups"),
        ("admissionregistration.k8s.io/v1", "validatingadmissionpolicies"),
        ("coordination.k8s.io/v1", "leases"),
    ],
)
def test_the_apis_the_product_reads_are_served(control_plane: ControlPlane, group_version: str, resource: str) -> None:
    discovery = control_plane.admin.get(f"/apis/{group_version}")
    assert discovery is not None, f"{group_version} is not served"
    assert resource in {entry["name"] for entry in discovery["resources"]}


def test_an_anonymous_caller_is_refused(control_plane: ControlPlane, tmp_path: Path) -> None:
    kubeconfig = control_plane.write_token_kubeconfig(tmp_path / "kubeconfig", "not-a-token")
    client = control_plane.client(kubeconfig)
    with pytest.raises(ApiError) as refused:
        client.list("/api/v1/nodes")
    assert refused.value.status == 401


def test_a_service_account_gets_what_its_rbac_grants_and_no_more(control_plane: ControlPlane, tmp_path: Path) -> None:
    control_plane.create_node("rbac-node")
    client = control_plane.client(agent_kubeconfig(control_plane, "rbac-node", tmp_path / "kubeconfig"))
    assert client.get("/api/v1/nodes/rbac-node") is not None  # the agent reads its own Node
    with pytest.raises(ApiError) as refused:
        client.list("/api/v1/pods")
    assert refused.value.status == 403
    assert "system:serviceaccount:kubenexus-agent:kubenexus-agent" in refused.value.message
    can = control_plane.kubectl(
        "auth", "can-i", "list", "nodes", "--as=system:serviceaccount:kubenexus-agent:kubenexus-agent", check=False
    )
    assert can.stdout.strip() == "no"


def test_a_pod_bound_token_carries_its_node(control_plane: ControlPlane, tmp_path: Path) -> None:
    control_plane.create_node("token-node")
    kubeconfig = agent_kubeconfig(control_plane, "token-node", tmp_path / "kubeconfig")
    review = control_plane.client(kubeconfig).create(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    user = review["status"]["userInfo"]
    assert user["username"] == "system:serviceaccount:kubenexus-agent:kubenexus-agent"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == ["token-node"]
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == ["kubenexus-agent-token-node"]


def test_nodes_are_ready_objects_with_capacity(control_plane: ControlPlane) -> None:
    node = control_plane.create_node("capacity-node", capacity={"nvidia.com/gpu": "8"})
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    ready = control_plane.kubectl("get", "node", "capacity-node", "--no-headers").stdout.split()
    assert ready[:2] == ["capacity-node", "Ready"]
