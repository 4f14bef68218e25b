"""docs/deploy.md's manual certificate route, run as written: its openssl commands make a CA and four
certificates, and each must verify for what the deployment uses it for (server or client, the names its
clients dial, the identity the service authorises) and for nothing else. Its Secret commands must make
the same Secrets as deploy/placement/cert-manager/certificates.yaml, from files the openssl commands wrote. Last,
the real gRPC server with the Deployment's TLS and identity flags, called by the shims' real client as
the extender and the binder dial it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import pytest
import yaml

from placement.api.server import ServerOptions, TlsFiles
from placement.main import build_parser
from placement.service.engine import PlacementEngine
from placement.shim.client import PlacementClient, ServiceError
from placement.state.cluster_index import ClusterIndex
from tests import REPO
from tests.deploy.test_shim_deploy import binder_container
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import kubelet, nvswitch_node

ROOT = REPO
DOC = ROOT / "docs" / "deploy.md"
DEPLOY = ROOT / "deploy"


def _blocks_after(marker: str) -> list[str]:
    text = DOC.read_text()
    return re.findall(r"```sh\n(.*?)```", text[text.index(marker) :], flags=re.DOTALL)


def _yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


@pytest.fixture(scope="module")
def made_by_hand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None or shutil.which("bash") is None:
        pytest.skip("the manual route needs openssl and bash, and this machine lacks one")
    folder = tmp_path_factory.mktemp("tls-by-hand")
    script = _blocks_after("**Route B, by hand.**")[0]
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=folder, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return folder


def _verifies(folder: Path, certificate: str, purpose: str, *check: str) -> bool:
    result = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.crt", "-purpose", purpose, *check, f"{certificate}.crt"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.returncode == 0


def _common_name(folder: Path, certificate: str) -> str:
    subject = subprocess.run(
        ["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", f"{certificate}.crt"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    match = re.search(r"CN=([^,\n]+)", subject)
    assert match is not None, subject
    return match.group(1)


def _service_names() -> list[str]:
    names = []
    for service in _yaml(DEPLOY / "placement" / "03-service.yaml"):
        name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
        names += [name, f"{name}.{namespace}", f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]
    return names


def test_the_service_certificate_serves_every_name_its_clients_dial(made_by_hand: Path) -> None:
    for name in _service_names():
        assert _verifies(made_by_hand, "server", "sslserver", "-verify_hostname", name), name
    assert _verifies(made_by_hand, "server", "sslserver", "-verify_ip", "127.0.0.1")  # the extender beside it
    assert not _verifies(made_by_hand, "server", "sslserver", "-verify_hostname", "kubenexus-placement.default.svc")
    assert not _verifies(made_by_hand, "server", "sslclient")  # a server key cannot pose as a client


def test_the_extender_certificate_serves_the_name_kube_scheduler_dials(made_by_hand: Path) -> None:
    (config,) = _yaml(DEPLOY / "scheduler" / "kube-scheduler-config.yaml")
    host = urlsplit(config["extenders"][0]["urlPrefix"]).hostname
    assert host is not None
    assert _verifies(made_by_hand, "extender", "sslserver", "-verify_hostname", host)
    assert not _verifies(made_by_hand, "extender", "sslclient")


def test_the_client_certificates_carry_the_identities_the_deployment_expects(made_by_hand: Path) -> None:
    (deployment,) = [d for d in _yaml(DEPLOY / "placement" / "02-deployment.yaml") if d["kind"] == "Deployment"]
    (serve,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "placement"]
    writers = [arg.partition("=")[2] for arg in serve["args"] if arg.startswith("--writer-identity=")]
    for client in ("scheduler-client", "kube-scheduler-client"):
        assert _verifies(made_by_hand, client, "sslclient")
        assert not _verifies(made_by_hand, client, "sslserver")
    assert [_common_name(made_by_hand, "scheduler-client")] == writers
    assert _common_name(made_by_hand, "kube-scheduler-client") not in writers


def test_both_routes_make_the_same_secrets_from_files_the_commands_wrote(made_by_hand: Path) -> None:
    secrets_block = _blocks_after("Then the Secrets")[0]
    pairs = re.findall(r"([a-z-]+):([a-z-]+)", secrets_block.split("; do")[0])
    assert "kubenexus-${pair%%:*}-tls" in secrets_block
    by_hand = {f"kubenexus-{secret}-tls": made_by_hand / f"{files}.crt" for secret, files in pairs}
    cert_manager = {
        d["spec"]["secretName"]
        for d in _yaml(DEPLOY / "placement" / "cert-manager" / "certificates.yaml")
        if d["kind"] == "Certificate" and not d["spec"].get("isCA")
    }
    assert set(by_hand) == cert_manager
    for certificate in by_hand.values():
        assert certificate.is_file()
        assert certificate.with_suffix(".key").is_file()


def _container_args(name: str) -> list[str]:
    (deployment,) = [d for d in _yaml(DEPLOY / "placement" / "02-deployment.yaml") if d["kind"] == "Deployment"]
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    args: list[str] = container["args"]
    return args


def _client(folder: Path, who: str, address: str, dialled: str) -> PlacementClient:
    """The shims' client as the Deployment configures it (CA, certificate, key), dialling ``dialled``."""
    credentials = grpc.ssl_channel_credentials(
        (folder / "ca.crt").read_bytes(), (folder / f"{who}.key").read_bytes(), (folder / f"{who}.crt").read_bytes()
    )
    options = [] if dialled == address else [("grpc.ssl_target_name_override", dialled)]
    return PlacementClient(grpc.secure_channel(address, credentials, options=options), deadline_s=10)


def _pod(name: str) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}
    return {
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}]},
    }


def test_the_real_service_admits_the_shims_and_refuses_kube_schedulers_writes(made_by_hand: Path) -> None:
    serve = build_parser().parse_args(_container_args("placement"))
    index = ClusterIndex()
    index.upsert_topology("h100", nvswitch_node(cells=2, settings=kubelet("single-numa-node", "pod")))
    tls = TlsFiles(cert=made_by_hand / "server.crt", key=made_by_hand / "server.key", client_ca=made_by_hand / "ca.crt")
    options = ServerOptions(
        listen="127.0.0.1:0", tls=tls, writers=frozenset(serve.writer_identity), admins=frozenset(), grace_s=0.5
    )
    server = RunningServer(PlacementEngine.over(index), options)
    try:
        binder_dials = build_parser().parse_args(binder_container()["args"]).service.rpartition(":")[0]
        extender_dials = build_parser().parse_args(_container_args("extender")).service.rpartition(":")[0]
        as_binder = _client(made_by_hand, "scheduler-client", server.address, binder_dials)
        assert as_binder.reserve(_pod("a"), ["h100"]).reserved
        as_extender = _client(made_by_hand, "scheduler-client", server.address, extender_dials)
        assert as_extender.reserve(_pod("b"), ["h100"]).reserved
        kube_scheduler = _client(made_by_hand, "kube-scheduler-client", server.address, binder_dials)
        assert list(kube_scheduler.filter(_pod("c"), ["h100"]).feasible_nodes) == ["h100"]  # reads are open
        with pytest.raises(ServiceError) as refused:
            kube_scheduler.reserve(_pod("c"), ["h100"])
        assert refused.value.code == "PERMISSION_DENIED"
        for client in (as_binder, as_extender, kube_scheduler):
            client.close()
    finally:
        server.close()
