"""Driver reservations through the engine's Reserve: a Spark driver holds its executors' room, executors land
in it, a competing pod is kept out, and the hold goes with the driver (Palantir's ResourceReservation)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from placement.core.constraints.constraint_types import NodeFacts
from placement.core.pods import pod_spec_from_json
from placement.service.engine import PlacementEngine
from placement.service.errors import InvalidRequest
from placement.state.cluster_index import ClusterIndex
from placement.state.driver_reservations import RESERVE_MEMBERS_KEY, RESERVE_RESOURCES_KEY
from tests.machines.node_topologies import GIB, cpu_node, kubelet

RACK = "topology.kubenexus.io/rack"
RACKS = {"node-a": "rack-1", "node-b": "rack-1", "node-c": "rack-2"}
SPARK_DRIVER = {
    "spark-executor-count": "4",
    "spark-executor-cpu": "8",
    "spark-executor-mem": "8Gi",
    "spark-driver-cpu": "2",
    "spark-driver-mem": "4Gi",
}


@pytest.fixture
def engine() -> PlacementEngine:
    index = ClusterIndex()
    for name, rack in RACKS.items():
        index.upsert_topology(name, cpu_node(cpus_per_cell=16, memory_per_cell=64 * GIB, settings=kubelet("none")))
        index.facts.set_node(NodeFacts(name, labels=((RACK, rack), ("kubernetes.io/hostname", name))))
    return PlacementEngine.over(index)


def _pod(
    name: str, *, cpu: str, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> Any:
    resources = {"cpu": cpu, "memory": "4Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "spark", "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}]},
    }


def _driver(app: str = "app-1", **annotations: str) -> Any:
    labels = {"spark-role": "driver", "spark-app-selector": app}
    return _pod(f"{app}-driver", cpu="2", labels=labels, annotations=SPARK_DRIVER | annotations)


def _executor(i: int, app: str = "app-1") -> Any:
    return _pod(f"{app}-exec-{i}", cpu="8", labels={"spark-role": "executor", "spark-app-selector": app})


def _reserve(engine: PlacementEngine, pod: Any, nodes: tuple[str, ...] = ()) -> str | None:
    outcome = engine.reserve(pod_spec_from_json(json.dumps(pod)), nodes)
    return None if outcome.placement is None else outcome.placement.node


def _free_cpus(engine: PlacementEngine, node: str) -> float:
    slot = engine.index.slot_of(node)
    assert slot is not None
    return engine.index.node_amounts(slot)["cpu"].free


def test_the_driver_holds_its_executors_room_nearest_first_and_a_competitor_is_kept_out(
    engine: PlacementEngine,
) -> None:
    assert _reserve(engine, _driver(), ("node-a",)) == "node-a"
    assert engine.drivers is not None
    # 32 CPUs: the driver's 2, then three 8-CPU executors on its node; the fourth in its rack, not rack-2.
    assert engine.drivers.held() == {("spark", "app-1-driver"): ["node-a", "node-a", "node-a", "node-b"]}
    assert _free_cpus(engine, "node-a") == 32 - 2 - 24

    # 6 CPUs are free on node-a: a competitor asking 8 does not get the executors' room.
    competitor = _pod("other", cpu="8")
    outcome = engine.reserve(pod_spec_from_json(json.dumps(competitor)), ("node-a",))
    assert outcome.placement is None
    assert "Insufficient cpu" in {group.reason for group in outcome.rejected}

    # Each executor takes a held place, nearest the driver first, and the hold shrinks.
    assert [_reserve(engine, _executor(i)) for i in range(4)] == ["node-a", "node-a", "node-a", "node-b"]
    assert engine.drivers.held() == {}  # every executor placed: the hold is gone
    assert _free_cpus(engine, "node-a") == 32 - 2 - 24


def test_deleting_the_driver_gives_the_room_back(engine: PlacementEngine) -> None:
    assert _reserve(engine, _driver(), ("node-a",)) == "node-a"
    assert _reserve(engine, _executor(0)) == "node-a"
    assert engine.drivers is not None
    assert len(engine.drivers.held()[("spark", "app-1-driver")]) == 3
    # What the feed does when the driver's pod is deleted or finishes; the engine's tick sweeps.
    engine.reservations.observe_pod_deleted("spark", "app-1-driver")
    engine.tick()
    assert engine.drivers.held() == {}
    assert _free_cpus(engine, "node-a") == 32 - 8  # the executor placed stays; the held room is back
    assert _free_cpus(engine, "node-b") == 32
    assert _reserve(engine, _pod("other", cpu="16"), ("node-a",)) == "node-a"


def test_a_driver_whose_executors_cannot_all_be_held_waits_holding_nothing(engine: PlacementEngine) -> None:
    driver = _driver(**{"spark-executor-count": "12", "spark-executor-cpu": "10"})
    outcome = engine.reserve(pod_spec_from_json(json.dumps(driver)), ())
    assert outcome.placement is None
    reasons = {group.reason for group in outcome.rejected}
    assert any("room for only 9 of the 12 members of application app-1" in reason for reason in reasons)
    assert engine.drivers is not None
    assert engine.drivers.held() == {}
    assert all(_free_cpus(engine, node) == 32 for node in RACKS)  # the driver's own reservation released too


def test_unreserving_the_driver_releases_the_hold_and_a_retry_holds_afresh(engine: PlacementEngine) -> None:
    assert _reserve(engine, _driver(), ("node-c",)) == "node-c"
    assert engine.drivers is not None
    assert engine.drivers.held()[("spark", "app-1-driver")][:3] == ["node-c"] * 3
    assert _reserve(engine, _driver(), ("node-a",)) == "node-a"  # the retry moves the hold with the driver
    assert engine.drivers.held()[("spark", "app-1-driver")] == ["node-a", "node-a", "node-a", "node-b"]
    assert _free_cpus(engine, "node-c") == 32
    assert engine.unreserve("spark", "app-1-driver")
    engine.tick()
    assert engine.drivers.held() == {}
    assert all(_free_cpus(engine, node) == 32 for node in RACKS)


def test_a_generic_driver_states_its_members_with_our_annotations(engine: PlacementEngine) -> None:
    labels = {"pod-group.scheduling.kubenexus.io/name": "ray-1"}
    head = _pod("ray-head", cpu="2", labels=labels)
    head["metadata"]["annotations"] = {RESERVE_MEMBERS_KEY: "2", RESERVE_RESOURCES_KEY: "cpu=12,memory=8Gi"}
    assert _reserve(engine, head, ("node-b",)) == "node-b"
    assert engine.drivers is not None
    assert engine.drivers.held() == {("spark", "ray-head"): ["node-b", "node-b"]}
    assert _free_cpus(engine, "node-b") == 32 - 2 - 24


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        ({"spark-executor-count": "many"}, "invalid value 'many' for spark-executor-count"),
        ({"spark-executor-mem": "lots"}, "invalid value 'lots' for spark-executor-mem"),
        ({"spark-executor-count": "0"}, "a whole number of members from 1 to 1000"),
    ],
)
def test_bad_driver_annotations_are_refused_with_the_key_and_nothing_is_reserved(
    engine: PlacementEngine, annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidRequest, match=message):
        engine.reserve(pod_spec_from_json(json.dumps(_driver(**annotations))), ())
    assert engine.reservations.pending() == {}


def test_bad_generic_resources_are_refused(engine: PlacementEngine) -> None:
    head = _pod("head", cpu="1", labels={"pod-group.scheduling.kubenexus.io/name": "g"})
    head["metadata"]["annotations"] = {RESERVE_MEMBERS_KEY: "2", RESERVE_RESOURCES_KEY: "cpu=4;memory=1Gi"}
    with pytest.raises(
        InvalidRequest, match=r"reserve-member-resources .*accepted: name=quantity pairs separated by commas"
    ):
        engine.reserve(pod_spec_from_json(json.dumps(head)), ())
