"""Reads spread over the replicas, decisions to the leader (``placement.shim.client``, docs/scheduler.md).

Real gRPC servers on 127.0.0.1, each with its own engine; the client as the extender builds it. What each
replica answered is read from its own Prometheus metrics, as an operator would read it. The headless
Service's DNS name is stood in for by an ``ipv4:`` target listing the replicas' ports: both hand gRPC's
``round_robin`` policy several addresses for one name (a real cluster DNS cannot run here).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from placement.api.interceptor import SERVICE_NAME
from placement.api.server import ServerOptions, TlsFiles
from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import LEADER_LABEL
from placement.main import build_parser
from placement.service.engine import PlacementEngine
from placement.shim.client import PlacementClient, ServiceError, check_read_target
from placement.shim.client import TlsFiles as ClientTls
from placement.shim.commands import run_extender
from placement.state.cluster_index import ClusterIndex
from tests.deploy.test_shim_deploy import certificates as cert_manager_certificates
from tests.deploy.test_shim_deploy import one, parsed, ports, service_dns_names
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import nvswitch_node
from tests.shim_cluster import pod_object

NODES = ["h100-a", "h100-b"]
_CALLS = "kubenexus_placement_rpc_duration_seconds_count"


class Cache:
    """A replica's cache verdict, flipped by the test (as a broken watch flips the feed's)."""

    def __init__(self) -> None:
        self.synced = True

    def __call__(self) -> bool:
        return self.synced


def _replica(cache: Cache | None = None, options: ServerOptions | None = None) -> RunningServer:
    index = ClusterIndex()
    for name in NODES:
        index.upsert_topology(name, nvswitch_node())
    engine = PlacementEngine.over(index, synced=cache or Cache())
    return RunningServer(engine, options)


def _answered(replica: RunningServer, method: str) -> int:
    """Calls of ``method`` the replica answered OK, from its metrics."""
    value = replica.server.metrics.registry.get_sample_value(_CALLS, {"method": method, "code": "OK"})
    return int(value or 0)


def _spread_over(*replicas: RunningServer) -> str:
    return "ipv4:" + ",".join(replica.address for replica in replicas)


@pytest.fixture
def replicas() -> Iterator[list[RunningServer]]:
    running = [_replica() for _ in range(3)]
    try:
        yield running
    finally:
        for replica in running:
            replica.close()


def test_reads_reach_every_replica_and_decisions_only_the_leader(replicas: list[RunningServer]) -> None:
    leader = replicas[0]
    client = PlacementClient.connect(leader.address, read_address=_spread_over(*replicas))
    pod = pod_object("trainer", gpus=2)
    try:
        # The channel connects to each replica in turn; until it has, round robin uses those it has.
        for _ in range(100):
            if all(_answered(replica, "Filter") for replica in replicas):
                break
            client.filter(pod, NODES)
        before = [_answered(replica, "Filter") for replica in replicas]
        for _ in range(30):
            assert set(client.filter(pod, NODES).feasible_nodes) == set(NODES)
            assert len(client.score(pod, NODES).nodes) == len(NODES)
        victims = client.check_eviction(pod, [pb.EvictionCandidate(node="h100-a", victim_uids=["uid-gone"])])
        assert [verdict.node for verdict in victims.verdicts] == ["h100-a"]
        assert client.reserve(pod, NODES).reserved
        assert client.unreserve("default", "trainer")
    finally:
        client.close()
    spread = [_answered(replica, "Filter") - earlier for replica, earlier in zip(replicas, before, strict=True)]
    assert sum(spread) == 30
    assert all(5 <= share <= 15 for share in spread), f"30 reads not spread over 3 replicas: {spread}"
    assert all(_answered(replica, "Score") for replica in replicas)
    # Read-only, but followed by evictions: asked of the leader, whose view is the freshest.
    assert [_answered(replica, "CheckEviction") for replica in replicas] == [1, 0, 0]
    assert [_answered(replica, "Reserve") for replica in replicas] == [1, 0, 0]
    assert [_answered(replica, "Unreserve") for replica in replicas] == [1, 0, 0]


def test_without_a_read_address_every_call_goes_to_the_decision_address(replicas: list[RunningServer]) -> None:
    leader = replicas[0]
    unset = build_parser().parse_args(["extender"]).read_service  # the extender without --read-service
    client = PlacementClient.connect(leader.address, read_address=unset)
    try:
        for _ in range(4):
            client.filter(pod_object("trainer", gpus=2), NODES)
    finally:
        client.close()
    assert [_answered(replica, "Filter") for replica in replicas] == [4, 0, 0]


def test_a_replica_whose_cache_is_not_synced_gets_no_reads() -> None:
    """Its health check says NOT_SERVING (as its /readyz takes it out of the headless Service's DNS, which a
    channel already connected does not re-read): ``round_robin`` leaves it out, no read fails."""
    broken = Cache()
    broken.synced = False
    stale, synced = _replica(broken), _replica()
    client = PlacementClient.connect(synced.address, read_address=_spread_over(stale, synced))
    try:
        for _ in range(10):
            assert client.filter(pod_object("trainer", gpus=2), NODES).feasible_nodes
    finally:
        client.close()
        stale.close()
        synced.close()
    assert _answered(synced, "Filter") == 10
    assert stale.server.metrics.registry.get_sample_value(_CALLS, {"method": "Filter", "code": "OK"}) is None


def test_a_read_refused_by_a_replica_whose_cache_just_broke_is_retried_on_another() -> None:
    """Between its cache breaking and its next health poll a replica still says SERVING and answers
    FAILED_PRECONDITION: the read policy tries the next replica, and the scheduling cycle goes on."""
    cache = Cache()
    # Health polled once an hour: the replica keeps saying SERVING for the whole test.
    slow_health = ServerOptions(listen="127.0.0.1:0", health_interval_s=3600, grace_s=1.0)
    breaking, synced = _replica(cache, slow_health), _replica()
    client = PlacementClient.connect(synced.address, read_address=_spread_over(breaking, synced))
    try:
        for _ in range(100):  # until the channel has connected to the replica about to break
            if _answered(breaking, "Filter"):
                break
            client.filter(pod_object("trainer", gpus=2), NODES)
        cache.synced = False
        before = _answered(synced, "Filter")
        for _ in range(10):
            assert client.filter(pod_object("trainer", gpus=2), NODES).feasible_nodes
        refused = breaking.server.metrics.registry.get_sample_value(
            _CALLS, {"method": "Filter", "code": "FAILED_PRECONDITION"}
        )
    finally:
        client.close()
        breaking.close()
        synced.close()
    assert refused is not None, "the broken replica was never tried"
    assert refused >= 1
    assert _answered(synced, "Filter") == before + 10


class RefusingReplica:
    """A replica going away as a client sees it: healthy by its health check, yet every Filter it is sent
    answers UNAVAILABLE (what a server shutting down, or a proxy losing its backend, answers)."""

    def __init__(self) -> None:
        self.refused = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="refusing replica", daemon=True)
        self._thread.start()
        self._server, self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server()
        refuse = grpc.unary_unary_rpc_method_handler(
            self._refuse, pb.FilterRequest.FromString, pb.FilterResponse.SerializeToString
        )
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, {"Filter": refuse}),))
        healthy = health.aio.HealthServicer()
        await healthy.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(healthy, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    async def _refuse(self, request: pb.FilterRequest, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.refused += 1
        await context.abort(grpc.StatusCode.UNAVAILABLE, "the replica is going away")

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.stop(0), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


def test_a_read_a_replica_answers_unavailable_is_retried_on_another() -> None:
    going, synced = RefusingReplica(), _replica()
    client = PlacementClient.connect(synced.address, read_address=f"ipv4:127.0.0.1:{going.port},{synced.address}")
    try:
        for _ in range(10):
            assert client.filter(pod_object("trainer", gpus=2), NODES).feasible_nodes
    finally:
        client.close()
        going.close()
        synced.close()
    assert going.refused >= 1, "the refusing replica was never tried"
    assert _answered(synced, "Filter") == 10


def test_reads_go_on_while_a_replica_stops() -> None:
    """A replica stopped (a rolling update) while reads flow: none of them fails."""
    staying, leaving = _replica(), _replica()
    client = PlacementClient.connect(staying.address, read_address=_spread_over(leaving, staying))
    failures: list[ServiceError] = []
    answered = 0
    stop = threading.Event()

    def read() -> None:
        nonlocal answered
        while not stop.is_set():
            try:
                client.filter(pod_object("trainer", gpus=2), NODES)
                answered += 1
            except ServiceError as error:
                failures.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        while _answered(leaving, "Filter") < 5:
            stop.wait(0.01)
        leaving.close()
        before = answered
        while answered < before + 20:
            stop.wait(0.01)
    finally:
        stop.set()
        reader.join(10)
        client.close()
        staying.close()
    assert failures == []


def test_both_channels_carry_the_client_certificate(certificates: Path) -> None:
    """mTLS on both: the read channel by a DNS name the server certificate carries (``localhost``), the
    decision channel by its address; the service sees the writer identity on each."""
    tls = TlsFiles(cert=certificates / "server.crt", key=certificates / "server.key", client_ca=certificates / "ca.crt")
    options = ServerOptions(listen="127.0.0.1:0", tls=tls, writers=frozenset({"kubenexus-scheduler"}), grace_s=0.5)
    replica = _replica(options=options)
    identity = ClientTls(
        ca=certificates / "ca.crt",
        cert=certificates / "kubenexus-scheduler.crt",
        key=certificates / "kubenexus-scheduler.key",
    )
    client = PlacementClient.connect(replica.address, read_address=f"dns:///localhost:{replica.port}", tls=identity)
    try:
        pod = pod_object("trainer", gpus=2)
        assert client.filter(pod, NODES).feasible_nodes
        assert client.reserve(pod, NODES).reserved
    finally:
        client.close()
        replica.close()
    assert (_answered(replica, "Filter"), _answered(replica, "Reserve")) == (1, 1)


@pytest.mark.parametrize(
    "target",
    [
        "dns:///kubenexus-placement-replicas-headless.kubenexus-system.svc:50051",
        "ipv4:10.0.0.1:50051,10.0.0.2:50051",
        "kubenexus-placement-replicas-headless.kubenexus-system.svc:50051",
        "[::1]:50051",
    ],
)
def test_targets_grpc_resolves_to_replicas_are_accepted_as_read_addresses(target: str) -> None:
    assert check_read_target(target) == target


@pytest.mark.parametrize("target", ["kubenexus-placement", "http://replicas:50051", "replicas:http", ""])
def test_a_read_target_that_is_not_one_is_refused_in_one_sentence(target: str) -> None:
    with pytest.raises(ValueError, match="is not a gRPC target") as caught:
        check_read_target(target)
    assert repr(target) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_deployed_extender_reads_from_every_ready_replica_and_decides_at_the_leader() -> None:
    extender = parsed("extender")
    scheme, _, address = extender.read_service.partition(":///")
    host, _, port = address.rpartition(":")
    assert scheme == "dns"
    headless = one("Service", host.split(".")[0])
    assert host == f"{headless['metadata']['name']}.{headless['metadata']['namespace']}.svc"
    spec = headless["spec"]
    assert spec["clusterIP"] == "None"  # DNS answers with every pod's address: the client balances
    assert spec["publishNotReadyAddresses"] is False  # a replica whose cache is not synced gets no reads
    assert spec["selector"] == one("Deployment")["spec"]["selector"]["matchLabels"]
    assert LEADER_LABEL not in spec["selector"]
    assert int(port) == ports("placement")["grpc"]
    assert extender.service == f"127.0.0.1:{port}"  # decisions: the leader's service, beside the extender
    server = cert_manager_certificates()["kubenexus-placement-server-tls"]["spec"]
    assert service_dns_names(headless["metadata"]["name"], headless["metadata"]["namespace"]) <= set(server["dnsNames"])
    assert not hasattr(parsed("binder"), "read_service")  # the binder only decides: all its calls go to the leader


def test_the_extender_refuses_to_start_with_a_read_address_that_is_not_a_target(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    args = build_parser().parse_args(
        ["extender", "--kubeconfig", str(kubeconfig), "--read-service", "http://replicas:50051"]
    )
    assert run_extender(args) == 2
    (record,) = [r for r in caplog.records if r.getMessage() == "cannot start the extender"]
    assert record.__dict__["error"].startswith("read address 'http://replicas:50051' is not a gRPC target")
