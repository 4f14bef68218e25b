"""deploy/ and the Helm chart against the real kube-apiserver v1.37: what `kubectl apply --server-side` and an
installer's `helm install` meet in a cluster. tests/deploy/ (test_deploy*.py, test_helm_chart.py) judge the same
files offline, against schemas; here the server judges them, with its validation, admission, CEL type checking
and RBAC.

* deploy/ as shipped (the CRD, agent, placement with its cert-manager certificates, kubenexus-scheduler with
  its configuration in a ConfigMap, monitoring, the operator examples), every object
  accepted under strict field validation with no warning, and stored (or, dry run, returned) with every field
  it sets. Objects that do nothing without a kubelet or an operator this cluster lacks (the DaemonSet and
  Deployments, cert-manager's, prometheus-operator's and the operators' kinds) go through `--dry-run=server`:
  validated and admitted, not stored. Their kinds' CRDs are applied first from files: cert-manager's from its
  Go module (as tools/control_plane.py takes scheduler-plugins' CRD from its module), prometheus-operator's
  from tests/monitoring_crds, the operators' from tests/operator_crds.
* Both admission policies type-check clean: kube-controller-manager's ValidatingAdmissionPolicy status
  controller checks every CEL expression against the matched kinds' schemas and writes the result into
  ``status.typeChecking``.
* The chart in every combination of its values toggles (scheduler.mode, tls.certManager,
  placement.workloadPolicies.enabled), applied as an installer's ServiceAccount: not system:masters, without
  the ``escalate`` and ``bind`` verbs, holding only what installing the chart takes. The chart's namespaces
  are fixed (values.yaml), and the modes differ only in objects they add and in the workloads (dry run), so
  the modes are applied one after the other in place; each workload's pod goes through pod admission
  (Pod Security ``restricted`` in kubenexus-system) as a dry-run Pod. Every RBAC object the chart makes is
  then created anew by that installer, which makes the API server's escalation check compare the rules with
  the installer's own; an identity holding less is refused with the escalation message.
* What each product ServiceAccount may and may not do, as `kubectl auth can-i --as` reports it.
"""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_python.chart import Chart

from tests import REPO, TESTS
from tests.conftest import wait_until
from tests.control_plane import AGENT_MANIFESTS, PLACEMENT_MANIFESTS, ControlPlane, ensure_object, install
from tools import control_plane as builder

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

Json = dict[str, Any]

DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "kubenexus"
# cert-manager's CRDs as that project publishes them in its Go module (tools/control_plane.py MODULE_CRDS pins
# the version, so the schemas the objects meet do not move under the test).
CERT_MANAGER_CRDS = ("cert-manager.io_issuers.yaml", "cert-manager.io_certificates.yaml")
FILE_CRDS = (*sorted((TESTS / "monitoring_crds").glob("*.yaml")), *sorted((TESTS / "operator_crds").glob("*.yaml")))

# Kinds that need a kubelet (their pods never run here) or an operator the cluster lacks: server dry run.
WORKLOADS = {"DaemonSet", "Deployment"}
DRY_RUN_GROUPS = {
    "cert-manager.io",
    "monitoring.coreos.com",
    "jobset.x-k8s.io",
    "leaderworkerset.x-k8s.io",
    "kubeflow.org",
    "ray.io",
    "sparkoperator.k8s.io",
    "scheduling.x-k8s.io",
    "scheduling.volcano.sh",
}
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
# The order Helm installs kinds in (pkg/release/util/kind_sorter.go, InstallOrder); kinds it does not list, last.
INSTALL_ORDER = (
    "Namespace",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "ConfigMap",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "Service",
    "DaemonSet",
    "Deployment",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
)
ESCALATION = "is attempting to grant RBAC permissions not currently held"

AGENT = "system:serviceaccount:kubenexus-agent:kubenexus-agent"
PLACEMENT = "system:serviceaccount:kubenexus-system:kubenexus-placement"
KUBE_SCHEDULER = "system:serviceaccount:kubenexus-system:kubenexus-kube-scheduler"


# -- files and renders --------------------------------------------------------------------------------------


