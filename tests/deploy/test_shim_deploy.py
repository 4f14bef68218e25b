"""deploy/placement/ and deploy/scheduler/: every document parses and agrees with the service's and the
shims' code: their flags, their ports, their certificates, the keys they write."""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from helm_python.chart import Chart

from kubenexus.kube.lease_flags import DEFAULT_NAMESPACE
from kubenexus.kube.paths import NRTS_PATH
from placement.core.annotations import ASSIGNED_CELLS_KEY, ASSIGNED_GPUS_KEY, LEADER_LABEL, RESERVED_NODE_KEY
from placement.core.gang_sources import SOURCE_WORKLOAD
from placement.main import build_parser
from placement.shim.flags import SCHEDULER_NAME
from placement.shim.gang_directory import GROUP_APIS
from tests import REPO

DEPLOY = REPO / "deploy"
PLACEMENT_DIR = DEPLOY / "placement"
CERT_MANAGER_FILE = PLACEMENT_DIR / "cert-manager" / "certificates.yaml"
KUBE_SCHEDULER_LABEL = {"app.kubernetes.io/name": "kubenexus-kube-scheduler"}
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}


def documents(folder: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / folder).glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None)
    return docs


def scheduler_config(name: str) -> dict[str, Any]:
    """One KubeSchedulerConfiguration of deploy/scheduler: kube-scheduler-config.yaml (extender mode) or
    kubenexus-scheduler-config.yaml (plugin mode)."""
    (config,) = [doc for doc in yaml.safe_load_all((DEPLOY / "scheduler" / name).read_text()) if doc is not None]
    assert config["kind"] == "KubeSchedulerConfiguration"
    return config  # type: ignore[no-any-return]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in documents("placement") if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return doc


def containers() -> dict[str, dict[str, Any]]:
    """The placement pod's containers as deploy/placement ships them (plugin mode), and the binder container as
    the chart's binder mode adds it."""
    shipped = {c["name"]: c for c in one("Deployment")["spec"]["template"]["spec"]["containers"]}
    return {**shipped, "binder": binder_container()}


@functools.cache
def binder_container() -> dict[str, Any]:
    """The binder container of the placement Deployment in the chart's binder mode."""
    manifests = Chart.load(DEPLOY / "helm" / "kubenexus").render(
        {"scheduler": {"mode": "binder"}}, name="kubenexus", namespace="kubenexus-system"
    )
    (deployment,) = [
        doc
        for text in manifests.values()
        for doc in yaml.safe_load_all(text)
        if doc is not None and doc["kind"] == "Deployment" and doc["metadata"]["name"] == "kubenexus-placement"
    ]
    (binder,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "binder"]
    return binder  # type: ignore[no-any-return]


def parsed(container: str) -> argparse.Namespace:
    """The container's args through the real parser: every flag the Deployment passes exists."""
    return build_parser().parse_args(containers()[container]["args"])


def ports(container: str) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in containers()[container]["ports"]}


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


def certificates() -> dict[str, dict[str, Any]]:
    """cert-manager Certificates by the Secret they write."""
    return {
        d["spec"]["secretName"]: d
        for d in yaml.safe_load_all(CERT_MANAGER_FILE.read_text())
        if d["kind"] == "Certificate"
    }


