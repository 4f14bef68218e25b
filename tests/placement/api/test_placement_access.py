"""Who may call the placement API: mutual TLS identities, per-method rules, reservation owners.

Real certificates (tests/conftest.py ``certificates``), a real gRPC server on 127.0.0.1 and real clients.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
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
from tests.machines.node_topologies import cpu_node, kubelet, nvswitch_node

WRITERS = frozenset({"kubenexus-scheduler", "other-writer"})


def _pod(name: str, gpus: int = 4) -> pb.Pod:
    resources = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": str(gpus)}
    container = pb.Container(name="main", requests=resources, limits=resources)
    return pb.Pod(namespace="ml", name=name, containers=[container])


@pytest.fixture
def server(certificates: Path) -> Iterator[RunningServer]:
    index = ClusterIndex()
    index.upsert_topology("h100", nvswitch_node(cells=2, settings=kubelet("single-numa-node", "pod")))
    index.upsert_topology("cpu", cpu_node(cpus_per_cell=16, settings=kubelet("single-numa-node", "pod")))
    tls = TlsFiles(cert=certificates / "server.crt", key=certificates / "server.key", client_ca=certificates / "ca.crt")
    options = ServerOptions(listen="127.0.0.1:0", tls=tls, writers=WRITERS, admins=frozenset({"admin"}), grace_s=0.5)
    running = RunningServer(PlacementEngine.over(index), options)
    try:
        yield running
    finally:
        running.close()


def _stub(server: RunningServer, certificates: Path, who: str) -> Any:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(certificates / "ca.crt").read_bytes(),
        private_key=(certificates / f"{who}.key").read_bytes(),
        certificate_chain=(certificates / f"{who}.crt").read_bytes(),
    )
    return placement_pb2_grpc.PlacementStub(grpc.secure_channel(server.address, credentials))


def _refused(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    return error.code(), error.details()


def test_any_authenticated_client_reads_but_only_writers_reserve(server: RunningServer, certificates: Path) -> None:
    reader = _stub(server, certificates, "reader")
    assert [n.name for n in reader.ListNodes(pb.ListNodesRequest(), timeout=10).nodes] == ["cpu", "h100"]
    assert list(reader.Filter(pb.FilterRequest(pod=_pod("p")), timeout=10).feasible_nodes) == ["h100"]
    for call in (
        lambda: reader.Reserve(pb.ReserveRequest(pod=_pod("p")), timeout=10),
        lambda: reader.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="p")), timeout=10),
        lambda: reader.PlaceGang(pb.PlaceGangRequest(group=pb.PodGroup(name="g", members=[_pod("p")])), timeout=10),
        # Preempt holds nodes for the preemptor: a write, though it evicts nothing itself.
        lambda: reader.Preempt(pb.PreemptRequest(pod=_pod("p", gpus=16)), timeout=10),
    ):
        code, message = _refused(call)
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert "'reader'" in message
    writer = _stub(server, certificates, "kubenexus-scheduler")
    assert writer.Reserve(pb.ReserveRequest(pod=_pod("p")), timeout=10).reserved
    # A writer is answered (no victims: nothing of lower priority runs), not refused.
    assert not writer.Preempt(pb.PreemptRequest(pod=_pod("q", gpus=16)), timeout=10).preempted


def test_a_reservation_is_released_only_by_its_owner_or_an_admin(server: RunningServer, certificates: Path) -> None:
    """The squat the issue found: pod A got GPUs 0-3, another client unreserved it, pod B got GPUs 0-3."""
    scheduler = _stub(server, certificates, "kubenexus-scheduler")
    other = _stub(server, certificates, "other-writer")
    first = scheduler.Reserve(pb.ReserveRequest(pod=_pod("a")), timeout=10)
    assert first.reserved
    theirs = pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="a"))
    code, message = _refused(lambda: other.Unreserve(theirs, timeout=10))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "another client" in message
    second = other.Reserve(pb.ReserveRequest(pod=_pod("b")), timeout=10)
    assert second.reserved
    assert set(second.placement.gpu_ids).isdisjoint(first.placement.gpu_ids), "pod a's GPUs were handed out again"
    assert other.Unreserve(pb.UnreserveRequest(pod=pb.PodRef(namespace="ml", name="b")), timeout=10).released
    admin = _stub(server, certificates, "admin")
    assert admin.Unreserve(theirs, timeout=10).released


@pytest.mark.parametrize(
    ("subject", "refusal"),
    [
        ("/CN=reader/CN=kubenexus-scheduler", "names several identities (Subject CN): 'reader', 'kubenexus-scheduler'"),
        ("/O=kubenexus", "names no identity (Subject CN)"),
    ],
)
def test_a_certificate_naming_several_identities_or_none_is_refused(
    server: RunningServer, certificates: Path, tmp_path: Path, subject: str, refusal: str
) -> None:
    """Which CN would it be? The first one won silently before: a certificate for reader and for the writer
    reserved. Refused now, reads and writes alike; so is one without a CN."""
    key, request, cert = (tmp_path / f"odd.{ext}" for ext in ("key", "csr", "crt"))
    (tmp_path / "ext").write_text("extendedKeyUsage=clientAuth\n")
    for args in (
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", str(key), "-out", str(request)],
        ["x509", "-req", "-in", str(request), "-CA", str(certificates / "ca.crt"), "-CAkey",
         str(certificates / "ca.key"), "-CAcreateserial", "-days", "1", "-extfile", str(tmp_path / "ext"),
         "-out", str(cert)],
    ):  # fmt: skip
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=(certificates / "ca.crt").read_bytes(),
        private_key=key.read_bytes(),
        certificate_chain=cert.read_bytes(),
    )
    stub = placement_pb2_grpc.PlacementStub(grpc.secure_channel(server.address, credentials))
    for call in (
        lambda: stub.ListNodes(pb.ListNodesRequest(), timeout=10),
        lambda: stub.Reserve(pb.ReserveRequest(pod=_pod("p")), timeout=10),
    ):
        code, message = _refused(call)
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert refusal in message


def test_a_client_without_a_certificate_cannot_connect(server: RunningServer, certificates: Path) -> None:
    anonymous = grpc.ssl_channel_credentials(root_certificates=(certificates / "ca.crt").read_bytes())
    stub = placement_pb2_grpc.PlacementStub(grpc.secure_channel(server.address, anonymous))
    code, _ = _refused(lambda: stub.ListNodes(pb.ListNodesRequest(), timeout=10))
    assert code == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("listen", ["0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.7:50051", "placement:50051"])
def test_plaintext_is_refused_beyond_loopback(listen: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="without client authentication"):
        ServerOptions(listen=listen)
    server_only = TlsFiles(cert=tmp_path / "server.crt", key=tmp_path / "server.key")
    with pytest.raises(ValueError, match="without client authentication"):
        ServerOptions(listen=listen, tls=server_only)
    assert ServerOptions(listen=listen, insecure=True).access.authenticate is False
    mutual = TlsFiles(cert=tmp_path / "server.crt", key=tmp_path / "server.key", client_ca=tmp_path / "ca.crt")
    assert ServerOptions(listen=listen, tls=mutual).access.authenticate is True


@pytest.mark.parametrize("listen", ["127.0.0.1:50051", "[::1]:50051", "localhost:50051", "unix:/tmp/placement.sock"])
def test_loopback_plaintext_is_development_mode(listen: str) -> None:
    assert ServerOptions(listen=listen).access.authenticate is False


def test_the_cli_refuses_an_open_address_in_one_sentence() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "placement.main", "serve", "--listen", "0.0.0.0:0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith("kubenexus-placement: refusing to serve 0.0.0.0:0 without client")
    assert "Traceback" not in done.stderr


def test_a_refused_call_is_one_log_line_without_a_traceback(
    server: RunningServer, certificates: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reader = _stub(server, certificates, "reader")
    with caplog.at_level(logging.INFO, logger="kubenexus.placement.server"):
        code, _ = _refused(lambda: reader.Reserve(pb.ReserveRequest(pod=_pod("p")), timeout=10))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    (record,) = [r for r in caplog.records if r.getMessage() == "refused a call"]
    assert (record.levelno, record.exc_info) == (logging.INFO, None)
    assert vars(record)["code"] == "PERMISSION_DENIED"
    assert vars(record)["method"] == "Reserve"