def documents(*paths: Path) -> list[Json]:
    return [doc for path in paths for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(values: Json | None = None) -> list[Json]:
    """The chart's templates as `helm template` renders them (tests/deploy/test_helm_chart.py renders the same way)."""
    manifests = Chart.load(CHART).render(values, name="kubenexus", namespace="kubenexus-system")
    docs = [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if doc]
    return sorted(docs, key=lambda doc: INSTALL_ORDER.index(doc["kind"]) if doc["kind"] in INSTALL_ORDER else 99)


def chart_crds() -> list[Json]:
    """The chart's crds/, which Helm applies before any template."""
    return [yaml.safe_load(crd["data"]) for crd in Chart.load(CHART).crds]


def group(doc: Mapping[str, Any]) -> str:
    api_version: str = doc["apiVersion"]
    return api_version.rpartition("/")[0]


def dry_run_only(doc: Mapping[str, Any]) -> bool:
    return doc["kind"] in WORKLOADS or group(doc) in DRY_RUN_GROUPS


# Every combination of the chart's toggles (values.yaml): the scheduler mode, cert-manager, workload policies.
CHART_MODES = [
    {"scheduler": {"mode": mode}, "tls": {"certManager": cert_manager},
     "placement": {"workloadPolicies": {"enabled": policies}}}
    for mode, cert_manager, policies in itertools.product(
        ("binder", "extender", "plugin"), (False, True), (True, False)
    )
]  # fmt: skip


def mode_id(values: Json) -> str:
    tls = "cert-manager" if values["tls"]["certManager"] else "own-secrets"
    policies = "policies" if values["placement"]["workloadPolicies"]["enabled"] else "no-policies"
    return f"{values['scheduler']['mode']}-{tls}-{policies}"


def all_renders() -> list[Json]:
    return [doc for values in CHART_MODES for doc in render(values)]


def cert_manager_crd_files() -> tuple[Path, ...]:
    """cert-manager's CRDs from its Go module, fetched with the control plane (tools/control_plane.py)."""
    files = builder.crd_files(builder.bin_dir())
    return tuple(files[name] for name in CERT_MANAGER_CRDS)


# -- applying -----------------------------------------------------------------------------------------------


def kubectl_apply(
    plane: ControlPlane, objects: Sequence[Mapping[str, Any]], *, dry_run: bool = False, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess[str]:
    args = ["apply", "--server-side", "--force-conflicts", "--validate=strict", "-o", "json", "-f", "-"]
    if dry_run:
        args.append("--dry-run=server")
    text = yaml.safe_dump_all([dict(obj) for obj in objects])
    return plane.kubectl(*args, kubeconfig=kubeconfig, check=False, input_text=text)


def apply(
    plane: ControlPlane, objects: Sequence[Mapping[str, Any]], *, dry_run: bool = False, kubeconfig: Path | None = None
) -> list[Json]:
    """Server-side apply of ``objects`` (by the administrator unless ``kubeconfig``): every one accepted, no
    warning, and the server's object (stored, or dry run returned) carries every field the manifest sets."""
    if not objects:
        return []
    result = kubectl_apply(plane, objects, dry_run=dry_run, kubeconfig=kubeconfig)
    assert result.returncode == 0, f"refused:\n{result.stderr}"
    assert [line for line in result.stderr.splitlines() if line.startswith("Warning")] == []
    answer = json.loads(result.stdout)
    returned: list[Json] = answer["items"] if answer.get("kind") == "List" else [answer]
    assert [key(obj) for obj in returned] == [key(obj) for obj in objects]
    for sent, stored in zip(objects, returned, strict=True):
        assert missing(sent, stored) == [], f"{key(sent)}: the server dropped or changed these fields"
    return returned


def apply_manifests(plane: ControlPlane, objects: Sequence[Json], *, kubeconfig: Path | None = None) -> list[Json]:
    """What can be stored, stored; the rest dry run."""
    stored = apply(plane, [obj for obj in objects if not dry_run_only(obj)], kubeconfig=kubeconfig)
    return stored + apply(plane, [obj for obj in objects if dry_run_only(obj)], dry_run=True, kubeconfig=kubeconfig)


def key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def missing(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Where ``stored`` lacks or differs from what ``sent`` sets (fields the server adds are fine; a null sets
    nothing, like controller-gen's ``creationTimestamp: null``)."""
    if sent is None or (stored is None and sent in (False, 0, "", [], {})):
        return []  # a Go zero value under omitempty is stored as absent (publishNotReadyAddresses: false)
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "/"]
        return [problem for name, value in sent.items()
                for problem in missing(value, stored.get(name), f"{path}/{name}")]  # fmt: skip
    if isinstance(sent, list):
        # The server appends to some lists (a pod's token volume and mounts, its default tolerations).
        if not isinstance(stored, list) or len(stored) < len(sent):
            return [path]
        return [problem for index, (a, b) in enumerate(zip(sent, stored[: len(sent)], strict=True))
                for problem in missing(a, b, f"{path}/{index}")]  # fmt: skip
    return [] if sent == stored else [f"{path}: {sent!r} became {stored!r}"]


def wait_established(plane: ControlPlane, crds: Sequence[Mapping[str, Any]]) -> None:
    names = [f"crd/{crd['metadata']['name']}" for crd in crds]
    plane.kubectl("wait", "--for=condition=Established", "--timeout=120s", *names)


def pod_from_template(workload: Mapping[str, Any], name: str) -> Json:
    """The pod the workload's controller would create (its template; the controller adds no more than names)."""
    template = workload["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**copy.deepcopy(template["metadata"]), "name": name,
                         "namespace": workload["metadata"]["namespace"]},
            "spec": copy.deepcopy(template["spec"])}  # fmt: skip


def nvidia_runtime_class(plane: ControlPlane) -> None:
    # The agent's pods run under the nvidia RuntimeClass (NVIDIA's GPU Operator creates it); the RuntimeClass
    # admission plugin refuses a pod naming one that does not exist.
    ensure_object(plane, "/apis/node.k8s.io/v1/runtimeclasses",
                  {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                   "handler": "nvidia"})  # fmt: skip


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# -- fixtures -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def third_party_crds(control_plane: ControlPlane) -> list[Json]:
    """cert-manager's, prometheus-operator's and the example operators' CRDs, applied and Established."""
    crds = documents(*cert_manager_crd_files(), *FILE_CRDS)
    apply(control_plane, crds)
    wait_established(control_plane, crds)
    return crds


def service_account(plane: ControlPlane, namespace: str, name: str, path: Path) -> Path:
    """A ServiceAccount in a namespace made for it, and a kubeconfig with its token: an identity that is not
    system:masters, so RBAC (and its escalation check) judges everything it does."""
    plane.apply_objects([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
    ])  # fmt: skip
    return plane.service_account_kubeconfig(path, namespace, name)


def cluster_role_for(plane: ControlPlane, name: str, rules: Sequence[Json], subject: tuple[str, str]) -> None:
    namespace, account = subject
    plane.apply_objects([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
         "rules": list(rules)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]},
    ])  # fmt: skip


