"""Kueue on the real control plane, installed from its own Helm chart as an administrator installs it
(tests/cluster/test_cluster_kueue.py, docs/kueue.md).

Kueue's controller is built from the Go module proxy at the pinned release (tools/kueue.py). Its chart (from the
same module) is rendered with Helm's own Go code and applied whole: the CRDs, Kueue's ServiceAccount and RBAC,
the webhook configurations, the Secret its certificates go in. What differs from a cluster, and only that:

* The controller runs as a process here, not as the chart's Deployment, with the chart's own configuration
  (``managerConfig``), changed for this machine: the ports it listens on (free ones), the folder its certificates
  are written to, its Lease's namespace (in a pod, read from the ServiceAccount's namespace file), and the
  frameworks it manages (the ones these tests create: ``batch/job`` and ``pod``).
* The webhook Service is an ``ExternalName`` Service naming ``localhost``, at the webhook's port: the API server
  resolves a webhook's Service to ``https://<externalName>:<port>`` (k8s.io/apiserver pkg/util/proxy
  ``ResolveCluster``) and checks the certificate against ``<service>.<namespace>.svc`` as in a cluster
  (pkg/util/webhook/client.go), so Kueue's own certificate management (``internalCertManagement``, the chart's
  default) makes, rotates and injects the CA exactly as in a cluster. The webhook configurations and the CRDs'
  conversion webhooks name that port instead of the Service's 443.
* The Secret Kueue writes its certificate into is mirrored into the certificate folder as the kubelet mounts a
  Secret volume (``SecretVolume``): Kueue's certificate rotator waits for the files to appear there
  (open-policy-agent/cert-controller ``ensureCertsMounted``) before it serves.
* The visibility API (an aggregated API server) is off (``VisibilityOnDemand=false``): there is no pod network
  to route an APIService to, and an unavailable APIService would break every client's discovery.

The webhook configurations have ``failurePolicy: Fail`` for every pod in every namespace but kube-system and
kueue-system: ``uninstall`` removes them (and the Service) before the controller stops, so the tests after these
create pods as before.
"""

from __future__ import annotations

import base64
import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from helm_python.chart import Chart

from kubenexus.kube.client import Json
from kubenexus.kube.errors import ApiError
from tests.conftest import wait_until
from tests.control_plane import ControlPlane, Process, free_port
from tools.kueue import KUEUE_VERSION, PROGRAMS, chart_dir

KUEUE_NAMESPACE = "kueue-system"
KUEUE_ACCOUNT = "kueue-controller-manager"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"  # the chart's internalCertManagement.webhookSecretName
FRAMEWORKS = ("batch/job", "pod")
# What the chart renders that a process on this machine does not use: the Deployment (the process runs
# instead) and the aggregated visibility API (off, see the module docstring).
_NOT_APPLIED = {"Deployment", "APIService"}
_VISIBILITY_SERVICE = "kueue-visibility-server"
_START_S = 180.0  # a deadline for a cold start on a loaded machine, never a wait
_SECRET_RESYNC_S = 0.5

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"


def chart_objects(values: Mapping[str, Any] | None = None) -> list[Json]:
    """Kueue's chart at the pinned release, rendered as ``helm template kueue -n kueue-system`` renders it."""
    rendered = Chart.load(chart_dir()).render(dict(values or {}), name="kueue", namespace=KUEUE_NAMESPACE)
    return [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]


def manager_configuration(objects: list[Json]) -> Json:
    """The controller's configuration as the chart ships it (the ``kueue-manager-config`` ConfigMap)."""
    (config_map,) = [obj for obj in objects if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].endswith(
        "manager-config")]  # fmt: skip
    document: Json = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    return document


def for_this_machine(shipped: Json, *, folder: Path, webhook_port: int, extra: Mapping[str, Any]) -> Json:
    """The shipped configuration with this machine's ports, certificate folder and Lease namespace, the frameworks
    the tests use, and ``extra`` (what a test's administrator would add: DRA device classes, waitForPodsReady, ...)."""
    config = copy.deepcopy(shipped)
    config["health"]["healthProbeBindAddress"] = f"127.0.0.1:{free_port()}"
    config["metrics"]["bindAddress"] = f"127.0.0.1:{free_port()}"
    config["webhook"] = {"port": webhook_port, "certDir": str(folder / "webhook-certs")}
    config["integrations"]["frameworks"] = list(FRAMEWORKS)
    # In a pod, the Lease's namespace is read from the ServiceAccount's mounted namespace file.
    config["leaderElection"]["resourceNamespace"] = KUEUE_NAMESPACE
    config.update(copy.deepcopy(dict(extra)))
    return config