def service_dns_names(name: str, namespace: str) -> set[str]:
    return {name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"}


# --- namespace and RBAC ---------------------------------------------------------------------------------------


def test_the_service_keeps_kubenexus_system_with_pod_security_restricted() -> None:
    namespace = one("Namespace")["metadata"]
    assert namespace["name"] == DEFAULT_NAMESPACE == "kubenexus-system"  # where the code looks for its Leases
    labels = namespace["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert re.fullmatch(r"v1\.\d+", labels[f"pod-security.kubernetes.io/{mode}-version"])
    namespaced = [
        d for d in documents("placement") if d["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    ]
    cluster_scoped = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert {d["metadata"]["namespace"] for d in namespaced if d["kind"] not in cluster_scoped} == {namespace["name"]}
    # kubectl apply -f deploy/placement/ applies files in name order: the namespace first.
    assert sorted(PLACEMENT_DIR.glob("*.yaml"))[0].name == "00-namespace.yaml"


def test_rbac_grants_what_the_feed_the_binder_and_the_election_use_and_no_more() -> None:
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in one("ClusterRole")["rules"]}
    # Nothing to authenticate callers with (tokenreviews): they present client certificates.
    assert rules == {
        (("",), ("nodes",)): {"get", "list", "watch"},
        ((NRTS_PATH.split("/")[2],), ("noderesourcetopologies",)): {"get", "list", "watch"},
        (("",), ("namespaces", "persistentvolumeclaims", "persistentvolumes")): {"get", "list", "watch"},
        (("storage.k8s.io",), ("storageclasses",)): {"get", "list", "watch"},
        (("scheduling.k8s.io",), ("priorityclasses",)): {"get", "list", "watch"},
        (("resource.k8s.io",), ("resourceslices", "deviceclasses")): {"list", "watch"},
        (("resource.k8s.io",), ("resourceclaims",)): {"get", "list", "watch", "patch"},
        (("resource.k8s.io",), ("resourceclaims/status",)): {"patch"},
        # Kubernetes 1.36+: writing status.allocation and reservedFor also needs the binding subresource.
        (("resource.k8s.io",), ("resourceclaims/binding",)): {"patch"},
        (("",), ("pods",)): {"get", "list", "watch", "patch"},
        (("",), ("pods/binding",)): {"create"},
        # Preemption: the nomination, the evictions (budgets checked by the API server), the budgets read.
        (("",), ("pods/status",)): {"patch"},
        (("",), ("pods/eviction",)): {"create"},
        (("policy",), ("poddisruptionbudgets",)): {"get", "list", "watch"},
        # Gang sources: their objects read, their status written (Volcano's through the object).
        (("scheduling.k8s.io",), ("workloads", "podgroups")): {"get", "list", "watch"},
        (("scheduling.k8s.io",), ("podgroups/status",)): {"patch"},
        (("scheduling.x-k8s.io",), ("podgroups",)): {"get", "list", "watch"},
        (("scheduling.x-k8s.io",), ("podgroups/status",)): {"patch"},
        (("scheduling.volcano.sh",), ("podgroups",)): {"get", "list", "watch", "patch"},
        (("",), ("events",)): {"create"},
    }
    lease_rules = one("Role")["rules"]
    assert {verb for rule in lease_rules for verb in rule["verbs"]} == {"create", "get", "update", "patch"}
    assert all(rule["apiGroups"] == ["coordination.k8s.io"] for rule in lease_rules)
    account = one("ServiceAccount")["metadata"]
    for binding in (one("ClusterRoleBinding"), one("RoleBinding")):
        assert [(s["name"], s["namespace"]) for s in binding["subjects"]] == [(account["name"], account["namespace"])]


def test_rbac_covers_what_the_binder_reads_and_writes_of_every_gang_api() -> None:
    """Each API of ``placement.shim.gang_directory`` read (list and watch: its reflector, the binder's and the
    extender's), and its status patched where ``group_status`` writes it: ``<plural>/status`` or, without a
    status subresource, the object; the Workload API has no status and gets no write."""
    granted = {
        (group, resource, verb)
        for rule in one("ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    for api in GROUP_APIS:
        assert {(api.group, api.plural, "list"), (api.group, api.plural, "watch")} <= granted, api.name
        status = f"{api.plural}/status" if api.status_subresource else api.plural
        written = api.source != SOURCE_WORKLOAD
        assert ((api.group, status, "patch") in granted) == written, api.name


def test_the_extender_reads_the_gang_apis_under_the_binders_grants() -> None:
    """The extender reads the same group objects as the binder (and writes none): it runs in the same pod, so
    under the one service account the ClusterRole above is bound to; no second account or role."""
    pod = one("Deployment")["spec"]["template"]["spec"]
    assert {"extender", "binder"} <= set(containers())
    (subject,) = one("ClusterRoleBinding")["subjects"]
    assert pod["serviceAccountName"] == subject["name"] == one("ServiceAccount")["metadata"]["name"]
    assert [d["kind"] for d in documents("placement")].count("ClusterRole") == 1


def test_pod_patches_are_limited_to_the_keys_the_service_writes() -> None:
    policy = one("ValidatingAdmissionPolicy")
    spec = policy["spec"]
    account = one("ServiceAccount")["metadata"]
    (condition,) = spec["matchConditions"]
    assert f"'system:serviceaccount:{account['namespace']}:{account['name']}'" in condition["expression"]
    variables = {variable["name"]: variable["expression"] for variable in spec["variables"]}
    assert re.findall(r"'([^']+)'", variables["placementAnnotations"]) == [
        ASSIGNED_CELLS_KEY,
        ASSIGNED_GPUS_KEY,
        RESERVED_NODE_KEY,
    ]
    assert variables["leaderLabel"] == f"'{LEADER_LABEL}'"
    # Only the caller's own placement pod may carry the leader label.
    app = one("Deployment")["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
    assert f"'{account['namespace']}'" in variables["ownPlacementPod"]
    assert f"'{app}'" in variables["ownPlacementPod"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods"], ["UPDATE"])
    binding = one("ValidatingAdmissionPolicyBinding")["spec"]
    assert binding["policyName"] == policy["metadata"]["name"]
    assert binding["validationActions"] == ["Deny"]


def test_docs_deploy_names_every_resource_and_verb_the_roles_grant() -> None:
    """docs/deploy.md's row for 01-rbac.yaml lists every rule, not a subset: an operator reviewing the grants
    reads them there."""
    docs = (DEPLOY.parent / "docs" / "deploy.md").read_text()
    (row,) = [line for line in docs.splitlines() if line.startswith("| `01-rbac.yaml` | ClusterRole, every rule")]
    rules = [rule for doc in documents("placement") if doc["kind"] in {"ClusterRole", "Role"} for rule in doc["rules"]]
    missing = sorted(
        {f"`{name}`" for rule in rules for name in (*rule["resources"], *rule["verbs"]) if f"`{name}`" not in row}
    )
    assert missing == []


# --- the Deployment: availability, flags, probes, certificates -------------------------------------------------


def test_the_deployment_is_highly_available() -> None:
    deployment = one("Deployment")
    assert deployment["spec"]["replicas"] >= 2
    assert set(containers()) == {"placement", "extender", "binder"}
    assert parsed("placement").leader_elect is True
    assert parsed("binder").lease_name == "kubenexus-binder"
    assert one("PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_every_listener_on_a_pod_address_requires_a_client_certificate() -> None:
    serve, extender = parsed("placement"), parsed("extender")
    for args in (serve, extender):
        assert not args.listen.startswith(("127.", "localhost", "[::1]"))
        assert args.insecure is False
        assert None not in (args.tls_cert, args.tls_key, args.tls_client_ca)
    assert port_of(serve.listen) == ports("placement")["grpc"]
    assert port_of(extender.listen) == ports("extender")["extender"]
    # Decisions only for the shims' client certificate; no one may release others' reservations.
    (client_cn,) = {certificates()[name]["spec"]["commonName"] for name in _secrets_mounted_by("binder")}
    assert serve.writer_identity == [client_cn] == ["kubenexus-scheduler"]
    assert serve.admin_identity == []
    assert extender.scheduler_name == SCHEDULER_NAME
    # bind only for kube-scheduler's client certificate, the one its extender tlsConfig presents.
    assert extender.writer_identity == [certificates()["kubenexus-kube-scheduler-client-tls"]["spec"]["commonName"]]


def test_the_shims_call_the_service_with_the_client_certificate() -> None:
    for name in ("extender", "binder"):
        args = parsed(name)
        assert None not in (args.service_ca, args.service_cert, args.service_key)
        assert port_of(args.service) == ports("placement")["grpc"]
    service = one("Service", "kubenexus-placement")["metadata"]
    assert parsed("binder").service.rpartition(":")[0] == f"{service['name']}.{service['namespace']}.svc"
    assert parsed("extender").service.rpartition(":")[0] == "127.0.0.1"  # its own pod's service


@pytest.mark.parametrize("name", ["placement", "extender", "binder"])
def test_probes_are_plain_http_on_each_containers_own_metrics_port(name: str) -> None:
    container = containers()[name]
    metrics = parsed(name).metrics_address
    (probe_port,) = {container[p]["httpGet"]["port"] for p in ("readinessProbe", "livenessProbe")}
    assert port_of(metrics) == ports(name)[probe_port]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert all(
        "grpc" not in container[p] and "tcpSocket" not in container[p] for p in ("readinessProbe", "livenessProbe")
    )


def _mounts(container: str) -> dict[PurePosixPath, str]:
    """Read-only Secret mounts of a container: mount path -> Secret name."""
    volumes = {v["name"]: v for v in one("Deployment")["spec"]["template"]["spec"]["volumes"]}
    mounts = {}
    for mount in containers()[container].get("volumeMounts", []):
        assert mount["readOnly"] is True
        if "secret" in volumes[mount["name"]]:
            mounts[PurePosixPath(mount["mountPath"])] = volumes[mount["name"]]["secret"]["secretName"]
    return mounts


def _secrets_mounted_by(container: str) -> set[str]:
    return set(_mounts(container).values())


def _secret_file(container: str, path: Path) -> tuple[str, str]:
    """(Secret name, key) a file flag of ``container`` points into."""
    file = PurePosixPath(path)
    (secret,) = [s for mount, s in _mounts(container).items() if file.parent == mount]
    return secret, file.name


def test_every_certificate_flag_reads_a_mounted_secret_of_the_right_kind() -> None:
    server, extender_tls, client = (
        "kubenexus-placement-server-tls",
        "kubenexus-extender-server-tls",
        "kubenexus-scheduler-client-tls",
    )
    files = {
        ("placement", "tls_cert"): (server, "tls.crt"),
        ("placement", "tls_key"): (server, "tls.key"),
        ("placement", "tls_client_ca"): (server, "ca.crt"),
        ("extender", "tls_cert"): (extender_tls, "tls.crt"),
        ("extender", "tls_key"): (extender_tls, "tls.key"),
        ("extender", "tls_client_ca"): (extender_tls, "ca.crt"),
        ("extender", "service_ca"): (client, "ca.crt"),
        ("extender", "service_cert"): (client, "tls.crt"),
        ("extender", "service_key"): (client, "tls.key"),
        ("binder", "service_ca"): (client, "ca.crt"),
        ("binder", "service_cert"): (client, "tls.crt"),
        ("binder", "service_key"): (client, "tls.key"),
    }
    for (container, flag), expected in files.items():
        assert _secret_file(container, getattr(parsed(container), flag)) == expected, (container, flag)
    # Each container mounts what it reads and nothing more: the binder never holds a server key.
    assert _secrets_mounted_by("placement") == {server}
    assert _secrets_mounted_by("extender") == {extender_tls, client}
    assert _secrets_mounted_by("binder") == {client}
    volumes = one("Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {v["secret"]["defaultMode"] for v in volumes if "secret" in v} == {0o440}
    pod_security = one("Deployment")["spec"]["template"]["spec"]["securityContext"]
    assert pod_security["fsGroup"] == pod_security["runAsGroup"]  # 0440 files are readable by the group only


# --- Services and the NetworkPolicy ------------------------------------------------------------------------------


def _container_ports() -> dict[str, int]:
    return {name: number for c in containers() for name, number in ports(c).items()}


def test_decisions_are_routed_to_the_leader_and_metrics_to_every_replica() -> None:
    leader = one("Service", "kubenexus-placement")["spec"]
    assert leader["selector"][LEADER_LABEL] == "true"
    assert {p["name"] for p in leader["ports"]} == {"grpc", "extender"}
    replicas = one("Service", "kubenexus-placement-replicas")["spec"]
    assert LEADER_LABEL not in replicas["selector"]
    assert {p["name"] for p in replicas["ports"]} == {"grpc", "metrics", "binder-metrics", "ext-metrics"}
    declared = _container_ports()
    for service in (leader, replicas):
        for port in service["ports"]:
            assert declared[port["targetPort"]] == port["port"]


def test_the_network_policy_admits_each_port_from_its_callers_only() -> None:
    policy = one("NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"] == one("Deployment")["spec"]["selector"]["matchLabels"]
    assert policy["policyTypes"] == ["Ingress"]
    placement_pods = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    admitted: dict[str, list[dict[str, Any]]] = {}
    for rule in policy["ingress"]:
        for port in rule["ports"]:
            assert port["protocol"] == "TCP"
            admitted.setdefault(port["port"], []).extend(rule["from"])
    assert set(admitted) == set(_container_ports())  # every port has a rule, every rule a port

    def selectors(peers: list[dict[str, Any]]) -> list[tuple[str, dict[str, str]]]:
        return [(kind, peer[kind]["matchLabels"]) for peer in peers for kind in peer]

    assert selectors(admitted["grpc"]) == [
        ("podSelector", {"app.kubernetes.io/name": placement_pods["app.kubernetes.io/name"]}),
        ("podSelector", KUBE_SCHEDULER_LABEL),
    ]
    assert selectors(admitted["extender"]) == [("podSelector", KUBE_SCHEDULER_LABEL)]
    for metrics in ("metrics", "binder-metrics", "ext-metrics"):
        assert selectors(admitted[metrics]) == [("namespaceSelector", MONITORING)]


# --- certificates ---------------------------------------------------------------------------------------------


def test_cert_manager_makes_every_secret_the_pods_and_kube_scheduler_mount_from_one_ca() -> None:
    docs = list(yaml.safe_load_all(CERT_MANAGER_FILE.read_text()))
    assert {d["apiVersion"] for d in docs} == {"cert-manager.io/v1"}
    namespace = one("Namespace")["metadata"]["name"]
    assert {d["metadata"]["namespace"] for d in docs} == {namespace}
    issuers = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Issuer"}
    by_secret = certificates()
    (ca,) = [c["spec"] for c in by_secret.values() if c["spec"].get("isCA")]
    # self-signed bootstrap -> CA certificate -> CA issuer -> every leaf
    assert issuers[ca["issuerRef"]["name"]] == {"selfSigned": {}}
    (ca_issuer,) = [name for name, spec in issuers.items() if spec.get("ca", {}).get("secretName") == ca["secretName"]]
    leaves = {secret: c["spec"] for secret, c in by_secret.items() if not c["spec"].get("isCA")}
    assert {leaf["issuerRef"]["name"] for leaf in leaves.values()} == {ca_issuer}
    assert {leaf["issuerRef"]["kind"] for leaf in leaves.values()} == {"Issuer"}
    pods = set().union(*(_secrets_mounted_by(c) for c in containers()))
    assert set(leaves) == pods | {"kubenexus-kube-scheduler-client-tls"}
    assert ca["secretName"] not in pods  # the CA's key stays with cert-manager


def test_each_certificate_names_what_its_clients_dial_and_serves_one_side_only() -> None:
    leaves = certificates()
    server = leaves["kubenexus-placement-server-tls"]["spec"]
    for service in ("kubenexus-placement", "kubenexus-placement-replicas"):
        metadata = one("Service", service)["metadata"]
        assert service_dns_names(metadata["name"], metadata["namespace"]) <= set(server["dnsNames"])
    assert parsed("binder").service.rpartition(":")[0] in server["dnsNames"]
    assert parsed("extender").service.rpartition(":")[0] in server["ipAddresses"]
    extender = leaves["kubenexus-extender-server-tls"]["spec"]
    (wiring,) = scheduler_config("kube-scheduler-config.yaml")["extenders"]
    assert urlsplit(wiring["urlPrefix"]).hostname in extender["dnsNames"]
    for secret, certificate in leaves.items():
        spec = certificate["spec"]
        if spec.get("isCA"):
            continue
        side = "server auth" if secret.endswith("server-tls") else "client auth"
        assert set(spec["usages"]) == {"digital signature", side}, secret
        assert spec["privateKey"]["rotationPolicy"] == "Always"
    assert leaves["kubenexus-scheduler-client-tls"]["spec"]["commonName"] == SCHEDULER_NAME
    # kube-scheduler's own identity is not a writer: through the extender it can do only what the shim does.
    assert (
        leaves["kubenexus-kube-scheduler-client-tls"]["spec"]["commonName"] not in parsed("placement").writer_identity
    )


# --- deploy/scheduler -----------------------------------------------------------------------------------------


def test_the_scheduler_configuration_wires_the_extender_into_the_kubenexus_profile() -> None:
    config = scheduler_config("kube-scheduler-config.yaml")
    assert [p["schedulerName"] for p in config["profiles"]] == [SCHEDULER_NAME]
    (extender,) = config["extenders"]
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert extender["nodeCacheCapable"] is True
    assert extender["weight"] >= 1
    assert extender["ignorable"] is False  # a KubeNexus pod is never bound without its NUMA placement
    assert config["leaderElection"]["resourceNamespace"] == one("Namespace")["metadata"]["name"]


def test_the_plugin_configuration_enables_the_plugin_in_the_kubenexus_profile_and_reaches_the_leader() -> None:
    config = scheduler_config("kubenexus-scheduler-config.yaml")
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == SCHEDULER_NAME
    assert [p["name"] for p in profile["plugins"]["multiPoint"]["enabled"]] == ["KubeNexus"]
    # The plugin's PreBind writes the claims with the service's devices: DynamicResources would write its own.
    assert profile["plugins"]["multiPoint"]["disabled"] == [{"name": "DynamicResources"}]
    (plugin_config,) = profile["pluginConfig"]
    args = plugin_config["args"]
    assert plugin_config["name"] == "KubeNexus"
    assert args["failurePolicy"] == "Fail"  # fail closed: a KubeNexus pod is never placed without the service
    host, _, port = args["address"].rpartition(":")
    assert host in certificates()["kubenexus-placement-server-tls"]["spec"]["dnsNames"]
    assert host.startswith(one("Service", "kubenexus-placement")["metadata"]["name"] + ".")
    assert int(port) == one("Service", "kubenexus-placement")["spec"]["ports"][0]["port"]
    assert {args[key].rpartition("/")[0] for key in ("caFile", "certFile", "keyFile")} == {
        "/etc/kubenexus/placement-client"
    }
    assert "extenders" not in config
    assert config["leaderElection"]["resourceNamespace"] == one("Namespace")["metadata"]["name"]
    # PostFilter evicts: granted to kube-scheduler's ServiceAccount, in the namespace the lease is in. Bind
    # writes the placement with the Binding (pods/binding, system:kube-scheduler's): no pod patch.
    rbac = documents("kubenexus-scheduler")
    (binding,) = [doc for doc in rbac if doc["metadata"]["name"] == "kubenexus-scheduler-plugin" and "roleRef" in doc]
    (subject,) = binding["subjects"]
    assert (subject["name"], subject["namespace"]) == ("kubenexus-kube-scheduler", one("Namespace")["metadata"]["name"])
    (role,) = [
        doc for doc in rbac if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == binding["roleRef"]["name"]
    ]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},  # PostFilter: the victims
    ]
    # The plugin's PostFilter is the profile's only preemption.
    assert profile["plugins"]["postFilter"] == {"disabled": [{"name": "DefaultPreemption"}]}
    # The plugin binds the pods it placed (the placement in the Binding), before DefaultBinder.
    assert profile["plugins"]["bind"] == {
        "disabled": [{"name": "DefaultBinder"}],
        "enabled": [{"name": "KubeNexus"}, {"name": "DefaultBinder"}],
    }


def test_the_extender_never_holds_a_bind_past_kube_schedulers_http_timeout() -> None:
    """kube-scheduler abandons an extender call after ``httpTimeout`` and schedules the pod again: the
    longest hold of a gang member at bind (``--max-gang-hold``, whatever a group's timeout asks) and the
    hold of a group without a timeout of its own (``--gang-timeout``) must end before it."""
    config = scheduler_config("kube-scheduler-config.yaml")
    (extender,) = config["extenders"]
    timeout = re.fullmatch(r"(\d+)s", extender["httpTimeout"])
    assert timeout is not None, extender["httpTimeout"]
    args = parsed("extender")
    assert 0 < args.gang_timeout <= args.max_gang_hold < int(timeout[1])


def test_kube_scheduler_calls_the_extender_over_verified_mutual_tls() -> None:
    config = scheduler_config("kube-scheduler-config.yaml")
    (extender,) = config["extenders"]
    url = urlsplit(extender["urlPrefix"])
    leader = one("Service", "kubenexus-placement")
    assert url.scheme == "https"
    assert url.hostname == f"{leader['metadata']['name']}.{leader['metadata']['namespace']}.svc"
    assert url.port == next(p["port"] for p in leader["spec"]["ports"] if p["name"] == "extender")
    assert extender["enableHTTPS"] is True
    tls = extender["tlsConfig"]
    # Without caFile, kube-scheduler turns enableHTTPS into "do not verify the server".
    assert tls["insecure"] is False
    files = {key: PurePosixPath(tls[key]) for key in ("caFile", "certFile", "keyFile")}
    assert len({path.parent for path in files.values()}) == 1  # one mounted Secret
    assert {key: path.name for key, path in files.items()} == {
        "caFile": "ca.crt",
        "certFile": "tls.crt",
        "keyFile": "tls.key",
    }