def resource_of(plane: ControlPlane, api_version: str, kind: str) -> str:
    """The plural a kind is served as, from the server's discovery."""
    discovery = plane.admin.get(f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}")
    assert discovery is not None, f"{api_version} is not served"
    (name,) = [entry["name"] for entry in discovery["resources"] if entry["kind"] == kind and "/" not in entry["name"]]
    resource: str = name
    return resource


def installer_rules(plane: ControlPlane) -> list[Json]:
    """What installing, upgrading and uninstalling the chart takes, and no `escalate` or `bind`:

    * the verbs Helm uses on every kind the chart makes, in every mode (and its CRD);
    * every rule the chart's Roles and ClusterRoles grant: RBAC lets a user grant only what it holds;
    * the rules of the roles the chart binds and does not make (system:kube-scheduler, ...), for the same reason.
    """
    docs = [*chart_crds(), *all_renders()]
    kinds = {(doc["apiVersion"], doc["kind"]) for doc in docs}
    manage = sorted({(group({"apiVersion": api_version}), resource_of(plane, api_version, kind))
                     for api_version, kind in kinds})  # fmt: skip
    rules: list[Json] = [
        {"apiGroups": [api_group], "resources": [resource],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}
        for api_group, resource in manage
    ]  # fmt: skip
    ours = {(doc["kind"], doc["metadata"]["name"]) for doc in docs if doc["kind"] in ("Role", "ClusterRole")}
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole"):
            rules.extend(doc["rules"])
        elif doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            ref = doc["roleRef"]
            if (ref["kind"], ref["name"]) in ours:
                continue
            where = f"namespaces/{doc['metadata']['namespace']}/roles" if ref["kind"] == "Role" else "clusterroles"
            role = plane.admin.get(f"/apis/rbac.authorization.k8s.io/v1/{where}/{ref['name']}")
            assert role is not None, f"the chart binds {ref['kind']} {ref['name']}, which the cluster lacks"
            rules.extend(role["rules"])
    unique_rules = {json.dumps(rule, sort_keys=True): rule for rule in rules}
    return list(unique_rules.values())


