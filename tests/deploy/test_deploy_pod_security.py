"""Pod Security admission, checked statically: each workload in deploy/ against the Pod Security Standards
(the v1.30 `baseline` and `restricted` rules, https://kubernetes.io/docs/concepts/security/pod-security-standards/),
and each namespace's enforced level against what its pods need.

The placement service must pass `restricted`; the agent needs `privileged`, and only because of its
hostPath volumes: that is the reason deploy/agent/00-namespace.yaml gives, and the test that keeps it true.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests import REPO

Json = dict[str, Any]

DEPLOY = REPO / "deploy"
LEVELS = ("privileged", "baseline", "restricted")

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _containers(spec: Json) -> Iterator[Json]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(field, [])


def _contexts(spec: Json) -> Iterator[Json]:
    """The pod's security context, then every container's."""
    yield spec.get("securityContext") or {}
    for container in _containers(spec):
        yield container.get("securityContext") or {}


def baseline_violations(metadata: Json, spec: Json) -> set[str]:
    found = set()
    if any((c.get("windowsOptions") or {}).get("hostProcess") for c in _contexts(spec)):
        found.add("hostProcess")
    if any(spec.get(field) for field in ("hostNetwork", "hostPID", "hostIPC")):
        found.add("host namespaces")
    if any(c.get("privileged") for c in _contexts(spec)):
        found.add("privileged")
    if any(set((c.get("capabilities") or {}).get("add", [])) - BASELINE_CAPABILITIES for c in _contexts(spec)):
        found.add("capabilities")
    if any("hostPath" in volume for volume in spec.get("volumes", [])):
        found.add("hostPath volumes")
    if any(port.get("hostPort") for container in _containers(spec) for port in container.get("ports", [])):
        found.add("host ports")
    apparmor = [
        value
        for key, value in (metadata.get("annotations") or {}).items()
        if key.startswith("container.apparmor.security.beta.kubernetes.io/")
    ]
    if any(value != "runtime/default" and not value.startswith("localhost/") for value in apparmor) or any(
        (c.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost")
        for c in _contexts(spec)
    ):
        found.add("AppArmor")
    for context in _contexts(spec):
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or "user" in selinux or "role" in selinux:
            found.add("SELinux")
    if any(c.get("procMount", "Default") != "Default" for c in _contexts(spec)):
        found.add("/proc mount type")
    if any((c.get("seccompProfile") or {}).get("type") == "Unconfined" for c in _contexts(spec)):
        found.add("seccomp")
    if any(s["name"] not in SAFE_SYSCTLS for s in (spec.get("securityContext") or {}).get("sysctls", [])):
        found.add("sysctls")
    return found


def restricted_violations(metadata: Json, spec: Json) -> set[str]:
    found = baseline_violations(metadata, spec)
    if any(set(volume) - {"name"} - RESTRICTED_VOLUMES for volume in spec.get("volumes", [])):
        found.add("volume types")
    containers = list(_containers(spec))
    contexts = [c.get("securityContext") or {} for c in containers]
    pod = spec.get("securityContext") or {}
    if any(c.get("allowPrivilegeEscalation") is not False for c in contexts):
        found.add("privilege escalation")
    pod_non_root = pod.get("runAsNonRoot") is True
    if any(
        c.get("runAsNonRoot") is False or (not pod_non_root and c.get("runAsNonRoot") is not True) for c in contexts
    ):
        found.add("running as non-root")
    if any(c.get("runAsUser") == 0 for c in (pod, *contexts)):
        found.add("running as non-root user")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    for context in contexts:
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.add("seccomp")
    for context in contexts:
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []) or set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.add("capabilities")
    return found


def lowest_level(metadata: Json, spec: Json) -> str:
    if not restricted_violations(metadata, spec):
        return "restricted"
    return "privileged" if baseline_violations(metadata, spec) else "baseline"


def _documents() -> list[Json]:
    return [
        doc
        for path in sorted(DEPLOY.rglob("*.yaml"))
        if DEPLOY / "helm" not in path.parents  # templates; tests/deploy/test_helm_chart.py renders them equal to these
        for doc in yaml.safe_load_all(path.read_text())
        if doc is not None
    ]


def _workload(kind: str, name: str) -> Json:
    (doc,) = [d for d in _documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _template(workload: Json) -> tuple[Json, Json]:
    template = workload["spec"]["template"]
    return template.get("metadata") or {}, template["spec"]


def _namespace_labels(name: str) -> dict[str, str]:
    (namespace,) = [d for d in _documents() if d["kind"] == "Namespace" and d["metadata"]["name"] == name]
    labels: dict[str, str] = namespace["metadata"]["labels"]
    return labels


@pytest.mark.parametrize("name", ["kubenexus-placement", "kubenexus-scheduler"])
def test_the_placement_and_scheduler_pods_pass_restricted(name: str) -> None:
    deployment = _workload("Deployment", name)
    assert restricted_violations(*_template(deployment)) == set()


def test_the_agent_needs_privileged_for_its_host_paths_and_for_nothing_else() -> None:
    daemonset = _workload("DaemonSet", "kubenexus-agent")
    metadata, spec = _template(daemonset)
    assert baseline_violations(metadata, spec) == {"hostPath volumes"}
    # Beyond baseline, restricted refuses the hostPath volumes again and root (for the pod-resources
    # socket); everything else restricted asks for, the agent does too.
    assert restricted_violations(metadata, spec) == {
        "hostPath volumes",
        "volume types",
        "running as non-root",
        "running as non-root user",
    }
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.parametrize(
    ("kind", "name"),
    [("Deployment", "kubenexus-placement"), ("DaemonSet", "kubenexus-agent")],
)
def test_each_namespace_enforces_exactly_the_level_its_pods_need(kind: str, name: str) -> None:
    workload = _workload(kind, name)
    labels = _namespace_labels(workload["metadata"]["namespace"])
    needed = lowest_level(*_template(workload))
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == needed
        # Pinned: a cluster upgrade must not change what is admitted without anyone deciding it.
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "v1.30"


def test_the_agent_and_the_service_live_apart() -> None:
    agent = _workload("DaemonSet", "kubenexus-agent")["metadata"]["namespace"]
    service = _workload("Deployment", "kubenexus-placement")["metadata"]["namespace"]
    assert (agent, service) == ("kubenexus-agent", "kubenexus-system")
    assert LEVELS.index(_namespace_labels(service)["pod-security.kubernetes.io/enforce"]) > LEVELS.index(
        _namespace_labels(agent)["pod-security.kubernetes.io/enforce"]
    )


def _container(name: str) -> Callable[[Json], Json]:
    def pick(spec: Json) -> Json:
        container: Json = next(c for c in spec["containers"] if c["name"] == name)
        return container

    return pick


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (lambda s: s["securityContext"].pop("seccompProfile"), "seccomp"),
        (lambda s: s["securityContext"].pop("runAsNonRoot"), "running as non-root"),
        (lambda s: _container("placement")(s)["securityContext"].update({"runAsUser": 0}), "running as non-root user"),
        (lambda s: _container("extender")(s).update({"securityContext": {}}), "privilege escalation"),
        (
            lambda s: _container("placement")(s)["securityContext"].update({"capabilities": {"add": ["NET_RAW"]}}),
            "capabilities",
        ),
        (lambda s: s["volumes"].append({"name": "logs", "hostPath": {"path": "/var/log"}}), "hostPath volumes"),
        (lambda s: s.update({"hostNetwork": True}), "host namespaces"),
        (lambda s: _container("placement")(s)["ports"][0].update({"hostPort": 50051}), "host ports"),
    ],
)
def test_the_check_catches_each_way_of_breaking_restricted(change: Callable[[Json], object], rule: str) -> None:
    metadata, spec = copy.deepcopy(_template(_workload("Deployment", "kubenexus-placement")))
    change(spec)
    assert rule in restricted_violations(metadata, spec)
