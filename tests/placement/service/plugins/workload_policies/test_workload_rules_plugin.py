"""WorkloadPolicies on its own at Reserve: it decides a driver (with its executors' room) and leaves every other
pod to the assume cache; a driver whose annotations cannot be read is the caller's to fix."""

from __future__ import annotations

import pytest

from placement.core.pods import ContainerSpec, PodSpec, validate_pod
from placement.service.engine import PlacementEngine
from placement.service.errors import InvalidRequest
from placement.service.framework.cycle_state import CycleState
from placement.service.framework.extension_points import ReserveAttempt
from placement.service.plugins.workload_policies import WorkloadPolicies
from placement.state.cluster_index import ClusterIndex
from placement.state.driver_reservations import RESERVE_MEMBERS_KEY, RESERVE_RESOURCES_KEY
from tests.machines.node_topologies import GIB, cpu_node, kubelet

NODES = ["node-a", "node-b"]


def _pod(name: str, annotations: dict[str, str] | None = None) -> PodSpec:
    resources = {"cpu": "2", "memory": "4Gi"}
    container = ContainerSpec("main", requests=resources, limits=resources)
    labels = {"spark-app-selector": "app-1"}
    return PodSpec(namespace="spark", name=name, containers=(container,), labels=labels, annotations=annotations or {})


@pytest.fixture
def engine() -> PlacementEngine:
    index = ClusterIndex()
    for name in NODES:
        index.upsert_topology(name, cpu_node(cpus_per_cell=16, memory_per_cell=64 * GIB, settings=kubelet("none")))
    return PlacementEngine.over(index)


def _attempt(engine: PlacementEngine, pod: PodSpec) -> ReserveAttempt:
    plugin = WorkloadPolicies(engine.pipeline.handle)
    attempt = ReserveAttempt(open_nodes=list(NODES))
    with engine.index.lock:
        plugin.reserve(CycleState(validate_pod(pod), engine.index), attempt)
    return attempt


def test_a_driver_is_decided_here_with_its_members_room_held(engine: PlacementEngine) -> None:
    driver = _pod("driver", {RESERVE_MEMBERS_KEY: "3", RESERVE_RESOURCES_KEY: "cpu=8,memory=8Gi"})
    attempt = _attempt(engine, driver)
    assert attempt.decision is not None
    assert attempt.decision.node in NODES
    held = engine.drivers.held() if engine.drivers is not None else {}
    assert len(held[("spark", "driver")]) == 3


def test_any_other_pod_is_left_to_the_assume_cache(engine: PlacementEngine) -> None:
    attempt = _attempt(engine, _pod("plain"))
    assert attempt.decision is None
    assert attempt.open_nodes == NODES
    assert attempt.rejected == []


def test_a_driver_with_unreadable_annotations_is_an_invalid_request(engine: PlacementEngine) -> None:
    driver = _pod("driver", {RESERVE_MEMBERS_KEY: "three", RESERVE_RESOURCES_KEY: "cpu=8"})
    with pytest.raises(InvalidRequest, match="pod spark/driver"):
        _attempt(engine, driver)
    assert engine.reservations.pending() == {}