@pytest.fixture(scope="module")
def installer(
    control_plane: ControlPlane, third_party_crds: list[Json], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The kubeconfig of a ServiceAccount bound to what the chart needs (installer_rules; the chart's
    cert-manager kinds are served once their CRDs are in)."""
    namespace = unique("deploy-installer")
    kubeconfig = service_account(control_plane, namespace, "installer",
                                 tmp_path_factory.mktemp("installer") / "kubeconfig")  # fmt: skip
    role = f"{namespace}-installs-kubenexus"
    cluster_role_for(control_plane, role, installer_rules(control_plane), (namespace, "installer"))
    as_installer = f"--as=system:serviceaccount:{namespace}:installer"
    for verb in ("escalate", "bind"):
        answer = control_plane.kubectl("auth", "can-i", verb, "clusterroles", as_installer, check=False)
        assert answer.stdout.strip() == "no", f"the installer must not hold {verb}: the escalation check is the test"
    yield kubeconfig
    control_plane.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
    control_plane.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")
    control_plane.delete(f"/api/v1/namespaces/{namespace}")


# -- deploy/ as shipped -------------------------------------------------------------------------------------


def test_deploy_as_shipped_is_accepted_and_stored_as_written(
    control_plane: ControlPlane, third_party_crds: list[Json]
) -> None:
    crds = documents(DEPLOY / "crd" / "noderesourcetopologies.yaml")
    apply(control_plane, crds)
    wait_established(control_plane, crds)

    agent = documents(*sorted((DEPLOY / "agent").glob("*.yaml")))
    placement = documents(*sorted((DEPLOY / "placement").glob("*.yaml")))
    scheduler = documents(*sorted((DEPLOY / "kubenexus-scheduler").glob("*.yaml")))
    certificates = documents(DEPLOY / "placement" / "cert-manager" / "certificates.yaml")
    applied = apply_manifests(control_plane, [*agent, *placement, *scheduler, *certificates])
    kinds = {obj["kind"] for obj in applied}
    assert {"DaemonSet", "Deployment", "Issuer", "Certificate", "ValidatingAdmissionPolicy", "ConfigMap"} <= kinds

    # What the Service objects got from the server: an address for the two, none for the headless one.
    services = {obj["metadata"]["name"]: obj["spec"] for obj in applied if obj["kind"] == "Service"}
    assert services["kubenexus-placement-replicas-headless"]["clusterIP"] == "None"
    assert services["kubenexus-placement"]["clusterIP"].startswith("10.0.0.")

    # Monitoring and the examples, in namespaces of their own that a user would have made.
    examples = documents(*sorted((DEPLOY / "examples").glob("*.yaml")))
    for namespace in sorted({obj["metadata"]["namespace"] for obj in examples}):
        ensure_object(control_plane, "/api/v1/namespaces",
                      {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})  # fmt: skip
    returned = apply_manifests(control_plane, [*documents(*sorted((DEPLOY / "monitoring").glob("*.yaml"))), *examples])
    assert {group(obj) for obj in returned} >= {"monitoring.coreos.com", "kubeflow.org", "ray.io", "jobset.x-k8s.io"}


def test_an_unknown_field_is_refused_so_acceptance_means_something(
    control_plane: ControlPlane, third_party_crds: list[Json]
) -> None:
    (certificate, *_) = [obj for obj in documents(DEPLOY / "placement" / "cert-manager" / "certificates.yaml")
                         if obj["kind"] == "Certificate"]  # fmt: skip
    ensure_object(control_plane, "/api/v1/namespaces",
                  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubenexus-system"}})  # fmt: skip
    misspelt = copy.deepcopy(certificate)
    misspelt["spec"]["isCa"] = misspelt["spec"].pop("isCA")
    refused = kubectl_apply(control_plane, [misspelt], dry_run=True)
    assert refused.returncode == 1
    assert ".spec.isCa: field not declared in schema" in refused.stderr


def test_both_admission_policies_type_check_without_a_warning(control_plane: ControlPlane) -> None:
    install(control_plane, [*AGENT_MANIFESTS, *PLACEMENT_MANIFESTS])
    shipped = [obj for obj in documents(*AGENT_MANIFESTS, *PLACEMENT_MANIFESTS)
               if obj["kind"] == "ValidatingAdmissionPolicy"]  # fmt: skip
    assert len(shipped) == 2
    # A control the checker must flag: the agent's policy with one misspelt field of a Node (no binding: inert).
    control = copy.deepcopy(next(obj for obj in shipped if obj["metadata"]["name"].startswith("kubenexus-agent")))
    control["metadata"] = {"name": unique("kubenexus-type-check-control")}
    control["spec"]["validations"].append(
        {"expression": "request.resource.resource != 'nodes' || object.spec.unschedulabel != true"}
    )
    misspelt = f"spec.validations[{len(control['spec']['validations']) - 1}].expression"
    control_plane.apply_objects([control])
    policies = {obj["metadata"]["name"] for obj in [*shipped, control]}
    # kube-controller-manager's status controller type-checks each policy's CEL against the schemas of the
    # kinds it matches and writes status.typeChecking. It checks the kinds a rule names by group, version and
    # resource: the agent's NodeResourceTopology rule matches apiVersions "*", which it skips
    # (k8s.io/apiserver .../policy/validating/typechecking.go, extractVersions), so that half of the agent's
    # policy is judged at admission only (tests/cluster/test_cluster_agent.py).
    controller = control_plane.start_controller_manager(controllers="validatingadmissionpolicy-status-controller")
    collection = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    statuses: dict[str, Json] = {}

    def checked() -> bool:
        for name in policies:
            policy = control_plane.admin.get(f"{collection}/{name}")
            assert policy is not None
            status = policy.get("status", {})
            if "typeChecking" in status and status.get("observedGeneration") == policy["metadata"]["generation"]:
                statuses[name] = status
        return set(statuses) == policies

    try:
        wait_until(checked, 120, "status.typeChecking on the admission policies")
    finally:
        controller.stop()
        control_plane.delete(f"{collection}/{control['metadata']['name']}")
    warnings = {name: status["typeChecking"].get("expressionWarnings", []) for name, status in statuses.items()}
    flagged = warnings.pop(control["metadata"]["name"])
    assert [warning["fieldRef"] for warning in flagged] == [misspelt]
    assert "Kind=Node: ERROR" in flagged[0]["warning"]
    assert "undefined field 'unschedulabel'" in flagged[0]["warning"]
    assert warnings == {obj["metadata"]["name"]: [] for obj in shipped}


# -- the chart ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", CHART_MODES, ids=[mode_id(values) for values in CHART_MODES])
def test_the_chart_installs_in_every_mode_as_an_installer(
    control_plane: ControlPlane, third_party_crds: list[Json], installer: Path, values: Json
) -> None:
    crds = chart_crds()
    apply(control_plane, crds, kubeconfig=installer)
    wait_established(control_plane, crds)
    docs = render(values)
    applied = apply_manifests(control_plane, docs, kubeconfig=installer)
    assert len(applied) == len(docs)
    second_scheduler = ("Deployment", "kubenexus-system", "kubenexus-scheduler")
    assert (second_scheduler in {key(obj) for obj in applied}) == (values["scheduler"]["mode"] != "binder")

    # Each workload's pod through pod admission (Pod Security, the RuntimeClass, the ServiceAccount), as
    # its controller would create it.
    nvidia_runtime_class(control_plane)
    workloads = [doc for doc in docs if doc["kind"] in WORKLOADS]
    pods = [pod_from_template(workload, unique(workload["metadata"]["name"])) for workload in workloads]
    apply(control_plane, pods, dry_run=True)


def test_the_chart_rbac_is_created_by_an_installer_without_escalate_or_bind(
    control_plane: ControlPlane, installer: Path
) -> None:
    # Every Role, ClusterRole and binding of every mode, under fresh names: created, not updated, so the
    # escalation check compares each one's rules (or its role's, for a binding) with the installer's own.
    suffix = uuid.uuid4().hex[:6]
    apply(control_plane, [doc for doc in render() if doc["kind"] == "Namespace"], kubeconfig=installer)
    distinct = {key(doc): doc for doc in all_renders() if doc["kind"] in RBAC_KINDS}
    ours = {(kind, name) for kind, _, name in distinct if kind in ("Role", "ClusterRole")}
    renamed = []
    for doc in distinct.values():
        copied = copy.deepcopy(doc)
        copied["metadata"]["name"] += f"-{suffix}"
        ref = copied.get("roleRef", {})
        if (ref.get("kind"), ref.get("name")) in ours:
            ref["name"] += f"-{suffix}"
        renamed.append(copied)
    renamed.sort(key=lambda doc: RBAC_KINDS.index(doc["kind"]))
    assert {doc["kind"] for doc in renamed} == set(RBAC_KINDS)
    try:
        for doc in renamed:
            assert control_plane.admin.get(path_of(doc)) is None
        stored = apply(control_plane, renamed, kubeconfig=installer)
        assert all(control_plane.admin.get(path_of(doc)) is not None for doc in renamed)
        assert len({obj["metadata"]["uid"] for obj in stored}) == len(renamed)
    finally:
        for doc in reversed(renamed):
            control_plane.delete(path_of(doc))


def path_of(obj: Mapping[str, Any]) -> str:
    kind, namespace, name = key(obj)
    plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles",
              "RoleBinding": "rolebindings"}[kind]  # fmt: skip
    where = f"namespaces/{namespace}/" if namespace else ""
    return f"/apis/rbac.authorization.k8s.io/v1/{where}{plural}/{name}"


def test_an_identity_holding_less_is_refused_the_placement_cluster_role(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    # `admin` in its own namespace, and leave to write ClusterRoles (without which authorization alone would
    # refuse, before the escalation check is reached).
    namespace = unique("deploy-namespace-admin")
    kubeconfig = service_account(control_plane, namespace, "operator", tmp_path / "kubeconfig")
    control_plane.apply_objects([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "operator-admin", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
         "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": namespace}]},
    ])  # fmt: skip
    writer = f"{namespace}-writes-clusterroles"
    cluster_role_for(control_plane, writer,
                     [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                       "verbs": ["get", "create", "update", "patch"]}], (namespace, "operator"))  # fmt: skip
    (placement,) = [doc for doc in documents(DEPLOY / "placement" / "01-rbac.yaml") if doc["kind"] == "ClusterRole"]
    attempt = copy.deepcopy(placement)
    attempt["metadata"]["name"] = unique("kubenexus-placement")
    held = {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["get"]}
    allowed = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": unique("kubenexus-readable")}, "rules": [held]}  # fmt: skip
    try:
        refused = kubectl_apply(control_plane, [attempt], kubeconfig=kubeconfig)
        assert refused.returncode == 1
        assert ESCALATION in refused.stderr
        assert f'"system:serviceaccount:{namespace}:operator"' in refused.stderr
        assert "pods/binding" in refused.stderr  # the message names each rule it does not hold
        assert control_plane.admin.get(path_of(attempt)) is None
        # The same identity may write a ClusterRole granting only what it holds: the refusal is the rules'.
        apply(control_plane, [allowed], kubeconfig=kubeconfig)
    finally:
        control_plane.delete(path_of(allowed))
        control_plane.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{writer}")
        control_plane.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{writer}")
        control_plane.delete(f"/api/v1/namespaces/{namespace}")


# -- a user's view ------------------------------------------------------------------------------------------

CAN_I = [
    # The agent: its own Node and NodeResourceTopology, read and patched; nothing of pods or secrets.
    (AGENT, ("get", "nodes"), "yes"),
    (AGENT, ("patch", "nodes"), "yes"),
    (AGENT, ("create", "noderesourcetopologies.topology.node.k8s.io"), "yes"),
    (AGENT, ("list", "nodes"), "no"),
    (AGENT, ("delete", "nodes"), "no"),
    (AGENT, ("update", "nodes/status"), "no"),
    (AGENT, ("delete", "noderesourcetopologies.topology.node.k8s.io"), "no"),
    (AGENT, ("list", "pods", "--all-namespaces"), "no"),
    (AGENT, ("get", "secrets", "-n", "kubenexus-agent"), "no"),
    # The placement service: binds, evicts, patches pods; never deletes nodes, reads secrets or makes pods.
    (PLACEMENT, ("create", "pods", "--subresource=binding", "-n", "default"), "yes"),
    (PLACEMENT, ("create", "pods", "--subresource=eviction", "-n", "default"), "yes"),
    (PLACEMENT, ("patch", "pods", "--subresource=status", "-n", "default"), "yes"),
    (PLACEMENT, ("patch", "pods", "-n", "default"), "yes"),
    (PLACEMENT, ("watch", "nodes"), "yes"),
    (PLACEMENT, ("patch", "resourceclaims.resource.k8s.io", "--subresource=status", "-n", "default"), "yes"),
    (PLACEMENT, ("update", "leases.coordination.k8s.io/kubenexus-placement", "-n", "kubenexus-system"), "yes"),
    (PLACEMENT, ("update", "leases.coordination.k8s.io/kube-scheduler", "-n", "kubenexus-system"), "no"),
    (PLACEMENT, ("create", "leases.coordination.k8s.io", "-n", "default"), "no"),
    (PLACEMENT, ("delete", "nodes"), "no"),
    (PLACEMENT, ("patch", "nodes"), "no"),
    (PLACEMENT, ("get", "secrets", "-n", "kubenexus-system"), "no"),
    (PLACEMENT, ("list", "secrets", "--all-namespaces"), "no"),
    (PLACEMENT, ("create", "pods", "-n", "default"), "no"),
    (PLACEMENT, ("delete", "pods", "-n", "default"), "no"),
    # The second kube-scheduler (extender mode): what kube-scheduler does, and its own Lease.
    (KUBE_SCHEDULER, ("create", "pods", "--subresource=binding", "-n", "default"), "yes"),
    (KUBE_SCHEDULER, ("watch", "nodes"), "yes"),
    (KUBE_SCHEDULER, ("update", "leases.coordination.k8s.io/kubenexus-scheduler", "-n", "kubenexus-system"), "yes"),
    (KUBE_SCHEDULER, ("get", "configmaps/extension-apiserver-authentication", "-n", "kube-system"), "yes"),
    (KUBE_SCHEDULER, ("get", "secrets", "-n", "kubenexus-system"), "no"),
    (KUBE_SCHEDULER, ("delete", "nodes"), "no"),
]


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> None:
    """deploy/'s RBAC, and extender mode's second kube-scheduler with its bindings, by the administrator."""
    install(control_plane, [*AGENT_MANIFESTS, *PLACEMENT_MANIFESTS])
    extender = [
        doc
        for doc in render({"scheduler": {"mode": "extender"}})
        if doc["kind"] in (*RBAC_KINDS, "ServiceAccount") and "kube-scheduler" in doc["metadata"]["name"]
    ]
    assert len(extender) == 6
    apply(control_plane, extender)


@pytest.mark.parametrize(
    ("user", "question", "answer"), CAN_I, ids=[f"{u.rsplit(':', 1)[1]}:{' '.join(q)}" for u, q, _ in CAN_I]
)
def test_each_service_account_may_do_what_it_must_and_nothing_more(
    control_plane: ControlPlane, installed: None, user: str, question: tuple[str, ...], answer: str
) -> None:
    result = control_plane.kubectl("auth", "can-i", *question, f"--as={user}", check=False)
    assert result.stdout.strip() == answer, result.stderr
    assert result.returncode == (0 if answer == "yes" else 1)
