"""Gang requests a careless or hostile client sends, over a real gRPC socket: every one is INVALID_ARGUMENT
(never INTERNAL, no traceback in the log) and leaves nothing registered; permit timeouts and members that
never appear as pods are logged and counted in the metrics."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from prometheus_client import generate_latest

from kubenexus.jsonlog import JsonFormatter
from placement.api.v1 import placement_pb2 as pb
from placement.core.annotations import GROUP_NAME_KEY, MIN_AVAILABLE_KEY
from placement.service.engine import PlacementEngine
from placement.service.gang_port import CoordinatedGangs
from placement.state.gang_coordinator import DEFAULT_MAX_MEMBERS, DEFAULT_PERMIT_TIMEOUT_S
from tests.gang_fixtures import Clock, gang_engine
from tests.grpc_server import RunningServer

NODES = ("a", "b")
DEEP = "[" * 100_000 + "]" * 100_000


@dataclass
class Service:
    running: RunningServer
    engine: PlacementEngine
    gangs: CoordinatedGangs
    clock: Clock
    stub: Any


@pytest.fixture
def service() -> Iterator[Service]:
    clock = Clock()
    made = gang_engine(NODES, clock)
    running = RunningServer(made.engine)
    try:
        yield Service(running, made.engine, made.gangs, clock, running.stub)
    finally:
        running.close()


def _pod(name: str, *, namespace: str = "ml", gpus: int = 1, labels: dict[str, str] | None = None) -> pb.Pod:
    resources = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)}
    return pb.Pod(
        namespace=namespace,
        name=name,
        labels=labels or {},
        containers=[pb.Container(name="main", requests=resources, limits=resources)],
    )


def _place(service: Service, name: str, members: list[pb.Pod], **group: Any) -> pb.PlaceGangResponse:
    request = pb.PlaceGangRequest(group=pb.PodGroup(namespace="ml", name=name, members=members, **group))
    answer: pb.PlaceGangResponse = service.stub.PlaceGang(request, timeout=30)
    return answer


def _refused(call: Any) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    details: str = error.details()
    return details


def _permit(service: Service, name: str) -> pb.PermitStatusResponse:
    answer: pb.PermitStatusResponse = service.stub.PermitStatus(
        pb.PermitStatusRequest(pod=pb.PodRef(namespace="ml", name=name))
    )
    return answer


def _clean(service: Service, *names: str) -> None:
    """Nothing of the refused request is left: no member, no reservation, and a tick reserves nothing."""
    for name in names:
        assert _permit(service, name).pod_group == ""
    service.engine.tick()
    assert service.gangs.coordinator.statuses() == []
    listed = service.stub.ListNodes(pb.ListNodesRequest())
    assert [node.pods for node in listed.nodes] == [0, 0]


@pytest.fixture
def no_bugs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No call was answered as a bug (INTERNAL, with a traceback in the log)."""
    with caplog.at_level(logging.INFO):
        yield
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_a_partly_bad_request_registers_nothing(service: Service, no_bugs: None) -> None:
    members = [_pod("w-0"), _pod("w-1"), _pod("w-2", namespace="other")]
    details = _refused(lambda: _place(service, "train", members))
    assert details == "pod other/w-2 is not in the namespace of pod group ml/train"
    stranger = _pod("w-2", labels={GROUP_NAME_KEY: "else", MIN_AVAILABLE_KEY: "3"})
    details = _refused(lambda: _place(service, "train", [_pod("w-0"), _pod("w-1"), stranger]))
    assert details == "pod ml/w-2 belongs to pod group ml/else"
    _clean(service, "w-0", "w-1", "w-2")


def test_duplicate_members_are_refused(service: Service, no_bugs: None) -> None:
    details = _refused(lambda: _place(service, "dup", [_pod("d-0"), _pod("d-0")]))
    assert details == "pod ml/d-0 appears more than once in pod group ml/dup"
    _clean(service, "d-0")


