"""kubenexus-scheduler in plugin mode on the real control plane, as the chart runs it, for the test modules that
need it (tests/cluster/test_cluster_plugin.py, tests/cluster/test_cluster_kueue.py): kube-scheduler v1.37.2 with the
KubeNexus framework plugin (built from scheduler/ by tools/kubenexus_scheduler.py) running the shipped
deploy/scheduler/kubenexus-scheduler-config.yaml, changed only where a test machine differs from a cluster (its
kubeconfig, the service's address, the TLS files), as the ServiceAccount and RBAC the chart gives it; the plugin
calls ``serve`` over mutual-TLS gRPC as the writer identity; the service runs as the kubenexus-placement
ServiceAccount with deploy/placement's RBAC.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from kubenexus.kube.client import Json
from placement.shim.client import PlacementClient
from tests import REPO
from tests.cluster_kube_scheduler import KUBE_SCHEDULER_ACCOUNT, SYSTEM, kube_scheduler_identity, start_scheduler
from tests.cluster_scene import SCHEDULER, serve_tls_args, shim_tls
from tests.control_plane import PLACEMENT_MANIFESTS, ControlPlane, Process, install, placement_kubeconfig
from tests.programs import Service
from tools.kubenexus_scheduler import PROGRAMS

SHIPPED_CONFIG = REPO / "deploy" / "scheduler" / "kubenexus-scheduler-config.yaml"


def shipped_config() -> Json:
    document: Json = yaml.safe_load(SHIPPED_CONFIG.read_text())
    return document


def plugin_args(config: Json, profile: int = 0) -> Json:
    (plugin_config,) = config["profiles"][profile]["pluginConfig"]
    args: Json = plugin_config["args"]
    return args


def for_this_machine(shipped: Json, *, kubeconfig: Path, address: str, certificates: Path) -> Json:
    """``shipped`` with kube-scheduler's ServiceAccount kubeconfig (in a cluster: in-cluster credentials), the
    service on 127.0.0.1 (in a cluster: the leader Service) and the TLS files here (in a cluster: the Secret's)."""
    config = copy.deepcopy(shipped)
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    plugin_args(config).update({
        "address": address, "caFile": str(certificates / "ca.crt"),
        "certFile": str(certificates / f"{SCHEDULER}.crt"), "keyFile": str(certificates / f"{SCHEDULER}.key"),
    })  # fmt: skip
    return config


@dataclass
class Plugged:
    plane: ControlPlane
    service: Service
    scheduler: Process
    config: Path
    client: PlacementClient
    folder: Path
    kubeconfig: Path
    binary: Path
    certificates: Path


@contextlib.contextmanager
def plugged_scheduler(
    control_plane: ControlPlane, certificates: Path, folder: Path, *, placement_pod: str
) -> Iterator[Plugged]:
    """The service (its pod ``placement_pod``'s identity) and kubenexus-scheduler asking it, until the block ends;
    ``tools.kubenexus_scheduler.BuildError`` when the binary cannot be built. The service's log must hold no
    traceback."""
    binary = PROGRAMS.build() / "kubenexus-scheduler"
    install(control_plane, PLACEMENT_MANIFESTS)
    control_plane.apply_objects(kube_scheduler_identity(mode="plugin"))
    placement = placement_kubeconfig(control_plane, placement_pod, folder / "placement.kubeconfig",
                                     node=f"{placement_pod}-system")  # fmt: skip
    service = Service(placement, *serve_tls_args(certificates))
    client = PlacementClient.connect(service.address, deadline_s=30, tls=shim_tls(certificates))
    scheduler: Process | None = None
    try:
        service.wait_ready()
        kubeconfig = control_plane.service_account_kubeconfig(folder / "kube-scheduler.kubeconfig", SYSTEM,
                                                              KUBE_SCHEDULER_ACCOUNT)  # fmt: skip
        config = for_this_machine(shipped_config(), kubeconfig=kubeconfig, address=service.address,
                                  certificates=certificates)  # fmt: skip
        path = folder / "kubenexus-scheduler.yaml"
        scheduler = start_scheduler(control_plane, config, path, binary=binary)
        yield Plugged(control_plane, service, scheduler, path, client, folder, kubeconfig, binary, certificates)
    finally:
        if scheduler is not None:
            scheduler.stop()
        client.close()
        service.stop()
    assert "Traceback" not in service.text(), service.text()[-3000:]
