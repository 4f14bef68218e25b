"""The Preempt RPC at the API edge: what a request may carry, how refusals read, what the metrics count.

A real server on a loopback socket over a static index; the victims themselves are chosen in the end-to-end
tests (tests/cluster/test_cluster_binder.py), against the real API server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import GROUP_NAME_KEY, SPREAD_KEY
from placement.service.engine import PlacementEngine
from placement.state.cluster_index import ClusterIndex
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import nvswitch_node


@pytest.fixture
def running() -> Iterator[RunningServer]:
    index = ClusterIndex()
    index.upsert_topology("h100", nvswitch_node())
    server = RunningServer(PlacementEngine.over(index))
    try:
        yield server
    finally:
        server.close()


def _pod(name: str, *, gpus: int = 16, policy: str = "", labels: dict[str, str] | None = None) -> pb.Pod:
    resources = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": str(gpus)}
    return pb.Pod(
        namespace="ml",
        name=name,
        containers=[pb.Container(name="main", requests=resources, limits=resources)],
        preemption_policy=policy,
        labels=labels or {},
        priority=1000,
    )


def _refused(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    return error.code(), error.details()


def test_a_request_names_exactly_one_preemptor(running: RunningServer) -> None:
    group = pb.PodGroup(namespace="ml", name="g", members=[_pod("m")])
    both = pb.PreemptRequest(pod=_pod("p"), group=group)
    assert _refused(lambda: running.stub.Preempt(both, timeout=10)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "a preemptor is required: set exactly one of `pod`, `pod_json` or `group` (pod, group are set)",
    )
    assert _refused(lambda: running.stub.Preempt(pb.PreemptRequest(), timeout=10)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "a preemptor is required: set exactly one of `pod`, `pod_json` or `group` (none is set)",
    )


def test_preemption_policy_travels_in_the_pod_message_and_in_pod_json(running: RunningServer) -> None:
    answer = running.stub.Preempt(pb.PreemptRequest(pod=_pod("patient", policy="Never")), timeout=10)
    assert not answer.preempted
    assert not answer.victims
    assert answer.hold_seconds == 0
    assert "preemptionPolicy Never" in answer.reason
    as_json = (
        '{"metadata":{"name":"patient","namespace":"ml"},"spec":{"priority":1000,"preemptionPolicy":"Never",'
        '"containers":[{"name":"main","resources":{"limits":{"cpu":"8","memory":"32Gi"}}}]}}'
    )
    assert "preemptionPolicy Never" in running.stub.Preempt(pb.PreemptRequest(pod_json=as_json), timeout=10).reason
    code, message = _refused(lambda: running.stub.Preempt(pb.PreemptRequest(pod=_pod("p", policy="Soon")), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.preemptionPolicy 'Soon'" in message


def test_a_group_whose_members_disagree_on_their_spread_is_refused(running: RunningServer) -> None:
    members = [
        _pod("m-0", labels={GROUP_NAME_KEY: "g", SPREAD_KEY: "packed"}),
        _pod("m-1", labels={GROUP_NAME_KEY: "g", SPREAD_KEY: "spread"}),
    ]
    request = pb.PreemptRequest(group=pb.PodGroup(namespace="ml", name="g", members=members))
    assert _refused(lambda: running.stub.Preempt(request, timeout=10)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"pod group ml/g: members disagree about {SPREAD_KEY}: packed, spread",
    )


def test_metrics_count_preempt_answers_and_victims(running: RunningServer) -> None:
    """Nothing of lower priority runs: an answer of no preemption, counted as such, with no victims."""
    answer = running.stub.Preempt(pb.PreemptRequest(pod=_pod("big")), timeout=10)
    assert not answer.preempted
    assert "fits on no node even with every lower-priority pod evicted" in answer.reason
    samples = generate_latest(running.server.metrics.registry).decode()
    assert 'kubenexus_placement_preemptions_total{outcome="none"} 1.0' in samples
    assert "kubenexus_placement_preemption_victims_total 0.0" in samples
    assert 'kubenexus_placement_rpc_duration_seconds_count{code="OK",method="Preempt"} 1.0' in samples
