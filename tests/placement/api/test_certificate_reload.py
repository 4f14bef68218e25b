"""TLS files read again when they change: the service's (``placement.api.certificates``), a real gRPC server
whose files are replaced under it as the kubelet replaces a renewed Secret's, real clients before and after;
and the shims' client certificate (``placement.shim.client``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import grpc
import pytest

from placement.api.server import ServerOptions, TlsFiles
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.service.engine import PlacementEngine
from placement.shim import client as client_module
from placement.shim.client import PlacementClient
from placement.shim.client import TlsFiles as ClientTls
from placement.state.cluster_index import ClusterIndex
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import cpu_node
from tests.shim_cluster import pod_object
from tools.throwaway_certificates import make_certificates


def _issued(folder: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all new."""
    folder.mkdir()
    make_certificates(folder, ["client"])
    return folder


def _install(issued: Path, live: Path) -> None:
    for name in ("server.crt", "server.key", "ca.crt"):
        shutil.copyfile(issued / name, live / name)


def _stub(server: RunningServer, issued: Path) -> Any:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(issued / "ca.crt").read_bytes(),
        private_key=(issued / "client.key").read_bytes(),
        certificate_chain=(issued / "client.crt").read_bytes(),
    )
    return placement_pb2_grpc.PlacementStub(grpc.secure_channel(server.address, credentials))


def _lists(stub: Any) -> bool:
    try:
        stub.ListNodes(pb.ListNodesRequest(), timeout=30)
    except grpc.RpcError:
        return False
    return True


def test_replaced_files_are_served_to_new_connections_and_open_ones_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Everything replaced at once (a new CA too, the hardest renewal): a client of the new CA connects, the
    connection opened before goes on with the old certificate, a new client of the old CA is refused."""
    first, second, live = _issued(tmp_path / "first"), _issued(tmp_path / "second"), tmp_path / "live"
    live.mkdir()
    _install(first, live)
    index = ClusterIndex()
    index.upsert_topology("cpu", cpu_node())
    tls = TlsFiles(cert=live / "server.crt", key=live / "server.key", client_ca=live / "ca.crt")
    server = RunningServer(PlacementEngine.over(index), ServerOptions(listen="127.0.0.1:0", tls=tls, grace_s=0.5))
    try:
        before = _stub(server, first)
        assert _lists(before)
        _install(second, live)
        assert _lists(_stub(server, second))
        assert _lists(before)  # its connection was made with the old certificate and stays
        assert not _lists(_stub(server, first))
        certificates = server.server.certificates
        assert certificates is not None
        assert certificates.files.reloads == 1
        # A key that is not the certificate's (a renewal caught half written): the served pair stays.
        caplog.set_level(logging.WARNING, logger="kubenexus.placement.certificates")
        shutil.copyfile(first / "server.key", live / "server.key")
        assert _lists(_stub(server, second))
        assert certificates.files.reloads == 1
        assert "TLS files changed but do not load; keeping the previous ones" in caplog.messages
    finally:
        server.close()


def test_a_client_reconnects_with_its_renewed_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shims' client (``PlacementClient``): its files replaced, the service restarted with the new CA (so
    every connection is opened again): its next calls go out on new channels with the new certificate."""
    monkeypatch.setattr(client_module, "CERTIFICATE_CHECK_S", 0.0)
    first, second = _issued(tmp_path / "first"), _issued(tmp_path / "second")
    serving, holding = tmp_path / "serving", tmp_path / "holding"
    for folder in (serving, holding):
        folder.mkdir()
    _install(first, serving)

    def hold(issued: Path) -> None:
        for name in ("ca.crt", "client.crt", "client.key"):
            shutil.copyfile(issued / name, holding / name)

    hold(first)
    index = ClusterIndex()
    index.upsert_topology("cpu", cpu_node())
    tls = TlsFiles(cert=serving / "server.crt", key=serving / "server.key", client_ca=serving / "ca.crt")
    server = RunningServer(PlacementEngine.over(index), ServerOptions(listen="127.0.0.1:0", tls=tls, grace_s=0.5))
    files = ClientTls(ca=holding / "ca.crt", cert=holding / "client.crt", key=holding / "client.key")
    client = PlacementClient.connect(server.address, tls=files, deadline_s=30)
    try:
        assert client.filter(pod_object("a"), ["cpu"]).feasible_nodes
        address = server.address
        server.close()
        _install(second, serving)
        hold(second)
        server = RunningServer(PlacementEngine.over(index), ServerOptions(listen=address, tls=tls, grace_s=0.5))
        assert client.filter(pod_object("b"), ["cpu"]).feasible_nodes
        assert client.reconnections == 1
    finally:
        client.close()
        server.close()
