"""The service's TLS files read again when they change (``placement.api.certificates``): a real gRPC server,
its files replaced under it as the kubelet replaces a renewed Secret's, real clients before and after."""

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
from placement.state.cluster_index import ClusterIndex
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import cpu_node
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
        assert certificates.reloads == 1
        # A key that is not the certificate's (a renewal caught half written): the served pair stays.
        caplog.set_level(logging.WARNING, logger="kubenexus.placement.certificates")
        shutil.copyfile(first / "server.key", live / "server.key")
        assert _lists(_stub(server, second))
        assert certificates.reloads == 1
        assert "TLS files changed but do not load; serving the previous ones" in caplog.messages
    finally:
        server.close()
