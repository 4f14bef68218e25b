"""deploy/agent/: every document parses, is the object it should be, and agrees with the agent's code."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from agent.main import build_parser
from kubenexus.kube.paths import NRT_GROUP, NRT_PLURAL
from kubenexus.topology.labels import OWNED_PREFIXES
from tests import REPO

AGENT_DIR = REPO / "deploy" / "agent"
EXPECTED = {
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
    ("apps/v1", "DaemonSet"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
}
PLACEMENT_NAMESPACE = "kubenexus-system"


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(AGENT_DIR.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None)
    return docs


def one(kind: str) -> dict[str, Any]:
    (doc,) = [doc for doc in documents() if doc["kind"] == kind]
    return doc


def test_every_document_is_a_known_object_with_a_name() -> None:
    docs = documents()
    assert {(doc["apiVersion"], doc["kind"]) for doc in docs} == EXPECTED
    assert len(docs) == len(EXPECTED)
    assert all(doc["metadata"]["name"] for doc in docs)
    # kubectl apply -f deploy/agent/ applies files in name order: the namespace must come first.
    assert sorted(AGENT_DIR.glob("*.yaml"))[0].name == "00-namespace.yaml"


def test_the_agent_has_a_namespace_of_its_own_at_the_level_it_needs() -> None:
    namespace = one("Namespace")["metadata"]
    # Not the placement service's: Pod Security admission sets one level per namespace, and the agent's
    # host mounts need `privileged` (tests/deploy/test_deploy_pod_security.py says why) where the service has
    # `restricted`.
    assert namespace["name"] == "kubenexus-agent" != PLACEMENT_NAMESPACE
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding"} | {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    assert {doc["metadata"]["namespace"] for doc in documents() if doc["kind"] not in cluster_scoped} == {
        namespace["name"]
    }


def test_rbac_is_least_privilege() -> None:
    rules = {
        (tuple(rule["apiGroups"]), tuple(rule["resources"])): set(rule["verbs"]) for rule in one("ClusterRole")["rules"]
    }
    assert rules == {
        (("",), ("nodes",)): {"get", "patch"},
        ((NRT_GROUP,), (NRT_PLURAL,)): {"get", "create", "update", "patch"},
    }
    binding = one("ClusterRoleBinding")
    (subject,) = binding["subjects"]
    account = one("ServiceAccount")
    assert (subject["name"], subject["namespace"]) == (account["metadata"]["name"], account["metadata"]["namespace"])
    assert binding["roleRef"]["name"] == one("ClusterRole")["metadata"]["name"]


def test_admission_policy_pins_the_agent_to_its_node_and_its_own_keys() -> None:
    policy = one("ValidatingAdmissionPolicy")["spec"]
    account = one("ServiceAccount")["metadata"]
    (condition,) = policy["matchConditions"]
    assert f"system:serviceaccount:{account['namespace']}:{account['name']}" in condition["expression"]
    variables = {variable["name"]: variable["expression"] for variable in policy["variables"]}
    assert "request.userInfo.extra['authentication.kubernetes.io/node-name']" in variables["boundNode"]
    assert re.findall(r"'([^']+)'", variables["ownedPrefixes"]) == list(OWNED_PREFIXES)
    expressions = [" ".join(validation["expression"].split()) for validation in policy["validations"]]
    assert "object.metadata.name == variables.boundNode" in expressions
    # A finalizer would block the Node's deletion, an owner reference hand it to the garbage collector;
    # tests/deploy/test_deploy_admission.py evaluates these on requests that try.
    for field in ("spec", "metadata.finalizers", "metadata.ownerReferences"):
        assert any(f"object.{field}" in e and f"oldObject.{field}" in e for e in expressions), field
    resources = {rule["resources"][0]: set(rule["operations"]) for rule in policy["matchConstraints"]["resourceRules"]}
    assert resources == {"nodes": {"UPDATE"}, NRT_PLURAL: {"CREATE", "UPDATE"}}
    binding = one("ValidatingAdmissionPolicyBinding")["spec"]
    assert binding["policyName"] == one("ValidatingAdmissionPolicy")["metadata"]["name"]
    assert binding["validationActions"] == ["Deny"]


def test_daemonset_runs_the_agent_with_read_only_host_mounts_and_probes() -> None:
    daemonset = one("DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert daemonset["metadata"]["namespace"] == one("Namespace")["metadata"]["name"]
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (container,) = pod["containers"]

    args = build_parser().parse_args(container["args"])  # the flags the DaemonSet passes exist
    assert (args.command, args.host_root, args.mode, args.node_name) == ("run", "/host", "both", None)
    env = {item["name"]: item for item in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"

    volumes = {volume["name"]: volume["hostPath"]["path"] for volume in pod["volumes"]}
    mounts = {
        mount["mountPath"]: (volumes[mount["name"]], mount.get("readOnly")) for mount in container["volumeMounts"]
    }
    assert mounts == {
        "/host/sys": ("/sys", True),
        "/host/proc": ("/proc", True),
        f"/host{args.kubelet_config}": ("/var/lib/kubelet/config.yaml", True),
        str(Path(args.pod_resources_socket).parent): ("/var/lib/kubelet/pod-resources", True),
    }
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
    assert args.metrics_address == f":{port}"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    limits = container["resources"]["limits"]
    assert _mebibytes(container["resources"]["requests"]["memory"]) <= _mebibytes(limits["memory"])
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_only_prometheus_reaches_the_metrics_port() -> None:
    policy = one("NetworkPolicy")
    pod = one("DaemonSet")["spec"]["template"]
    assert policy["metadata"]["namespace"] == one("DaemonSet")["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    (container,) = pod["spec"]["containers"]
    assert [port["port"] for port in rule["ports"]] == [port["name"] for port in container["ports"]] == ["metrics"]


def _mebibytes(quantity: str) -> int:
    if not quantity.endswith("Mi"):
        raise ValueError(f"memory quantities in deploy/agent are written in Mi: {quantity!r}")
    return int(quantity.removesuffix("Mi"))
