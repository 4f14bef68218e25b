"""A real Kubernetes control plane for the ``cluster`` tests: etcd, kube-apiserver v1.37 and, where a test needs
them, kube-scheduler and kube-controller-manager, built from the Go modules by tools/control_plane.py.

Everything runs on loopback with random ports and real security, as a production cluster runs it:

* TLS everywhere (a throwaway CA made with ``openssl``); client certificates for the administrator
  (``system:masters``), kube-scheduler and kube-controller-manager;
* ServiceAccount tokens (a signing key, an issuer, the TokenRequest API): the product's programs run as their
  ServiceAccounts with the RBAC in deploy/, the agent with a pod-bound token that names its node;
* ``--authorization-mode=Node,RBAC``; the default admission chain plus NodeRestriction, with
  ValidatingAdmissionPolicy (GA, on by default);
* the APIs the product reads at the 1.37 level: ``resource.k8s.io`` (DRA, v1 with the beta versions), the
  scheduling Workload and PodGroup API (``GenericWorkload``, beta and off by default in 1.37, turned on with
  its API versions), and the CRDs: NodeResourceTopology (deploy/crd), scheduler-plugins' PodGroup (from its Go
  module, as published) and Volcano's PodGroup (tests/gang_crds).

There is no kubelet: Nodes are objects created through the API with capacity and a Ready condition, as
kube-scheduler's own scheduler_perf does, and a pod bound to one stays Pending, which is all the product's
clients can observe of a kubelet anyway.

The flags follow k/k's integration test server (cmd/kube-apiserver/app/testing/testserver.go) and
controller-runtime's envtest, with authorization and admission left on.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubenexus.kube.client import KubeClient, connect
from tools import control_plane as builder

REPO = Path(__file__).resolve().parent.parent
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# GenericWorkload is beta and off by default in 1.37, TopologyAwareWorkloadScheduling (a PodGroup's
# schedulingConstraints) alpha (pkg/features/kube_features.go); the product reads both, so the gates are on in
# the API server and kube-scheduler alike.
FEATURE_GATES = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
RUNTIME_CONFIG = ",".join(
    [
        "scheduling.k8s.io/v1beta1=true",
        "scheduling.k8s.io/v1alpha3=true",
        "resource.k8s.io/v1beta1=true",
        "resource.k8s.io/v1beta2=true",
    ]
)
PRODUCT_CRDS = (
    REPO / "deploy" / "crd" / "noderesourcetopologies.yaml",
    REPO / "tests" / "gang_crds" / "scheduling.volcano.sh_podgroups.yaml",
)
# Generous: a cold kube-apiserver on a loaded 2-core machine takes 10-40 s to serve; a deadline, not a wait.
START_TIMEOUT_S = 180.0

Json = dict[str, Any]


class ControlPlaneError(RuntimeError):
    """A component did not start or an API call failed; the message carries the log's last lines."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _log_tail(path: Path, lines: int = 40) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


def stop_group(popen: subprocess.Popen[Any], sig: int, timeout_s: float) -> int:
    """Send ``sig`` to the process group ``popen`` leads (started with ``start_new_session``), then SIGKILL
    after ``timeout_s``; its exit status."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, sig)
        try:
            return popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
    return popen.wait(timeout=timeout_s)


@dataclass
class Process:
    """One component's process and its log file."""

    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log.open("ab")
        self.popen = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> None:
        if self.popen is not None:
            stop_group(self.popen, sig, timeout_s)
            self.popen = None

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets open and answers nothing, as a hung server does."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGCONT)

    def tail(self) -> str:
        return _log_tail(self.log)