def test_min_available_beyond_the_cap_and_int32_is_refused(service: Service, no_bugs: None) -> None:
    labels = {GROUP_NAME_KEY: "huge", MIN_AVAILABLE_KEY: "2147483648"}
    details = _refused(lambda: _place(service, "huge", [_pod("h-0", labels=labels)]))
    assert details == (
        f"pod ml/h-0: invalid value '2147483648' for {MIN_AVAILABLE_KEY} (more members than a group may have); "
        f"accepted: a positive integer up to {DEFAULT_MAX_MEMBERS}, the most members a pod group may have"
    )
    _clean(service, "h-0")


def test_a_group_over_the_cap_is_refused(service: Service, no_bugs: None) -> None:
    members = [_pod(f"m-{i}", gpus=0) for i in range(DEFAULT_MAX_MEMBERS + 1)]
    details = _refused(lambda: _place(service, "many", members))
    assert details == (
        f"pod group ml/many: {DEFAULT_MAX_MEMBERS + 1} members, more than the {DEFAULT_MAX_MEMBERS} a group may have"
    )
    _clean(service, "m-0")


def test_deeply_nested_pod_json_is_refused(service: Service, no_bugs: None) -> None:
    expected = "pod_json nests 100000 levels deep, more than the 64 a Kubernetes Pod needs"
    assert _refused(lambda: service.stub.Filter(pb.FilterRequest(pod_json=DEEP))) == expected
    assert _refused(lambda: service.stub.Explain(pb.ExplainRequest(pod_json=DEEP, node="a"))) == expected
    group = pb.PodGroup(namespace="ml", name="deep", members=[_pod("ok-0")], members_json=[DEEP])
    assert _refused(lambda: service.stub.PlaceGang(pb.PlaceGangRequest(group=group))) == expected
    _clean(service, "ok-0")
    assert list(service.stub.Filter(pb.FilterRequest(pod=_pod("after"))).feasible_nodes) == list(NODES)


def _samples(service: Service) -> str:
    return generate_latest(service.running.server.metrics.registry).decode()


def test_a_permit_timeout_is_logged_and_counted(service: Service, caplog: pytest.LogCaptureFixture) -> None:
    placed = _place(service, "t", [_pod("t-0", gpus=4), _pod("t-1", gpus=4)])
    assert placed.state == pb.GANG_STATE_PLACED
    for name in ("t-0", "t-1"):
        service.gangs.observe_pod(("ml", name), None, False)  # the pod watch sees both pods, pending
    assert "kubenexus_placement_gang_permit_timeouts_total 0.0" in _samples(service)
    service.clock.now += DEFAULT_PERMIT_TIMEOUT_S
    with caplog.at_level(logging.INFO, logger="kubenexus.placement.gangs"):
        service.engine.tick()
    assert "kubenexus_placement_gang_permit_timeouts_total 1.0" in _samples(service)
    (record,) = [r for r in caplog.records if r.name == "kubenexus.placement.gangs"]
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "warning"
    assert line["message"] == "pod group permit timed out: reservations released"
    assert (line["group"], sorted(line["members"])) == ("ml/t", ["ml/t-0", "ml/t-1"])
    assert line["why"].startswith("permit timeout: 2 member(s) of ml/t not bound within 10 s")
    assert "exception" not in line
    assert _permit(service, "t-0").state == pb.PERMIT_STATE_REJECT  # told once; placed again since


def test_members_sent_only_over_grpc_are_dropped_after_the_permit_timeout(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    for group in range(3):
        answer = _place(service, f"ghost-{group}", [_pod(f"g{group}-{i}", gpus=8) for i in range(3)])
        assert answer.state != pb.GANG_STATE_PLACED
    assert _permit(service, "g0-0").pod_group == "ml/ghost-0"
    service.clock.now += DEFAULT_PERMIT_TIMEOUT_S
    with caplog.at_level(logging.INFO, logger="kubenexus.placement.gangs"):
        service.engine.tick()
    assert service.gangs.coordinator.statuses() == []
    assert _permit(service, "g0-0").pod_group == ""
    assert "kubenexus_placement_gang_members_dropped_total 9.0" in _samples(service)
    dropped = [r for r in caplog.records if r.getMessage() == "pod group members dropped: never seen as pods"]
    assert sorted(vars(r)["group"] for r in dropped) == ["ml/ghost-0", "ml/ghost-1", "ml/ghost-2"]