def _with_webhook_port(obj: Json, port: int) -> Json:
    """``obj`` with every webhook clientConfig naming Kueue's Service at ``port``; the webhook Service an
    ExternalName for localhost."""
    obj = copy.deepcopy(obj)
    if obj["kind"] == "Service" and obj["metadata"]["name"] == WEBHOOK_SERVICE:
        obj["spec"] = {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]}
    for webhook in obj.get("webhooks") or ():
        webhook["clientConfig"]["service"]["port"] = port
    conversion = (obj.get("spec") or {}).get("conversion") or {}
    if obj["kind"] == "CustomResourceDefinition" and conversion.get("strategy") == "Webhook":
        conversion["webhook"]["clientConfig"]["service"]["port"] = port
    return obj


class SecretVolume:
    """A Secret's keys kept as files in a folder while it runs, as the kubelet keeps a Secret volume: each key a
    file, rewritten when the Secret changes (by renaming a complete file into place, never half-written)."""

    def __init__(self, plane: ControlPlane, namespace: str, name: str, folder: Path) -> None:
        self._path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        self._plane, self._folder = plane, folder
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"secret-volume-{name}", daemon=True)

    def start(self) -> None:
        self._folder.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        written: dict[str, bytes] = {}
        while True:
            if self._stop.wait(_SECRET_RESYNC_S):  # a pace: the kubelet re-reads a Secret volume's source
                return
            try:
                secret = self._plane.admin.get(self._path) or {}
            except ApiError:
                continue  # the API server restarting: the kubelet retries too
            for key, encoded in (secret.get("data") or {}).items():
                content = base64.b64decode(encoded)
                if written.get(key) != content:
                    staged = self._folder / f".{key}.new"
                    staged.write_bytes(content)
                    staged.replace(self._folder / key)
                    written[key] = content


@dataclass
class Kueue:
    process: Process
    config: Path
    objects: list[Json]
    certificates: SecretVolume

    def tail(self) -> str:
        return self.process.tail()


def install(plane: ControlPlane, folder: Path, *, extra_config: Mapping[str, Any] | None = None) -> Kueue:
    """Kueue's chart applied (but its Deployment), and its controller started as its ServiceAccount; returns
    once its webhooks answer (a LocalQueue dry run is admitted through them)."""
    binary = PROGRAMS.build() / "kueue"
    webhook_port = free_port()
    rendered = chart_objects()
    objects = [
        _with_webhook_port(obj, webhook_port)
        for obj in rendered
        if obj["kind"] not in _NOT_APPLIED and obj["metadata"]["name"] != _VISIBILITY_SERVICE
    ]
    plane.kubectl("create", "namespace", KUEUE_NAMESPACE, check=False)
    plane.apply_objects([obj for obj in objects if obj["kind"] == "CustomResourceDefinition"])
    plane.wait_for_crds()
    plane.apply_objects([obj for obj in objects if obj["kind"] != "CustomResourceDefinition"])
    config = for_this_machine(manager_configuration(rendered), folder=folder, webhook_port=webhook_port,
                              extra=extra_config or {})  # fmt: skip
    path = folder / "kueue-config.yaml"
    path.write_text(yaml.safe_dump(config))
    kubeconfig = plane.service_account_kubeconfig(folder / "kueue.kubeconfig", KUEUE_NAMESPACE, KUEUE_ACCOUNT)
    certificates = SecretVolume(plane, KUEUE_NAMESPACE, WEBHOOK_SECRET, Path(config["webhook"]["certDir"]))
    certificates.start()
    process = plane.start_process("kueue", [
        str(binary), f"--config={path}", f"--kubeconfig={kubeconfig}", "--feature-gates=VisibilityOnDemand=false",
        "--zap-log-level=2",
    ])  # fmt: skip
    kueue = Kueue(process, path, objects, certificates)
    # A ResourceFlavor goes through Kueue's mutating and validating webhooks (a LocalQueue through none).
    probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "kueue-probe"}}

    def admitted_by_its_webhook() -> bool:
        assert process.running(), f"Kueue {KUEUE_VERSION} exited:\n{process.tail()}"
        try:
            plane.admin.create(f"{KUEUE_API}/resourceflavors", probe)
        except ApiError:
            return False
        plane.delete(f"{KUEUE_API}/resourceflavors/kueue-probe")
        return True

    wait_until(admitted_by_its_webhook, timeout_s=_START_S, what=f"Kueue {KUEUE_VERSION}'s webhooks to answer")
    return kueue


def uninstall(plane: ControlPlane, kueue: Kueue) -> None:
    """The webhook configurations and the webhook Service removed, then the controller stopped; the CRDs stay
    (objects of them are the tests' to delete)."""
    for obj in kueue.objects:
        if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            plane.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False)
    plane.kubectl("delete", "service", WEBHOOK_SERVICE, "-n", KUEUE_NAMESPACE, "--ignore-not-found", check=False)
    kueue.process.stop()
    kueue.certificates.stop()