class ControlPlane:
    """etcd and kube-apiserver in ``workdir``; see the module docstring. Use as a context manager."""

    def __init__(self, workdir: Path, binaries: Path | None = None) -> None:
        self.dir = workdir
        self.bin = binaries or builder.build()
        self.certs = workdir / "pki"
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.etcd = Process("etcd", self._etcd_args(), workdir / "etcd.log")
        self.apiserver = Process("kube-apiserver", self._apiserver_args(), workdir / "kube-apiserver.log")
        self.admin_kubeconfig = workdir / "admin.kubeconfig"
        self._admin: KubeClient | None = None
        self._extra: list[Process] = []

    # -- lifecycle --------------------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.certs.mkdir(parents=True, exist_ok=True)
        self._make_certificates()
        self.write_cert_kubeconfig(self.admin_kubeconfig, "admin")
        self.etcd.start()
        self.wait_etcd()
        self.apiserver.start()
        self.wait_ready()
        self.apply_files(*PRODUCT_CRDS, builder.crd_files(self.bin)["scheduling.x-k8s.io_podgroups.yaml"])
        self.wait_for_crds()

    def stop(self) -> None:
        for process in [*self._extra, self.apiserver, self.etcd]:
            process.stop()
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def restart_apiserver(self, *, down_s: float = 0.0, before_start: Any = None) -> None:
        """Stop kube-apiserver (SIGTERM, as a rolling upgrade does), optionally run ``before_start`` while it
        is down, start it again on the same port and wait until it serves."""
        self.apiserver.stop()
        if down_s:
            time.sleep(down_s)
        if before_start is not None:
            before_start()
        self.apiserver.start()
        self.wait_ready()

    def wait_etcd(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(f"http://127.0.0.1:{self.etcd_port}/health", timeout=5) as answer,
            ):
                if json.loads(answer.read()).get("health") == "true":
                    return
            self._check_alive(self.etcd, deadline)
            time.sleep(0.2)

    def wait_ready(self) -> None:
        """Until ``/readyz`` answers ok (etcd reachable, bootstrap RBAC and priority classes in place)."""
        context = self.ssl_context("admin")
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with (
                contextlib.suppress(OSError, urllib.error.URLError, ssl.SSLError),
                urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=5) as answer,
            ):
                if answer.status == 200:
                    return
            self._check_alive(self.apiserver, deadline)
            time.sleep(0.2)

    def _check_alive(self, process: Process, deadline: float) -> None:
        if not process.running():
            raise ControlPlaneError(f"{process.name} exited while starting:\n{process.tail()}")
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"{process.name} not ready after {START_TIMEOUT_S:.0f} s:\n{process.tail()}")

    # -- configuration ----------------------------------------------------------------------------------

    def _etcd_args(self) -> list[str]:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(self.bin / "etcd"),
            "--data-dir", str(self.dir / "etcd-data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"default={peer}",
            # Test data need not survive a power cut; fsync on a shared CI disk costs seconds per test.
            "--unsafe-no-fsync",
            "--log-level", "warn",
        ]  # fmt: skip

    def _apiserver_args(self) -> list[str]:
        pki = self.certs
        return [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            f"--runtime-config={RUNTIME_CONFIG}",
            f"--feature-gates={FEATURE_GATES}",
            # The API server's own compaction stays off: a test that needs a compaction asks etcd for one.
            "--etcd-compaction-interval=0",
            # Without it a SIGTERM waits for every open watch to end (its HTTP server's shutdown) until Process.stop
            # kills it 30 s later; with it the watches are ended after the grace period and it exits at once, as
            # a rolling upgrade's graceful termination expects (k8s.io/apiserver genericapiserver.go).
            "--shutdown-watch-termination-grace-period=2s",
            f"--cert-dir={pki}",
            "--v=1",
        ]

    def _make_certificates(self) -> None:
        pki = self.certs
        if (pki / "ca.crt").exists():
            return
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=kubenexus-test-ca",
                 "-keyout", str(pki / "ca.key"), "-out", str(pki / "ca.crt"))  # fmt: skip
        server_names = "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc"
        self._leaf("apiserver", "/CN=kube-apiserver", f"subjectAltName={server_names}\nextendedKeyUsage=serverAuth")
        self._leaf("admin", "/O=system:masters/CN=kubenexus-test-admin", "extendedKeyUsage=clientAuth")
        self._leaf("kube-scheduler", "/CN=system:kube-scheduler", "extendedKeyUsage=clientAuth")
        self._leaf("kube-controller-manager", "/CN=system:kube-controller-manager", "extendedKeyUsage=clientAuth")
        _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))

    def _leaf(self, name: str, subject: str, extensions: str) -> None:
        pki = self.certs
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                 "-keyout", str(pki / f"{name}.key"), "-out", str(pki / f"{name}.csr"))  # fmt: skip
        (pki / f"{name}.ext").write_text(extensions + "\n")
        _openssl("x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(pki / "ca.crt"),
                 "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "2",
                 "-extfile", str(pki / f"{name}.ext"), "-out", str(pki / f"{name}.crt"))  # fmt: skip

    # -- identities -------------------------------------------------------------------------------------

    def ssl_context(self, cert_user: str) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        context.load_cert_chain(self.certs / f"{cert_user}.crt", self.certs / f"{cert_user}.key")
        return context

    def _kubeconfig(self, path: Path, user_name: str, user: Mapping[str, str]) -> Path:
        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url,
                                                      "certificate-authority": str(self.certs / "ca.crt")}}],
            "users": [{"name": user_name, "user": dict(user)}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user_name}}],
            "current-context": "test",
        }  # fmt: skip
        path.write_text(yaml.safe_dump(document))
        return path

    def write_cert_kubeconfig(self, path: Path, cert_user: str) -> Path:
        """A kubeconfig that authenticates with one of the control plane's client certificates."""
        return self._kubeconfig(
            path,
            cert_user,
            {
                "client-certificate": str(self.certs / f"{cert_user}.crt"),
                "client-key": str(self.certs / f"{cert_user}.key"),
            },
        )

    def token(self, namespace: str, service_account: str, *, bound_pod: str | None = None, seconds: int = 7200) -> str:
        """A ServiceAccount token from the TokenRequest API, as the kubelet projects one into a pod; bound to
        ``bound_pod`` (in the same namespace) when given, which puts the pod's node into the token."""
        spec: Json = {"audiences": [SERVICE_ACCOUNT_ISSUER], "expirationSeconds": seconds}
        if bound_pod is not None:
            pod = self.admin.get(f"/api/v1/namespaces/{namespace}/pods/{bound_pod}")
            if pod is None:
                raise ControlPlaneError(f"no pod {namespace}/{bound_pod} to bind a token to")
            spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": bound_pod,
                                      "uid": pod["metadata"]["uid"]}  # fmt: skip
        answer = self.admin.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
        )
        token: str = answer["status"]["token"]
        return token

    def write_token_kubeconfig(self, path: Path, token: str, user_name: str = "service-account") -> Path:
        return self._kubeconfig(path, user_name, {"token": token})

    def service_account_kubeconfig(
        self, path: Path, namespace: str, service_account: str, *, bound_pod: str | None = None
    ) -> Path:
        """A kubeconfig for ``namespace/service_account``: what the program would read inside its pod."""
        token = self.token(namespace, service_account, bound_pod=bound_pod)
        return self.write_token_kubeconfig(path, token, f"system:serviceaccount:{namespace}:{service_account}")

    @property
    def admin(self) -> KubeClient:
        if self._admin is None:
            self._admin = connect(str(self.admin_kubeconfig), field_manager="kubenexus-tests")
        return self._admin

    def client(self, kubeconfig: Path, field_manager: str = "kubenexus-tests") -> KubeClient:
        return connect(str(kubeconfig), field_manager=field_manager)

    # -- kubectl and objects ----------------------------------------------------------------------------

    def kubectl(
        self, *args: str, kubeconfig: Path | None = None, check: bool = True, input_text: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """kubectl v1.37 (built with the control plane), as a user runs it."""
        command = [str(self.bin / "kubectl"), f"--kubeconfig={kubeconfig or self.admin_kubeconfig}", *args]
        result = subprocess.run(command, capture_output=True, text=True, input=input_text, timeout=120, check=False)
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed:\n{result.stderr}{result.stdout}")
        return result

    def apply_files(self, *paths: Path) -> None:
        """Server-side apply, as `kubectl apply --server-side` does, by the administrator."""
        for path in paths:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))

    def apply_objects(self, objects: Sequence[Mapping[str, Any]]) -> None:
        text = yaml.safe_dump_all([dict(obj) for obj in objects])
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input_text=text)

    def wait_for_crds(self) -> None:
        self.kubectl("wait", "--for=condition=Established", "--timeout=120s", "crd", "--all")

    def create_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        capacity: Mapping[str, str] | None = None,
        taints: Sequence[Json] = (),
    ) -> Json:
        """A Node object as a kubelet registers it (capacity, allocatable, a Ready condition), created by the
        administrator; scheduler_perf's nodes are made the same way."""
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", **(capacity or {})}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node = self.admin.create("/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  **(labels or {})}},
            "spec": {"taints": list(taints)} if taints else {},
        })  # fmt: skip
        status = {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        }  # fmt: skip
        node = self.admin.merge_patch(f"/api/v1/nodes/{name}/status", {"status": status}) or node
        # The TaintNodesByCondition admission plugin taints every new Node node.kubernetes.io/not-ready
        # (NoSchedule); kube-controller-manager's node lifecycle controller lifts it once the Node reports Ready.
        # No such controller runs here: lifted as it would be, the taints asked for kept.
        return self.admin.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": list(taints) or None}}) or node

    def delete(self, path: str) -> None:
        """Delete the object at ``path`` without waiting; best effort, for a test's cleanup (gone already is fine)."""
        with contextlib.suppress(Exception):
            self.kubectl("delete", "--raw", path, "--wait=false", check=False)

    # -- faults a real server produces ------------------------------------------------------------------

    def etcd_revision(self) -> int:
        answer = self._etcd_call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        return int(answer["header"]["revision"])

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (what the API server does every 5 minutes), so
        that a watch resumed from an older resourceVersion is answered 410 Gone."""
        revision = self.etcd_revision()
        self._etcd_call("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision

    def _etcd_call(self, path: str, body: Json) -> Json:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.etcd_port}{path}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            document: Json = json.loads(answer.read())
            return document

    # -- more components --------------------------------------------------------------------------------

    def start_process(self, name: str, args: list[str]) -> Process:
        """A process stopped with the control plane (or earlier, by the test)."""
        process = Process(name, args, self.dir / f"{name}-{len(self._extra)}.log")
        process.start()
        self._extra.append(process)
        return process

    def start_scheduler(self, config: Path, name: str = "kube-scheduler", binary: Path | None = None) -> Process:
        """kube-scheduler v1.37 (or ``binary``: kubenexus-scheduler, the same with the KubeNexus plugin) with
        ``config`` (its ``clientConnection.kubeconfig`` names its identity)."""
        return self.start_process(name, [
            str(binary or self.bin / "kube-scheduler"), f"--config={config}", "--secure-port=0",
            f"--feature-gates={FEATURE_GATES}", "--v=2",
        ])  # fmt: skip

    def start_controller_manager(self, controllers: str = "*") -> Process:
        """kube-controller-manager with its own identity and every controller that needs no cloud: ServiceAccount
        tokens, garbage collection, ResourceClaims from templates, ..."""
        kubeconfig = self.write_cert_kubeconfig(self.dir / "kube-controller-manager.kubeconfig",
                                                "kube-controller-manager")  # fmt: skip
        return self.start_process("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            f"--service-account-private-key-file={self.certs / 'sa.key'}",
            f"--root-ca-file={self.certs / 'ca.crt'}", "--use-service-account-credentials=true",
            f"--controllers={controllers}", "--leader-elect=false", "--secure-port=0",
            f"--feature-gates={FEATURE_GATES}", "--v=1",
        ])  # fmt: skip


def server_version(plane: ControlPlane) -> str:
    with urllib.request.urlopen(f"{plane.url}/version", context=plane.ssl_context("admin"), timeout=10) as answer:
        version: str = json.loads(answer.read())["gitVersion"]
        return version


# -- the product installed as deploy/ installs it -----------------------------------------------------------

AGENT_MANIFESTS = tuple(sorted((REPO / "deploy" / "agent").glob("0[0-3]-*.yaml")))
PLACEMENT_MANIFESTS = tuple(
    REPO / "deploy" / "placement" / name
    for name in ("00-namespace.yaml", "00-serviceaccount.yaml", "01-rbac.yaml", "05-admission-policy.yaml")
)


def manifest_objects(path: Path) -> list[Json]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


# How long a just-applied admission policy may take to be enforced: a bound against a hang, never a pace.
POLICY_IN_FORCE_S = 120.0


def install(plane: ControlPlane, manifests: Sequence[Path]) -> None:
    """Apply ``manifests`` once per control plane (server-side apply is idempotent; this only saves time)."""
    done: set[Path] = plane.__dict__.setdefault("_installed", set())
    todo = [path for path in manifests if path not in done]
    if todo:
        plane.apply_files(*todo)
        done.update(todo)


def template_pod(workload: Path, name: str, node: str) -> Json:
    """The pod a DaemonSet's or Deployment's controller would create from ``workload``'s template, bound to
    ``node`` (there is no kubelet: it stays Pending, which is all a token needs)."""
    (owner,) = [obj for obj in manifest_objects(workload) if obj["kind"] in ("DaemonSet", "Deployment")]
    template = owner["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": owner["metadata"]["namespace"],
                     "labels": dict(template["metadata"]["labels"])},
        "spec": {**template["spec"], "nodeName": node},
    }  # fmt: skip


def ensure_object(plane: ControlPlane, collection: str, obj: Json) -> Json:
    """Create ``obj`` in ``collection`` unless it is there already; the stored object."""
    existing = plane.admin.get(f"{collection}/{obj['metadata']['name']}")
    return existing if existing is not None else plane.admin.create(collection, obj)


def agent_kubeconfig(plane: ControlPlane, node: str, path: Path) -> Path:
    """The agent's credentials on ``node``: its ServiceAccount's token bound to its DaemonSet pod there, as the
    kubelet projects it (the token names the node, which the admission policy checks)."""
    install(plane, AGENT_MANIFESTS)
    # The DaemonSet runs under the nvidia RuntimeClass (NVIDIA's GPU Operator creates it); the RuntimeClass
    # admission plugin refuses a pod naming one that does not exist.
    ensure_object(plane, "/apis/node.k8s.io/v1/runtimeclasses",
                  {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                   "handler": "nvidia"})  # fmt: skip
    pod = template_pod(REPO / "deploy" / "agent" / "04-daemonset.yaml", f"kubenexus-agent-{node}", node)
    ensure_object(plane, "/api/v1/namespaces/kubenexus-agent/pods", pod)
    name = pod["metadata"]["name"]
    kubeconfig = plane.service_account_kubeconfig(path, "kubenexus-agent", "kubenexus-agent", bound_pod=name)
    _wait_for_the_agents_policy(plane, kubeconfig, node)
    return kubeconfig


def _wait_for_the_agents_policy(plane: ControlPlane, kubeconfig: Path, node: str) -> None:
    """deploy/agent's admission policy in force, once per control plane: the API server enforces a policy from
    the moment its informer has it and the binding, a moment after the apply (longer on a loaded machine); a
    test that expects a refusal must not race it. Probed with a label the agent does not own, as a server-side
    dry run (admission judges it, nothing is stored)."""
    if plane.__dict__.get("_agent_policy_in_force"):
        return

    def refused() -> bool:
        done = plane.kubectl("label", "node", node, "example.com/policy-probe=1", "--overwrite", "--dry-run=server",
                             kubeconfig=kubeconfig, check=False)  # fmt: skip
        return done.returncode != 0 and "may change only the label and annotation keys it owns" in done.stderr

    deadline = time.monotonic() + POLICY_IN_FORCE_S
    while not refused():
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"the agent's admission policy was not in force {POLICY_IN_FORCE_S:g} s after it was applied"
            )
        time.sleep(0.2)
    plane.__dict__["_agent_policy_in_force"] = True


def placement_kubeconfig(plane: ControlPlane, pod_name: str, path: Path, *, node: str) -> Path:
    """The placement service's credentials: its ServiceAccount's token bound to its Deployment pod
    ``pod_name`` on ``node`` (the pod-bound token lets it label only its own pod as leader)."""
    install(plane, PLACEMENT_MANIFESTS)
    pod = template_pod(REPO / "deploy" / "placement" / "02-deployment.yaml", pod_name, node)
    ensure_object(plane, "/api/v1/namespaces/kubenexus-system/pods", pod)
    return plane.service_account_kubeconfig(path, "kubenexus-system", "kubenexus-placement", bound_pod=pod_name)
